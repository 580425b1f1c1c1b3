"""Build a receipt from a judged outcome by the shared rules (R-MSG-7, R-SCORE-*, R-VAL-*).

The worker issues every episode's receipt through a :class:`ReceiptIssuer` (``build_receipt``,
then the signature, with what the certificate and outcome decide made once per certificate);
anyone can call ``build_receipt`` to see what a correct receipt for an outcome looks like. Time,
nonce and the certificate's revocation are arguments, so the function stays pure and testable at
its boundaries.

A receipt is validated once where it is made (``build_receipt``; a receipt stamped from an
issuer's template has its facts checked, its claims having been checked on the template) and
once where it is read (``open_receipt``, the trust boundary of every reader); what
``open_receipt`` returns, an :class:`OpenedReceipt`, is passed on as it is and never parsed or
validated again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from rewardseal.core.certificates import certificate_state
from rewardseal.core.clock import timestamp
from rewardseal.core.contract import (
    UNSCORED_OUTCOMES,
    certificate_digest,
    component_values,
    contract_digest,
)
from rewardseal.core.digest import digest_json
from rewardseal.core.errors import (
    ReceiptMismatch,
    SignatureError,
    Unscored,
    ValidationError,
    preview,
)
from rewardseal.core.judging.receipt_findings import (
    ReceiptFinding,
    finding_messages,
    read_findings,
)
from rewardseal.core.scoring import score
from rewardseal.core.signing import RECEIPT_PAYLOAD_TYPE, SigningKey, TrustSet, sign_envelope
from rewardseal.core.task_parameters import from_wire
from rewardseal.core.validation import parse_strict, validate_receipt, validate_receipt_facts
from rewardseal.v1.certificate_pb2 import RewardCertificate
from rewardseal.v1.contract_pb2 import RewardContract
from rewardseal.v1.enums_pb2 import CalibrationScope, CertificateState, RewardOutcome, Uncertainty
from rewardseal.v1.episode_pb2 import EpisodeDescriptor, TaskParameterValue
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt, SignedEnvelope


@dataclass(frozen=True)
class EpisodeFacts:
    """What the worker knows about one judged episode when it writes the receipt.

    ``findings``: why the outcome is what it is (R-MSG-12,
    :func:`~rewardseal.core.judging.receipt_findings.decision_findings`); none for VERIFIED.
    """

    receipt_id: str
    episode_id: str
    policy_checkpoint_id: str
    policy_update: int
    outcome: RewardOutcome.ValueType
    uncertainty: Uncertainty.ValueType
    tier: int
    evidence_digest: str
    nonce: str
    issued_at: datetime
    findings: tuple[ReceiptFinding, ...] = ()
    task_parameters_digest: str = ""
    """The bound task parameters' digest (R-W-18); "" when the contract declares none."""


def build_receipt(
    facts: EpisodeFacts,
    *,
    contract: RewardContract,
    certificate: RewardCertificate | None,
    issuer_key_id: str,
    revoked: bool = False,
    revocation_unknown: bool = False,
    digest_of_contract: str | None = None,
    digest_of_certificate: str | None = None,
) -> RewardEvidenceReceipt:
    """A validated receipt for ``facts`` scored against ``contract`` and ``certificate``.

    A caller that already holds the contract's or certificate's digest may pass it, to skip
    rehashing on every receipt (the worker does, on its hot path).
    """
    result = score(
        facts.outcome,
        tier=facts.tier,
        certificate=certificate,
        policy_update=facts.policy_update,
        contract=contract,
        revoked=revoked,
        revocation_unknown=revocation_unknown,
    )
    receipt = RewardEvidenceReceipt(
        receipt_id=facts.receipt_id,
        reward_contract_digest=digest_of_contract or contract_digest(contract),
        policy_checkpoint_id=facts.policy_checkpoint_id,
        policy_update=facts.policy_update,
        episode_id=facts.episode_id,
        oracle_tier=facts.tier,
        reward_outcome=facts.outcome,
        evidence_digest=facts.evidence_digest,
        uncertainty=facts.uncertainty,
        certified=result.certified,
        development_only=result.development_only,
        certification_refusals=list(result.refusals),
        issuer_key_id=issuer_key_id,
        nonce=facts.nonce,
        issued_at=timestamp(facts.issued_at, "issued_at"),
        task_parameters_digest=facts.task_parameters_digest,
        certificate_state=certificate_state(certificate, facts.policy_update, revoked=revoked),
        findings=finding_messages(facts.findings),
    )
    if result.scalar is not None:
        receipt.scalar_reward = result.scalar
        receipt.reward_components.update(component_values(contract, result.scalar))
    if certificate is not None:
        receipt.certificate_id = certificate.certificate_id
        receipt.certificate_digest = digest_of_certificate or certificate_digest(certificate)
        receipt.calibration_corpus_digest = certificate.calibration_corpus_digest
        receipt.calibration_scope = certificate.calibration_scope
    validate_receipt(receipt)
    return receipt


def is_unscored(receipt: RewardEvidenceReceipt) -> bool:
    """True when the receipt's outcome carries no scalar (R-SCORE-2)."""
    return receipt.reward_outcome in UNSCORED_OUTCOMES


def seal_receipt(receipt: RewardEvidenceReceipt, key: SigningKey) -> SignedEnvelope:
    """Sign a validated receipt into a DSSE envelope over its exact serialized bytes (R-MSG-8).

    ``receipt`` may come from anywhere (and a protobuf message can be changed after it was
    built), so it is validated here; the worker, which signs what it has just built, uses a
    :class:`ReceiptIssuer` (or :func:`issue_receipt`) instead and validates once.
    """
    validate_receipt(receipt)
    if receipt.issuer_key_id != key.key_id:
        raise ValidationError("the receipt's issuer_key_id is not the signing key's id")
    return _sign(receipt, key)


@dataclass(frozen=True)
class IssuedReceipt:
    """A receipt :class:`ReceiptIssuer` (or :func:`issue_receipt`) built and validated, and its
    envelope over its bytes."""

    receipt: RewardEvidenceReceipt
    envelope: SignedEnvelope


def issue_receipt(
    facts: EpisodeFacts,
    *,
    contract: RewardContract,
    certificate: RewardCertificate | None,
    key: SigningKey,
    revoked: bool = False,
    revocation_unknown: bool = False,
    digest_of_contract: str | None = None,
    digest_of_certificate: str | None = None,
) -> IssuedReceipt:
    """:func:`build_receipt` then sign with ``key``, the receipt validated once (R-MSG-8).

    The same receipt and envelope bytes as ``seal_receipt(build_receipt(...), key)``: the
    receipt names ``key`` as its issuer and never leaves this function between its validation
    and its signature, so the second validation ``seal_receipt`` does for a receipt handed in
    is not needed. Arguments as :func:`build_receipt`'s. An issuer of many receipts under one
    contract and certificate uses a :class:`ReceiptIssuer`.
    """
    issuer = ReceiptIssuer(
        contract=contract,
        certificate=certificate,
        key=key,
        digest_of_contract=digest_of_contract,
        digest_of_certificate=digest_of_certificate,
    )
    return issuer.issue(facts, revoked=revoked, revocation_unknown=revocation_unknown)


_FactField = Literal[
    "receipt_id",
    "episode_id",
    "policy_checkpoint_id",
    "evidence_digest",
    "nonce",
    "issued_at",
    "findings",
    "task_parameters_digest",
]
_FACT_FIELDS: tuple[_FactField, ...] = (
    "receipt_id",
    "episode_id",
    "policy_checkpoint_id",
    "evidence_digest",
    "nonce",
    "issued_at",
    "findings",
    "task_parameters_digest",
)
"""The receipt fields :func:`~rewardseal.core.validation.validate_receipt_facts` checks: the ones
that differ between receipts of equal claims."""

MAX_TEMPLATES = 64
"""Templates one :class:`ReceiptIssuer` keeps (one per outcome, uncertainty, tier, policy
update and revocation state seen); a training run meets a handful at a time."""


class ReceiptIssuer:
    """Issues the receipts of one contract, certificate and key: :func:`issue_receipt`'s
    receipts and envelopes, byte for byte, at a fraction of its cost.

    What a receipt claims beside its facts (scalar, components, certification, certificate
    state and references, issuer) depends only on the contract, the certificate, the key and
    the outcome, uncertainty, tier, policy update and revocation state. The first receipt of
    each such combination is made by :func:`build_receipt` (``score()`` and every check of
    :func:`~rewardseal.core.validation.validate_receipt`); it is kept without its facts as a
    template, and the next receipts of the combination are that template with their facts
    filled in, the facts checked (:func:`~rewardseal.core.validation.validate_receipt_facts`) and
    the receipt signed. No rule relates a fact to a claim but one, checked with the facts (a
    VERIFIED receipt has no findings, R-MSG-12), so each receipt is one ``build_receipt`` would
    make and pass.

    An issuer holds one certificate: the worker makes a new one when it changes. Safe to use
    from several threads (templates are complete before they are shared, and never changed).
    """

    def __init__(
        self,
        *,
        contract: RewardContract,
        certificate: RewardCertificate | None,
        key: SigningKey,
        digest_of_contract: str | None = None,
        digest_of_certificate: str | None = None,
    ) -> None:
        """Arguments as :func:`build_receipt`'s; the digests are computed here when not given."""
        self.contract = contract
        self.certificate = certificate
        self.key = key
        self._digest_of_contract = digest_of_contract or contract_digest(contract)
        self._digest_of_certificate = (
            None
            if certificate is None
            else digest_of_certificate or certificate_digest(certificate)
        )
        self._templates: dict[tuple[int, int, int, int, bool, bool], RewardEvidenceReceipt] = {}

    def issue(
        self, facts: EpisodeFacts, *, revoked: bool = False, revocation_unknown: bool = False
    ) -> IssuedReceipt:
        """The receipt of ``facts``, validated, and its envelope signed with the issuer's key.

        ``revoked`` and ``revocation_unknown`` as :func:`build_receipt`'s.

        Raises:
            ValidationError: the facts, or the claims they lead to, break a rule.
        """
        claims = (
            facts.outcome,
            facts.uncertainty,
            facts.tier,
            facts.policy_update,
            revoked,
            revocation_unknown,
        )
        # A bool is an int to a dict, but no policy update (check_policy_update): such facts
        # take build_receipt every time, which refuses them.
        exact = type(facts.policy_update) is int
        template = self._templates.get(claims) if exact else None
        if template is None:
            receipt = build_receipt(
                facts,
                contract=self.contract,
                certificate=self.certificate,
                issuer_key_id=self.key.key_id,
                revoked=revoked,
                revocation_unknown=revocation_unknown,
                digest_of_contract=self._digest_of_contract,
                digest_of_certificate=self._digest_of_certificate,
            )
            template = RewardEvidenceReceipt()
            template.CopyFrom(receipt)
            for name in _FACT_FIELDS:
                template.ClearField(name)
            if exact:
                if len(self._templates) >= MAX_TEMPLATES:
                    self._templates.clear()
                self._templates[claims] = template
        else:
            receipt = RewardEvidenceReceipt()
            receipt.CopyFrom(template)
            receipt.receipt_id = facts.receipt_id
            receipt.episode_id = facts.episode_id
            receipt.policy_checkpoint_id = facts.policy_checkpoint_id
            receipt.evidence_digest = facts.evidence_digest
            receipt.nonce = facts.nonce
            receipt.issued_at.CopyFrom(timestamp(facts.issued_at, "issued_at"))
            if facts.findings:
                receipt.findings.extend(finding_messages(facts.findings))
            receipt.task_parameters_digest = facts.task_parameters_digest
            validate_receipt_facts(receipt)
        return IssuedReceipt(receipt, _sign(receipt, self.key))


def _sign(receipt: RewardEvidenceReceipt, key: SigningKey) -> SignedEnvelope:
    """The envelope of a validated receipt whose issuer is ``key``: its exact bytes, signed."""
    payload = receipt.SerializeToString(deterministic=True)
    return sign_envelope(RECEIPT_PAYLOAD_TYPE, payload, key, unscored=is_unscored(receipt))


def _word(enum: Any, value: int, prefix: str) -> str:
    # An open proto3 enum keeps a number it does not know; say so rather than guess a name.
    try:
        name = str(enum.Name(value))
    except ValueError:
        return f"unknown({value})"
    return name.removeprefix(prefix).lower()


def outcome_word(outcome: int) -> str:
    """A reward outcome as a readable string: the enum name without ``REWARD_OUTCOME_``, lower
    case (``"verified"``, ``"wrong_effect"``, ``"failed_platform"``, ...)."""
    return _word(RewardOutcome, outcome, "REWARD_OUTCOME_")


def scope_word(scope: int) -> str:
    """A calibration scope as a readable string: ``"synthetic"``, ``"production"`` or
    ``"unspecified"`` (no certificate, so no scope)."""
    return _word(CalibrationScope, scope, "CALIBRATION_SCOPE_")


def certificate_state_word(state: int) -> str:
    """A certificate state as a readable string: ``"absent"``, ``"not_yet_valid"``,
    ``"current"``, ``"expired"`` or ``"revoked"``."""
    return _word(CertificateState, state, "CERTIFICATE_STATE_")


@dataclass(frozen=True)
class OpenedReceipt:
    """A receipt envelope that passed every step of :func:`open_receipt`, and its receipt.

    The value the next layer takes as it is, never parsing or validating again: a client binds
    it to its request (:func:`check_receipt_answers`), control's receipt index stores it.
    ``receipt`` is ``envelope.payload`` (the exact signed bytes) parsed strictly and validated,
    and ``receipt.issuer_key_id`` is a trusted key that signed those bytes. Made by
    :func:`open_receipt`; both messages are shared, not copied: change neither.
    """

    receipt: RewardEvidenceReceipt
    envelope: SignedEnvelope

    @property
    def scalar(self) -> float | None:
        """The scalar reward, or None when the episode is unscored (never 0.0 for it)."""
        return None if is_unscored(self.receipt) else self.receipt.scalar_reward

    @property
    def unscored(self) -> bool:
        """True when the episode carries no scalar and must be dropped, not paid 0."""
        return is_unscored(self.receipt)

    @property
    def outcome(self) -> str:
        """The reward outcome as a string (``receipt.outcome == "wrong_effect"``); the signed
        ``receipt.reward_outcome`` is the enum's number (:func:`outcome_word`)."""
        return outcome_word(self.receipt.reward_outcome)

    @property
    def scope(self) -> str:
        """The calibration scope the receipt was certified under, as a string:
        ``"synthetic"``, ``"production"``, or ``"unspecified"`` without a certificate."""
        return scope_word(self.receipt.calibration_scope)

    @property
    def certificate_state(self) -> str:
        """The certificate's state at the receipt's policy update, as a string (``"current"``,
        ``"absent"``, ``"expired"``, ``"not_yet_valid"``, ``"revoked"``)."""
        return certificate_state_word(self.receipt.certificate_state)

    @property
    def findings(self) -> tuple[ReceiptFinding, ...]:
        """Why the outcome is what it is, per effect (R-MSG-12); empty when VERIFIED."""
        return read_findings(self.receipt)

    @property
    def task_parameters_digest(self) -> str:
        """The digest of the task parameters the episode was judged with (R-W-18); "" when
        the contract declares none."""
        return self.receipt.task_parameters_digest


def open_receipt(envelope: SignedEnvelope, trust: TrustSet) -> OpenedReceipt:
    """Verify, then parse, then validate a receipt envelope (R-MSG-8, R-T-5).

    Steps, in this order:
    1. a trusted key signs the exact payload bytes (nothing is parsed before this);
    2. the payload parses as a receipt with no fields this schema does not know;
    3. the receipt passes every R-VAL rule;
    4. the receipt names a key that signed it;
    5. the envelope's unsigned flags agree with the signed receipt.

    The trust boundary of every reader (a trainer's client, control's RecordReceipts): the
    :class:`OpenedReceipt` it returns is passed on as it is.
    """
    verified = trust.verify(envelope, payload_type=RECEIPT_PAYLOAD_TYPE)  # step 1
    receipt = parse_strict(RewardEvidenceReceipt, verified.payload)  # step 2
    validate_receipt(receipt)  # step 3
    if receipt.issuer_key_id not in verified.key_ids:  # step 4
        raise SignatureError("the receipt's issuer_key_id did not sign it")
    check_envelope_flags(envelope, receipt)  # step 5
    return OpenedReceipt(receipt, envelope)


def check_envelope_flags(envelope: SignedEnvelope, receipt: RewardEvidenceReceipt) -> None:
    """Refuse envelope flags that say more than the signed ``receipt`` does (R-MSG-8).

    The flags sit outside the signed bytes, so they may only repeat what is signed: a reward
    receipt never claims a seal or a governed policy, and ``unscored`` follows the outcome.
    Every reader of a receipt envelope checks them here, in :func:`open_receipt` (a trainer's
    client, control's RecordReceipts), so all refuse the same envelopes with the same words.

    Raises:
        ValidationError: a flag disagrees with the receipt.
    """
    if envelope.execute_seal or envelope.production_seal or envelope.flow_governed_policy:
        raise ValidationError("a reward receipt envelope never claims a seal or a governed policy")
    if envelope.unscored != is_unscored(receipt):
        raise ValidationError("the envelope's unscored flag disagrees with the receipt")


@dataclass(frozen=True)
class ExpectedReceipt:
    """What a receipt must name to answer one request; a field left None is not checked."""

    receipt_id: str | None = None
    episode_id: str | None = None
    policy_checkpoint_id: str | None = None
    policy_update: int | None = None
    reward_contract_digest: str | None = None
    task_parameters_digest: str | None = None
    """The digest of the task parameters the request bound (R-W-18; see
    :func:`expected_parameters_digest`)."""

    @classmethod
    def for_descriptor(
        cls,
        descriptor: EpisodeDescriptor,
        *,
        receipt_id: str | None = None,
        task_parameters_digest: str | None = None,
    ) -> ExpectedReceipt:
        """A receipt answering ``descriptor``: its episode, checkpoint, update and contract
        (and, when given, the receipt id the worker named for it), and the task parameters
        it repeats, else ``task_parameters_digest`` (what its begin bound, when known)."""
        if descriptor.task_parameters:
            task_parameters_digest = expected_parameters_digest(descriptor.task_parameters)
        return cls(
            receipt_id=receipt_id,
            episode_id=descriptor.episode_id,
            policy_checkpoint_id=descriptor.policy_checkpoint_id,
            policy_update=descriptor.policy_update,
            reward_contract_digest=descriptor.reward_contract_digest,
            task_parameters_digest=task_parameters_digest,
        )


def expected_parameters_digest(values: Mapping[str, TaskParameterValue]) -> str:
    """The ``task_parameters_digest`` a receipt must carry for an episode whose request sent
    ``values`` (R-W-18): "" for none, else the digest of their JSON object. The worker binds
    exactly what was sent (a NUMBER given as an integer has the same canonical JSON), so a
    client knows the digest without the contract's declaration."""
    if not values:
        return ""
    return digest_json(from_wire(values))


# Checked in this order, so the error names the most telling field first.
_BOUND_FIELDS = (
    "receipt_id",
    "episode_id",
    "policy_update",
    "policy_checkpoint_id",
    "reward_contract_digest",
    "task_parameters_digest",
)


def receipt_mismatch(field: str, expected: object, received: object) -> ReceiptMismatch:
    """The error for an answer whose ``field`` is ``received`` where ``expected`` was asked.

    Both values are quoted short (they may come from a hostile peer); ``metadata["field"]``
    names the field for callers that tell a misrouted answer from a reused episode id.
    """
    return ReceiptMismatch(
        f"the worker's answer does not answer the request: {field} is {preview(received)}, "
        f"expected {preview(expected)}",
        metadata={"field": field},
    )


def check_receipt_answers(receipt: RewardEvidenceReceipt, expected: ExpectedReceipt) -> None:
    """Raise ReceiptMismatch unless ``receipt`` names everything ``expected`` asks for (R-T-5).

    The signature proves who wrote a receipt, not which request it answers: a validly signed
    receipt of episode X handed back for episode Z (a swapped batch, a replayed GetReceipt, a
    receipt of an older policy update) would otherwise pay Z. Every client path checks its
    answer here, after the signature and before the receipt is handed out.
    """
    for name in _BOUND_FIELDS:
        want = getattr(expected, name)
        got = getattr(receipt, name)
        if want is not None and got != want:
            raise receipt_mismatch(name, want, got)


def grader_score(receipt: RewardEvidenceReceipt) -> float:
    """The OpenAI-grader mirror's score of a receipt: 1.0 when it pays, else 0.0 (R-W-9).

    Raises Unscored for an unscored receipt: the grader shape cannot carry "no score", and 0.0
    would train on noise.
    """
    if is_unscored(receipt):
        raise Unscored(f"episode {receipt.episode_id} is unscored; drop the sample")
    return 1.0 if receipt.scalar_reward > 0 else 0.0
