"""Open episodes (R-W-1, R-W-3): registering a batch of episodes, one per identity at a time.

An episode is registered by BeginEpisode for a contract and an oracle identity and stays open
until its receipt is committed (:mod:`rewardseal_worker.store.receipts` closes it) or it goes
stale (older than the TTL) and another begin reclaims its identity. One identity has at most one
open episode per contract; an episode id is open on at most one contract and identity.

Concurrency: the registrations a batch can meet are read ``FOR UPDATE`` (locked on PostgreSQL);
a registration inserted by another writer after that read makes the insert fall short, and the
transaction is run again (:class:`~rewardseal.sqlstore.LostRace`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Connection, Row

from rewardseal.errors import (
    DuplicateEpisode,
    IdentityBusy,
    IdentityConflict,
    RewardSealError,
    ValidationError,
)
from rewardseal.sqlstore import LostRace, as_utc, chunks
from rewardseal_worker.store import schema
from rewardseal_worker.store.core import StorePart, as_dict

Record = dict[str, Any]
"""A record of the system of record: a string ``"id"`` plus field -> JSON scalar."""


@dataclass(frozen=True)
class OpenEpisode:
    """A registered (BeginEpisode) episode that has no receipt yet."""

    identity_key: str
    identity: dict[str, str]
    baseline: list[Record] | None
    begun_at: datetime


@dataclass(frozen=True, kw_only=True)
class BeginItem:
    """One episode to register (an item of :meth:`EpisodeStore.begin_episodes`)."""

    contract_digest: str
    episode_id: str
    identity_key: str
    identity: Mapping[str, str] | None = None
    baseline: list[Record] | None
    begun_at: datetime
    ttl_seconds: float


def identity_from_key(identity_key: str) -> dict[str, str]:
    """Parse a canonical identity string back into the identity mapping."""
    try:
        value = json.loads(identity_key)
    except ValueError as exc:
        raise ValidationError(f"identity_key is not canonical JSON: {exc}") from exc
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ValidationError("identity_key must encode a JSON object of strings")
    return value


def open_episode_of(row: Row[*tuple[Any, ...]]) -> OpenEpisode:
    """An :class:`OpenEpisode` from a row of ``open_episodes`` (identity, baseline, begun_at)."""
    return OpenEpisode(
        identity_key=row.identity_key,
        identity=dict(row.identity),
        baseline=None if row.baseline is None else list(row.baseline),
        begun_at=row.begun_at,
    )


def pairs_of_chunks(
    episode_ids: Sequence[str], keys: Sequence[str]
) -> Iterator[tuple[Sequence[str], Sequence[str]]]:
    """Chunks of both lists, paired so that every episode id and every key is covered.

    Each pair is one query of :data:`~rewardseal_worker.store.schema.OPEN_FOR_BEGIN`; an empty
    list binds as an empty ``IN``.
    """
    episode_chunks = list(chunks(episode_ids)) or [[]]
    key_chunks = list(chunks(keys)) or [[]]
    for number in range(max(len(episode_chunks), len(key_chunks))):
        yield (
            episode_chunks[number] if number < len(episode_chunks) else [],
            key_chunks[number] if number < len(key_chunks) else [],
        )


class EpisodeStore(StorePart):
    """The open-episode part of :class:`~rewardseal_worker.store.WorkerStore`."""

    def begin_episodes(self, items: Sequence[BeginItem]) -> list[RewardSealError | None]:
        """Register a batch of episodes in ONE transaction; one outcome per item, in order.

        Each item registers an open episode for ``(contract_digest, identity_key)`` (R-W-1,
        R-W-3). Its ``begun_at`` is also "now" for the TTL: an open episode whose ``begun_at``
        is at least ``ttl_seconds`` older is stale and is reclaimed (deleted). Re-beginning the
        same episode id on the same contract and identity is idempotent and keeps the first
        baseline. ``identity`` is the mapping ``identity_key`` encodes; when omitted it is
        parsed from ``identity_key``; when given it must agree with it.

        Items are applied in order; an item's outcome is None when it is registered (or already
        was: an idempotent re-begin), else its error:

        - DuplicateEpisode: the episode already has a receipt (metadata ``receipt_id``);
        - IdentityBusy: the identity has another, non-stale open episode;
        - IdentityConflict: the episode id is open (non-stale) on another contract or identity;
        - ValidationError: ``identity_key`` is not a canonical identity string, or ``identity``
          disagrees with it.

        A refused item changes nothing and does not fail the others; an unreachable database
        fails the call (Unavailable). Durable before return.
        """
        outcomes: list[RewardSealError | None] = [None] * len(items)
        accepted: list[tuple[int, BeginItem, dict[str, str], datetime]] = []
        for index, entry in enumerate(items):
            try:
                parsed = identity_from_key(entry.identity_key)
                if entry.identity is not None and dict(entry.identity) != parsed:
                    raise ValidationError("identity does not match identity_key")
            except ValidationError as exc:
                outcomes[index] = exc
                continue
            accepted.append((index, entry, parsed, as_utc(entry.begun_at)))
        if not accepted:
            return outcomes
        episode_ids = list(dict.fromkeys(entry.episode_id for _, entry, _, _ in accepted))
        contracts = sorted({entry.contract_digest for _, entry, _, _ in accepted})
        keys = sorted({entry.identity_key for _, entry, _, _ in accepted})

        def work(conn: Connection) -> list[RewardSealError | None]:
            results = list(outcomes)
            existing: dict[str, str] = {}
            # Registrations as they stand, updated as the items are applied in order.
            by_slot: dict[tuple[str, str], tuple[str, datetime]] = {}
            by_episode: dict[str, tuple[str, str, datetime]] = {}
            for episode_chunk, key_chunk in pairs_of_chunks(episode_ids, keys):
                rows = conn.execute(
                    schema.OPEN_FOR_BEGIN,
                    {
                        "episode_ids": episode_chunk,
                        "contracts": contracts,
                        "identity_keys": key_chunk,
                    },
                )
                for contract, key, episode, begun in rows:
                    by_slot[(contract, key)] = (episode, begun)
                    by_episode[episode] = (contract, key, begun)
            # Read after the registrations are locked: a receipt whose commit closed one of
            # them before the lock is visible here.
            for chunk in chunks(episode_ids):
                existing.update(
                    as_dict(conn.execute(schema.RECEIPT_IDS_OF_EPISODES, {"episode_ids": chunk}))
                )
            stored_episodes = set(by_episode)
            to_delete: set[str] = set()
            to_insert: dict[str, dict[str, Any]] = {}

            def release(episode: str) -> None:
                contract, key, _ = by_episode.pop(episode)
                del by_slot[(contract, key)]
                to_insert.pop(episode, None)
                if episode in stored_episodes:
                    to_delete.add(episode)

            for index, entry, parsed, now in accepted:
                receipt_id = existing.get(entry.episode_id)
                if receipt_id is not None:
                    results[index] = DuplicateEpisode(
                        f"episode {entry.episode_id!r} already has a receipt",
                        metadata={"receipt_id": receipt_id},
                    )
                    continue
                holder = by_slot.get((entry.contract_digest, entry.identity_key))
                if holder is not None:
                    if holder[0] == entry.episode_id:
                        continue  # idempotent re-begin: keep the first registration
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
                by_slot[(entry.contract_digest, entry.identity_key)] = (entry.episode_id, now)
                by_episode[entry.episode_id] = (entry.contract_digest, entry.identity_key, now)
                to_insert[entry.episode_id] = {
                    "contract_digest": entry.contract_digest,
                    "identity_key": entry.identity_key,
                    "episode_id": entry.episode_id,
                    "identity": parsed,
                    "baseline": entry.baseline,
                    "begun_at": now,
                }
            for chunk in chunks(sorted(to_delete)):
                conn.execute(schema.CLOSE_OPEN_EPISODES, {"episode_ids": chunk})
            if to_insert:
                inserted = conn.execute(self._inserts.open_episodes, list(to_insert.values())).all()
                if len(inserted) != len(to_insert):
                    # A registration for one of these slots or episode ids was inserted (by a
                    # PostgreSQL transaction) after our read: read again, it is visible now.
                    raise LostRace("open episode inserted concurrently")
            return results

        return self._db.write(work)
