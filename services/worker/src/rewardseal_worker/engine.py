"""The scoring pipeline: identity, ledger, oracle read, judge, receipt, signature, durable commit.

R-W-1..8. Every RPC that scores goes through ``Scorer.score_jobs`` so the unary, batched,
streamed and grader paths cannot disagree. A batch runs in one worker thread (or, small and with
nothing across a network to wait for, on the event loop: ``Scorer.inline_batch``) and ends in one
store transaction, so the fsync that makes receipts durable is paid once per batch;
``Scorer.score`` groups concurrent unary calls into such batches.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
import os
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from google.protobuf import json_format

from rewardseal.core.accepting import CertificateInUse
from rewardseal.core.certificates import certificate_state
from rewardseal.core.clock import utc_now
from rewardseal.core.digest import digest_bytes
from rewardseal.core.errors import (
    ContractMismatch,
    DuplicateEpisode,
    IdentityConflict,
    IdentityMismatch,
    IdentityMissing,
    InvalidEpisode,
    NotFound,
    PolicyUpdateJump,
    PolicyUpdateRegressed,
    RewardSealError,
    Unavailable,
    ValidationError,
    preview,
)
from rewardseal.core.judging import judge_episode
from rewardseal.core.receipts import EpisodeFacts, ReceiptIssuer, is_unscored
from rewardseal.core.signing import SigningKey
from rewardseal.core.validation import (
    check_identity_values,
    runtime_signal_of,
    validate_descriptor,
    validate_digest,
    validate_id,
)
from rewardseal.v1.certificate_pb2 import RewardCertificate
from rewardseal.v1.episode_pb2 import EpisodeDescriptor
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt, SignedEnvelope
from rewardseal.v1.worker_service_pb2 import (
    BeginEpisodeRequest,
    BeginEpisodeResponse,
    HealthResponse,
)
from rewardseal_worker.batching import CallCount, MicroBatcher, run_placed
from rewardseal_worker.begins import BeginJob, BeginOutcome, begin_batch, repeat_of_earlier
from rewardseal_worker.bundle import ContractBundle
from rewardseal_worker.identity import Identity
from rewardseal_worker.oracles.base import OracleReader, OracleUnavailable
from rewardseal_worker.settings import DEFAULT_MAX_POLICY_UPDATE_JUMP
from rewardseal_worker.store import BatchLookup, ReceiptToCommit, WorkerStore

_log = logging.getLogger(__name__)

_Job = TypeVar("_Job")
_Outcome = TypeVar("_Outcome")

MAX_CREDIT_ROUNDS = 3
"""How often one batch re-judges a job whose records a concurrent commit credited first."""

UNARY_IN_FLIGHT = 3
"""Batches of unary calls (scores, begins) that may run at once; see MicroBatcher."""

DEFAULT_BATCH_CALLS = {"sqlite": 1, "postgresql": 2}
"""Batch calls that run at once by store dialect (see ``Scorer.__init__``)."""

INLINE_BATCH = 64
"""The largest batch run on the event loop when the store and the oracle are files on this host
(see rewardseal_worker.batching): about 15-20 ms of work on a 2-core machine, the longest a call
waits behind one. Larger batches, and every batch over a network store or oracle, run in a
worker thread."""

GATHER_SECONDS = 0.002
"""How long, under load, a unary call waits for company when batches run on the event loop: a
step of the wait, which grows with the calls in the worker (MicroBatcher._gather_wait)."""

RANDOM_BYTES_PER_RECEIPT = 48
"""Fresh random bytes one receipt takes: evidence salt, nonce, receipt id (16 each)."""

Record = dict[str, Any]
Clock = Callable[[], datetime]


class Revocation(enum.Enum):
    """What the worker knows about a certificate's revocation (R-C-4)."""

    NOT_REVOKED = "not_revoked"
    REVOKED = "revoked"
    UNKNOWN = "unknown"
    """The worker follows a revocation list but holds no fresh one."""


RevocationCheck = Callable[[RewardCertificate], Revocation]
"""Given a certificate, what the worker knows of its revocation (by its id, its contract or its
checker configuration, R-C-13)."""


def never_revoked(certificate: RewardCertificate) -> Revocation:
    """The revocation check of a worker that follows no revocation list."""
    return Revocation.NOT_REVOKED


@dataclass(frozen=True)
class ScoreJob:
    """One episode to score. ``commit_unscored=False`` is the grader mirror's dry run (R-W-9)."""

    descriptor: EpisodeDescriptor
    commit_unscored: bool = True


ScoreOutcome = SignedEnvelope | RewardSealError
"""What one job yields: the signed receipt, or the error for that episode alone."""


@dataclass
class _Prepared:
    """A job that passed every check and was judged, waiting for the batch commit."""

    index: int
    envelope: SignedEnvelope
    receipt: RewardEvidenceReceipt
    commit: ReceiptToCommit | None


@dataclass(frozen=True)
class _Checked:
    """A job that passed the checks that need no read of the system of record."""

    index: int
    job: ScoreJob
    identity: Identity
    baseline: list[Record] | None


class Scorer:
    """Scores episodes against one contract bundle with one signing key and one store."""

    def __init__(
        self,
        *,
        bundle: ContractBundle,
        store: WorkerStore,
        reader: OracleReader,
        key: SigningKey,
        clock: Clock = utc_now,
        revoked: RevocationCheck = never_revoked,
        episode_ttl_seconds: float = 3600.0,
        max_policy_update_jump: int = DEFAULT_MAX_POLICY_UPDATE_JUMP,
        max_batch: int = 256,
        max_concurrent_batches: int | None = None,
        inline_batch: int | None = None,
    ) -> None:
        if max_policy_update_jump < 0:
            raise ValidationError("max_policy_update_jump must be 0 or more")
        self.bundle = bundle
        self.store = store
        self.reader = reader
        self.key = key
        self.clock = clock
        self.revoked = revoked
        self.in_use = CertificateInUse(bundle.certificate, bundle.certificate_digest)
        """Replaced whole (one attribute store), never changed in place: see use_certificate."""
        self._identity_keys = frozenset(bundle.contract.oracle.identity_keys)
        """The contract's identity key names (R-W-2), as a set once, not per identity."""
        self._issuer: tuple[CertificateInUse, ReceiptIssuer] | None = None
        """The receipt issuer of one :attr:`in_use` value (see _issuer_for)."""
        self.on_commit: Callable[[], None] | None = None
        """Called (in the scoring thread) after receipts were committed: wakes the forwarder."""
        self.on_receipts: Callable[[Sequence[RewardEvidenceReceipt]], None] | None = None
        """Told (in the scoring thread) the receipts each round answers with: those committed
        and the grader's dry runs, never a duplicate or a refusal (the metrics count them)."""
        self.episode_ttl_seconds = episode_ttl_seconds
        self.max_policy_update_jump = max_policy_update_jump
        """How far above the contract's highest policy update (before the call) one call may
        score; applied again, under the ledger lock, when the batch commits."""
        # Few batch calls (BeginEpisodes, ScoreEpisodes, stream runs) in flight on purpose: every
        # batch pays a fixed cost (store round trips, one durable commit), and calls that arrive
        # while one runs form a larger next batch. On SQLite (one writer) a second batch thread
        # only fought the first for the GIL: one at a time cost 13% less CPU per episode for 5%
        # more episodes/s (bench/peer_bench.py batched, paired runs); PostgreSQL overlaps one
        # batch's round trips with another's work, so it keeps two. Unary calls have their own
        # batcher below and never wait for these.
        if max_concurrent_batches is None:
            max_concurrent_batches = DEFAULT_BATCH_CALLS.get(store.dialect, 2)
        self._slots = asyncio.Semaphore(max_concurrent_batches)
        # Batches of at most inline_batch calls run on the event loop where nothing they wait
        # for is across a network (SQLite store, a local-file oracle): cheaper than a worker
        # thread (see rewardseal_worker.batching). Never over a network: a slow database or API
        # would stop every call.
        if inline_batch is None:
            inline_batch = INLINE_BATCH if store.dialect == "sqlite" and reader.local else 0
        if inline_batch < 0:
            raise ValidationError("inline_batch must be 0 or more")
        self.inline_batch = inline_batch
        # Unary calls: one batch at a time under light load; beside a large batch up to
        # UNARY_IN_FLIGHT, the last slot kept for lone calls, so a lone call never waits for a
        # large batch to finish (see MicroBatcher).
        unary = functools.partial(
            MicroBatcher,
            max_batch=max_batch,
            in_flight=UNARY_IN_FLIGHT,
            inline_max=inline_batch,
            gather_seconds=GATHER_SECONDS if inline_batch else 0.0,
            calls=CallCount(),
        )
        self._scores: MicroBatcher[ScoreJob, SignedEnvelope] = unary(
            self.score_jobs_sync, name="scoring"
        )
        self._begins: MicroBatcher[BeginJob, BeginEpisodeResponse] = unary(
            self._begin_batch, name="begin"
        )

    # --- BeginEpisode (R-W-1, R-W-3; the batch itself is rewardseal_worker.begins) ---

    async def begin(self, request: BeginEpisodeRequest) -> BeginEpisodeResponse:
        """Record the baseline read for the identity before the rollout."""
        return await self._begins.submit(self.begin_job(request))

    async def begin_many(self, requests: Sequence[BeginEpisodeRequest]) -> list[BeginOutcome]:
        """Begin a batch in one worker thread (or on the loop: see ``inline_batch``) and ONE
        store transaction; one outcome per request, in order.

        A request refused by its checks or by the store, or repeating an earlier request's
        episode id, is refused alone. A store failure fails the whole call and stores nothing.
        """
        outcomes: dict[int, BeginOutcome] = {}
        jobs: dict[int, BeginJob] = {}
        seen: set[str] = set()
        for index, request in enumerate(requests):
            try:
                repeat = repeat_of_earlier(request.episode_id, seen)
                if repeat is not None:
                    raise repeat
                jobs[index] = self.begin_job(request)
            except RewardSealError as exc:
                outcomes[index] = exc
        if jobs:
            begun = await self._batch_call(self._begin_batch, list(jobs.values()))
            outcomes.update(zip(jobs, begun, strict=True))
        return [outcomes[index] for index in range(len(requests))]

    def begin_job(self, request: BeginEpisodeRequest) -> BeginJob:
        """``request`` checked without a read: its id, contract and identity (R-W-2)."""
        validate_id(request.episode_id, "episode_id", error=InvalidEpisode)
        self._check_contract_digest(request.reward_contract_digest)
        identity = self._check_identity_keys(dict(request.oracle_identity), "oracle_identity")
        return BeginJob(request.episode_id, identity)

    def _begin_batch(self, jobs: Sequence[BeginJob]) -> list[BeginOutcome]:
        return begin_batch(
            jobs,
            contract_digest=self.bundle.contract_digest,
            store=self.store,
            reader=self.reader,
            begun_at=self.clock(),
            ttl_seconds=self.episode_ttl_seconds,
        )

    # --- Scoring ---

    async def score(self, job: ScoreJob) -> SignedEnvelope:
        """Score one episode through the group-commit batcher; raise its error if it has one."""
        return await self._scores.submit(job)

    async def score_jobs(self, jobs: Sequence[ScoreJob]) -> list[ScoreOutcome]:
        """Score a batch in one thread (or on the loop: see ``inline_batch``) and one commit;
        one outcome per job, in order."""
        if not jobs:
            return []
        try:
            return await self._batch_call(self.score_jobs_sync, list(jobs))
        except RewardSealError:
            raise
        except Exception as exc:
            _log.exception("scoring batch failed")
            raise Unavailable(
                f"the worker could not score the batch: {type(exc).__name__}"
            ) from exc

    async def _batch_call(
        self, run: Callable[[Sequence[_Job]], list[_Outcome]], jobs: Sequence[_Job]
    ) -> list[_Outcome]:
        """``run(jobs)`` for a batch call: in its slot, on the loop or in a worker thread."""
        async with self._slots:
            return await run_placed(run, jobs, self.inline_batch)

    def score_jobs_sync(self, jobs: Sequence[ScoreJob]) -> list[ScoreOutcome]:
        """The blocking pipeline for a batch (in a worker thread, or on the loop: see
        ``inline_batch``)."""
        outcomes: list[ScoreOutcome | None] = [None] * len(jobs)
        first_index_of: dict[str, int] = {}
        repeats: dict[int, int] = {}
        pending: list[int] = []
        for index, job in enumerate(jobs):
            episode_id = job.descriptor.episode_id
            if episode_id in first_index_of:
                # The same episode twice in one batch: it is scored once; the repeat is told so.
                repeats[index] = first_index_of[episode_id]
            else:
                first_index_of[episode_id] = index
                pending.append(index)
        committed_ids: dict[int, str] = {}
        # A record credited by a concurrent commit sends its job round again: judged against
        # the fresh credited set, it can no longer claim that record (R-W-3).
        for _ in range(MAX_CREDIT_ROUNDS):
            if not pending:
                break
            pending = self._score_round(jobs, pending, outcomes, committed_ids)
        for index in pending:
            outcomes[index] = Unavailable("episode kept colliding with concurrent commits")
        for index, first in repeats.items():
            episode_id = jobs[index].descriptor.episode_id
            outcome = outcomes[first]
            if first in committed_ids:
                outcomes[index] = _duplicate(episode_id, committed_ids[first])
            elif isinstance(outcome, RewardSealError):
                outcomes[index] = outcome
            else:
                outcomes[index] = InvalidEpisode(f"episode {episode_id} appears twice in one batch")
        return [o if o is not None else Unavailable("episode was not scored") for o in outcomes]

    def _score_round(
        self,
        jobs: Sequence[ScoreJob],
        indexes: Sequence[int],
        outcomes: list[ScoreOutcome | None],
        committed_ids: dict[int, str],
    ) -> list[int]:
        """Check, read, judge, sign and commit ``indexes``; return those to run again."""
        checked, known = self._check_batch(jobs, indexes, outcomes)
        # The lookup read the registrations' credited records in its snapshot; an identity
        # given by the descriptor alone (no registration) needs a read of its own.
        credited: dict[str, Set[str]] = dict(known.credited)
        unread = {c.identity.key for c in checked} - credited.keys()
        if unread:
            credited.update(self.store.credited_for(self.bundle.contract_digest, unread))
        reads = self.reader.read_many([c.identity for c in checked])
        # One draw from the OS for the whole round: a system call per value (salt, nonce,
        # receipt id) released and re-took the GIL three times per episode, which under load
        # cost more than the values themselves.
        random = os.urandom(RANDOM_BYTES_PER_RECEIPT * len(checked))
        prepared = [
            self._judge_and_sign(
                c,
                credited.get(c.identity.key, set()),
                read,
                random[n * RANDOM_BYTES_PER_RECEIPT : (n + 1) * RANDOM_BYTES_PER_RECEIPT],
            )
            for n, (c, read) in enumerate(zip(checked, reads, strict=True))
        ]
        to_commit = [p for p in prepared if p.commit is not None]
        results = self.store.commit_receipts(
            [p.commit for p in to_commit if p.commit], max_jump=self.max_policy_update_jump
        )
        retry: list[int] = []
        answered: list[RewardEvidenceReceipt] = []
        for item, result in zip(to_commit, results, strict=True):
            descriptor = jobs[item.index].descriptor
            if result.duplicate_of is not None:
                outcomes[item.index] = _duplicate(descriptor.episode_id, result.duplicate_of)
            elif result.regressed:
                outcomes[item.index] = _regressed(descriptor.policy_update, None)
            elif result.jumped:
                outcomes[item.index] = self._jumped(descriptor.policy_update, None)
            elif result.credit_conflicts:
                retry.append(item.index)
            else:
                outcomes[item.index] = item.envelope
                committed_ids[item.index] = result.receipt_id
                answered.append(item.receipt)
        if committed_ids and self.on_commit is not None:
            self.on_commit()
        for item in prepared:
            if item.commit is None:
                # Grader dry run of an unscored episode: nothing stored, the id is not burned.
                outcomes[item.index] = item.envelope
                answered.append(item.receipt)
        if answered and self.on_receipts is not None:
            self.on_receipts(answered)
        return retry

    def _check_batch(
        self,
        jobs: Sequence[ScoreJob],
        indexes: Sequence[int],
        outcomes: list[ScoreOutcome | None],
    ) -> tuple[list[_Checked], BatchLookup]:
        """Every check that needs only the descriptor and the store; failures go to outcomes.
        Also the store's lookup the checks were made against."""
        valid: list[int] = []
        for index in indexes:
            try:
                validate_descriptor(jobs[index].descriptor)
                self._check_descriptor_contract(jobs[index].descriptor)
                valid.append(index)
            except RewardSealError as exc:
                outcomes[index] = exc
        known = self.store.lookup(
            self.bundle.contract_digest, [jobs[i].descriptor.episode_id for i in valid]
        )
        checked: list[_Checked] = []
        for index in valid:
            descriptor = jobs[index].descriptor
            try:
                if descriptor.episode_id in known.receipts:
                    raise _duplicate(descriptor.episode_id, known.receipts[descriptor.episode_id])
                if known.highest is not None and descriptor.policy_update < known.highest:
                    raise _regressed(descriptor.policy_update, known.highest)
                if (
                    known.highest is not None
                    and descriptor.policy_update > known.highest + self.max_policy_update_jump
                ):
                    # Refused before the read and the judge; the commit checks again under the
                    # ledger lock (and bounds a first batch on an empty ledger, see the store).
                    raise self._jumped(descriptor.policy_update, known.highest)
                registration = known.open.get(descriptor.episode_id)
                identity = self._resolve_identity(
                    descriptor, registration.identity if registration else None
                )
            except RewardSealError as exc:
                outcomes[index] = exc
                continue
            checked.append(
                _Checked(
                    index=index,
                    job=jobs[index],
                    identity=identity,
                    baseline=registration.baseline if registration is not None else None,
                )
            )
        return checked, known

    def _judge_and_sign(
        self,
        checked: _Checked,
        credited: Set[str],
        read: list[Record] | OracleUnavailable,
        random: bytes,
    ) -> _Prepared:
        """Judge the read of the system of record, build and sign the receipt (R-W-1, R-W-4).

        ``random``: :data:`RANDOM_BYTES_PER_RECEIPT` fresh bytes from the OS (salt, nonce and
        receipt id, 16 bytes each)."""
        descriptor = checked.job.descriptor
        current: list[Record] | None = None
        oracle_error: str | None = None
        if isinstance(read, OracleUnavailable):
            oracle_error = str(read) or "the system of record could not be read"
        else:
            current = read
        decision = judge_episode(
            self.bundle.required,
            self.bundle.forbidden,
            identity=checked.identity,
            baseline=checked.baseline,
            current=current,
            runtime_signal=runtime_signal_of(descriptor),
            credited=credited,
            oracle_error=oracle_error,
        )
        # The salt keeps the evidence digest from being guessed from low-entropy contents
        # (record ids, counts): the trainer gets the digest, never the document.
        evidence = decision.evidence_json(salt=random[:16].hex())
        in_use = self.in_use  # read once: the certificate and digest of one moment
        certificate = in_use.certificate
        revocation = self.revoked(certificate) if certificate else Revocation.NOT_REVOKED
        issued_at = self.clock()
        issued = self._issuer_for(in_use).issue(
            EpisodeFacts(
                receipt_id=new_receipt_id(random[32:48], issued_at),
                episode_id=descriptor.episode_id,
                policy_checkpoint_id=descriptor.policy_checkpoint_id,
                policy_update=descriptor.policy_update,
                outcome=decision.outcome,
                uncertainty=decision.uncertainty,
                tier=self.bundle.tier,
                evidence_digest=digest_bytes(evidence),
                nonce=random[16:32].hex(),
                issued_at=issued_at,
            ),
            revoked=revocation is Revocation.REVOKED,
            revocation_unknown=revocation is Revocation.UNKNOWN,
        )
        receipt, envelope = issued.receipt, issued.envelope
        commit = None
        if checked.job.commit_unscored or not is_unscored(receipt):
            commit = ReceiptToCommit(
                receipt_id=receipt.receipt_id,
                episode_id=receipt.episode_id,
                contract_digest=self.bundle.contract_digest,
                policy_update=receipt.policy_update,
                identity_key=checked.identity.key,
                envelope=envelope.SerializeToString(),
                evidence=evidence,
                credited_record_ids=decision.credited_record_ids,
            )
        return _Prepared(index=checked.index, envelope=envelope, receipt=receipt, commit=commit)

    def _issuer_for(self, in_use: CertificateInUse) -> ReceiptIssuer:
        """The issuer of receipts under ``in_use``: kept while it is the value in use, so the
        parts of a receipt that only the certificate and the outcome decide are made (and
        checked) once; a new one when :meth:`use_certificate` replaced it."""
        held = self._issuer
        if held is None or held[0] is not in_use:
            issuer = ReceiptIssuer(
                contract=self.bundle.contract,
                certificate=in_use.certificate,
                key=self.key,
                digest_of_contract=self.bundle.contract_digest,
                digest_of_certificate=in_use.digest,
            )
            held = (in_use, issuer)
            self._issuer = held  # one attribute store: threads see an old or a new pair
        return held[1]

    def observe_batches(self, observe: Callable[[str, int], None]) -> None:
        """Tell ``observe(name, size)`` of every micro-batch of unary calls as it starts."""
        self._scores.on_batch = observe
        self._begins.on_batch = observe

    def use_certificate(self, certificate: RewardCertificate | None, digest: str | None) -> None:
        """Score from now on under ``certificate`` (one the caller verified; None: no
        certificate, receipts uncertified); receipts already issued keep the one they name."""
        self.in_use = CertificateInUse(certificate, digest)

    @property
    def certificate(self) -> RewardCertificate | None:
        """The certificate in use now (see :attr:`in_use` for it and its digest together)."""
        return self.in_use.certificate

    # --- Checks (R-W-2, docs/spec.md §8) ---

    def _jumped(self, policy_update: int, highest: int | None) -> PolicyUpdateJump:
        """The error for a descriptor further above the ledger than one call may move it."""
        above = (
            f"{highest}, the highest scored for this contract"
            if highest is not None
            else "the highest scored for this contract when the call began"
        )
        return PolicyUpdateJump(
            f"policy update {policy_update} is more than {self.max_policy_update_jump} above "
            f"{above} (REWARDSEAL_WORKER_MAX_POLICY_UPDATE_JUMP)",
            metadata={"max_jump": str(self.max_policy_update_jump)},
        )

    def _check_contract_digest(self, digest: str) -> None:
        validate_digest(digest, "reward_contract_digest", error=InvalidEpisode)
        if digest != self.bundle.contract_digest:
            raise ContractMismatch(
                f"this worker scores contract {self.bundle.contract_digest}, not {digest}"
            )

    def _check_descriptor_contract(self, descriptor: EpisodeDescriptor) -> None:
        self._check_contract_digest(descriptor.reward_contract_digest)
        contract = self.bundle.contract
        if descriptor.HasField("task_id") and descriptor.task_id != contract.task_id:
            raise ContractMismatch(f"task {descriptor.task_id} is not the contract's task")
        if (
            descriptor.HasField("environment_id")
            and descriptor.environment_id != contract.environment_id
        ):
            raise ContractMismatch(
                f"environment {descriptor.environment_id} is not the contract's environment"
            )

    def _check_identity_keys(self, identity: Mapping[str, object], field: str) -> Identity:
        """The identity, checked: shape first (every entry point: sizes, names, values), then
        its key set against the contract's (R-W-2); ``field`` names it in messages. The one
        place an :class:`Identity` (and its key) is made for scoring or BeginEpisode."""
        if not identity:
            raise IdentityMissing("no oracle identity was given")
        check_identity_values(identity, field)
        expected = self._identity_keys
        if identity.keys() != expected:
            given = preview(", ".join(sorted(identity)), 128, quoted=False)
            raise IdentityMismatch(
                f"oracle identity keys [{given}] differ from the contract's {sorted(expected)}"
            )
        if isinstance(identity, Identity):
            return identity  # its key is already computed
        return Identity({name: str(value) for name, value in identity.items()})

    def _resolve_identity(
        self, descriptor: EpisodeDescriptor, registered: Identity | None
    ) -> Identity:
        """Descriptor field, else metadata.oracle_identity, else the registration; a
        registration wins and a descriptor naming another subject is refused (R-W-2)."""
        given: dict[str, str] | None = None
        if descriptor.oracle_identity:
            given = dict(descriptor.oracle_identity)
        elif "oracle_identity" in descriptor.metadata.fields:
            raw = json_format.MessageToDict(descriptor.metadata).get("oracle_identity")
            if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
                raise IdentityMismatch("metadata.oracle_identity must map names to strings")
            # Shape first, so an oversized identity is refused before it is compared or quoted.
            check_identity_values(raw, "metadata.oracle_identity")
            given = raw
        if registered is not None:
            if given is not None and given != dict(registered):
                raise IdentityConflict(
                    "the descriptor names another subject than the BeginEpisode registration"
                )
            return self._check_identity_keys(registered, "registered oracle_identity")
        if given is None:
            raise IdentityMissing(
                "no oracle identity in the descriptor, its metadata, or a BeginEpisode"
            )
        return self._check_identity_keys(given, "oracle_identity")

    # --- Reads ---

    def get_receipt(self, *, receipt_id: str = "", episode_id: str = "") -> SignedEnvelope:
        """A stored receipt envelope by receipt id or episode id."""
        if bool(receipt_id) == bool(episode_id):
            raise ValidationError("give exactly one of receipt_id and episode_id")
        if receipt_id:
            validate_id(receipt_id, "receipt_id")
            stored = self.store.receipt_by_id(receipt_id)
        else:
            validate_id(episode_id, "episode_id")
            stored = self.store.receipt_by_episode(episode_id)
        if stored is None:
            raise NotFound("no receipt for that id")
        return SignedEnvelope.FromString(stored.envelope)

    def health(self) -> HealthResponse:
        """What a caller needs to pin and check this worker."""
        highest = self.store.highest_policy_update(self.bundle.contract_digest) or 0
        certificate = self.in_use.certificate
        revoked = certificate is not None and self.revoked(certificate) is Revocation.REVOKED
        return HealthResponse(
            issuer_key_id=self.key.key_id,
            issuer_public_key=self.key.public_key,
            reward_contract_digest=self.bundle.contract_digest,
            oracle_tier=self.bundle.tier,
            oracle_channel=self.bundle.contract.oracle.channel,
            certificate_state=certificate_state(certificate, highest, revoked=revoked),
            certificate_id=certificate.certificate_id if certificate else "",
            highest_policy_update=highest,
        )


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND = timedelta(milliseconds=1)


def new_receipt_id(random: bytes | None = None, issued_at: datetime | None = None) -> str:
    """A fresh receipt id that satisfies R-MSG-10: ``rcpt.``, the issue time in milliseconds
    since the epoch (12 hex digits; ``issued_at``, an aware datetime, else now) and 16 random
    bytes in hex (``random``, when the caller drew them already, else fresh ones).

    The time comes first so that ids sort by issue time: a batch's ids land together at the
    end of the receipts' primary-key index. Random ids scattered every insert over the whole
    index, so each commit rewrote (and later checkpointed) a leaf page per receipt: at 60,000
    receipts, 1.4x the commit's CPU and wall time (``bench/receipt_id_bench.py``). The
    receipt states its issue time anyway; the random part keeps ids unguessable and unique.
    """
    since = (issued_at or utc_now()) - _EPOCH
    # 12 hex digits hold every datetime (year 9999 < 10889); a clock before 1970 counts as 0.
    millis = max(since // _MILLISECOND, 0)
    return f"rcpt.{millis:012x}{(os.urandom(16) if random is None else random[:16]).hex()}"


def _duplicate(episode_id: str, receipt_id: str) -> DuplicateEpisode:
    return DuplicateEpisode(
        f"episode {episode_id} already has a receipt", metadata={"receipt_id": receipt_id}
    )


def _regressed(policy_update: int, highest: int | None) -> PolicyUpdateRegressed:
    below = f"below {highest}, " if highest is not None else "below "
    return PolicyUpdateRegressed(
        f"policy update {policy_update} is {below}the highest already scored for this "
        "contract (R-W-7)"
    )
