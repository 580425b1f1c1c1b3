"""The receipt index (R-C-5): forwarded receipt envelopes and their privacy-safe columns.

The service opens each envelope (:func:`~rewardseal.core.receipts.open_receipt`: the signature over
the exact bytes against the active worker keys, then the strict parse, core's rules and the
envelope flags) and hands :meth:`ReceiptIndex.record_receipts` the
:class:`~rewardseal.core.receipts.OpenedReceipt`: the index takes a receipt only in that form, so it
never parses or validates one again. A receipt is stored once per receipt id and once per
episode; the contract and issuer key it names must be registered. Only columns that identify and
score a receipt are kept beside the signed envelope: never record contents.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Any

from sqlalchemy import ColumnElement, func, or_, select
from sqlalchemy.engine import Connection

from rewardseal.core.contract import UNSCORED_OUTCOMES
from rewardseal.core.errors import (
    CertificateUnknown,
    DuplicateEpisode,
    KeyNotAdmitted,
    KeyNotBound,
    NotFound,
    RewardSealError,
    SignatureError,
    ValidationError,
)
from rewardseal.core.receipts import OpenedReceipt
from rewardseal.core.validation import check_policy_update_field, validate_digest
from rewardseal.v1.enums_pb2 import RewardOutcome
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt, SignedEnvelope
from rewardseal_control.store import inputs, key_bindings, tables
from rewardseal_control.store.contracts import require_contract
from rewardseal_control.store.pagination import Listing, Page, fingerprint
from rewardseal_control.store.tables import AnyRow
from rewardseal_server.sqlstore import LostRace, StoreEngine, chunks

__all__ = [
    "ContractActivity",
    "ReceiptFilter",
    "ReceiptIndex",
    "ReceiptSummary",
    "RecordResult",
    "StoredReceipt",
    "TimelineBucket",
    "read_receipt",
]

_receipts = tables.receipts
_certificates = tables.certificates
_SELECT = select(
    _receipts.c.receipt_id,
    _receipts.c.policy_update,
    _receipts.c.envelope,
    _receipts.c.recorded_at,
)
_LISTING = Listing(
    kind="receipts", order=(_receipts.c.policy_update, _receipts.c.receipt_id), shape=(int, str)
)


@dataclass(frozen=True)
class RecordResult:
    """What happened to one forwarded receipt (same order as the request).

    ``recorded`` is True when the receipt is stored, now or before (``duplicate``); otherwise
    ``error`` says why it was refused. ``receipt_id`` is empty when the item was refused before
    its receipt was looked at (not an opened receipt, or an envelope with unknown fields).
    """

    receipt_id: str
    recorded: bool
    duplicate: bool = False
    error: RewardSealError | None = None


@dataclass(frozen=True)
class StoredReceipt:
    """A receipt of the index: the signed envelope, its parsed payload, when it was recorded."""

    receipt: RewardEvidenceReceipt
    envelope: SignedEnvelope
    recorded_at: datetime


@dataclass(frozen=True, kw_only=True)
class ReceiptFilter:
    """Filters of :meth:`ControlStore.list_receipts`; None (or outcome 0) means "any"."""

    contract_digest: str | None = None
    reward_outcome: int | None = None
    certified: bool | None = None
    min_policy_update: int | None = None
    max_policy_update: int | None = None


@dataclass(frozen=True)
class ReceiptSummary:
    """Per-contract counts of the receipt index."""

    contract_digest: str
    total: int
    counts: Mapping[int, int]
    """RewardOutcome number -> receipts with that outcome (outcomes with none are absent)."""
    certified: int
    unscored: int
    highest_policy_update: int | None = None
    """The highest policy update among the contract's receipts; None when there are none."""

    @property
    def certified_share(self) -> float:
        """Certified receipts / all receipts (0.0 when there are none)."""
        return self.certified / self.total if self.total else 0.0

    @property
    def unscored_share(self) -> float:
        """Unscored receipts (RECONCILIATION_REQUIRED, FAILED_PLATFORM) / all (0.0 if none)."""
        return self.unscored / self.total if self.total else 0.0


@dataclass(frozen=True)
class TimelineBucket:
    """Receipts of one contract over a span of policy updates (``first``..``last``)."""

    first_update: int
    last_update: int
    counts: Mapping[int, int]
    """RewardOutcome number -> receipts with that outcome in the span."""
    certified: int

    @property
    def total(self) -> int:
        """Receipts in the span."""
        return sum(self.counts.values())


@dataclass(frozen=True)
class ContractActivity:
    """How many receipts a contract has in the index and the newest policy update among them."""

    total: int
    newest_policy_update: int


def read_receipt(conn: Connection, receipt_id: str) -> StoredReceipt | None:
    """The recorded receipt ``receipt_id`` inside ``conn``; None if it is not recorded."""
    row = conn.execute(_SELECT.where(_receipts.c.receipt_id == receipt_id)).one_or_none()
    return None if row is None else _stored_receipt(row)


class ReceiptIndex:
    """Record forwarded receipts; list and count them."""

    def __init__(self, db: StoreEngine) -> None:
        """Work on ``db`` (owned by the :class:`~rewardseal_control.store.ControlStore`)."""
        self._db = db
        self._insert = db.insert_ignore(_receipts).returning(_receipts.c.receipt_id)

    def record_receipts(
        self, receipts: Sequence[OpenedReceipt], *, at: datetime | None = None
    ) -> list[RecordResult]:
        """Store forwarded receipts in ONE transaction; one result per item, in order.

        The caller (the service) opened each envelope against :meth:`worker_trust` with
        :func:`~rewardseal.core.receipts.open_receipt`: signature, strict parse, every rule and the
        envelope flags are checked there, once. Here each receipt's privacy-safe columns are
        stored with its envelope. Per item, the first rule that fires wins:

        1. not an :class:`~rewardseal.core.receipts.OpenedReceipt`, or an envelope carrying fields
           this schema does not know (they would be stored) -> ValidationError;
        2. the receipt id is stored already: same payload -> ``recorded, duplicate``;
           another payload -> ValidationError;
        3. the contract is not registered -> NotFound;
        4. the issuer key is not registered -> SignatureError (``signature_invalid``);
        5. the key is not admitted -> KeyNotAdmitted (R-C-10; retryable);
        6. the key is not bound to the receipt's contract -> KeyNotBound (R-C-10);
        7. the receipt names a certificate that control did not issue for its contract and
           that the key did not register as its bundle certificate (same id, contract and,
           where the receipt states one, digest) -> CertificateUnknown;
        8. the episode has another receipt under the same contract -> DuplicateEpisode
           (metadata ``receipt_id``): the index is keyed by (contract digest, episode id);
        9. otherwise stored -> ``recorded``.

        Who may write comes before what exists: a key that may not write a contract's receipts
        learns nothing from the index about its episodes.

        A refused item never fails the others. Durable before return.
        """
        now = inputs.moment(at)
        results: list[RecordResult | None] = [None] * len(receipts)
        parsed: list[tuple[int, RewardEvidenceReceipt, dict[str, Any]]] = []
        for index, opened in enumerate(receipts):
            try:
                row = _receipt_row(opened, now)
            except RewardSealError as exc:
                results[index] = RecordResult(receipt_id="", recorded=False, error=exc)
                continue
            parsed.append((index, opened.receipt, row))
        # The signed bytes of each item: what "the same receipt" means for idempotency.
        payloads = {index: bytes(receipts[index].envelope.payload) for index, _, _ in parsed}
        if not parsed:
            return [r for r in results if r is not None]
        digests = sorted({receipt.reward_contract_digest for _, receipt, _ in parsed})
        key_ids = sorted({receipt.issuer_key_id for _, receipt, _ in parsed})
        certificate_ids = sorted({r.certificate_id for _, r, _ in parsed if r.certificate_id})

        def work(conn: Connection) -> list[RecordResult]:
            # One statement per chunk of items reads what exists under their receipt ids OR
            # their episode ids, so an item's two lookups see one state of the table.
            payload_by_id: dict[str, bytes] = {}
            receipt_by_episode: dict[tuple[str, str], str] = {}
            for batch in chunks(parsed):
                found = conn.execute(
                    select(
                        _receipts.c.receipt_id,
                        _receipts.c.contract_digest,
                        _receipts.c.episode_id,
                        _receipts.c.envelope,
                    ).where(
                        or_(
                            _receipts.c.receipt_id.in_([r.receipt_id for _, r, _ in batch]),
                            _receipts.c.episode_id.in_([r.episode_id for _, r, _ in batch]),
                        )
                    )
                )
                for receipt_id, contract, episode_id, stored in found:
                    payload_by_id[receipt_id] = SignedEnvelope.FromString(bytes(stored)).payload
                    receipt_by_episode[(contract, episode_id)] = receipt_id
            standing = key_bindings.bindings_in(conn, key_ids)
            issued: dict[tuple[str, str], str] = {}
            for chunk in chunks(certificate_ids):
                for certificate_id, contract, digest in conn.execute(
                    select(
                        _certificates.c.certificate_id,
                        _certificates.c.contract_digest,
                        _certificates.c.digest,
                    ).where(_certificates.c.certificate_id.in_(chunk))
                ):
                    issued[(certificate_id, contract)] = digest
            contracts: set[str] = set()
            for chunk in chunks(digests):
                contracts.update(
                    conn.execute(
                        select(tables.contracts.c.digest).where(
                            tables.contracts.c.digest.in_(chunk)
                        )
                    ).scalars()
                )
            decided = list(results)
            rows: list[dict[str, Any]] = []
            for index, receipt, row in parsed:
                receipt_id = receipt.receipt_id
                episode = (receipt.reward_contract_digest, receipt.episode_id)
                previous = payload_by_id.get(receipt_id)
                error: RewardSealError | None = None
                if previous is not None:
                    if previous == payloads[index]:
                        decided[index] = RecordResult(receipt_id, recorded=True, duplicate=True)
                        continue
                    error = ValidationError(
                        f"receipt {receipt_id} is already recorded with other content"
                    )
                elif receipt_by_episode.get(episode) == receipt_id:
                    # Committed concurrently between two reads: read again.
                    raise LostRace("receipt recorded concurrently")
                else:
                    error = _refusal(receipt, contracts, standing, issued)
                    if error is None and episode in receipt_by_episode:
                        error = DuplicateEpisode(
                            f"episode {receipt.episode_id} already has a receipt under contract "
                            f"{receipt.reward_contract_digest}",
                            metadata={"receipt_id": receipt_by_episode[episode]},
                        )
                if error is not None:
                    decided[index] = RecordResult(receipt_id, recorded=False, error=error)
                    continue
                payload_by_id[receipt_id] = payloads[index]
                receipt_by_episode[episode] = receipt_id
                rows.append(row)
                decided[index] = RecordResult(receipt_id, recorded=True)
            if rows:
                inserted = conn.execute(self._insert, rows).scalars().all()
                if len(inserted) != len(rows):
                    raise LostRace("receipt recorded concurrently")
            return [r for r in decided if r is not None]

        return self._db.write(work)

    def list_receipts(
        self, filters: ReceiptFilter | None = None, page_size: int = 0, page_token: str = ""
    ) -> Page[StoredReceipt]:
        """Recorded receipts matching ``filters``, by policy update then receipt id.

        Raises:
            ValidationError: a malformed filter (digest, outcome, update range) or page token.
        """
        filters = filters or ReceiptFilter()
        conditions, query = _receipt_conditions(filters)
        statement = _SELECT.where(*conditions)
        rows, token = _LISTING.read(
            self._db, statement, query=query, page_size=page_size, page_token=page_token
        )
        return Page([_stored_receipt(row) for row in rows], token)

    def receipt_summary(self, contract_digest: str) -> ReceiptSummary:
        """Counts by outcome, certified and unscored receipts of one registered contract.

        Raises:
            ValidationError: malformed digest.
            NotFound: the contract is not registered.
        """
        validate_digest(contract_digest, "reward_contract_digest")
        statement = (
            select(_receipts.c.reward_outcome, _receipts.c.certified, func.count())
            .where(_receipts.c.contract_digest == contract_digest)
            .group_by(_receipts.c.reward_outcome, _receipts.c.certified)
        )

        highest = select(func.max(_receipts.c.policy_update)).where(
            _receipts.c.contract_digest == contract_digest
        )

        def work(conn: Connection) -> tuple[list[AnyRow], int | None]:
            require_contract(conn, contract_digest)
            return list(conn.execute(statement)), conn.execute(highest).scalar_one_or_none()

        rows, top = self._db.read(work, snapshot=True)
        counts: dict[int, int] = {}
        certified = unscored = 0
        for outcome, is_certified, count in rows:
            counts[int(outcome)] = counts.get(int(outcome), 0) + int(count)
            if is_certified:
                certified += int(count)
            if outcome in UNSCORED_OUTCOMES:
                unscored += int(count)
        return ReceiptSummary(
            contract_digest=contract_digest,
            total=sum(counts.values()),
            counts=MappingProxyType(dict(sorted(counts.items()))),
            certified=certified,
            unscored=unscored,
            highest_policy_update=None if top is None else int(top),
        )

    def timeline(self, contract_digest: str, *, buckets: int = 24) -> list[TimelineBucket]:
        """The contract's receipts over training time: at most ``buckets`` equal spans of policy
        updates from the lowest to the highest recorded, each with its counts by outcome and its
        certified receipts (spans without receipts are left out). Empty without receipts.

        Raises:
            ValidationError: malformed digest, or ``buckets`` not in 1..500.
        """
        validate_digest(contract_digest, "reward_contract_digest")
        if isinstance(buckets, bool) or not isinstance(buckets, int) or not 1 <= buckets <= 500:
            raise ValidationError("buckets must be an integer from 1 to 500")
        mine = _receipts.c.contract_digest == contract_digest

        def work(conn: Connection) -> list[TimelineBucket]:
            low, high = conn.execute(
                select(
                    func.min(_receipts.c.policy_update), func.max(_receipts.c.policy_update)
                ).where(mine)
            ).one()
            if low is None:
                return []
            low, high = int(low), int(high)
            width = -(-(high - low + 1) // buckets)  # ceiling: every update lands in a bucket
            slot = ((_receipts.c.policy_update - low) // width).label("slot")
            rows = conn.execute(
                select(slot, _receipts.c.reward_outcome, _receipts.c.certified, func.count())
                .where(mine)
                .group_by(slot, _receipts.c.reward_outcome, _receipts.c.certified)
            )
            counts: dict[int, dict[int, int]] = {}
            certified: dict[int, int] = {}
            for index, outcome, is_certified, count in rows:
                per = counts.setdefault(int(index), {})
                per[int(outcome)] = per.get(int(outcome), 0) + int(count)
                if is_certified:
                    certified[int(index)] = certified.get(int(index), 0) + int(count)
            return [
                TimelineBucket(
                    first_update=low + index * width,
                    last_update=min(high, low + (index + 1) * width - 1),
                    counts=MappingProxyType(dict(sorted(counts[index].items()))),
                    certified=certified.get(index, 0),
                )
                for index in sorted(counts)
            ]

        return self._db.read(work, snapshot=True)

    def activity(self) -> dict[str, ContractActivity]:
        """Per contract digest with receipts: how many, and the newest policy update recorded
        (the reference point at which the console shows a certificate's schedule state)."""
        statement = select(
            _receipts.c.contract_digest, func.count(), func.max(_receipts.c.policy_update)
        ).group_by(_receipts.c.contract_digest)
        rows = self._db.read(lambda conn: list(conn.execute(statement)), snapshot=True)
        return {
            str(digest): ContractActivity(total=int(count), newest_policy_update=int(newest))
            for digest, count, newest in rows
        }


def _refusal(
    receipt: RewardEvidenceReceipt,
    contracts: set[str],
    standing: Mapping[str, key_bindings.KeyStanding],
    issued: Mapping[tuple[str, str], str],
) -> RewardSealError | None:
    """Why the receipt's key may not write it into the index (rules 3 to 7); None if it may."""
    contract, key_id = receipt.reward_contract_digest, receipt.issuer_key_id
    if contract not in contracts:
        return NotFound(f"reward contract {contract} is not registered")
    key = standing.get(key_id)
    if key is None:
        return SignatureError(f"issuer key {key_id} is not a registered worker key")
    if not key.admitted:
        return KeyNotAdmitted(
            f"issuer key {key_id} is registered but not admitted; an admin runs "
            f"rewardseal-control keys approve {key_id} --contract {contract}",
            metadata={"issuer_key_id": key_id, "reward_contract_digest": contract},
        )
    if contract not in key.contracts:
        return KeyNotBound(
            f"issuer key {key_id} is not bound to contract {contract}",
            metadata={"issuer_key_id": key_id, "reward_contract_digest": contract},
        )
    certificate_id = receipt.certificate_id
    if certificate_id:
        digest = issued.get((certificate_id, contract)) or key.certificates.get(
            (certificate_id, contract)
        )
        if digest is None or (receipt.certificate_digest and receipt.certificate_digest != digest):
            return CertificateUnknown(
                f"certificate {certificate_id} is neither one control issued for contract "
                f"{contract} nor the bundle certificate key {key_id} registered",
                metadata={"certificate_id": certificate_id},
            )
    return None


def _receipt_row(opened: OpenedReceipt, now: datetime) -> dict[str, Any]:
    """The privacy-safe row of one opened receipt (its envelope stored as it is)."""
    if not isinstance(opened, OpenedReceipt):
        raise ValidationError("each receipt must be an OpenedReceipt (see open_receipt)")
    envelope, receipt = opened.envelope, opened.receipt
    # The signature covers the payload only; fields outside it that this schema does not know
    # would be stored with the envelope, so they are refused here, where it is stored.
    try:
        inputs.no_unknown_fields(envelope)
    except ValidationError:
        raise ValidationError(
            "the receipt envelope carries fields this schema does not know"
        ) from None
    return {
        "receipt_id": receipt.receipt_id,
        "episode_id": receipt.episode_id,
        "contract_digest": receipt.reward_contract_digest,
        "policy_checkpoint_id": receipt.policy_checkpoint_id,
        "policy_update": receipt.policy_update,
        "oracle_tier": receipt.oracle_tier,
        "reward_outcome": receipt.reward_outcome,
        "scalar_reward": receipt.scalar_reward if receipt.HasField("scalar_reward") else None,
        "certified": receipt.certified,
        "development_only": receipt.development_only,
        "certificate_id": receipt.certificate_id or None,
        "certificate_state": receipt.certificate_state,
        "calibration_scope": receipt.calibration_scope,
        "issuer_key_id": receipt.issuer_key_id,
        "issued_at": inputs.to_datetime(receipt.issued_at),
        "envelope": envelope.SerializeToString(deterministic=True),
        "recorded_at": now,
    }


def _receipt_conditions(filters: ReceiptFilter) -> tuple[list[ColumnElement[bool]], str]:
    """WHERE clauses of a receipt filter and the fingerprint bound into its page tokens."""
    if not isinstance(filters, ReceiptFilter):
        raise ValidationError("filters must be a ReceiptFilter")
    conditions: list[ColumnElement[bool]] = []
    if filters.contract_digest is not None:
        validate_digest(filters.contract_digest, "reward_contract_digest")
        conditions.append(_receipts.c.contract_digest == filters.contract_digest)
    outcome = filters.reward_outcome or None
    if outcome is not None:
        if outcome not in RewardOutcome.values():
            raise ValidationError(f"reward_outcome {outcome} is not a known outcome")
        conditions.append(_receipts.c.reward_outcome == outcome)
    if filters.certified is not None:
        if not isinstance(filters.certified, bool):
            raise ValidationError("certified must be a boolean")
        conditions.append(_receipts.c.certified == filters.certified)
    low, high = filters.min_policy_update, filters.max_policy_update
    for value, name in ((low, "min_policy_update"), (high, "max_policy_update")):
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValidationError(f"{name} must be an integer")
            check_policy_update_field(value, name)
    if low is not None and high is not None and low > high:
        raise ValidationError("min_policy_update must not exceed max_policy_update")
    if low is not None:
        conditions.append(_receipts.c.policy_update >= low)
    if high is not None:
        conditions.append(_receipts.c.policy_update <= high)
    query = fingerprint(
        contract=filters.contract_digest,
        outcome=outcome,
        certified=filters.certified,
        low=low,
        high=high,
    )
    return conditions, query


def _stored_receipt(row: AnyRow) -> StoredReceipt:
    envelope = SignedEnvelope.FromString(bytes(row.envelope))
    return StoredReceipt(
        receipt=RewardEvidenceReceipt.FromString(envelope.payload),
        envelope=envelope,
        recorded_at=row.recorded_at,
    )
