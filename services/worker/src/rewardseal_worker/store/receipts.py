"""Receipts, credits and the policy ledger (R-W-3, R-W-7, R-W-8): reads before judging, the
commit after it, and receipts by id or episode.

:meth:`ReceiptStore.lookup` is the read a scoring batch makes before judging (one statement,
the credited records of its registrations' identities included; :meth:`ReceiptStore.credited_for`
reads them for identities without a registration); :meth:`ReceiptStore.commit_receipts` stores
the signed receipts of a batch in one transaction: exactly one receipt per episode, one credit
per record and contract, a ledger whose highest only moves forward (an item is refused more
than ``max_lag`` below it and, with ``max_jump``, too far above it), the episodes' open
registrations closed and, with the outbox on, one outbox row per receipt stored. It answers
each item with a typed outcome (:data:`CommitResult`): committed, a refusal that carries its
error (duplicate, regressed, jumped) or lost credits (judge again), so the scorer passes
refusals on instead of re-deriving them.

Concurrency: on PostgreSQL a commit first locks the ledger rows of its contracts in sorted order
(creating missing rows), so everything it checks for a contract is read under that lock; an
insert that falls short means a writer the lock does not cover won a row, and the transaction
is run again (:class:`~rewardseal_server.sqlstore.LostRace`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, ClassVar, TypeAlias

from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Connection, Row

from rewardseal.core.errors import (
    DuplicateEpisode,
    PolicyUpdateJump,
    PolicyUpdateRegressed,
    RewardSealError,
)
from rewardseal_server.sqlstore import UNIQUE_VIOLATION, DriverConnection, LostRace, sqlstate
from rewardseal_worker.identity import Identity
from rewardseal_worker.ledger_refusals import (
    duplicate_episode,
    policy_update_jumped,
    policy_update_regressed,
)
from rewardseal_worker.store import evidence_codec, schema
from rewardseal_worker.store.core import StorePart
from rewardseal_worker.store.episodes import OpenEpisode


@dataclass(frozen=True)
class StoredReceipt:
    """A committed receipt as kept by the worker."""

    receipt_id: str
    episode_id: str
    contract_digest: str
    envelope: bytes
    """The serialized ``SignedEnvelope`` of the receipt."""
    evidence: bytes
    """Canonical JSON of the evidence document (its digest is on the receipt)."""


@dataclass(frozen=True)
class ReceiptToCommit:
    """One signed receipt to store, with what its commit must record."""

    receipt_id: str
    episode_id: str
    contract_digest: str
    policy_update: int
    identity_key: str | None
    """The identity's :attr:`~rewardseal_worker.identity.Identity.key`, or None if unknown."""
    envelope: bytes
    evidence: bytes
    credited_record_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Committed:
    """The receipt was stored by this commit (its records credited, the ledger raised)."""

    receipt_id: str
    stored: ClassVar[bool] = True


@dataclass(frozen=True, slots=True)
class Duplicate:
    """The episode already had a receipt, ``duplicate_of`` (stored before, or earlier in the
    batch): nothing was stored for the item (R-W-8)."""

    receipt_id: str
    duplicate_of: str
    episode_id: str
    stored: ClassVar[bool] = False

    def error(self) -> DuplicateEpisode:
        """The refusal the caller answers with."""
        return duplicate_episode(self.episode_id, self.duplicate_of)


@dataclass(frozen=True, slots=True)
class Regressed:
    """``policy_update`` was more than ``max_lag`` below ``highest``, the contract's highest
    committed update (under the ledger lock, earlier items of the batch included): nothing was
    stored for the item (R-W-7)."""

    receipt_id: str
    policy_update: int
    highest: int
    max_lag: int
    stored: ClassVar[bool] = False

    def error(self) -> PolicyUpdateRegressed:
        """The refusal the caller answers with (the window as the commit saw it)."""
        return policy_update_regressed(self.policy_update, self.highest, self.max_lag)


@dataclass(frozen=True, slots=True)
class Jumped:
    """``policy_update`` was more than ``max_jump`` above where the contract's ledger stood
    when the transaction began: nothing was stored for the item."""

    receipt_id: str
    policy_update: int
    max_jump: int
    stored: ClassVar[bool] = False

    def error(self) -> PolicyUpdateJump:
        """The refusal the caller answers with."""
        return policy_update_jumped(self.policy_update, None, self.max_jump)


@dataclass(frozen=True, slots=True)
class CreditsTaken:
    """The item lost a race for records: ``credit_conflicts`` (sorted) were already credited
    for the contract, before or to an earlier item of the batch. Nothing was stored for it and
    it is not refused: the caller judges it again against the fresh credited set (R-W-3)."""

    receipt_id: str
    credit_conflicts: tuple[str, ...]
    stored: ClassVar[bool] = False


CommitRefusal: TypeAlias = Duplicate | Regressed | Jumped
"""An outcome that refuses the item: its ``error()`` is what the caller answers with."""

CommitResult: TypeAlias = Committed | CommitRefusal | CreditsTaken
"""What happened to one :class:`ReceiptToCommit`: exactly one of these (a closed set); only a
:class:`Committed` item stored anything. Every one names the item's ``receipt_id`` and says
whether it was ``stored``."""


@dataclass(frozen=True)
class BatchLookup:
    """What a scoring batch needs to know about its episodes before judging (one read)."""

    receipts: Mapping[str, str]
    """episode_id -> receipt_id, for the episodes that already have a receipt (any contract)."""
    open: Mapping[str, OpenEpisode]
    """episode_id -> registration, for the episodes open on the looked-up contract."""
    highest: int | None
    """The contract's highest committed policy update, or None if none was (R-W-7)."""
    credited: Mapping[str, frozenset[str]]
    """identity key -> the ids of the records already credited for the contract, for the
    identities of :attr:`open` (what :meth:`ReceiptStore.credited_for` gives for those keys)."""


def stored_receipt(row: Row[*tuple[Any, ...]] | None) -> StoredReceipt | None:
    """A :class:`StoredReceipt` from a row of ``receipts``, or None for no row."""
    if row is None:
        return None
    return StoredReceipt(
        receipt_id=row.receipt_id,
        episode_id=row.episode_id,
        contract_digest=row.contract_digest,
        envelope=bytes(row.envelope),
        evidence=evidence_codec.unpack(bytes(row.evidence)),
    )


def group_credits(
    keys: Collection[str], rows: Sequence[tuple[str | None, str]]
) -> dict[str, set[str]]:
    """(identity key, record id) rows as key -> record ids, for every key of ``keys``; a record
    credited without an identity key (None) counts for every key (it cannot be attributed)."""
    credited: dict[str, set[str]] = {k: set() for k in keys}
    anonymous: set[str] = set()
    for identity_key, record_id in rows:
        if identity_key is None:
            anonymous.add(record_id)
        elif identity_key in credited:
            credited[identity_key].add(record_id)
    if anonymous:
        for records in credited.values():
            records |= anonymous
    return credited


class ReceiptStore(StorePart):
    """The receipt, credit and ledger part of :class:`~rewardseal_worker.store.WorkerStore`."""

    def lookup(self, contract_digest: str, episode_ids: Sequence[str]) -> BatchLookup:
        """Everything scoring needs to know about a batch before judging, in one read.

        ONE statement (:mod:`.hot_sql`), so one snapshot on both backends: the episodes'
        open registrations on ``contract_digest``, their existing receipts, the contract's
        highest committed policy update and the records credited to the registrations'
        identities. Advisory: :meth:`commit_receipts` checks again under its lock.
        """
        wanted = list(dict.fromkeys(episode_ids))
        found, rows, highest, credits = self._db.read_on_driver(
            lambda conn: self._hot.lookup(conn, contract_digest, wanted)
        )
        registered = {
            episode_id: OpenEpisode(
                identity=Identity(identity),
                baseline=baseline,
                begun_at=begun_at,
                task_parameters=parameters,
            )
            for episode_id, (identity, baseline, begun_at, parameters) in rows.items()
        }
        keys = {episode.identity.key for episode in registered.values()}
        credited = group_credits(keys, credits)
        return BatchLookup(
            receipts=MappingProxyType(found),
            open=MappingProxyType(registered),
            highest=highest,
            credited=MappingProxyType({k: frozenset(v) for k, v in credited.items()}),
        )

    def credited_for(
        self, contract_digest: str, identity_keys: Collection[str]
    ) -> dict[str, set[str]]:
        """For each identity key, the ids of the records already credited for the contract.

        Records credited by receipts committed without an identity key count for every
        identity (they cannot be attributed to one). One statement, however many keys. Keys
        with no credited record map to an empty set.
        """
        keys = sorted(set(identity_keys))
        if not keys:
            return {}
        rows = self._db.read_on_driver(lambda conn: self._hot.credited(conn, contract_digest, keys))
        return group_credits(keys, rows)

    def receipt_by_episode(self, episode_id: str) -> StoredReceipt | None:
        """The receipt of an episode, or None."""
        return self._db.read(
            lambda conn: stored_receipt(
                conn.execute(schema.RECEIPT_BY_EPISODE, {"episode_id": episode_id}).one_or_none()
            )
        )

    def receipt_by_id(self, receipt_id: str) -> StoredReceipt | None:
        """A receipt by its id, or None."""
        return self._db.read(
            lambda conn: stored_receipt(
                conn.execute(schema.RECEIPT_BY_ID, {"receipt_id": receipt_id}).one_or_none()
            )
        )

    def highest_policy_update(self, contract_digest: str) -> int | None:
        """The highest policy update committed for a contract, or None if none was (R-W-7)."""

        def work(conn: Connection) -> int | None:
            value = conn.execute(schema.HIGHEST, {"contract_digest": contract_digest}).scalar()
            return None if value is None else int(value)

        return self._db.read(work)

    def commit_receipts(
        self,
        items: Sequence[ReceiptToCommit],
        *,
        max_jump: int | None = None,
        max_lag: int = 0,
    ) -> list[CommitResult]:
        """Commit a batch of receipts in ONE transaction; one result per item, in order.

        Items are applied in order; per item, the first check that fires wins:

        1. the episode already has a receipt (stored before, or earlier in this batch) ->
           :class:`Duplicate` of that receipt's id;
        2. ``policy_update`` is more than ``max_lag`` below the contract's highest committed
           update (before, or by an earlier item of this batch) -> :class:`Regressed` (the
           store's default, 0: any update below the highest);
        2b. with ``max_jump`` set, ``policy_update`` is more than ``max_jump`` above the
           contract's highest update *as it was before this transaction* -> :class:`Jumped`. On an
           empty ledger the first item stored by this transaction stands in for it: the first
           episode of a contract may start at any update, but one transaction never moves the
           ledger more than ``max_jump`` past where it started, however many items it holds;
        3. a record to credit is already credited for the contract (before, or to an earlier
           item of this batch) -> :class:`CreditsTaken` (the records, sorted);
        4. otherwise -> :class:`Committed`: the receipt is inserted, its records credited, the
           episode's open registration closed and the ledger raised to
           ``max(highest, policy_update)`` (an item within the lag leaves it where it is);
           with the outbox on, an outbox row is inserted for it (due at once).

        Nothing is stored for an item in cases 1-3. Set-based (:mod:`.hot_sql`): after the
        contracts' ledger rows are locked, ONE query reads the batch's existing receipts and
        credited records, the items are decided here, and the rows are written with one
        statement per table. Evidence is stored packed (:mod:`.evidence_codec`). Durable before
        return.

        Raises:
            RewardSealError: a receipt id is already used by another episode (nothing of the
                batch is stored).
            ValueError: ``max_lag`` is negative.
        """
        if max_lag < 0:
            raise ValueError("max_lag must be 0 or more")
        if not items:
            return []
        batch = list(items)
        contracts = sorted({entry.contract_digest for entry in batch})
        episode_ids = list(dict.fromkeys(entry.episode_id for entry in batch))
        record_ids = sorted({r for entry in batch for r in entry.credited_record_ids})
        # Packed before the transaction: the write lock is not held while deflating, and a
        # transaction run again (LostRace) does not deflate again.
        packed = [evidence_codec.pack(entry.evidence) for entry in batch]
        # PostgreSQL: receipts go in by COPY until a conflict shows (see _write_receipts);
        # from then on this batch takes the careful INSERT, which tells conflicts apart.
        careful = [not self._hot.copies]

        def work(conn: DriverConnection) -> list[CommitResult]:
            highest, existing, taken = self._hot.lock_and_check(
                conn, contracts, episode_ids, record_ids
            )
            before = dict(highest)
            # Where each contract's ledger stood when this transaction began (see 2b).
            base = dict(before)
            now = datetime.now(UTC)
            results: list[CommitResult] = []
            receipt_rows: list[dict[str, Any]] = []
            credit_rows: list[dict[str, Any]] = []
            for entry, evidence in zip(batch, packed, strict=True):
                contract = entry.contract_digest
                duplicate_of = existing.get(entry.episode_id)
                if duplicate_of is not None:
                    results.append(Duplicate(entry.receipt_id, duplicate_of, entry.episode_id))
                    continue
                current = highest[contract]
                if current is not None and entry.policy_update < current - max_lag:
                    results.append(
                        Regressed(entry.receipt_id, entry.policy_update, current, max_lag)
                    )
                    continue
                start = base[contract]
                if (
                    max_jump is not None
                    and start is not None
                    and entry.policy_update > start + max_jump
                ):
                    results.append(Jumped(entry.receipt_id, entry.policy_update, max_jump))
                    continue
                wanted = sorted(set(entry.credited_record_ids))
                conflicts = tuple(r for r in wanted if (contract, r) in taken)
                if conflicts:
                    results.append(CreditsTaken(entry.receipt_id, conflicts))
                    continue
                existing[entry.episode_id] = entry.receipt_id
                taken.update((contract, r) for r in wanted)
                if start is None:
                    base[contract] = entry.policy_update
                highest[contract] = (
                    entry.policy_update if current is None else max(current, entry.policy_update)
                )
                receipt_rows.append(
                    {
                        "receipt_id": entry.receipt_id,
                        "episode_id": entry.episode_id,
                        "contract_digest": contract,
                        "policy_update": entry.policy_update,
                        "envelope": entry.envelope,
                        "evidence": evidence,
                        "created_at": now,
                    }
                )
                credit_rows.extend(
                    {
                        "contract_digest": contract,
                        "record_id": record_id,
                        "receipt_id": entry.receipt_id,
                        "identity_key": entry.identity_key,
                    }
                    for record_id in wanted
                )
                results.append(Committed(entry.receipt_id))
            if receipt_rows:
                self._write_receipts(conn, receipt_rows, careful)
            if credit_rows and self._hot.insert_credits(conn, credit_rows) != len(credit_rows):
                # Read free under the contracts' locks: a conflict is a bug. Fail the whole
                # batch rather than credit a record twice.
                raise RewardSealError("worker store error (a record was credited twice)")
            self._hot.close_and_raise(
                conn,
                [row["episode_id"] for row in receipt_rows],
                {c: v for c, v in highest.items() if v is not None and v != before[c]},
            )
            return results

        return self._db.write_on_driver(work)

    def _write_receipts(
        self, conn: DriverConnection, rows: list[dict[str, Any]], careful: list[bool]
    ) -> None:
        """Insert the decided receipts (and their outbox rows); all of them, or roll the
        transaction back.

        ``careful[0]`` False: by COPY (PostgreSQL). The episodes were checked for receipts
        under the ledger lock, so a conflict means a concurrent commit under another contract
        or a receipt id already used: the transaction is lost either way, and runs again
        (:class:`LostRace`) the careful way, which tells the two apart.
        """
        if not careful[0]:
            try:
                self._hot.insert_receipts(conn, rows, outbox=self._outbox, copy=True)
                return
            except sa_exc.IntegrityError as exc:
                if sqlstate(exc) != UNIQUE_VIOLATION:
                    raise
                careful[0] = True
                raise LostRace("a receipt key was taken during the COPY") from exc
        if self._hot.insert_receipts(conn, rows, outbox=self._outbox) == len(rows):
            return
        # Some were not inserted: a receipt id is taken (by another episode), or an episode got
        # its receipt from a concurrent commit under another contract (whose lock we do not
        # hold). Our own rows map to their episodes; any other owner is the first case.
        owners = self._hot.owners(conn, [row["receipt_id"] for row in rows])
        for row in rows:
            owner = owners.get(row["receipt_id"])
            if owner is not None and owner != row["episode_id"]:
                raise RewardSealError(
                    f"receipt id {row['receipt_id']!r} is already used by another episode"
                )
        raise LostRace("receipt committed concurrently")
