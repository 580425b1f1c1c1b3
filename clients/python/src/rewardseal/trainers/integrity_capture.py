"""Trainer-side capture for reward integrity (docs/spec.md §12, R-I-3, R-I-5).

The reward function (TRL) or the verl managers hand every scored sample to an
:class:`IntegrityCapture`: its record identity, candidate ordinal, episode id, the exact output
(kept by SHA-256 digest only), the optimizer's raw reward (mapped through the reward system's
mapping here), group id and selection. For a system-of-record task the capture also asks the
**sentinel worker** (a second worker client pinned to the sentinel's key) for its own receipt of
the *same* episode at the time of the episode: :meth:`IntegrityCapture.begin_sentinel` before
the rollout acts, :meth:`IntegrityCapture.record` after the optimizer scored it. That receipt
becomes the row's :class:`~rewardseal.core.integrity.SentinelObservation` and nothing else (R-I-5):
the capture returns nothing the reward function uses, and never raises into it for a sentinel
or control failure. A sentinel that cannot answer marks the row ``error`` (counted in the error
rate), never agreement or disagreement.

Rows travel to control through the on-disk :class:`~rewardseal.trainers.integrity.buffer.
SignalBuffer`: written and fsync'd first, delivered in order (``AppendSignalRows`` per batch,
``SealSignalShard`` per boundary), removed once acknowledged. While control is away the entries
wait on disk; a delivery attempt stops after ``max_block_s`` (default
:data:`DEFAULT_MAX_BLOCK_S`) plus at most one call's deadline (the integrity client's
``timeout``), and after a failed attempt none is made for ``retry_after_s``, so an outage costs a
training step at most that bound once, then nothing.

A boundary is a policy update (control refuses a row whose ``policy_update`` is not its
shard's boundary): the rows scored at policy update ``u`` form boundary ``u``. Only policy
updates that are multiples of ``boundary_every`` are captured (and cost the sentinel a call);
:meth:`IntegrityCapture.seal` closes one. Rows that arrive for a boundary already sealed are not
captured (counted in :attr:`IntegrityCapture.late_rows` and logged).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from rewardseal.core.digest import digest_bytes
from rewardseal.core.errors import (
    NotFound,
    PermissionDenied,
    RewardMappingError,
    RewardSealError,
    Unauthenticated,
    ValidationError,
)
from rewardseal.core.integrity import RewardMapping, SentinelObservation, SignalRow
from rewardseal.core.integrity.mapping import map_reward
from rewardseal.core.integrity.messages import signal_row_message
from rewardseal.core.integrity.signals import Selection
from rewardseal.core.validation import validate_id
from rewardseal.rpc.integrity_client import IntegrityClient
from rewardseal.rpc.worker_client import ReceiptOrError, WorkerClient, make_begin, make_descriptor
from rewardseal.rpc.worker_protocol import VerifiedReceipt
from rewardseal.trainers.integrity.buffer import BufferedEntry, SignalBuffer
from rewardseal.v1.enums_pb2 import RewardOutcome, RuntimeSignal

__all__ = [
    "DEFAULT_MAX_BLOCK_S",
    "DEFAULT_RETRY_AFTER_S",
    "CapturedSample",
    "IntegrityCapture",
    "output_digest",
    "sentinel_observation",
]

DEFAULT_MAX_BLOCK_S: Final = 2.0
"""How long one capture call may spend delivering to control before it leaves the rest on disk."""
DEFAULT_RETRY_AFTER_S: Final = 5.0
"""After a failed delivery, how long the capture waits before it tries control again."""

_LOG = logging.getLogger(__name__)
_VERIFIED = RewardOutcome.REWARD_OUTCOME_VERIFIED
# A refusal that resending cannot fix: the rows stay buffered and the error is raised at the
# next seal, rather than retried forever in silence.
_PERMANENT = (Unauthenticated, PermissionDenied, NotFound, ValidationError)


def output_digest(text: str) -> str:
    """``sha256:<hex>`` of the exact completion text (UTF-8): what a row keeps of the output."""
    return digest_bytes(text.encode("utf-8"))


def sentinel_observation(got: VerifiedReceipt) -> SentinelObservation:
    """A worker's verified receipt as a sentinel's verdict: accepted when VERIFIED and paid,
    refused when scored otherwise, an error when it left the episode unscored."""
    receipt = got.receipt
    # The digest of the exact signed bytes: what anyone holding the envelope can check.
    signed = digest_bytes(got.envelope.payload)
    if got.scalar is None:
        return SentinelObservation(
            "error",
            receipt_id=receipt.receipt_id,
            receipt_digest=signed,
            error=f"unscored: {RewardOutcome.Name(receipt.reward_outcome)}",
        )
    accepted = receipt.reward_outcome == _VERIFIED and got.scalar > 0
    return SentinelObservation(
        "accepted" if accepted else "refused",
        reward=got.scalar,
        receipt_id=receipt.receipt_id,
        receipt_digest=signed,
    )


def _sentinel_error(error: RewardSealError) -> SentinelObservation:
    return SentinelObservation("error", error=f"{error.reason}: {error.message}"[:500])


@dataclass(frozen=True, slots=True)
class CapturedSample:
    """One scored sample as the trainer saw it.

    ``output_text`` is the exact completion (only its digest leaves the trainer unless
    ``keep_traces``); ``optimizer_raw`` the optimizer's own number before any mapping (None when
    it produced none: unscored). ``identity`` and ``runtime_signal`` are what the sentinel's
    episode is opened and scored with (the optimizer's own, for a SoR task).
    """

    record_id: str
    candidate: int
    episode_id: str
    output_text: str
    optimizer_raw: float | None
    group_id: str
    selection: Selection = "selected"
    identity: Mapping[str, str] | None = None
    runtime_signal: RuntimeSignal.ValueType | None = None
    subgroups: Mapping[str, str] = field(default_factory=dict)


class IntegrityCapture:
    """Captures signal rows for one run and delivers them to control (see the module docstring).

    ``control`` is a blocking :class:`~rewardseal.rpc.integrity_client.IntegrityClient` with the
    trainer token; ``mapping`` the reward system revision's mapping; ``sentinel`` a
    :class:`~rewardseal.rpc.worker_client.WorkerClient` pinned to the sentinel worker's key, with
    ``sentinel_contract_digest`` its contract (None: no sentinel observation is captured, e.g. an
    external sentinel filled in elsewhere). ``checkpoint`` names the policy checkpoint the rows
    were produced by (updated with :meth:`set_checkpoint`).
    """

    def __init__(
        self,
        control: IntegrityClient,
        *,
        run_id: str,
        system_revision_id: str,
        protocol_revision_id: str,
        mapping: RewardMapping,
        buffer: SignalBuffer,
        runtime_identity: str,
        checkpoint: str,
        sentinel: WorkerClient | None = None,
        sentinel_contract_digest: str | None = None,
        boundary_every: int = 1,
        max_block_s: float = DEFAULT_MAX_BLOCK_S,
        retry_after_s: float = DEFAULT_RETRY_AFTER_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if (sentinel is None) != (sentinel_contract_digest is None):
            raise ValidationError("a sentinel client needs its contract digest, and the reverse")
        if max_block_s <= 0 or retry_after_s < 0 or boundary_every < 1:
            raise ValidationError(
                "max_block_s must be positive, retry_after_s >= 0 and boundary_every >= 1"
            )
        if not run_id:
            raise ValidationError("run_id must not be empty")
        # The sentinel's descriptor carries it: the worker's id rule, checked before any call.
        validate_id(checkpoint, "checkpoint")
        self.control = control
        self.run_id = run_id
        self.system_revision_id = system_revision_id
        self.protocol_revision_id = protocol_revision_id
        self.mapping = mapping
        self.buffer = buffer
        self.runtime_identity = runtime_identity
        self.checkpoint = checkpoint
        self.sentinel = sentinel
        self.sentinel_contract_digest = sentinel_contract_digest
        self.boundary_every = boundary_every
        self.max_block_s = max_block_s
        self.retry_after_s = retry_after_s
        self._clock = clock
        self._lock = threading.Lock()
        self._not_before = 0.0
        # Whether the oldest entry may have reached control already: it was sent and the answer
        # was lost, or it was read back from disk after a restart. AppendSignalRows is not
        # idempotent, so such an entry refused as "appended already" was in fact delivered.
        self._head_uncertain = len(buffer) > 0
        self._begun: dict[str, SentinelObservation | None] = {}
        # Seals still on disk from an earlier process over the same buffer count as sealed.
        self._sealed = {e.boundary for e in buffer.entries() if e.kind == "seal"}
        self.late_rows = 0
        """Rows not captured because their boundary was sealed already."""
        self.last_rows: list[SignalRow] = []
        """The rows of the last captured batch (for logs and tests; control has the record)."""
        self.shard_ids: dict[int, str] = {}
        """Sealed boundaries control acknowledged: boundary -> shard id."""
        self.last_error: RewardSealError | None = None
        """The last delivery failure (None after a delivery that emptied the buffer)."""

    def captures(self, policy_update: int) -> bool:
        """Whether rows scored at ``policy_update`` are captured (a boundary not yet sealed)."""
        return policy_update % self.boundary_every == 0 and policy_update not in self._sealed

    def set_checkpoint(self, checkpoint: str) -> None:
        """Name the policy checkpoint the next rows come from."""
        self.checkpoint = validate_id(checkpoint, "checkpoint")

    # --- the sentinel (R-I-3, R-I-5) ---

    def begin_sentinel(
        self, episodes: Iterable[tuple[str, Mapping[str, str] | None]], *, policy_update: int
    ) -> None:
        """Open ``(episode_id, identity)`` on the sentinel worker before the rollout acts (only at
        a captured policy update).

        A refusal or an outage is remembered per episode and becomes that row's sentinel error;
        nothing is raised (the trainer's reward never depends on the sentinel).
        """
        if self.sentinel is None or self.sentinel_contract_digest is None:
            return
        if not self.captures(policy_update):
            return
        items = list(episodes)
        if not items:
            return
        digest = self.sentinel_contract_digest
        answers: Sequence[object]
        try:
            answers = self.sentinel.begin_many(
                make_begin(episode_id, digest, dict(identity or {}))
                for episode_id, identity in items
            )
        except RewardSealError as exc:
            answers = [exc] * len(items)
        for (episode_id, _), answer in zip(items, answers, strict=True):
            failed = isinstance(answer, RewardSealError)
            self._begun[episode_id] = _sentinel_error(answer) if failed else None  # type: ignore[arg-type]

    def _observe(
        self, samples: Sequence[CapturedSample], policy_update: int
    ) -> list[SentinelObservation | None]:
        if self.sentinel is None or self.sentinel_contract_digest is None:
            return [None] * len(samples)
        found: list[SentinelObservation | None] = [None] * len(samples)
        to_score: list[int] = []
        for index, sample in enumerate(samples):
            refused = self._begun.pop(sample.episode_id, None)
            if refused is not None:
                found[index] = refused
            else:
                to_score.append(index)
        if not to_score:
            return found
        descriptors = [
            make_descriptor(
                episode_id=samples[i].episode_id,
                policy_checkpoint_id=self.checkpoint,
                policy_update=policy_update,
                reward_contract_digest=self.sentinel_contract_digest,
                oracle_identity=dict(samples[i].identity or {}) or None,
                runtime_signal=samples[i].runtime_signal,
            )
            for i in to_score
        ]
        answers: Sequence[ReceiptOrError]
        try:
            answers = self.sentinel.score_many(descriptors)
        except RewardSealError as exc:
            answers = [exc] * len(to_score)
        for index, answer in zip(to_score, answers, strict=True):
            found[index] = (
                _sentinel_error(answer)
                if isinstance(answer, RewardSealError)
                else sentinel_observation(answer)
            )
        return found

    # --- rows ---

    def _mapped(self, raw: float | None) -> float | None:
        if raw is None:
            return None
        try:
            return map_reward(raw, self.mapping).mapped
        except RewardMappingError:
            # failure_behavior "raise" must not reach training: the row says "no mapped value".
            return None

    def record(self, samples: Sequence[CapturedSample], *, policy_update: int) -> list[SignalRow]:
        """Capture one scored batch at ``policy_update``: the sentinel's observations, the rows,
        written to the buffer and (within the time bound) delivered. The rows it made (none
        when ``policy_update`` is not a captured boundary).

        Raises:
            IntegrityBufferFull: control has been away long enough to fill the buffer; the rows
                of this batch are not stored (the error says how many).
        """
        with self._lock:
            if policy_update % self.boundary_every != 0:
                return []
            if policy_update in self._sealed:
                self.late_rows += len(samples)
                _LOG.warning(
                    "reward integrity: %d rows of policy update %d arrived after its boundary "
                    "was sealed; not captured",
                    len(samples),
                    policy_update,
                )
                return []
            observed = self._observe(samples, policy_update)
            rows = [
                SignalRow(
                    record_id=sample.record_id,
                    candidate=sample.candidate,
                    episode_id=sample.episode_id,
                    output_digest=output_digest(sample.output_text),
                    optimizer_raw=sample.optimizer_raw,
                    optimizer_mapped=self._mapped(sample.optimizer_raw),
                    group_id=sample.group_id,
                    selection=sample.selection,
                    checkpoint=self.checkpoint,
                    policy_update=policy_update,
                    runtime_identity=self.runtime_identity,
                    sentinel=observation,
                    subgroups=dict(sample.subgroups),
                )
                for sample, observation in zip(samples, observed, strict=True)
            ]
            self.last_rows = rows
            if rows:
                self.buffer.add(self._entry("rows", policy_update, tuple(rows)))
                self._deliver()
            return rows

    def _entry(self, kind: str, boundary: int, rows: tuple[SignalRow, ...] = ()) -> BufferedEntry:
        return BufferedEntry(
            kind="rows" if kind == "rows" else "seal",
            run_id=self.run_id,
            boundary=boundary,
            system_revision_id=self.system_revision_id,
            protocol_revision_id=self.protocol_revision_id,
            rows=rows,
        )

    def seal(self, boundary: int) -> str | None:
        """Close ``boundary`` (its seal buffered and delivered like rows); its shard id once
        control acknowledged the seal (also in :attr:`shard_ids`), else None (the seal waits on
        disk, or the boundary had no row). Sealing a boundary twice buffers nothing more.

        Raises:
            IntegrityBufferFull: the seal could not be buffered (the boundary stays open).
        """
        with self._lock:
            if boundary not in self._sealed:
                self.buffer.add(self._entry("seal", boundary))
                self._sealed.add(boundary)
            self._deliver()
            return self.shard_ids.get(boundary)

    def pending_seals(self) -> list[int]:
        """Boundaries sealed here whose seal control has not acknowledged yet, in order."""
        with self._lock:
            return [e.boundary for e in self.buffer.entries() if e.kind == "seal"]

    def deliver(self, *, force: bool = False) -> bool:
        """Try to deliver what waits on disk (``force``: even inside the retry pause); True when
        nothing is left."""
        with self._lock:
            if force:
                self._not_before = 0.0
            return self._deliver()

    def _deliver(self) -> bool:
        start = self._clock()
        if start < self._not_before:
            return len(self.buffer) == 0
        delivered = 0
        try:
            for entry in self.buffer.entries():
                if delivered and self._clock() - start > self.max_block_s:
                    break
                self._send(entry)
                delivered += 1
                self._head_uncertain = False
        except RewardSealError as exc:
            self.last_error = exc
            self._head_uncertain = not isinstance(exc, _PERMANENT)
            self._not_before = self._clock() + self.retry_after_s
        finally:
            self.buffer.drop_delivered(delivered)
        if len(self.buffer) == 0:
            self.last_error = None
            return True
        return False

    def _send(self, entry: BufferedEntry) -> None:
        if entry.kind == "rows":
            try:
                self.control.append_signal_rows(
                    entry.run_id,
                    entry.boundary,
                    [signal_row_message(row) for row in entry.rows],
                    system_revision_id=entry.system_revision_id,
                    protocol_revision_id=entry.protocol_revision_id,
                )
            except ValidationError as exc:
                # One append is one transaction: a clash on a resend means all of it landed.
                if not (self._head_uncertain and "appended already" in exc.message):
                    raise
                _LOG.info("reward integrity: a resent batch had reached control already")
            return
        try:
            sealed = self.control.seal_signal_shard(entry.run_id, entry.boundary)
        except NotFound:
            # A boundary without a single row: nothing to seal, nothing to audit.
            return
        self.shard_ids[entry.boundary] = sealed.shard.shard_id

    def raise_if_stuck(self) -> None:
        """Raise the last delivery failure when resending cannot fix it (a wrong token, an
        unknown revision, a refused row): the rows stay buffered, the operator must act."""
        if isinstance(self.last_error, _PERMANENT):
            raise self.last_error
