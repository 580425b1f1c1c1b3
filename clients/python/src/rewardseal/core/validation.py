"""Validators for contracts, certificates, receipts and descriptors (docs/spec.md §5, R-MSG-*).

Each validator returns nothing and raises one error from ``rewardseal.core.errors`` naming the first
rule broken. They run when a message is built and when one is parsed, so a bad message never
travels far.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from google.protobuf.descriptor import Descriptor
from google.protobuf.message import DecodeError, Message
from google.protobuf.struct_pb2 import ListValue, Struct, Value
from google.protobuf.unknown_fields import UnknownFieldSet

from rewardseal.core.certificates import MAX_POLICY_UPDATE
from rewardseal.core.contract import CERTIFIABLE_TIER, SCORING_DEFAULTS, UNSCORED_OUTCOMES
from rewardseal.core.digest import is_digest
from rewardseal.core.errors import CertificationRefused, InvalidEpisode, ValidationError, preview
from rewardseal.core.judging.receipt_findings import validate_findings
from rewardseal.core.task_parameters import check_declarations
from rewardseal.v1.certificate_pb2 import CalibrationSummary, RewardCertificate
from rewardseal.v1.contract_pb2 import RewardContract
from rewardseal.v1.enums_pb2 import (
    RUNTIME_SIGNAL_COMPLETED,
    CalibrationScope,
    CertificateIssuer,
    CertificateState,
    OracleChannel,
    RewardOutcome,
    RuntimeSignal,
    Uncertainty,
)
from rewardseal.v1.episode_pb2 import EpisodeDescriptor
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt

ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{7,127}\Z")
"""R-MSG-10: every id that enters the system.

The patterns end in backslash-Z, not ``$``: ``$`` also matches before a trailing newline.
"""

KEY_ID_PATTERN = re.compile(r"^ed25519:sha256:[0-9a-f]{64}\Z")
NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}\Z")
"""Identity keys, component names and metadata keys."""

MAX_ABS_FLOAT = 1e6
MAX_COMPONENTS = 64
MAX_IDENTITY_KEYS = 32
MAX_IDENTITY_VALUE_LENGTH = 256
MAX_METADATA_KEY_LENGTH = 128
"""Longest descriptor metadata key, at any depth (keys are free-form but bounded)."""
MAX_METADATA_DEPTH = 32
"""Deepest nesting of a descriptor's metadata (R-MSG-9): the metadata object itself is level 1,
each object or list inside it one more. The same bound on every face (gRPC, HTTP, the clients);
protobuf's own parse limit (100 messages, three per Struct level) lies just above it, and a
request past that is refused ``invalid_episode`` too (the worker's decoding guard)."""
SIGNATURE_LENGTH = 64

FORBIDDEN_METADATA_KEYS: frozenset[str] = frozenset(
    {
        "screenshot",
        "screenshots",
        "screen",
        "screen_text",
        "image",
        "prompt",
        "prompts",
        "completion",
        "completions",
        "messages",
        "note",
        "notes",
        "record",
        "records",
        "row",
        "rows",
        "evidence",
        "phi",
        "pii",
        "patient",
        "url",
        "dsn",
        "password",
        "secret",
        "token",
        "credentials",
    }
)
"""Metadata keys that name record contents or secrets (R-MSG-9); refused at any depth."""

_Msg = TypeVar("_Msg", bound=Message)


def validate_id(value: str, field: str, *, error: type[ValidationError] = ValidationError) -> str:
    """Return ``value`` if it matches R-MSG-10, else raise ``error`` naming ``field``."""
    if not isinstance(value, str) or not ID_PATTERN.match(value):
        raise error(
            f"{field} {preview(value, 40)} is not a valid id (8-128 of A-Z a-z 0-9 . _ : -, "
            "starting with a letter or digit)"
        )
    return value


def validate_digest(
    value: str, field: str, *, error: type[ValidationError] = ValidationError
) -> str:
    """Return ``value`` if it is a ``sha256:`` digest, else raise ``error`` naming ``field``."""
    if not is_digest(value):
        raise error(f"{field} must be 'sha256:' followed by 64 lowercase hex digits")
    return value


def validate_key_id(value: str, field: str = "issuer_key_id") -> str:
    """Return ``value`` if it is an ``ed25519:sha256:`` key id (R-SIG-1)."""
    if not KEY_ID_PATTERN.match(value):
        raise ValidationError(f"{field} must be 'ed25519:sha256:' followed by 64 hex digits")
    return value


def check_float(
    value: float, field: str, *, error: type[ValidationError] = ValidationError
) -> None:
    """Refuse a non-finite float or one with |x| > 1e6 (R-VAL-6)."""
    if not is_bounded_float(value):
        raise error(f"{field} must be finite with |x| <= 1e6, got {value!r}")


def is_bounded_float(value: float) -> bool:
    """The rule :func:`check_float` enforces, as a test: finite with |x| <= 1e6 (R-VAL-6)."""
    return math.isfinite(value) and abs(value) <= MAX_ABS_FLOAT


def check_policy_update_field(
    value: int, field: str, *, error: type[ValidationError] = ValidationError
) -> None:
    """Refuse a policy update outside 0 .. 2^53-1 (R-VAL-6)."""
    if value < 0 or value > MAX_POLICY_UPDATE:
        raise error(f"{field} must be in 0..2^53-1, got {value}")


@functools.cache
def _known_values(enum: Any) -> frozenset[int]:
    # Enum wrappers rebuild their value list on every call; validation runs per receipt.
    return frozenset(v for v in enum.values() if v != 0)


def _check_enum(value: int, enum: Any, field: str, error: type[ValidationError]) -> None:
    if value not in _known_values(enum):
        raise error(f"{field} must be a known value other than UNSPECIFIED, got {value}")


def _check_names(names: Iterable[str], field: str, *, low: int, high: int) -> None:
    names = list(names)
    if not low <= len(names) <= high:
        raise ValidationError(f"{field} must have {low}-{high} entries, got {len(names)}")
    if len(set(names)) != len(names):
        raise ValidationError(f"{field} must be unique")
    for name in names:
        if not NAME_PATTERN.match(name):
            raise ValidationError(f"{field} entry {preview(name)} is not a valid name")


def validate_contract(contract: RewardContract) -> None:
    """R-MSG-1..3, R-MSG-10: ids, digests, oracle, components, scoring and certificate policy."""
    validate_id(contract.contract_id, "contract_id")
    if not contract.contract_version:
        raise ValidationError("contract_version is required")
    validate_id(contract.task_id, "task_id")
    validate_id(contract.environment_id, "environment_id")
    for field in (
        "task_digest",
        "environment_digest",
        "required_effects_digest",
        "forbidden_effects_digest",
    ):
        validate_digest(getattr(contract, field), field)
    if not contract.HasField("oracle"):
        raise ValidationError("oracle is required")
    _check_enum(contract.oracle.channel, OracleChannel, "oracle.channel", ValidationError)
    _check_names(
        contract.oracle.identity_keys, "oracle.identity_keys", low=1, high=MAX_IDENTITY_KEYS
    )
    validate_digest(contract.oracle.oracle_recipe_digest, "oracle.oracle_recipe_digest")
    _check_names((c.name for c in contract.components), "components", low=1, high=MAX_COMPONENTS)
    check_declarations(contract.task_parameters, NAME_PATTERN.match)  # R-MSG-11
    for component in contract.components:
        # Names were checked above (NAME_PATTERN: at most 64 characters), so quoting is safe.
        check_float(component.weight, f"component {component.name} weight")
        if component.weight <= 0:
            raise ValidationError(f"component {component.name} weight must be > 0")
    policy = contract.scoring_policy
    for name in SCORING_DEFAULTS:
        if not policy.HasField(name):
            continue
        value = getattr(policy, name)
        check_float(value, f"scoring_policy.{name}")
        if name == "verified_reward" and value <= 0:
            raise ValidationError("scoring_policy.verified_reward must be > 0")
        if name != "verified_reward" and value > 0:
            raise ValidationError(f"scoring_policy.{name} must be <= 0")
    if not contract.HasField("certificate_policy"):
        raise ValidationError("certificate_policy is required")
    cert_policy = contract.certificate_policy
    for bound in ("max_epsilon", "max_delta"):
        value = getattr(cert_policy, bound)
        if not (math.isfinite(value) and 0 < value < 1):
            raise ValidationError(f"certificate_policy.{bound} must be in (0, 1), got {value!r}")
    check_float(cert_policy.threshold, "certificate_policy.threshold")
    validate_digest(
        cert_policy.calibration_corpus_digest, "certificate_policy.calibration_corpus_digest"
    )
    if cert_policy.max_expiry_policy_updates < 1:
        raise ValidationError("certificate_policy.max_expiry_policy_updates must be >= 1")


def validate_certificate(certificate: RewardCertificate) -> None:
    """R-MSG-4/5, R-VAL-6: fields, ranges, issuer/scope combination, signature shape.

    Signature *verification* is kept apart, in ``rewardseal.core.signing``.
    """
    validate_id(certificate.certificate_id, "certificate_id")
    validate_digest(certificate.reward_contract_digest, "reward_contract_digest")
    validate_digest(certificate.checker_configuration_digest, "checker_configuration_digest")
    if not (math.isfinite(certificate.epsilon) and 0 <= certificate.epsilon <= 1):
        raise ValidationError(f"epsilon must be in [0, 1], got {certificate.epsilon!r}")
    if not (math.isfinite(certificate.delta) and 0 < certificate.delta < 1):
        raise ValidationError(f"delta must be in (0, 1), got {certificate.delta!r}")
    check_float(certificate.threshold, "threshold")
    validate_digest(certificate.calibration_corpus_digest, "calibration_corpus_digest")
    _check_enum(
        certificate.calibration_scope, CalibrationScope, "calibration_scope", ValidationError
    )
    check_policy_update_field(certificate.issued_at_policy_update, "issued_at_policy_update")
    if certificate.expiry_policy_updates < 1:
        raise ValidationError("expiry_policy_updates must be >= 1")
    if not certificate.HasField("issued_at"):
        raise ValidationError("issued_at is required")
    _check_enum(certificate.issuer, CertificateIssuer, "issuer", ValidationError)
    if (
        certificate.issuer == CertificateIssuer.CERTIFICATE_ISSUER_SELF_SIGNED
        and certificate.calibration_scope != CalibrationScope.CALIBRATION_SCOPE_SYNTHETIC
    ):
        raise CertificationRefused("a SELF_SIGNED certificate may only carry SYNTHETIC scope")
    validate_key_id(certificate.issuer_key_id)
    if len(certificate.signature) != SIGNATURE_LENGTH:
        raise ValidationError(
            f"signature must be {SIGNATURE_LENGTH} bytes, got {len(certificate.signature)}"
        )


_UNCERTAINTY_BY_OUTCOME: Mapping[int, frozenset[int]] = {
    RewardOutcome.REWARD_OUTCOME_RECONCILIATION_REQUIRED: frozenset(
        {Uncertainty.UNCERTAINTY_EFFECT_UNCERTAIN, Uncertainty.UNCERTAINTY_DELIVERY_UNCERTAIN}
    ),
    RewardOutcome.REWARD_OUTCOME_FAILED_PLATFORM: frozenset(
        {
            Uncertainty.UNCERTAINTY_ORACLE_UNAVAILABLE,
            Uncertainty.UNCERTAINTY_DELIVERY_UNCERTAIN,
            Uncertainty.UNCERTAINTY_NONE,
        }
    ),
}
"""R-VAL-4; every scored outcome carries NONE."""


def validate_receipt(receipt: RewardEvidenceReceipt) -> None:
    """R-MSG-7, R-VAL-1..6: the receipt is internally consistent.

    :func:`validate_receipt_facts` and then :func:`validate_receipt_claims`."""
    validate_receipt_facts(receipt)
    validate_receipt_claims(receipt)


def validate_receipt_facts(receipt: RewardEvidenceReceipt) -> None:
    """R-MSG-7, R-MSG-10, R-MSG-12: the fields that name one episode's receipt (its ids,
    evidence digest, nonce, issue time and findings), each well formed.

    The fields no rule relates to any other claim: a receipt that passed
    :func:`validate_receipt_claims` still does with other values in them. An issuer that
    stamps many receipts from one validated template checks only these per receipt
    (:class:`rewardseal.core.receipts.ReceiptIssuer`). The findings' one tie to a claim (a
    VERIFIED receipt has none) is checked here, so it holds for stamped receipts too.
    """
    validate_id(receipt.receipt_id, "receipt_id")
    validate_id(receipt.policy_checkpoint_id, "policy_checkpoint_id")
    validate_id(receipt.episode_id, "episode_id")
    validate_digest(receipt.evidence_digest, "evidence_digest")
    if receipt.task_parameters_digest:  # "" when the contract declares no parameters (R-W-18)
        validate_digest(receipt.task_parameters_digest, "task_parameters_digest")
    if not receipt.nonce:
        raise ValidationError("nonce is required")
    if not receipt.HasField("issued_at"):
        raise ValidationError("issued_at is required")
    validate_findings(receipt)


# Enum members read once here: the wrappers look each name up in Python on every access, and
# every reader of a receipt (each trainer's client, control) runs these checks.
_VERIFIED = RewardOutcome.REWARD_OUTCOME_VERIFIED
_STATE_ABSENT = CertificateState.CERTIFICATE_STATE_ABSENT
_STATE_CURRENT = CertificateState.CERTIFICATE_STATE_CURRENT
_UNCERTAINTY_NONE_ONLY = frozenset({Uncertainty.UNCERTAINTY_NONE})


def validate_receipt_claims(receipt: RewardEvidenceReceipt) -> None:
    """R-MSG-7, R-VAL-1..6: everything but :func:`validate_receipt_facts`: contract, update,
    tier, outcome, scalar, certificate and issuer, alone and together."""
    # Each field is read from the message once (a protobuf read is not free) and the rules run
    # in the order below, so a receipt that breaks several is told the first.
    validate_digest(receipt.reward_contract_digest, "reward_contract_digest")
    check_policy_update_field(receipt.policy_update, "policy_update")
    tier = receipt.oracle_tier
    if tier > 3:
        raise ValidationError(f"oracle_tier {tier} is not one of 0, 1, 2, 3")
    outcome, uncertainty = receipt.reward_outcome, receipt.uncertainty
    state = receipt.certificate_state
    _check_enum(outcome, RewardOutcome, "reward_outcome", ValidationError)
    _check_enum(uncertainty, Uncertainty, "uncertainty", ValidationError)
    _check_enum(state, CertificateState, "certificate_state", ValidationError)
    validate_key_id(receipt.issuer_key_id)

    # R-VAL-1
    if receipt.development_only != (tier < CERTIFIABLE_TIER):
        raise ValidationError("development_only must be true exactly at oracle tier 0 or 1")

    # R-VAL-3 and R-VAL-6
    components = receipt.reward_components
    has_scalar = receipt.HasField("scalar_reward")
    if outcome in UNSCORED_OUTCOMES:
        if has_scalar or components:
            raise ValidationError("an unscored outcome carries no scalar and no components")
    else:
        if not has_scalar or not components:
            raise ValidationError("a scored outcome requires a scalar and components")
        scalar = receipt.scalar_reward
        check_float(scalar, "scalar_reward")
        verified = outcome == _VERIFIED
        if verified and scalar <= 0:
            raise ValidationError("a VERIFIED scalar must be > 0")
        if not verified and scalar > 0:
            raise ValidationError("a scored outcome other than VERIFIED must be <= 0")
    if len(components) > MAX_COMPONENTS:
        raise ValidationError(f"at most {MAX_COMPONENTS} reward components")
    for name, value in components.items():
        if not is_bounded_float(value):  # the field's name is only formatted for the error
            check_float(value, f"reward component {preview(name, quoted=False)}")

    # R-VAL-4
    if uncertainty not in _UNCERTAINTY_BY_OUTCOME.get(outcome, _UNCERTAINTY_NONE_ONLY):
        raise ValidationError(
            f"{RewardOutcome.Name(outcome)} cannot carry uncertainty "
            f"{Uncertainty.Name(uncertainty)}"
        )

    # R-VAL-5
    if state == _STATE_ABSENT:
        if (
            receipt.certificate_id
            or receipt.certificate_digest
            or receipt.calibration_corpus_digest
            or receipt.calibration_scope
        ):
            raise ValidationError("an ABSENT certificate state carries no certificate reference")
    else:
        validate_id(receipt.certificate_id, "certificate_id")
        validate_digest(receipt.certificate_digest, "certificate_digest")
        validate_digest(receipt.calibration_corpus_digest, "calibration_corpus_digest")
        _check_enum(
            receipt.calibration_scope, CalibrationScope, "calibration_scope", ValidationError
        )

    # R-VAL-2 and R-SCORE-4: certified is exactly "no refusals".
    refusals = receipt.certification_refusals
    if receipt.certified:
        if tier < CERTIFIABLE_TIER:
            raise CertificationRefused(f"a receipt at oracle tier {tier} cannot be certified")
        if state != _STATE_CURRENT:
            raise CertificationRefused("a certified receipt needs a CURRENT certificate")
        if refusals:
            raise CertificationRefused("a certified receipt carries no certification refusals")
    elif not refusals:
        raise ValidationError("an uncertified receipt must say why (certification_refusals)")


def check_metadata(metadata: Struct) -> None:
    """Refuse metadata nested deeper than :data:`MAX_METADATA_DEPTH`, keys that name record
    contents or secrets, at any depth (R-MSG-9), keys longer than
    :data:`MAX_METADATA_KEY_LENGTH` (no reader needs them; they only bloat), and numbers with no
    JSON form (NaN, infinity).

    The walk is iterative (an explicit stack), so no nesting a caller builds can exhaust the
    interpreter's recursion limit: a deep document is refused at its first level too many.
    """
    if not metadata.fields:  # most descriptors: nothing to walk
        return
    pending: list[tuple[Struct | ListValue, str, int]] = [(metadata, "metadata", 1)]
    while pending:
        node, path, depth = pending.pop()
        if depth > MAX_METADATA_DEPTH:
            raise InvalidEpisode(
                f"metadata nests deeper than {MAX_METADATA_DEPTH} levels "
                f"(at {preview(path, quoted=False)})"
            )
        if isinstance(node, ListValue):
            for index, value in enumerate(node.values):
                _push_value(pending, value, f"{path}[{index}]", depth)
            continue
        for key, value in node.fields.items():
            # Checked before anything quotes the path: a parent's keys are short by now.
            if len(key) > MAX_METADATA_KEY_LENGTH:
                raise InvalidEpisode(
                    f"a key in {preview(path, quoted=False)} is longer than "
                    f"{MAX_METADATA_KEY_LENGTH} characters ({len(key)})"
                )
            if key.lower() in FORBIDDEN_METADATA_KEYS:
                raise InvalidEpisode(
                    f"{preview(f'{path}.{key}', quoted=False)} names record contents; "
                    "metadata may not carry it"
                )
            _push_value(pending, value, f"{path}.{key}", depth)


def _push_value(
    pending: list[tuple[Struct | ListValue, str, int]], value: Value, path: str, depth: int
) -> None:
    """Queue ``value``'s object or list one level below ``depth``; refuse a number with no
    JSON form."""
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        pending.append((value.struct_value, path, depth + 1))
    elif kind == "list_value":
        pending.append((value.list_value, path, depth + 1))
    elif kind == "number_value" and not math.isfinite(value.number_value):
        # The value itself is not quoted: it is the caller's.
        raise InvalidEpisode("metadata has no JSON form (NaN or infinity)")


def check_identity_values(identity: Mapping[str, object], field: str) -> None:
    """Refuse an identity with too many keys, a malformed key, or a value that is not a string
    of 1-:data:`MAX_IDENTITY_VALUE_LENGTH` characters (R-W-2); ``field`` names it in messages.

    The one shape check for an oracle identity wherever it enters: BeginEpisode, a descriptor's
    ``oracle_identity``, a descriptor's ``metadata.oracle_identity``, batches and streams. Key
    *set* checks against the contract (identity_mismatch) come after it, in the worker.
    """
    if len(identity) > MAX_IDENTITY_KEYS:
        raise InvalidEpisode(
            f"{field} has {len(identity)} keys; an identity has at most {MAX_IDENTITY_KEYS}"
        )
    for key, value in identity.items():
        if not isinstance(key, str) or not NAME_PATTERN.match(key):
            raise InvalidEpisode(f"{field} key {preview(key)} is not a valid name")
        if not isinstance(value, str) or not value or len(value) > MAX_IDENTITY_VALUE_LENGTH:
            raise InvalidEpisode(f"{field}.{key} must be 1-{MAX_IDENTITY_VALUE_LENGTH} characters")


def validate_descriptor(descriptor: EpisodeDescriptor) -> None:
    """R-MSG-9/10 shape checks; every failure is InvalidEpisode (``invalid_episode``).

    Checks that need the contract or the worker's state (digest match, identity keys,
    policy-update ledger) belong to the worker.
    """
    validate_id(descriptor.episode_id, "episode_id", error=InvalidEpisode)
    validate_id(descriptor.policy_checkpoint_id, "policy_checkpoint_id", error=InvalidEpisode)
    check_policy_update_field(descriptor.policy_update, "policy_update", error=InvalidEpisode)
    validate_digest(
        descriptor.reward_contract_digest, "reward_contract_digest", error=InvalidEpisode
    )
    if descriptor.HasField("task_id"):
        validate_id(descriptor.task_id, "task_id", error=InvalidEpisode)
    if descriptor.HasField("environment_id"):
        validate_id(descriptor.environment_id, "environment_id", error=InvalidEpisode)
    if descriptor.HasField("runtime_signal"):
        _check_enum(descriptor.runtime_signal, RuntimeSignal, "runtime_signal", InvalidEpisode)
    if descriptor.oracle_identity:  # most descriptors name none (BeginEpisode did)
        check_identity_values(descriptor.oracle_identity, "oracle_identity")
    check_metadata(descriptor.metadata)
    runtime_signal_of(descriptor)


RUNTIME_SIGNAL_METADATA_KEY = "runtime_signal"
"""Where HTTP reward clients put the runtime's end-of-episode signal: ``metadata.runtime_signal``,
a lowercase word (``halted_before_effect``) or the enum's full name."""


def runtime_signal_named(word: str | None, field: str) -> RuntimeSignal.ValueType:
    """The runtime signal a JSON caller names: a lowercase word (``halted_before_effect``) or
    the enum's full name; ``field`` names where it came from in the error.

    Raises:
        InvalidEpisode: ``word`` is not a string naming a known signal (UNSPECIFIED is none).
    """
    name = "" if word is None else word.upper()
    if name and not name.startswith("RUNTIME_SIGNAL_"):
        name = f"RUNTIME_SIGNAL_{name}"
    names = RuntimeSignal.keys()
    if name not in names or name == "RUNTIME_SIGNAL_UNSPECIFIED":
        known = ", ".join(n.removeprefix("RUNTIME_SIGNAL_").lower() for n in names[1:])
        shown = preview(word) if word is not None else "a non-string value"
        raise InvalidEpisode(f"{field} must be one of {known}, got {shown}")
    return RuntimeSignal.Value(name)


def runtime_signal_of(descriptor: EpisodeDescriptor) -> RuntimeSignal.ValueType:
    """The runtime signal a descriptor states (R-MSG-9, R-W-4): the field, else
    ``metadata.runtime_signal``, else COMPLETED.

    Raises:
        InvalidEpisode: ``metadata.runtime_signal`` is not a known signal, or it names another
            signal than the field does (which one the runtime meant cannot be told).
    """
    field = descriptor.runtime_signal if descriptor.HasField("runtime_signal") else None
    fields = descriptor.metadata.fields
    if RUNTIME_SIGNAL_METADATA_KEY not in fields:
        return RUNTIME_SIGNAL_COMPLETED if field is None else field
    raw = fields[RUNTIME_SIGNAL_METADATA_KEY]
    word = raw.string_value if raw.WhichOneof("kind") == "string_value" else None
    value = runtime_signal_named(word, "metadata.runtime_signal")
    if field is not None and field != value:
        raise InvalidEpisode("metadata.runtime_signal names another signal than runtime_signal")
    return value


def validate_calibration_summary(summary: CalibrationSummary) -> None:
    """R-CAL-2, R-CAL-7: counts that make sense and the digests that name contract and corpus."""
    validate_digest(summary.reward_contract_digest, "reward_contract_digest")
    validate_digest(summary.calibration_corpus_digest, "calibration_corpus_digest")
    validate_digest(summary.checker_configuration_digest, "checker_configuration_digest")
    if summary.trials < 1:
        raise ValidationError("calibration needs at least one trial")
    if summary.false_accepts > summary.trials:
        raise ValidationError("false_accepts cannot exceed trials")
    if summary.fault_classes:
        for fault_class in summary.fault_classes:
            if fault_class.false_accepts > fault_class.trials:
                raise ValidationError(
                    f"fault class {preview(fault_class.name)} false_accepts cannot exceed "
                    "its trials"
                )
        if sum(c.trials for c in summary.fault_classes) != summary.trials:
            raise ValidationError("fault class trials must add up to trials")
        if sum(c.false_accepts for c in summary.fault_classes) != summary.false_accepts:
            raise ValidationError("fault class false accepts must add up to false_accepts")
        # R-CAL-7: draws that were no effective fault, counted apart, add up like the trials.
        if sum(c.benign for c in summary.fault_classes) != summary.benign_trials:
            raise ValidationError("fault class benign draws must add up to benign_trials")
        if sum(c.rejected for c in summary.fault_classes) != summary.rejected_trials:
            raise ValidationError("fault class rejected draws must add up to rejected_trials")
    if not (math.isfinite(summary.confidence) and 0 < summary.confidence < 1):
        raise ValidationError(f"confidence must be in (0, 1), got {summary.confidence!r}")
    check_float(summary.threshold, "threshold")
    if summary.gold_trials < 1:
        raise ValidationError("calibration needs at least one gold control trial (R-CAL-3)")
    if summary.gold_refused:
        raise ValidationError("a gold control trial was not judged VERIFIED (R-CAL-3)")


def parse_strict(message_type: type[_Msg], data: bytes) -> _Msg:
    """Parse ``data`` as ``message_type``, refusing unknown fields at any depth.

    A signed payload with fields this schema does not know could carry claims (an execution id,
    say) that a reader would silently drop; refusing them keeps a receipt from being mistaken
    for anything else (R-MSG-7).
    """
    message = message_type()
    try:
        message.ParseFromString(data)
    except DecodeError as exc:
        raise ValidationError(f"payload is not a valid {message_type.__name__}: {exc}") from exc
    _refuse_unknown_fields(message, message_type.__name__)
    return message


_SINGLE, _REPEATED, _MAP = 0, 1, 2
"""How a field holds messages (see :func:`_message_fields`)."""


@functools.cache
def _message_fields(descriptor: Descriptor) -> tuple[tuple[str, int], ...]:
    """The fields of a message type that can hold messages with fields of their own: each
    one's name and whether it holds one, a list or a map of them (a map of scalars holds
    none). Known per type once, so a parse reads only those fields, not every set one."""
    fields: list[tuple[str, int]] = []
    for field in descriptor.fields:
        if field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:
            if field.message_type.fields_by_name["value"].message_type is not None:
                fields.append((field.name, _MAP))
        elif field.is_repeated:
            fields.append((field.name, _REPEATED))
        else:
            fields.append((field.name, _SINGLE))
    return tuple(fields)


def _refuse_unknown_fields(message: Message, path: str) -> None:
    if len(UnknownFieldSet(message)):
        raise ValidationError(f"{path} carries fields this schema does not know")
    for name, kind in _message_fields(message.DESCRIPTOR):
        if kind == _SINGLE:
            if message.HasField(name):
                _refuse_unknown_fields(getattr(message, name), f"{path}.{name}")
        elif kind == _REPEATED:
            for index, inner in enumerate(getattr(message, name)):
                _refuse_unknown_fields(inner, f"{path}.{name}[{index}]")
        else:
            for key, inner in getattr(message, name).items():
                _refuse_unknown_fields(inner, f"{path}.{name}[{key}]")
