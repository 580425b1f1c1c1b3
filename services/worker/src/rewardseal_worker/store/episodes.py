"""Open episodes (R-W-1, R-W-3): registering a batch of episodes, one per identity at a time.

An episode is registered by BeginEpisode for a contract and an oracle identity and stays open
until its receipt is committed (:mod:`rewardseal_worker.store.receipts` closes it) or it goes
stale (older than the TTL) and another begin reclaims its identity. One identity has at most one
open episode per contract; an episode id is open on at most one contract and identity.

Concurrency: the registrations a batch can meet are read ``FOR UPDATE`` (locked on PostgreSQL);
a registration inserted by another writer after that read makes the insert fall short, and the
transaction is run again (:class:`~rewardseal_server.sqlstore.LostRace`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Row

from rewardseal.core.digest import canonical_json
from rewardseal.core.errors import (
    DuplicateEpisode,
    IdentityBusy,
    IdentityConflict,
    InvalidTaskParameters,
    RewardSealError,
    preview,
)
from rewardseal_server.sqlstore import (
    UNIQUE_VIOLATION,
    DriverConnection,
    LostRace,
    as_utc,
    sqlstate,
)
from rewardseal_worker.identity import Identity
from rewardseal_worker.store.core import StorePart

Record = dict[str, Any]
"""A record of the system of record: a string ``"id"`` plus field -> JSON scalar."""


@dataclass(frozen=True)
class OpenEpisode:
    """A registered (BeginEpisode) episode that has no receipt yet."""

    identity: Identity
    baseline: list[Record] | None
    begun_at: datetime
    task_parameters: dict[str, Any] | None = None
    """The task parameters bound at begin (R-W-18); None when the contract declares none."""


@dataclass(frozen=True, kw_only=True)
class BeginItem:
    """One episode to register (an item of :meth:`EpisodeStore.begin_episodes`)."""

    contract_digest: str
    episode_id: str
    identity: Identity
    """The identity, registered under its key (:attr:`Identity.key`)."""
    baseline: list[Record] | None
    begun_at: datetime
    ttl_seconds: float
    task_parameters: dict[str, Any] | None = None
    """The task parameters bound at begin, checked against the contract (R-W-18); None when
    it declares none."""


@dataclass(frozen=True)
class KeptRegistration:
    """A begin of an episode already open on the same contract and identity (an idempotent
    re-begin): the first registration stands, and this is what it holds."""

    begun_at: datetime
    """When the first begin registered the episode (aware)."""
    baseline_recorded: bool
    """Whether the first begin recorded a baseline (the one the episode is judged against)."""


BeginDecision = RewardSealError | KeptRegistration | None
"""What :meth:`EpisodeStore.begin_episodes` decided for one item: None, registered as given;
a :class:`KeptRegistration`, already registered so; else the refusal."""


def same_parameters(stored: dict[str, Any] | None, given: dict[str, Any] | None) -> bool:
    """Whether two sets of bound task parameters are the same values (types included: a JSON
    round trip keeps them; canonical JSON tells ``1`` from ``true``)."""
    if stored is None or given is None:
        return stored is None and given is None
    return canonical_json(stored) == canonical_json(given)


def other_parameters(
    episode_id: str, stored: dict[str, Any] | None, given: dict[str, Any] | None
) -> InvalidTaskParameters:
    """The refusal of a re-begin that names other task parameters than the open episode's,
    naming the first (by name) whose value differs."""
    first, second = stored or {}, given or {}
    names = sorted(set(first) | set(second))
    differing = [n for n in names if not same_parameters({n: first.get(n)}, {n: second.get(n)})]
    named = (differing or names or ["?"])[0]
    return InvalidTaskParameters(
        f"episode {preview(episode_id)} is already begun with another value of task parameter "
        f"{preview(named, quoted=False)} (parameters are bound once)",
        metadata={"parameter": named},
    )


def open_episode_of(row: Row[*tuple[Any, ...]]) -> OpenEpisode:
    """An :class:`OpenEpisode` from a row of ``open_episodes`` (identity, baseline, begun_at)."""
    return OpenEpisode(
        identity=Identity(row.identity),
        baseline=None if row.baseline is None else list(row.baseline),
        begun_at=row.begun_at,
        task_parameters=None if row.task_parameters is None else dict(row.task_parameters),
    )


class EpisodeStore(StorePart):
    """The open-episode part of :class:`~rewardseal_worker.store.WorkerStore`."""

    def begin_episodes(self, items: Sequence[BeginItem]) -> list[BeginDecision]:
        """Register a batch of episodes in ONE transaction; one outcome per item, in order.

        Each item registers an open episode for ``(contract_digest, identity.key)`` (R-W-1,
        R-W-3). Its ``begun_at`` is also "now" for the TTL: an open episode whose ``begun_at``
        is at least ``ttl_seconds`` older is stale and is reclaimed (deleted). Re-beginning the
        same episode id on the same contract and identity is idempotent and keeps the first
        registration (its baseline and ``begun_at``).

        Items are applied in order; an item's outcome is None when it is registered, a
        :class:`KeptRegistration` when it already was (an idempotent re-begin: what the first
        registration holds, for the answer), else its error:

        - DuplicateEpisode: the episode already has a receipt (metadata ``receipt_id``);
        - IdentityBusy: the identity has another, non-stale open episode;
        - IdentityConflict: the episode id is open (non-stale) on another contract or identity.

        A refused item changes nothing and does not fail the others; an unreachable database
        fails the call (Unavailable). Durable before return.
        """
        if not items:
            return []
        accepted = [(index, entry, as_utc(entry.begun_at)) for index, entry in enumerate(items)]
        episode_ids = list(dict.fromkeys(entry.episode_id for entry in items))
        contracts = sorted({entry.contract_digest for entry in items})
        keys = sorted({entry.identity.key for entry in items})

        def work(conn: DriverConnection) -> list[BeginDecision]:
            results: list[BeginDecision] = [None] * len(items)
            # Registrations as they stand, updated as the items are applied in order; the
            # receipts are read after the registrations are locked, so a receipt whose commit
            # closed one of them before the lock is visible here.
            found, existing = self._hot.begin_reads(conn, episode_ids, contracts, keys)
            by_slot: dict[tuple[str, str], tuple[str, datetime]] = {}
            by_episode: dict[str, tuple[str, str, datetime]] = {}
            recorded: dict[str, bool] = {}  # episode -> a baseline is recorded
            parameters: dict[str, dict[str, Any] | None] = {}  # episode -> what its begin bound
            for contract, key, episode, begun, has_baseline, bound in found:
                by_slot[(contract, key)] = (episode, begun)
                by_episode[episode] = (contract, key, begun)
                recorded[episode] = has_baseline
                parameters[episode] = bound
            stored_episodes = set(by_episode)
            to_delete: set[str] = set()
            to_insert: dict[str, dict[str, Any]] = {}

            def release(episode: str) -> None:
                contract, key, _ = by_episode.pop(episode)
                del by_slot[(contract, key)]
                to_insert.pop(episode, None)
                if episode in stored_episodes:
                    to_delete.add(episode)

            for index, entry, now in accepted:
                key = entry.identity.key
                receipt_id = existing.get(entry.episode_id)
                if receipt_id is not None:
                    results[index] = DuplicateEpisode(
                        f"episode {entry.episode_id!r} already has a receipt",
                        metadata={"receipt_id": receipt_id},
                    )
                    continue
                holder = by_slot.get((entry.contract_digest, key))
                if holder is not None:
                    if holder[0] == entry.episode_id:
                        if not same_parameters(parameters.get(holder[0]), entry.task_parameters):
                            # R-W-18: values are bound once; a re-begin cannot change them.
                            results[index] = other_parameters(
                                entry.episode_id, parameters.get(holder[0]), entry.task_parameters
                            )
                            continue
                        # Idempotent re-begin: the first registration stands, and the answer
                        # says what it holds (not this begin's time and baseline read).
                        results[index] = KeptRegistration(holder[1], recorded[holder[0]])
                        continue
                    if (now - holder[1]).total_seconds() < entry.ttl_seconds:
                        results[index] = IdentityBusy(
                            "the oracle identity already has an open episode for this contract"
                        )
                        continue
                    release(holder[0])
                elsewhere = by_episode.get(entry.episode_id)
                if elsewhere is not None:
                    if (now - elsewhere[2]).total_seconds() < entry.ttl_seconds:
                        results[index] = IdentityConflict(
                            f"episode {entry.episode_id!r} is already open for another identity"
                            " or contract"
                        )
                        continue
                    release(entry.episode_id)
                by_slot[(entry.contract_digest, key)] = (entry.episode_id, now)
                by_episode[entry.episode_id] = (entry.contract_digest, key, now)
                recorded[entry.episode_id] = entry.baseline is not None
                parameters[entry.episode_id] = entry.task_parameters
                to_insert[entry.episode_id] = {
                    "contract_digest": entry.contract_digest,
                    "identity_key": key,
                    "episode_id": entry.episode_id,
                    "identity": dict(entry.identity),
                    "baseline": entry.baseline,
                    "begun_at": now,
                    "task_parameters": entry.task_parameters,
                }
            if to_delete:
                self._hot.close_open(conn, sorted(to_delete))
            if to_insert:
                try:
                    inserted = self._hot.register(conn, list(to_insert.values()))
                except sa_exc.IntegrityError as exc:
                    if sqlstate(exc) != UNIQUE_VIOLATION:
                        raise
                    # PostgreSQL's COPY fails where an INSERT would fall short (see below).
                    raise LostRace("open episode inserted concurrently") from exc
                if inserted != len(to_insert):
                    # A registration for one of these slots or episode ids was inserted (by a
                    # PostgreSQL transaction) after our read: read again, it is visible now.
                    raise LostRace("open episode inserted concurrently")
            return results

        return self._db.write_on_driver(work)
