"""The JSON shapes of the HTTP face (R-H-1, R-H-2): request bodies in, receipt views out.

Requests become the same protobuf messages the gRPC face takes (:class:`EpisodeDescriptor`,
:class:`BeginEpisodeRequest`), and the Scorer checks them as it checks every other: the models
here state types only (for the OpenAPI document and a 422 that names the field), never a rule.

A receipt goes out as the widely used reward-receipt JSON (:func:`receipt_view`): lowercase
enum words, integer ``policy_update`` and ``oracle_tier``, ``issued_at`` in whole seconds with
``Z``, ``scalar_reward: null`` when unscored, absent certificate references as null. Beside it
(never inside, so a strict parser of that shape accepts the receipt) travel the receipt's
``certification_refusals``, rewardseal's own view of the receipt (:func:`rewardseal_view`,
R-H-24: what the signed receipt says, including the certification that shape cannot state, its
signed ``findings`` (R-MSG-12) and its ``task_parameters_digest``) and
rewardseal's signed envelope (:func:`envelope_view`, the proto3 JSON mapping: ``payload`` is the
exact signed bytes, base64), which a rewardseal client verifies with
:func:`rewardseal.core.receipts.open_receipt`.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

from google.protobuf.struct_pb2 import Struct
from pydantic import BaseModel, ConfigDict, Field

from rewardseal.core.errors import InvalidEpisode
from rewardseal.core.integrity.messages import enum_word
from rewardseal.core.judging.receipt_findings import read_findings
from rewardseal.core.receipts import certificate_state_word, outcome_word, scope_word
from rewardseal.core.task_parameters import to_wire
from rewardseal.core.validation import runtime_signal_named
from rewardseal.v1.enums_pb2 import (
    CalibrationScope,
    CertificateState,
    OracleChannel,
    RewardOutcome,
    Uncertainty,
)
from rewardseal.v1.episode_pb2 import EpisodeDescriptor
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt, SignedEnvelope
from rewardseal.v1.worker_service_pb2 import BeginEpisodeRequest, HealthResponse

SIGNATURE_ALGORITHM = "ed25519"
WITHHELD_PRODUCTION = (
    "production calibration scope cannot be stated as certified in this receipt shape; "
    "rewardseal.certified beside it states the certification, and the signed envelope carries "
    "the receipt as issued"
)
"""The sentence added beside a PRODUCTION-scope receipt whose compatibility view says
``certified: false``: that shape's reader learns why, rewardseal's reader looks at
:func:`rewardseal_view`."""


# --- Request bodies (types only; the Scorer checks every rule) ---


class _Body(BaseModel):
    # Strict: "7" is not an integer and 1 is not a string; unknown fields are refused by name.
    model_config = ConfigDict(extra="forbid", strict=True)


ParameterValues = dict[str, bool | int | float | str]
"""A JSON object of task parameter values (R-W-18): name -> string, number or boolean."""


class EpisodeBody(_Body):
    """``POST /v1/rewards``: the episode descriptor (docs/spec.md R-MSG-9)."""

    episode_id: str
    policy_checkpoint_id: str
    policy_update: int = Field(description="the policy update that generated the episode")
    reward_contract_digest: str
    task_id: str | None = None
    environment_id: str | None = None
    oracle_identity: dict[str, str] | None = Field(
        default=None, description="else metadata.oracle_identity, else the begin's registration"
    )
    runtime_signal: str | None = Field(
        default=None,
        description="completed (default), halted_before_effect, refused, rejected_policy, "
        "failed_platform; else metadata.runtime_signal",
    )
    metadata: dict[str, Any] | None = Field(
        default=None,
        description="free-form; oracle_identity and runtime_signal are read from here too; "
        "keys naming record contents are refused",
    )
    task_parameters: ParameterValues | None = Field(
        default=None, description="optional repeat of the values the begin bound: must equal them"
    )


class BeginBody(_Body):
    """``POST /v1/episodes``: register an episode and record its baseline read (R-W-1)."""

    episode_id: str
    reward_contract_digest: str
    oracle_identity: dict[str, str]
    task_parameters: ParameterValues | None = Field(
        default=None,
        description="the episode's task parameters, bound once (exactly the contract's declared "
        "parameters, each of its type and range)",
    )


class GraderBody(_Body):
    """``POST /v1/graders/openai``: the python grader's ``grade(sample, item)`` arguments."""

    sample: dict[str, Any] = Field(default_factory=dict, description="not read by the worker")
    item: dict[str, Any] = Field(description="carries the episode descriptor fields by name")


# --- Response bodies (documented in the OpenAPI document; built as plain dicts below) ---


class ErrorView(BaseModel):
    """Every refusal: the reason word of docs/spec.md §8 and a sentence; some add fields
    (``receipt_id`` on ``duplicate_episode``, ``field`` on a body that fails its shape)."""

    error: str
    detail: str


class ReceiptView(BaseModel):
    """The reward receipt as JSON (R-H-2)."""

    receipt_id: str
    reward_contract_digest: str
    policy_checkpoint_id: str
    policy_update: int
    episode_id: str
    oracle_tier: int
    reward_outcome: str
    evidence_digest: str
    reward_components: dict[str, float]
    scalar_reward: float | None
    certificate_id: str | None
    certificate_digest: str | None
    certificate_state: str
    calibration_corpus_digest: str | None
    calibration_scope: str | None
    uncertainty: str
    certified: bool
    development_only: bool
    issuer_key_id: str
    nonce: str
    issued_at: str
    signature_algorithm: str
    signature: str = Field(description="base64 Ed25519 signature of the envelope beside it")


class SignatureView(BaseModel):
    """One envelope signature: the key id and the base64 signature."""

    keyid: str
    sig: str


class EnvelopeView(BaseModel):
    """rewardseal's signed envelope (R-MSG-8) in the proto3 JSON mapping."""

    payload_type: str
    payload: str = Field(description="the exact signed receipt bytes, base64")
    signatures: list[SignatureView]
    execute_seal: bool
    production_seal: bool
    flow_governed_policy: bool
    unscored: bool


class FindingView(BaseModel):
    """One signed finding (R-MSG-12): the contract's effect and field names, never a value."""

    effect: str = Field(description='the effect name; "" for a finding about the episode')
    code: str = Field(description="missing_record, duplicate_record, wrong_field, ...")
    fields: list[str]


class RewardsealView(BaseModel):
    """rewardseal's own view of the receipt (R-H-24): what the signed receipt states, in words,
    the certification of every scope included."""

    certified: bool = Field(
        description="the signed receipt's flag, as gRPC states it: true for a production-scope "
        "receipt certified under an organization's certificate too"
    )
    calibration_scope: str = Field(description="synthetic, production or unspecified")
    certificate_state: str = Field(description="absent, not_yet_valid, current, expired or revoked")
    outcome: str = Field(description="verified, wrong_effect, ... (the receipt's outcome)")
    findings: list[FindingView] = Field(
        description="why the outcome is what it is, per effect; empty when verified"
    )
    task_parameters_digest: str = Field(
        description="the digest of the task parameters bound at begin (R-W-18); empty when "
        "the contract declares none"
    )


class RewardView(BaseModel):
    """A scored episode: the receipt, its refusals, rewardseal's view of it and the envelope
    that proves it."""

    receipt: ReceiptView
    certification_refusals: list[str]
    rewardseal: RewardsealView
    envelope: EnvelopeView


class GradeView(RewardView):
    """The grader mirror's answer: a score in [0, 1] and the receipt it came from."""

    score: float


class BeginView(BaseModel):
    """A registered episode."""

    episode_id: str
    begun_at: str
    baseline_recorded: bool = Field(
        description="false when the system of record could not be read: the episode will be "
        "unscored; begin again to retry"
    )


class HealthView(BaseModel):
    """What a caller needs to pin and check this worker (no token needed)."""

    status: str
    issuer_key_id: str
    issuer_public_key: str = Field(description="hex")
    reward_contract_digest: str
    oracle_tier: int
    oracle_channel: str | None
    certificate_state: str | None
    certificate_id: str | None
    highest_policy_update: int
    version: str


# --- Conversions ---


def descriptor_from_body(body: EpisodeBody) -> EpisodeDescriptor:
    """The protobuf descriptor ``body`` states.

    Raises:
        InvalidEpisode: a value the descriptor cannot hold (a policy update beyond 64 bits, an
            unknown runtime signal word).
    """
    descriptor = EpisodeDescriptor(
        episode_id=body.episode_id,
        policy_checkpoint_id=body.policy_checkpoint_id,
        reward_contract_digest=body.reward_contract_digest,
    )
    try:
        descriptor.policy_update = body.policy_update
    except ValueError:
        raise InvalidEpisode(f"policy_update {body.policy_update} is out of range") from None
    if body.task_id is not None:
        descriptor.task_id = body.task_id
    if body.environment_id is not None:
        descriptor.environment_id = body.environment_id
    if body.oracle_identity:
        descriptor.oracle_identity.update(body.oracle_identity)
    if body.runtime_signal is not None:
        descriptor.runtime_signal = runtime_signal_named(body.runtime_signal, "runtime_signal")
    if body.metadata:
        descriptor.metadata.CopyFrom(_struct(body.metadata))
    if body.task_parameters:
        for name, value in to_wire(body.task_parameters).items():  # a message map: no update()
            descriptor.task_parameters[name].CopyFrom(value)
    return descriptor


def _struct(document: dict[str, Any]) -> Struct:
    struct = Struct()
    try:
        struct.update(document)
    except (ValueError, TypeError) as exc:
        raise InvalidEpisode(f"metadata cannot be stored: {type(exc).__name__}") from None
    return struct


def begin_request_from_body(body: BeginBody) -> BeginEpisodeRequest:
    """The protobuf begin request ``body`` states."""
    return BeginEpisodeRequest(
        episode_id=body.episode_id,
        reward_contract_digest=body.reward_contract_digest,
        oracle_identity=body.oracle_identity,
        task_parameters=to_wire(body.task_parameters or {}),
    )


def _seconds(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def issued_at_text(receipt: RewardEvidenceReceipt) -> str:
    """``issued_at`` in whole seconds with ``Z`` (sub-second digits are cut, not rounded)."""
    return _seconds(datetime.fromtimestamp(receipt.issued_at.seconds, UTC))


def signature_of(receipt: RewardEvidenceReceipt, envelope: SignedEnvelope) -> str:
    """The base64 signature the receipt's issuer made over the envelope's payload ("" if none)."""
    for signature in envelope.signatures:
        if signature.keyid == receipt.issuer_key_id:
            return base64.b64encode(signature.sig).decode("ascii")
    return ""


def reports_certified(receipt: RewardEvidenceReceipt) -> bool:
    """``certified`` as the view states it: never for a state or scope the shape cannot
    express (REVOKED, PRODUCTION; R-H-2)."""
    return (
        receipt.certified
        and receipt.certificate_state != CertificateState.CERTIFICATE_STATE_REVOKED
        and receipt.calibration_scope != CalibrationScope.CALIBRATION_SCOPE_PRODUCTION
    )


def receipt_view(receipt: RewardEvidenceReceipt, envelope: SignedEnvelope) -> dict[str, Any]:
    """The receipt as the widely used reward-receipt JSON (R-H-2)."""
    has_certificate = bool(receipt.certificate_id)
    return {
        "receipt_id": receipt.receipt_id,
        "reward_contract_digest": receipt.reward_contract_digest,
        "policy_checkpoint_id": receipt.policy_checkpoint_id,
        "policy_update": receipt.policy_update,
        "episode_id": receipt.episode_id,
        "oracle_tier": receipt.oracle_tier,
        "reward_outcome": enum_word(RewardOutcome, receipt.reward_outcome, "REWARD_OUTCOME_"),
        "evidence_digest": receipt.evidence_digest,
        "reward_components": {name: float(v) for name, v in receipt.reward_components.items()},
        "scalar_reward": receipt.scalar_reward if receipt.HasField("scalar_reward") else None,
        "certificate_id": receipt.certificate_id if has_certificate else None,
        "certificate_digest": receipt.certificate_digest or None,
        "certificate_state": enum_word(
            CertificateState, receipt.certificate_state, "CERTIFICATE_STATE_"
        ),
        "calibration_corpus_digest": receipt.calibration_corpus_digest or None,
        "calibration_scope": enum_word(
            CalibrationScope, receipt.calibration_scope, "CALIBRATION_SCOPE_"
        ),
        "uncertainty": enum_word(Uncertainty, receipt.uncertainty, "UNCERTAINTY_"),
        "certified": reports_certified(receipt),
        "development_only": receipt.development_only,
        "issuer_key_id": receipt.issuer_key_id,
        "nonce": receipt.nonce,
        "issued_at": issued_at_text(receipt),
        "signature_algorithm": SIGNATURE_ALGORITHM,
        "signature": signature_of(receipt, envelope),
    }


def rewardseal_view(receipt: RewardEvidenceReceipt) -> dict[str, Any]:
    """rewardseal's own view of ``receipt`` (R-H-24), the answer's top-level ``rewardseal``
    object: what the signed receipt states, in the words of the Python receipt view
    (:class:`rewardseal.core.receipts.OpenedReceipt`), with nothing withheld for a shape.

    ``certified`` is the signed flag itself: a PRODUCTION-scope receipt certified under an
    organization's certificate reads ``true`` here, while :func:`receipt_view` (the
    compatibility shape, which cannot state that scope) says ``false``.
    """
    return {
        "certified": receipt.certified,
        "calibration_scope": scope_word(receipt.calibration_scope),
        "certificate_state": certificate_state_word(receipt.certificate_state),
        "outcome": outcome_word(receipt.reward_outcome),
        "findings": [finding.as_dict() for finding in read_findings(receipt)],
        "task_parameters_digest": receipt.task_parameters_digest,
    }


def envelope_view(envelope: SignedEnvelope) -> dict[str, Any]:
    """The envelope in the proto3 JSON mapping (bytes base64; every flag present), which
    ``google.protobuf.json_format.ParseDict`` turns back into the same exact bytes."""
    return {
        "payload_type": envelope.payload_type,
        "payload": base64.b64encode(envelope.payload).decode("ascii"),
        "signatures": [
            {"keyid": s.keyid, "sig": base64.b64encode(s.sig).decode("ascii")}
            for s in envelope.signatures
        ],
        "execute_seal": envelope.execute_seal,
        "production_seal": envelope.production_seal,
        "flow_governed_policy": envelope.flow_governed_policy,
        "unscored": envelope.unscored,
    }


def reward_view(receipt: RewardEvidenceReceipt, envelope: SignedEnvelope) -> dict[str, Any]:
    """The answer of ``POST /v1/rewards`` and ``GET /v1/rewards/{id}``: ``{"receipt": ...}``
    (no top-level ``schema_version``: clients of the widely used shape key on that), its
    refusals, rewardseal's own view (``rewardseal``, R-H-24) and the envelope."""
    refusals = list(receipt.certification_refusals)
    if receipt.certified and not reports_certified(receipt):
        refusals.append(WITHHELD_PRODUCTION)
    return {
        "receipt": receipt_view(receipt, envelope),
        "certification_refusals": refusals,
        "rewardseal": rewardseal_view(receipt),
        "envelope": envelope_view(envelope),
    }


def begin_view(episode_id: str, begun_at: datetime, baseline_recorded: bool) -> dict[str, Any]:
    """The answer of ``POST /v1/episodes``."""
    return {
        "episode_id": episode_id,
        "begun_at": _seconds(begun_at),
        "baseline_recorded": baseline_recorded,
    }


def health_view(health: HealthResponse) -> dict[str, Any]:
    """The answer of ``GET /health``: the Health RPC's fields as JSON."""
    return {
        "status": "serving",
        "issuer_key_id": health.issuer_key_id,
        "issuer_public_key": health.issuer_public_key.hex(),
        "reward_contract_digest": health.reward_contract_digest,
        "oracle_tier": health.oracle_tier,
        "oracle_channel": enum_word(OracleChannel, health.oracle_channel, "ORACLE_CHANNEL_"),
        "certificate_state": enum_word(
            CertificateState, health.certificate_state, "CERTIFICATE_STATE_"
        ),
        "certificate_id": health.certificate_id or None,
        "highest_policy_update": health.highest_policy_update,
        "version": health.version,
    }
