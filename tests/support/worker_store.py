"""What tests and benchmarks ask a :class:`WorkerStore` that the worker itself never does.

The worker begins and reads in batches (``begin_episodes``, ``lookup``, ``credited_for``);
these one-at-a-time questions (one registration, one identity's credited records, how many
receipts, how full the outbox is) only check its work, so they live here, not in the store.
Reads run on the store's own engine, one statement each in autocommit, as the store's own
single-statement reads do (no write lock taken on SQLite).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, bindparam, func, or_, select

from rewardseal.core.errors import RewardSealError
from rewardseal_server.sqlstore import AUTOCOMMIT_READ_OPTION, as_utc
from rewardseal_worker.identity import Identity
from rewardseal_worker.store import BeginItem, OpenEpisode, WorkerStore
from rewardseal_worker.store.episodes import open_episode_of
from rewardseal_worker.store.schema import OPEN_EPISODES, credited_records, outbox, receipts

_CREDITED_ONE = select(credited_records.c.record_id).where(
    credited_records.c.contract_digest == bindparam("contract_digest"),
    or_(
        credited_records.c.identity_key == bindparam("identity_key"),
        credited_records.c.identity_key.is_(None),
    ),
)

_COUNT_RECEIPTS = select(func.count()).select_from(receipts)
_OUTBOX_SIZE = select(func.count()).select_from(outbox)
_OUTBOX_OLDEST = select(func.min(outbox.c.created_at))


def _reader(store: WorkerStore) -> Engine:
    """The store's engine set up for a single-statement read (autocommit, no ``BEGIN``)."""
    if store.dialect == "postgresql":
        return store.engine.execution_options(isolation_level="AUTOCOMMIT")
    return store.engine.execution_options(**{AUTOCOMMIT_READ_OPTION: True})


def begin_episode(
    store: WorkerStore,
    *,
    contract_digest: str,
    episode_id: str,
    identity: Mapping[str, str],
    baseline: list[dict[str, Any]] | None,
    begun_at: datetime,
    ttl_seconds: float,
    task_parameters: dict[str, Any] | None = None,
) -> None:
    """Register one episode (a batch of one :class:`BeginItem`; an idempotent re-begin keeps
    the first registration); raise its refusal, if any.

    Raises:
        DuplicateEpisode, IdentityBusy, IdentityConflict: as
            :meth:`WorkerStore.begin_episodes` reports them for the item.
    """
    [decision] = store.begin_episodes(
        [
            BeginItem(
                contract_digest=contract_digest,
                episode_id=episode_id,
                identity=Identity(identity),
                baseline=baseline,
                begun_at=begun_at,
                ttl_seconds=ttl_seconds,
                task_parameters=task_parameters,
            )
        ]
    )
    if isinstance(decision, RewardSealError):
        raise decision


def open_episode(store: WorkerStore, contract_digest: str, episode_id: str) -> OpenEpisode | None:
    """The open registration of an episode on a contract, or None."""
    with _reader(store).connect() as conn:
        row = conn.execute(
            OPEN_EPISODES, {"contract_digest": contract_digest, "episode_ids": [episode_id]}
        ).one_or_none()
        return None if row is None else open_episode_of(row)


def credited_record_ids(store: WorkerStore, contract_digest: str, identity_key: str) -> set[str]:
    """Ids of the records credited for this contract and identity, one query of its own.

    Also includes records credited by receipts committed without an identity key (those cannot
    be attributed to an identity, so they are excluded for every identity): the same set as
    :meth:`WorkerStore.credited_for` gives for the key, read another way.
    """
    with _reader(store).connect() as conn:
        rows = conn.execute(
            _CREDITED_ONE, {"contract_digest": contract_digest, "identity_key": identity_key}
        )
        return set(rows.scalars())


def count_receipts(store: WorkerStore) -> int:
    """How many receipts are stored."""
    with _reader(store).connect() as conn:
        return int(conn.execute(_COUNT_RECEIPTS).scalar_one())


def outbox_size(store: WorkerStore) -> int:
    """How many receipts wait in the outbox (due or not)."""
    with _reader(store).connect() as conn:
        return int(conn.execute(_OUTBOX_SIZE).scalar_one())


def outbox_oldest(store: WorkerStore, now: datetime) -> float | None:
    """Age in seconds at ``now`` of the oldest receipt in the outbox (at least 0), or None when
    the outbox is empty."""
    with _reader(store).connect() as conn:
        oldest: datetime | None = conn.execute(_OUTBOX_OLDEST).scalar()
    if oldest is None:
        return None
    return max(0.0, (as_utc(now) - oldest).total_seconds())
