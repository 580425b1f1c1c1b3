"""The scoring pipeline: identity, ledger, oracle read, judge, receipt, signature, durable commit.

R-W-1..8. Every RPC that scores goes through ``Scorer.score_jobs`` so the unary, batched,
streamed and grader paths cannot disagree. A batch ends in one store transaction, so the fsync
that makes receipts durable is paid once per batch; ``Scorer.score`` groups concurrent unary
calls into such batches. Where a batch runs (a worker thread, or the event loop) is not decided
here: the serving layer gives the scorer a :class:`~rewardseal_worker.batch_plan.BatchPlan`.
"""

from __future__ import annotations

import enum
import logging
import os
from collections.abc import Callable, Sequence, Set
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from rewardseal.core.accepting import CertificateInUse
from rewardseal.core.certificates import certificate_state
from rewardseal.core.clock import utc_now
from rewardseal.core.digest import digest_bytes
from rewardseal.core.errors import (
    InvalidEpisode,
    NotFound,
    RewardSealError,
    Unavailable,
    ValidationError,
)
from rewardseal.core.judging import bind_parameters, judge_episode
from rewardseal.core.judging.receipt_findings import (
    contract_names,
    decision_findings,
    findings_text,
)
from rewardseal.core.receipts import EpisodeFacts, ReceiptIssuer, is_unscored
from rewardseal.core.signing import SigningKey
from rewardseal.core.task_parameters import ParameterValue, parameters_digest
from rewardseal.core.validation import (
    runtime_signal_of,
    validate_descriptor,
    validate_id,
)
from rewardseal.v1.certificate_pb2 import RewardCertificate
from rewardseal.v1.enums_pb2 import RewardOutcome
from rewardseal.v1.episode_pb2 import EpisodeDescriptor
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt, SignedEnvelope
from rewardseal.v1.worker_service_pb2 import (
    BeginEpisodeRequest,
    BeginEpisodeResponse,
    HealthResponse,
)
from rewardseal_worker.batch_plan import BatchPlan, BatchRunner
from rewardseal_worker.batching import MicroBatcher
from rewardseal_worker.begins import BeginJob, BeginOutcome, begin_batch, repeat_of_earlier
from rewardseal_worker.bundle import ContractBundle
from rewardseal_worker.episode_checks import EpisodeChecks
from rewardseal_worker.identity import Identity
from rewardseal_worker.ledger_refusals import (
    duplicate_episode,
    policy_update_jumped,
    policy_update_regressed,
)
from rewardseal_worker.oracles.base import OracleReader, OracleUnavailable
from rewardseal_worker.settings import DEFAULT_MAX_POLICY_LAG, DEFAULT_MAX_POLICY_UPDATE_JUMP
from rewardseal_worker.store import (
    BatchLookup,
    Committed,
    CreditsTaken,
    ReceiptToCommit,
    WorkerStore,
)

_log = logging.getLogger(__name__)

MAX_CREDIT_ROUNDS = 3
"""How often one batch re-judges a job whose records a concurrent commit credited first."""

RANDOM_BYTES_PER_RECEIPT = 48
"""Fresh random bytes one receipt takes: evidence salt, nonce, receipt id (16 each)."""

EVERY_BATCH_IN_A_THREAD = BatchPlan()
"""The plan of a scorer the serving layer gave none: every batch in a worker thread."""

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
    task_parameters: dict[str, ParameterValue] | None = None
    """The values it is judged with (R-W-18); None when the contract declares none."""


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
        max_policy_lag: int = DEFAULT_MAX_POLICY_LAG,
        plan: BatchPlan = EVERY_BATCH_IN_A_THREAD,
    ) -> None:
        if max_policy_update_jump < 0:
            raise ValidationError("max_policy_update_jump must be 0 or more")
        if max_policy_lag < 0:
            raise ValidationError("max_policy_lag must be 0 or more")
        self.bundle = bundle
        self.store = store
        self.reader = reader
        self.key = key
        self.clock = clock
        self.revoked = revoked
        self.in_use = CertificateInUse(bundle.certificate, bundle.certificate_digest)
        """Replaced whole (one attribute store), never changed in place: see use_certificate."""
        self._checks = EpisodeChecks(bundle.contract, bundle.contract_digest)
        """The checks that need no read (R-W-2, docs/spec.md §8)."""
        self._issuer: tuple[CertificateInUse, ReceiptIssuer] | None = None
        """The receipt issuer of one :attr:`in_use` value (see _issuer_for)."""
        self._finding_names = contract_names((*bundle.required, *bundle.forbidden))
        """The field names a receipt's findings may carry: the contract's own (R-MSG-12)."""
        self.on_commit: Callable[[], None] | None = None
        """Called (in the scoring thread) after receipts were committed: wakes the forwarder."""
        self.on_receipts: Callable[[Sequence[RewardEvidenceReceipt]], None] | None = None
        """Told (in the scoring thread) the receipts each round answers with: those committed
        and the grader's dry runs, never a duplicate or a refusal (the metrics count them)."""
        self.episode_ttl_seconds = episode_ttl_seconds
        self.max_policy_update_jump = max_policy_update_jump
        """How far above the contract's highest policy update (before the call) one call may
        score; applied again, under the ledger lock, when the batch commits."""
        self.max_policy_lag = max_policy_lag
        """How far below the contract's highest policy update an episode may still be scored
        (R-W-7); checked against the batch's lookup and again, under the ledger lock, when the
        batch commits. Its certificate is judged at its own update."""
        self.plan = plan
        """Where its batches run: the serving layer's choice (:mod:`.batch_plan`)."""
        self._runner = BatchRunner(plan)
        self._scores: MicroBatcher[ScoreJob, SignedEnvelope] = self._runner.unary(
            self.score_jobs_sync, name="scoring"
        )
        self._begins: MicroBatcher[BeginJob, BeginEpisodeResponse] = self._runner.unary(
            self._begin_batch, name="begin"
        )

    # --- BeginEpisode (R-W-1, R-W-3; the batch itself is rewardseal_worker.begins) ---

    async def begin(self, request: BeginEpisodeRequest) -> BeginEpisodeResponse:
        """Record the baseline read for the identity before the rollout."""
        return await self._begins.submit(self.begin_job(request))

    async def begin_many(self, requests: Sequence[BeginEpisodeRequest]) -> list[BeginOutcome]:
        """Begin a batch in one worker thread (or on the loop: see :attr:`plan`) and ONE
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
            begun = await self._runner.call(self._begin_batch, list(jobs.values()))
            outcomes.update(zip(jobs, begun, strict=True))
        return [outcomes[index] for index in range(len(requests))]

    def begin_job(self, request: BeginEpisodeRequest) -> BeginJob:
        """``request`` checked without a read: its id, contract and identity (R-W-2)."""
        validate_id(request.episode_id, "episode_id", error=InvalidEpisode)
        self._checks.contract_digest(request.reward_contract_digest)
        identity = self._checks.identity(dict(request.oracle_identity), "oracle_identity")
        parameters = self._checks.task_parameters(request.task_parameters)
        return BeginJob(request.episode_id, identity, parameters)

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
        """Score a batch in one thread (or on the loop: see :attr:`plan`) and one commit;
        one outcome per job, in order."""
        if not jobs:
            return []
        try:
            return await self._runner.call(self.score_jobs_sync, list(jobs))
        except RewardSealError:
            raise
        except Exception as exc:
            _log.exception("scoring batch failed")
            raise Unavailable(
                f"the worker could not score the batch: {type(exc).__name__}"
            ) from exc

    def score_jobs_sync(self, jobs: Sequence[ScoreJob]) -> list[ScoreOutcome]:
        """The blocking pipeline for a batch (in a worker thread, or on the loop: see
        :attr:`plan`)."""
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
                outcomes[index] = duplicate_episode(episode_id, committed_ids[first])
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
            [p.commit for p in to_commit if p.commit],
            max_jump=self.max_policy_update_jump,
            max_lag=self.max_policy_lag,
        )
        retry: list[int] = []
        answered: list[RewardEvidenceReceipt] = []
        for item, result in zip(to_commit, results, strict=True):
            if isinstance(result, Committed):
                outcomes[item.index] = item.envelope
                committed_ids[item.index] = result.receipt_id
                answered.append(item.receipt)
            elif isinstance(result, CreditsTaken):
                retry.append(item.index)
            else:
                outcomes[item.index] = result.error()
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
                self._checks.descriptor_contract(jobs[index].descriptor)
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
                    raise duplicate_episode(
                        descriptor.episode_id, known.receipts[descriptor.episode_id]
                    )
                if (
                    known.highest is not None
                    and descriptor.policy_update < known.highest - self.max_policy_lag
                ):
                    # Below the window (R-W-7); the lookup's highest, no read of its own.
                    raise policy_update_regressed(
                        descriptor.policy_update, known.highest, self.max_policy_lag
                    )
                if (
                    known.highest is not None
                    and descriptor.policy_update > known.highest + self.max_policy_update_jump
                ):
                    # Refused before the read and the judge; the commit checks again under the
                    # ledger lock (and bounds a first batch on an empty ledger, see the store).
                    raise policy_update_jumped(
                        descriptor.policy_update, known.highest, self.max_policy_update_jump
                    )
                registration = known.open.get(descriptor.episode_id)
                identity = self._checks.resolve_identity(
                    descriptor, registration.identity if registration else None
                )
                parameters = self._checks.resolve_parameters(
                    descriptor,
                    registration.task_parameters if registration else None,
                    begun=registration is not None,
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
                    task_parameters=parameters,
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
        parameters = checked.task_parameters or {}
        decision = judge_episode(
            bind_parameters(self.bundle.required, parameters),
            bind_parameters(self.bundle.forbidden, parameters),
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
        findings = decision_findings(decision, self._finding_names)
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
                findings=findings,
                task_parameters_digest=parameters_digest(self.bundle.contract, parameters),
            ),
            revoked=revocation is Revocation.REVOKED,
            revocation_unknown=revocation is Revocation.UNKNOWN,
        )
        receipt, envelope = issued.receipt, issued.envelope
        if _log.isEnabledFor(logging.DEBUG):
            # Names and codes only (R-MSG-12): a person debugging a contract sees why.
            _log.debug(
                "scored episode %s: %s, findings: %s",
                receipt.episode_id,
                RewardOutcome.Name(receipt.reward_outcome),
                findings_text(findings) or "none",
            )
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
