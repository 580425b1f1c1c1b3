"""Every rule of rewardseal.core.validation, accepted side and refused side (R-MSG-1..10,
R-VAL-1..6).

Each table starts from a valid object built by a helper below (a MockMed contract, a signed
certificate, a receipt from ``build_receipt``, a descriptor, a calibration summary), changes one
thing, and checks that the validator accepts it or raises the exact error class with a message
that names the field or the rule. ``parse_strict`` is checked against payloads with fields the
schema does not know, at the top level and nested.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import pytest
from google.protobuf.message import Message
from google.protobuf.struct_pb2 import ListValue, Struct

from rewardseal.core.contract import contract_digest
from rewardseal.core.digest import digest_json
from rewardseal.core.errors import CertificationRefused, Code, InvalidEpisode, ValidationError
from rewardseal.core.receipts import EpisodeFacts, build_receipt
from rewardseal.core.signing import SigningKey, sign_certificate, sign_envelope
from rewardseal.core.validation import (
    FORBIDDEN_METADATA_KEYS,
    MAX_METADATA_DEPTH,
    parse_strict,
    validate_calibration_summary,
    validate_certificate,
    validate_contract,
    validate_descriptor,
    validate_digest,
    validate_id,
    validate_key_id,
    validate_receipt,
)
from rewardseal.v1.certificate_pb2 import CalibrationSummary, FaultClassCount, RewardCertificate
from rewardseal.v1.contract_pb2 import RewardComponent, RewardContract
from rewardseal.v1.enums_pb2 import (
    CalibrationScope,
    CertificateIssuer,
    CertificateState,
    OracleChannel,
    RewardOutcome,
    RuntimeSignal,
    Uncertainty,
)
from rewardseal.v1.episode_pb2 import EpisodeDescriptor
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt, SignedEnvelope
from rewardseal_mockmed.contract import CORPUS_DIGEST, THRESHOLD, mockmed_contract

M = TypeVar("M", bound=Message)
E = TypeVar("E", bound=Exception)
Mutation = Callable[[Any], object]

MAX_POLICY_UPDATE = 2**53 - 1
GOOD_DIGEST = "sha256:" + "0123456789abcdef" * 4
KEY = SigningKey.from_seed(bytes(range(32)))
ISSUED_AT = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
CONTRACT_DIGEST = contract_digest(mockmed_contract())
CHECKER_DIGEST = digest_json({"checker": "mockmed-sql", "version": 1})

VERIFIED = RewardOutcome.REWARD_OUTCOME_VERIFIED
HALTED = RewardOutcome.REWARD_OUTCOME_HALTED_BEFORE_EFFECT
REFUSED = RewardOutcome.REWARD_OUTCOME_REFUSED
REJECTED = RewardOutcome.REWARD_OUTCOME_REJECTED_POLICY
WRONG_EFFECT = RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT
RECONCILIATION = RewardOutcome.REWARD_OUTCOME_RECONCILIATION_REQUIRED
FAILED_PLATFORM = RewardOutcome.REWARD_OUTCOME_FAILED_PLATFORM
NONE = Uncertainty.UNCERTAINTY_NONE
DELIVERY_UNCERTAIN = Uncertainty.UNCERTAINTY_DELIVERY_UNCERTAIN
EFFECT_UNCERTAIN = Uncertainty.UNCERTAINTY_EFFECT_UNCERTAIN
ORACLE_UNAVAILABLE = Uncertainty.UNCERTAINTY_ORACLE_UNAVAILABLE
SYNTHETIC = CalibrationScope.CALIBRATION_SCOPE_SYNTHETIC
PRODUCTION = CalibrationScope.CALIBRATION_SCOPE_PRODUCTION
SELF_SIGNED = CertificateIssuer.CERTIFICATE_ISSUER_SELF_SIGNED
ORGANIZATION = CertificateIssuer.CERTIFICATE_ISSUER_ORGANIZATION


# --------------------------------------------------------------------------- helpers


def _resolve(message: Message, path: str) -> tuple[Message, str]:
    *parents, name = path.split(".")
    for parent in parents:
        message = getattr(message, parent)
    return message, name


def _set(path: str, value: object) -> Mutation:
    """Set one (possibly dotted) scalar field."""

    def mutate(message: Message) -> None:
        target, name = _resolve(message, path)
        setattr(target, name, value)

    return mutate


def _clear(path: str) -> Mutation:
    """Clear one (possibly dotted) field, message fields included."""

    def mutate(message: Message) -> None:
        target, name = _resolve(message, path)
        target.ClearField(name)

    return mutate


def _chain(*mutations: Mutation) -> Mutation:
    def mutate(message: Message) -> None:
        for mutation in mutations:
            mutation(message)

    return mutate


def _noop(message: Message) -> None:
    return None


def _mutated(message: M, mutation: Mutation) -> M:
    copy = type(message)()
    copy.CopyFrom(message)
    mutation(copy)
    return copy


def _refuses(validator: Callable[[Any], object], message: Any, error: type[E], match: str) -> E:
    """Run ``validator`` and check it raises exactly ``error`` with a message matching ``match``."""
    with pytest.raises(error, match=match) as info:
        validator(message)
    assert type(info.value) is error, f"expected exactly {error.__name__}, got {info.type}"
    return info.value


def _certificate(**fields: Any) -> RewardCertificate:
    """A signed, valid SELF_SIGNED SYNTHETIC certificate for the MockMed contract."""
    cert = RewardCertificate(
        certificate_id="cert.mockmed.0001",
        reward_contract_digest=CONTRACT_DIGEST,
        checker_configuration_digest=CHECKER_DIGEST,
        epsilon=0.0099361,
        delta=0.05,
        threshold=THRESHOLD,
        calibration_corpus_digest=CORPUS_DIGEST,
        calibration_scope=SYNTHETIC,
        issued_at_policy_update=0,
        expiry_policy_updates=1000,
        issuer=SELF_SIGNED,
    )
    cert.issued_at.FromDatetime(ISSUED_AT)
    for name, value in fields.items():
        setattr(cert, name, value)
    return sign_certificate(cert, KEY)


@functools.cache
def _base_certificate() -> RewardCertificate:
    return _certificate()


_DEFAULT: Any = object()


def _receipt(
    *,
    outcome: RewardOutcome.ValueType = VERIFIED,
    uncertainty: Uncertainty.ValueType = NONE,
    tier: int = 2,
    certificate: RewardCertificate | None = _DEFAULT,
    policy_update: int = 5,
    revoked: bool = False,
) -> RewardEvidenceReceipt:
    """A receipt built (and validated) by ``build_receipt``; the default one is certified."""
    facts = EpisodeFacts(
        receipt_id="receipt-000001",
        episode_id="episode-000001",
        policy_checkpoint_id="ckpt-step-000005",
        policy_update=policy_update,
        outcome=outcome,
        uncertainty=uncertainty,
        tier=tier,
        evidence_digest=digest_json({"evidence": "episode-000001"}),
        nonce="nonce-4f1c2a9e",
        issued_at=ISSUED_AT,
    )
    return build_receipt(
        facts,
        contract=mockmed_contract(),
        certificate=_base_certificate() if certificate is _DEFAULT else certificate,
        issuer_key_id=KEY.key_id,
        revoked=revoked,
    )


RECEIPT_BASES: dict[str, dict[str, Any]] = {
    "certified": {},
    "tier0": {"tier": 0},
    "tier1": {"tier": 1},
    "absent": {"certificate": None},
    "expired": {"policy_update": 5000},
    "revoked": {"revoked": True},
    "halted": {"outcome": HALTED},
    "refused": {"outcome": REFUSED},
    "rejected": {"outcome": REJECTED},
    "wrong-effect": {"outcome": WRONG_EFFECT},
    "reconciliation": {"outcome": RECONCILIATION, "uncertainty": EFFECT_UNCERTAIN},
    "failed-platform": {"outcome": FAILED_PLATFORM, "uncertainty": ORACLE_UNAVAILABLE},
}


def _descriptor() -> EpisodeDescriptor:
    descriptor = EpisodeDescriptor(
        episode_id="episode-000001",
        policy_checkpoint_id="ckpt-step-000005",
        policy_update=5,
        reward_contract_digest=CONTRACT_DIGEST,
        oracle_identity={"patient_id": "patient-0001"},
    )
    descriptor.metadata.update(
        {"group_uid": "group-7", "sample_index": 3, "tags": ["triage", "synthetic"]}
    )
    return descriptor


FAULT_CLASSES = (
    "extra_record",
    "duplicate_record",
    "missing_record",
    "wrong_field",
    "wrong_subject",
    "forbidden_present",
)


def _summary() -> CalibrationSummary:
    return CalibrationSummary(
        reward_contract_digest=CONTRACT_DIGEST,
        calibration_corpus_digest=CORPUS_DIGEST,
        checker_configuration_digest=CHECKER_DIGEST,
        trials=300,
        false_accepts=1,
        fault_classes=[
            FaultClassCount(name=name, trials=50, false_accepts=1 if index == 0 else 0)
            for index, name in enumerate(FAULT_CLASSES)
        ],
        generator_seed=7,
        method="clopper-pearson",
        confidence=0.95,
        threshold=THRESHOLD,
        gold_trials=1,
        gold_refused=0,
        held_out=True,
    )


def _names(count: int, prefix: str = "name") -> list[str]:
    return [f"{prefix}_{index:02d}" for index in range(count)]


def _identity_keys(keys: list[str]) -> Mutation:
    def mutate(contract: RewardContract) -> None:
        del contract.oracle.identity_keys[:]
        contract.oracle.identity_keys.extend(keys)

    return mutate


def _components(components: list[tuple[str, float]]) -> Mutation:
    def mutate(contract: RewardContract) -> None:
        del contract.components[:]
        contract.components.extend(RewardComponent(name=n, weight=w) for n, w in components)

    return mutate


def _weight(value: float) -> Mutation:
    return _components([("triage_encounter_created", value)])


def _reward_components(values: dict[str, float], *, replace: bool = True) -> Mutation:
    def mutate(receipt: RewardEvidenceReceipt) -> None:
        if replace:
            receipt.reward_components.clear()
        receipt.reward_components.update(values)

    return mutate


def _no_refusals(receipt: RewardEvidenceReceipt) -> None:
    del receipt.certification_refusals[:]


def _metadata(document: dict[str, Any]) -> Mutation:
    def mutate(descriptor: EpisodeDescriptor) -> None:
        descriptor.metadata.Clear()
        descriptor.metadata.update(document)

    return mutate


def _identity(identity: dict[str, str]) -> Mutation:
    def mutate(descriptor: EpisodeDescriptor) -> None:
        descriptor.oracle_identity.clear()
        descriptor.oracle_identity.update(identity)

    return mutate


def _fault_class(index: int, **fields: int) -> Mutation:
    def mutate(summary: CalibrationSummary) -> None:
        for name, value in fields.items():
            setattr(summary.fault_classes[index], name, value)

    return mutate


# --------------------------------------------------------------------------- validate_id

BAD_IDS = [
    pytest.param("../../etc/passwd", id="R-MSG-10-path-traversal-refused"),
    pytest.param("a/b/c/d/e/f", id="R-MSG-10-slashes-refused"),
    pytest.param("..\\..\\windows", id="R-MSG-10-backslashes-refused"),
    pytest.param("x" * 129, id="R-MSG-10-129-chars-refused"),
    pytest.param("abcdefg", id="R-MSG-10-7-chars-refused"),
    pytest.param("", id="R-MSG-10-empty-refused"),
    pytest.param("épisode-0001", id="R-MSG-10-unicode-letter-refused"),
    pytest.param("episode-\uff10\uff10\uff10\uff11", id="R-MSG-10-fullwidth-digits-refused"),
    pytest.param("_episode-0001", id="R-MSG-10-first-char-underscore-refused"),
    pytest.param(".episode-0001", id="R-MSG-10-first-char-dot-refused"),
    pytest.param("-episode-0001", id="R-MSG-10-first-char-dash-refused"),
    pytest.param(":episode-0001", id="R-MSG-10-first-char-colon-refused"),
    pytest.param("episode 0001", id="R-MSG-10-space-refused"),
    pytest.param("episode-0001\n", id="R-MSG-10-trailing-newline-refused"),
    pytest.param("episode\n-0001", id="R-MSG-10-inner-newline-refused"),
    pytest.param("episode\x00-0001", id="R-MSG-10-nul-byte-refused"),
    pytest.param("episode/0001", id="R-MSG-10-slash-refused"),
    pytest.param("episode%2f0001", id="R-MSG-10-percent-encoding-refused"),
    pytest.param(None, id="R-MSG-10-none-refused"),
    pytest.param(12345678, id="R-MSG-10-int-refused"),
]

GOOD_IDS = [
    pytest.param("a" * 8, id="R-MSG-10-8-chars-accepted"),
    pytest.param("a" * 128, id="R-MSG-10-128-chars-accepted"),
    pytest.param("0episode", id="R-MSG-10-first-char-digit-accepted"),
    pytest.param("Z._:-Z._:-", id="R-MSG-10-every-punctuation-accepted"),
    pytest.param("mockmed.triage-create.tier2", id="R-MSG-10-dotted-accepted"),
    pytest.param("ckpt:step-000005", id="R-MSG-10-colon-accepted"),
    pytest.param("a..b..c..", id="R-MSG-10-inner-dots-accepted"),
]


@pytest.mark.parametrize("value", BAD_IDS)
def test_validate_id_refuses(value: Any) -> None:
    _refuses(lambda v: validate_id(v, "episode_id"), value, ValidationError, "episode_id")


@pytest.mark.parametrize("value", BAD_IDS)
def test_validate_id_raises_the_requested_error_class(value: Any) -> None:
    error = _refuses(
        lambda v: validate_id(v, "episode_id", error=InvalidEpisode),
        value,
        InvalidEpisode,
        "episode_id .* is not a valid id",
    )
    assert error.reason == "invalid_episode"


@pytest.mark.parametrize("value", GOOD_IDS)
def test_validate_id_accepts(value: str) -> None:
    assert validate_id(value, "episode_id") == value


def test_validate_id_message_truncates_long_values() -> None:
    with pytest.raises(ValidationError) as info:
        validate_id("x" * 1000, "episode_id")
    assert len(str(info.value)) < 200


# --------------------------------------------------------------------------- validate_digest

BAD_DIGESTS = [
    pytest.param("", id="R-DIG-1-empty-refused"),
    pytest.param("0123456789abcdef" * 4, id="R-DIG-1-no-prefix-refused"),
    pytest.param("sha256:" + "0123456789ABCDEF" * 4, id="R-DIG-1-uppercase-hex-refused"),
    pytest.param("SHA256:" + "0123456789abcdef" * 4, id="R-DIG-1-uppercase-prefix-refused"),
    pytest.param("sha256:" + "a" * 63, id="R-DIG-1-63-hex-refused"),
    pytest.param("sha256:" + "a" * 65, id="R-DIG-1-65-hex-refused"),
    pytest.param("sha512:" + "a" * 64, id="R-DIG-1-other-algorithm-refused"),
    pytest.param("sha256:" + "g" * 64, id="R-DIG-1-non-hex-refused"),
    pytest.param("sha256: " + "a" * 63, id="R-DIG-1-space-refused"),
    pytest.param(GOOD_DIGEST + "\n", id="R-DIG-1-trailing-newline-refused"),
    pytest.param(None, id="R-DIG-1-none-refused"),
]


@pytest.mark.parametrize("value", BAD_DIGESTS)
def test_validate_digest_refuses(value: Any) -> None:
    _refuses(
        lambda v: validate_digest(v, "evidence_digest"), value, ValidationError, "evidence_digest"
    )


def test_validate_digest_raises_the_requested_error_class() -> None:
    _refuses(
        lambda v: validate_digest(v, "reward_contract_digest", error=InvalidEpisode),
        "sha256:nope",
        InvalidEpisode,
        "reward_contract_digest must be 'sha256:'",
    )


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(GOOD_DIGEST, id="R-DIG-1-lowercase-hex-accepted"),
        pytest.param(digest_json({"a": 1}), id="R-DIG-1-digest-json-output-accepted"),
    ],
)
def test_validate_digest_accepts(value: str) -> None:
    assert validate_digest(value, "evidence_digest") == value


# --------------------------------------------------------------------------- validate_key_id


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("", id="R-SIG-1-empty-refused"),
        pytest.param("ed25519:" + "a" * 64, id="R-SIG-1-missing-sha256-refused"),
        pytest.param("ed25519:sha256:" + "A" * 64, id="R-SIG-1-uppercase-refused"),
        pytest.param("ed25519:sha256:" + "a" * 63, id="R-SIG-1-short-refused"),
        pytest.param("rsa:sha256:" + "a" * 64, id="R-SIG-1-other-algorithm-refused"),
        pytest.param(KEY.key_id + "\n", id="R-SIG-1-trailing-newline-refused"),
    ],
)
def test_validate_key_id_refuses(value: str) -> None:
    _refuses(validate_key_id, value, ValidationError, "issuer_key_id must be 'ed25519:sha256:'")


def test_validate_key_id_accepts_a_real_key_id() -> None:
    assert validate_key_id(KEY.key_id) == KEY.key_id


# --------------------------------------------------------------------------- validate_contract

CONTRACT_REFUSED = [
    # R-MSG-10 / R-MSG-1: ids and version
    pytest.param(
        _set("contract_id", "../../etc/passwd"),
        "contract_id",
        id="R-MSG-10-contract-id-path-refused",
    ),
    pytest.param(
        _set("contract_id", "short"), "contract_id", id="R-MSG-10-contract-id-short-refused"
    ),
    pytest.param(
        _set("contract_version", ""),
        "contract_version is required",
        id="R-MSG-1-version-missing-refused",
    ),
    pytest.param(_set("task_id", "a/b/c/d/e/f"), "task_id", id="R-MSG-10-task-id-refused"),
    pytest.param(
        _set("environment_id", ""), "environment_id", id="R-MSG-10-environment-id-empty-refused"
    ),
    # R-MSG-1: digests
    pytest.param(_set("task_digest", "sha256:x"), "task_digest", id="R-MSG-1-task-digest-refused"),
    pytest.param(
        _set("environment_digest", ""),
        "environment_digest",
        id="R-MSG-1-environment-digest-refused",
    ),
    pytest.param(
        _set("required_effects_digest", "md5:00"),
        "required_effects_digest",
        id="R-MSG-1-required-effects-digest-refused",
    ),
    pytest.param(
        _set("forbidden_effects_digest", GOOD_DIGEST.upper()),
        "forbidden_effects_digest",
        id="R-MSG-1-forbidden-effects-digest-refused",
    ),
    # R-MSG-1: oracle
    pytest.param(_clear("oracle"), "oracle is required", id="R-MSG-1-oracle-missing-refused"),
    pytest.param(
        _set("oracle.channel", OracleChannel.ORACLE_CHANNEL_UNSPECIFIED),
        "oracle.channel",
        id="R-MSG-6-oracle-channel-unspecified-refused",
    ),
    pytest.param(
        _set("oracle.channel", 99), "oracle.channel", id="R-MSG-6-oracle-channel-unknown-refused"
    ),
    pytest.param(
        _identity_keys([]),
        r"oracle.identity_keys must have 1-32 entries, got 0",
        id="R-MSG-1-identity-keys-none-refused",
    ),
    pytest.param(
        _identity_keys(_names(33)),
        r"oracle.identity_keys must have 1-32 entries, got 33",
        id="R-MSG-1-identity-keys-33-refused",
    ),
    pytest.param(
        _identity_keys(["patient_id", "patient_id"]),
        "oracle.identity_keys must be unique",
        id="R-MSG-1-identity-keys-duplicate-refused",
    ),
    pytest.param(
        _identity_keys(["patient id"]),
        "oracle.identity_keys entry 'patient id'",
        id="R-MSG-1-identity-key-space-refused",
    ),
    pytest.param(
        _identity_keys([""]),
        "oracle.identity_keys entry ''",
        id="R-MSG-1-identity-key-empty-refused",
    ),
    pytest.param(
        _identity_keys(["patient_id\n"]),
        "oracle.identity_keys entry",
        id="R-MSG-1-identity-key-trailing-newline-refused",
    ),
    pytest.param(
        _set("oracle.oracle_recipe_digest", ""),
        "oracle.oracle_recipe_digest",
        id="R-MSG-1-oracle-recipe-digest-refused",
    ),
    # R-MSG-1: components
    pytest.param(
        _components([]),
        "components must have 1-64 entries, got 0",
        id="R-MSG-1-components-none-refused",
    ),
    pytest.param(
        _components([(n, 1.0) for n in _names(65)]),
        "components must have 1-64 entries, got 65",
        id="R-MSG-1-components-65-refused",
    ),
    pytest.param(
        _components([("a", 1.0), ("a", 2.0)]),
        "components must be unique",
        id="R-MSG-1-components-duplicate-refused",
    ),
    pytest.param(
        _components([("9lives", 1.0)]),
        "components entry '9lives'",
        id="R-MSG-1-component-name-digit-first-refused",
    ),
    pytest.param(_weight(0.0), "weight must be > 0", id="R-MSG-1-weight-zero-refused"),
    pytest.param(_weight(-0.0), "weight must be > 0", id="R-MSG-1-weight-negative-zero-refused"),
    pytest.param(_weight(-1.0), "weight must be > 0", id="R-MSG-1-weight-negative-refused"),
    pytest.param(_weight(math.nan), "weight must be finite", id="R-VAL-6-weight-nan-refused"),
    pytest.param(_weight(math.inf), "weight must be finite", id="R-VAL-6-weight-inf-refused"),
    pytest.param(
        _weight(1e6 * (1 + 1e-12)),
        r"weight must be finite with \|x\| <= 1e6",
        id="R-VAL-6-weight-above-1e6-refused",
    ),
    # R-MSG-2: scoring policy signs and ranges
    pytest.param(
        _set("scoring_policy.verified_reward", 0.0),
        "verified_reward must be > 0",
        id="R-MSG-2-verified-zero-refused",
    ),
    pytest.param(
        _set("scoring_policy.verified_reward", -1.0),
        "verified_reward must be > 0",
        id="R-MSG-2-verified-negative-refused",
    ),
    pytest.param(
        _set("scoring_policy.verified_reward", math.nan),
        "scoring_policy.verified_reward must be finite",
        id="R-VAL-6-verified-nan-refused",
    ),
    pytest.param(
        _set("scoring_policy.verified_reward", 2e6),
        "scoring_policy.verified_reward must be finite",
        id="R-VAL-6-verified-2e6-refused",
    ),
    pytest.param(
        _set("scoring_policy.halted_before_effect_reward", 0.1),
        "halted_before_effect_reward must be <= 0",
        id="R-MSG-2-halted-positive-refused",
    ),
    pytest.param(
        _set("scoring_policy.refused_reward", 1e-9),
        "refused_reward must be <= 0",
        id="R-MSG-2-refused-positive-refused",
    ),
    pytest.param(
        _set("scoring_policy.rejected_policy_reward", 0.5),
        "rejected_policy_reward must be <= 0",
        id="R-MSG-2-rejected-positive-refused",
    ),
    pytest.param(
        _set("scoring_policy.wrong_effect_reward", 1.0),
        "wrong_effect_reward must be <= 0",
        id="R-MSG-2-wrong-effect-positive-refused",
    ),
    pytest.param(
        _set("scoring_policy.wrong_effect_reward", -math.inf),
        "wrong_effect_reward must be finite",
        id="R-VAL-6-wrong-effect-minus-inf-refused",
    ),
    pytest.param(
        _set("scoring_policy.refused_reward", -1e6 - 1),
        "refused_reward must be finite",
        id="R-VAL-6-refused-below-minus-1e6-refused",
    ),
    pytest.param(
        _set("scoring_policy.halted_before_effect_reward", math.nan),
        "halted_before_effect_reward must be finite",
        id="R-VAL-6-halted-nan-refused",
    ),
    # R-MSG-3: certificate policy
    pytest.param(
        _clear("certificate_policy"),
        "certificate_policy is required",
        id="R-MSG-3-certificate-policy-missing-refused",
    ),
    pytest.param(
        _set("certificate_policy.max_epsilon", 0.0),
        r"max_epsilon must be in \(0, 1\)",
        id="R-MSG-3-max-epsilon-zero-refused",
    ),
    pytest.param(
        _set("certificate_policy.max_epsilon", 1.0),
        r"max_epsilon must be in \(0, 1\)",
        id="R-MSG-3-max-epsilon-one-refused",
    ),
    pytest.param(
        _set("certificate_policy.max_epsilon", -0.1),
        "max_epsilon",
        id="R-MSG-3-max-epsilon-negative-refused",
    ),
    pytest.param(
        _set("certificate_policy.max_epsilon", math.nan),
        "max_epsilon",
        id="R-MSG-3-max-epsilon-nan-refused",
    ),
    pytest.param(
        _set("certificate_policy.max_delta", 0.0),
        r"max_delta must be in \(0, 1\)",
        id="R-MSG-3-max-delta-zero-refused",
    ),
    pytest.param(
        _set("certificate_policy.max_delta", 1.0),
        r"max_delta must be in \(0, 1\)",
        id="R-MSG-3-max-delta-one-refused",
    ),
    pytest.param(
        _set("certificate_policy.max_delta", math.inf),
        "max_delta",
        id="R-MSG-3-max-delta-inf-refused",
    ),
    pytest.param(
        _set("certificate_policy.threshold", math.nan),
        "certificate_policy.threshold must be finite",
        id="R-VAL-6-threshold-nan-refused",
    ),
    pytest.param(
        _set("certificate_policy.threshold", -2e6),
        "certificate_policy.threshold",
        id="R-VAL-6-threshold-minus-2e6-refused",
    ),
    pytest.param(
        _set("certificate_policy.calibration_corpus_digest", ""),
        "certificate_policy.calibration_corpus_digest",
        id="R-MSG-3-corpus-digest-missing-refused",
    ),
    pytest.param(
        _set("certificate_policy.max_expiry_policy_updates", 0),
        "max_expiry_policy_updates must be >= 1",
        id="R-MSG-3-max-expiry-zero-refused",
    ),
]

CONTRACT_ACCEPTED = [
    pytest.param(_noop, id="R-MSG-1-mockmed-contract-accepted"),
    pytest.param(
        _set("oracle.channel", OracleChannel.ORACLE_CHANNEL_OCR), id="R-MSG-1-ocr-channel-accepted"
    ),
    pytest.param(_identity_keys(_names(32)), id="R-MSG-1-identity-keys-32-accepted"),
    pytest.param(
        _identity_keys(["site", "patient_id"]), id="R-MSG-1-identity-keys-unsorted-accepted"
    ),
    pytest.param(_components([(n, 1.0) for n in _names(64)]), id="R-MSG-1-components-64-accepted"),
    pytest.param(_weight(1e-9), id="R-MSG-1-tiny-positive-weight-accepted"),
    pytest.param(_weight(1e6), id="R-VAL-6-weight-1e6-accepted"),
    pytest.param(_set("scoring_policy.verified_reward", 1e6), id="R-MSG-2-verified-1e6-accepted"),
    pytest.param(
        _set("scoring_policy.verified_reward", 1e-6), id="R-MSG-2-verified-small-positive-accepted"
    ),
    pytest.param(
        _set("scoring_policy.wrong_effect_reward", -1e6),
        id="R-MSG-2-wrong-effect-minus-1e6-accepted",
    ),
    pytest.param(
        _set("scoring_policy.halted_before_effect_reward", 0.0), id="R-MSG-2-halted-zero-accepted"
    ),
    pytest.param(
        _set("scoring_policy.refused_reward", -0.5), id="R-MSG-2-refused-negative-accepted"
    ),
    pytest.param(_clear("scoring_policy"), id="R-MSG-2-all-defaults-accepted"),
    pytest.param(
        _set("certificate_policy.max_epsilon", 0.999), id="R-MSG-3-max-epsilon-below-one-accepted"
    ),
    pytest.param(_set("certificate_policy.max_delta", 1e-9), id="R-MSG-3-max-delta-tiny-accepted"),
    pytest.param(
        _set("certificate_policy.max_expiry_policy_updates", 1),
        id="R-MSG-3-max-expiry-one-accepted",
    ),
]


@pytest.mark.parametrize(("mutation", "match"), CONTRACT_REFUSED)
def test_validate_contract_refuses(mutation: Mutation, match: str) -> None:
    _refuses(validate_contract, _mutated(mockmed_contract(), mutation), ValidationError, match)


@pytest.mark.parametrize("mutation", CONTRACT_ACCEPTED)
def test_validate_contract_accepts(mutation: Mutation) -> None:
    validate_contract(_mutated(mockmed_contract(), mutation))


@pytest.mark.parametrize("tier", [0, 2])
def test_validate_contract_accepts_both_mockmed_contracts(tier: int) -> None:
    validate_contract(mockmed_contract(tier=tier))


# --------------------------------------------------------------------------- validate_certificate

CERTIFICATE_REFUSED = [
    pytest.param(
        _set("certificate_id", "../../etc/passwd"),
        ValidationError,
        "certificate_id",
        id="R-MSG-10-certificate-id-path-refused",
    ),
    pytest.param(
        _set("certificate_id", ""),
        ValidationError,
        "certificate_id",
        id="R-MSG-10-certificate-id-empty-refused",
    ),
    pytest.param(
        _set("reward_contract_digest", "sha256:"),
        ValidationError,
        "reward_contract_digest",
        id="R-MSG-4-contract-digest-refused",
    ),
    pytest.param(
        _set("checker_configuration_digest", ""),
        ValidationError,
        "checker_configuration_digest",
        id="R-MSG-4-checker-digest-refused",
    ),
    pytest.param(
        _set("epsilon", -0.01),
        ValidationError,
        r"epsilon must be in \[0, 1\]",
        id="R-MSG-4-epsilon-negative-refused",
    ),
    pytest.param(
        _set("epsilon", 1.01),
        ValidationError,
        r"epsilon must be in \[0, 1\]",
        id="R-MSG-4-epsilon-above-one-refused",
    ),
    pytest.param(
        _set("epsilon", math.nan), ValidationError, "epsilon", id="R-VAL-6-epsilon-nan-refused"
    ),
    pytest.param(
        _set("epsilon", math.inf), ValidationError, "epsilon", id="R-VAL-6-epsilon-inf-refused"
    ),
    pytest.param(
        _set("delta", 0.0),
        ValidationError,
        r"delta must be in \(0, 1\)",
        id="R-MSG-4-delta-zero-refused",
    ),
    pytest.param(
        _set("delta", 1.0),
        ValidationError,
        r"delta must be in \(0, 1\)",
        id="R-MSG-4-delta-one-refused",
    ),
    pytest.param(
        _set("delta", -0.05), ValidationError, "delta", id="R-MSG-4-delta-negative-refused"
    ),
    pytest.param(_set("delta", math.nan), ValidationError, "delta", id="R-VAL-6-delta-nan-refused"),
    pytest.param(
        _set("threshold", math.nan),
        ValidationError,
        "threshold must be finite",
        id="R-VAL-6-threshold-nan-refused",
    ),
    pytest.param(
        _set("threshold", 1e6 + 1),
        ValidationError,
        r"threshold must be finite with \|x\| <= 1e6",
        id="R-VAL-6-threshold-above-1e6-refused",
    ),
    pytest.param(
        _set("calibration_corpus_digest", ""),
        ValidationError,
        "calibration_corpus_digest",
        id="R-MSG-4-corpus-digest-refused",
    ),
    pytest.param(
        _set("calibration_scope", CalibrationScope.CALIBRATION_SCOPE_UNSPECIFIED),
        ValidationError,
        "calibration_scope",
        id="R-MSG-6-scope-unspecified-refused",
    ),
    pytest.param(
        _set("calibration_scope", 7),
        ValidationError,
        "calibration_scope",
        id="R-MSG-6-scope-unknown-refused",
    ),
    pytest.param(
        _set("issued_at_policy_update", -1),
        ValidationError,
        "issued_at_policy_update",
        id="R-VAL-6-issued-at-update-negative-refused",
    ),
    pytest.param(
        _set("issued_at_policy_update", MAX_POLICY_UPDATE + 1),
        ValidationError,
        r"issued_at_policy_update must be in 0..2\^53-1",
        id="R-VAL-6-issued-at-update-2-pow-53-refused",
    ),
    pytest.param(
        _set("expiry_policy_updates", 0),
        ValidationError,
        "expiry_policy_updates must be >= 1",
        id="R-MSG-4-expiry-zero-refused",
    ),
    pytest.param(
        _clear("issued_at"),
        ValidationError,
        "issued_at is required",
        id="R-MSG-4-issued-at-missing-refused",
    ),
    pytest.param(
        _set("issuer", CertificateIssuer.CERTIFICATE_ISSUER_UNSPECIFIED),
        ValidationError,
        "issuer must be a known value",
        id="R-MSG-6-issuer-unspecified-refused",
    ),
    pytest.param(
        _set("issuer", 3),
        ValidationError,
        "issuer must be a known value",
        id="R-MSG-6-issuer-unknown-refused",
    ),
    pytest.param(
        _set("calibration_scope", PRODUCTION),
        CertificationRefused,
        "SELF_SIGNED certificate may only carry SYNTHETIC scope",
        id="R-MSG-5-self-signed-production-refused",
    ),
    pytest.param(
        _set("issuer_key_id", ""),
        ValidationError,
        "issuer_key_id",
        id="R-SIG-1-issuer-key-id-empty-refused",
    ),
    pytest.param(
        _set("issuer_key_id", "ed25519:sha256:" + "F" * 64),
        ValidationError,
        "issuer_key_id",
        id="R-SIG-1-issuer-key-id-uppercase-refused",
    ),
    pytest.param(
        _set("issuer_key_id", "worker-key-0001"),
        ValidationError,
        "issuer_key_id",
        id="R-SIG-1-issuer-key-id-free-text-refused",
    ),
    pytest.param(
        _set("signature", b""),
        ValidationError,
        "signature must be 64 bytes, got 0",
        id="R-MSG-4-signature-missing-refused",
    ),
    pytest.param(
        _set("signature", b"\x01" * 63),
        ValidationError,
        "signature must be 64 bytes, got 63",
        id="R-MSG-4-signature-63-bytes-refused",
    ),
    pytest.param(
        _set("signature", b"\x01" * 65),
        ValidationError,
        "signature must be 64 bytes, got 65",
        id="R-MSG-4-signature-65-bytes-refused",
    ),
]

CERTIFICATE_ACCEPTED = [
    pytest.param(_noop, id="R-MSG-4-signed-self-signed-synthetic-accepted"),
    pytest.param(
        _chain(_set("issuer", ORGANIZATION), _set("calibration_scope", PRODUCTION)),
        id="R-MSG-5-organization-production-accepted-by-validator",
    ),
    pytest.param(_set("issuer", ORGANIZATION), id="R-MSG-5-organization-synthetic-accepted"),
    pytest.param(_set("epsilon", 0.0), id="R-MSG-4-epsilon-zero-accepted"),
    pytest.param(_set("epsilon", 1.0), id="R-MSG-4-epsilon-one-accepted"),
    pytest.param(_set("delta", 1e-9), id="R-MSG-4-delta-tiny-accepted"),
    pytest.param(_set("delta", 0.999), id="R-MSG-4-delta-below-one-accepted"),
    pytest.param(_set("threshold", 1e6), id="R-VAL-6-threshold-1e6-accepted"),
    pytest.param(_set("expiry_policy_updates", 1), id="R-MSG-4-expiry-one-accepted"),
    pytest.param(
        _set("issued_at_policy_update", MAX_POLICY_UPDATE),
        id="R-VAL-6-issued-at-update-2-pow-53-minus-1-accepted",
    ),
    pytest.param(
        _set("signature", b"\x00" * 64), id="R-MSG-4-any-64-byte-signature-shape-accepted"
    ),
]


@pytest.mark.parametrize(("mutation", "error", "match"), CERTIFICATE_REFUSED)
def test_validate_certificate_refuses(
    mutation: Mutation, error: type[Exception], match: str
) -> None:
    _refuses(validate_certificate, _mutated(_base_certificate(), mutation), error, match)


@pytest.mark.parametrize("mutation", CERTIFICATE_ACCEPTED)
def test_validate_certificate_accepts(mutation: Mutation) -> None:
    validate_certificate(_mutated(_base_certificate(), mutation))


def test_self_signed_production_is_a_certification_refusal_with_its_reason() -> None:
    cert = _mutated(_base_certificate(), _set("calibration_scope", PRODUCTION))
    error = _refuses(validate_certificate, cert, CertificationRefused, "SELF_SIGNED")
    assert isinstance(error, ValidationError)
    assert error.reason == "certification_refused"
    assert error.code == Code.INVALID_ARGUMENT


def test_organization_production_certificate_signed_for_real_is_accepted() -> None:
    validate_certificate(_certificate(issuer=ORGANIZATION, calibration_scope=PRODUCTION))


# --------------------------------------------------------------------------- validate_receipt

RECEIPT_REFUSED = [
    # R-MSG-7 / R-MSG-10: identity of the receipt
    pytest.param(
        "certified",
        _set("receipt_id", "../../etc/passwd"),
        ValidationError,
        "receipt_id",
        id="R-MSG-10-receipt-id-path-refused",
    ),
    pytest.param(
        "certified",
        _set("episode_id", "abcdefg"),
        ValidationError,
        "episode_id",
        id="R-MSG-10-episode-id-7-chars-refused",
    ),
    pytest.param(
        "certified",
        _set("episode_id", "x" * 129),
        ValidationError,
        "episode_id",
        id="R-MSG-10-episode-id-129-chars-refused",
    ),
    pytest.param(
        "certified",
        _set("policy_checkpoint_id", ""),
        ValidationError,
        "policy_checkpoint_id",
        id="R-MSG-10-checkpoint-id-empty-refused",
    ),
    pytest.param(
        "certified",
        _set("reward_contract_digest", "sha256:abc"),
        ValidationError,
        "reward_contract_digest",
        id="R-MSG-7-contract-digest-refused",
    ),
    pytest.param(
        "certified",
        _set("evidence_digest", ""),
        ValidationError,
        "evidence_digest",
        id="R-MSG-7-evidence-digest-refused",
    ),
    pytest.param(
        "certified",
        _set("oracle_tier", 4),
        ValidationError,
        "oracle_tier 4 is not one of 0, 1, 2, 3",
        id="R-MSG-7-tier-4-refused",
    ),
    pytest.param(
        "certified",
        _set("reward_outcome", RewardOutcome.REWARD_OUTCOME_UNSPECIFIED),
        ValidationError,
        "reward_outcome must be a known value other than UNSPECIFIED",
        id="R-MSG-6-outcome-unspecified-refused",
    ),
    pytest.param(
        "certified",
        _set("reward_outcome", 99),
        ValidationError,
        "reward_outcome",
        id="R-MSG-6-outcome-unknown-refused",
    ),
    pytest.param(
        "certified",
        _set("uncertainty", Uncertainty.UNCERTAINTY_UNSPECIFIED),
        ValidationError,
        "uncertainty must be a known value",
        id="R-MSG-6-uncertainty-unspecified-refused",
    ),
    pytest.param(
        "certified",
        _set("certificate_state", CertificateState.CERTIFICATE_STATE_UNSPECIFIED),
        ValidationError,
        "certificate_state must be a known value",
        id="R-MSG-6-certificate-state-unspecified-refused",
    ),
    pytest.param(
        "certified",
        _set("issuer_key_id", "ed25519:" + "a" * 64),
        ValidationError,
        "issuer_key_id",
        id="R-SIG-1-issuer-key-id-refused",
    ),
    pytest.param(
        "certified",
        _set("nonce", ""),
        ValidationError,
        "nonce is required",
        id="R-MSG-7-nonce-missing-refused",
    ),
    pytest.param(
        "certified",
        _clear("issued_at"),
        ValidationError,
        "issued_at is required",
        id="R-MSG-7-issued-at-missing-refused",
    ),
    # R-VAL-1
    pytest.param(
        "certified",
        _set("development_only", True),
        ValidationError,
        "development_only must be true exactly at oracle tier 0 or 1",
        id="R-VAL-1-tier2-development-only-refused",
    ),
    pytest.param(
        "certified",
        _chain(_set("oracle_tier", 3), _set("development_only", True)),
        ValidationError,
        "development_only",
        id="R-VAL-1-tier3-development-only-refused",
    ),
    pytest.param(
        "tier0",
        _set("development_only", False),
        ValidationError,
        "development_only",
        id="R-VAL-1-tier0-not-development-only-refused",
    ),
    pytest.param(
        "tier1",
        _set("development_only", False),
        ValidationError,
        "development_only",
        id="R-VAL-1-tier1-not-development-only-refused",
    ),
    # R-VAL-2
    pytest.param(
        "tier0",
        _chain(_set("certified", True), _no_refusals),
        CertificationRefused,
        "oracle tier 0 cannot be certified",
        id="R-VAL-2-certified-at-tier0-refused",
    ),
    pytest.param(
        "tier1",
        _chain(_set("certified", True), _no_refusals),
        CertificationRefused,
        "oracle tier 1 cannot be certified",
        id="R-VAL-2-certified-at-tier1-refused",
    ),
    pytest.param(
        "expired",
        _chain(_set("certified", True), _no_refusals),
        CertificationRefused,
        "needs a CURRENT certificate",
        id="R-VAL-2-certified-with-expired-certificate-refused",
    ),
    pytest.param(
        "revoked",
        _chain(_set("certified", True), _no_refusals),
        CertificationRefused,
        "needs a CURRENT certificate",
        id="R-VAL-2-certified-with-revoked-certificate-refused",
    ),
    pytest.param(
        "absent",
        _chain(_set("certified", True), _no_refusals),
        CertificationRefused,
        "needs a CURRENT certificate",
        id="R-VAL-2-certified-without-certificate-refused",
    ),
    pytest.param(
        "certified",
        _set("certificate_state", CertificateState.CERTIFICATE_STATE_NOT_YET_VALID),
        CertificationRefused,
        "needs a CURRENT certificate",
        id="R-VAL-2-certified-not-yet-valid-refused",
    ),
    pytest.param(
        "certified",
        lambda r: r.certification_refusals.append("no certificate"),
        CertificationRefused,
        "certified receipt carries no certification refusals",
        id="R-SCORE-4-certified-with-refusals-refused",
    ),
    pytest.param(
        "expired",
        _no_refusals,
        ValidationError,
        "certification_refusals",
        id="R-SCORE-4-uncertified-without-refusals-refused",
    ),
    # R-VAL-3
    pytest.param(
        "reconciliation",
        _set("scalar_reward", 0.0),
        ValidationError,
        "unscored outcome carries no scalar and no components",
        id="R-VAL-3-unscored-with-zero-scalar-refused",
    ),
    pytest.param(
        "failed-platform",
        _set("scalar_reward", -1.0),
        ValidationError,
        "unscored outcome carries no scalar",
        id="R-VAL-3-failed-platform-with-scalar-refused",
    ),
    pytest.param(
        "reconciliation",
        _reward_components({"triage_encounter_created": 0.0}),
        ValidationError,
        "unscored outcome carries no scalar and no components",
        id="R-VAL-3-unscored-with-components-refused",
    ),
    pytest.param(
        "certified",
        _clear("scalar_reward"),
        ValidationError,
        "scored outcome requires a scalar and components",
        id="R-VAL-3-scored-without-scalar-refused",
    ),
    pytest.param(
        "wrong-effect",
        _clear("scalar_reward"),
        ValidationError,
        "scored outcome requires a scalar",
        id="R-VAL-3-wrong-effect-without-scalar-refused",
    ),
    pytest.param(
        "certified",
        _reward_components({}),
        ValidationError,
        "scored outcome requires a scalar and components",
        id="R-VAL-3-scored-without-components-refused",
    ),
    pytest.param(
        "certified",
        _set("scalar_reward", 0.0),
        ValidationError,
        "VERIFIED scalar must be > 0",
        id="R-VAL-3-verified-zero-scalar-refused",
    ),
    pytest.param(
        "certified",
        _set("scalar_reward", -1.0),
        ValidationError,
        "VERIFIED scalar must be > 0",
        id="R-VAL-3-verified-negative-scalar-refused",
    ),
    pytest.param(
        "wrong-effect",
        _set("scalar_reward", 0.5),
        ValidationError,
        "other than VERIFIED must be <= 0",
        id="R-VAL-3-wrong-effect-positive-scalar-refused",
    ),
    pytest.param(
        "halted",
        _set("scalar_reward", 1.0),
        ValidationError,
        "other than VERIFIED must be <= 0",
        id="R-VAL-3-halted-positive-scalar-refused",
    ),
    pytest.param(
        "refused",
        _set("scalar_reward", 1e-9),
        ValidationError,
        "other than VERIFIED must be <= 0",
        id="R-VAL-3-refused-positive-scalar-refused",
    ),
    pytest.param(
        "rejected",
        _set("scalar_reward", 0.25),
        ValidationError,
        "other than VERIFIED must be <= 0",
        id="R-VAL-3-rejected-positive-scalar-refused",
    ),
    # R-VAL-4
    pytest.param(
        "certified",
        _set("uncertainty", EFFECT_UNCERTAIN),
        ValidationError,
        "REWARD_OUTCOME_VERIFIED cannot carry uncertainty UNCERTAINTY_EFFECT_UNCERTAIN",
        id="R-VAL-4-verified-effect-uncertain-refused",
    ),
    pytest.param(
        "certified",
        _set("uncertainty", DELIVERY_UNCERTAIN),
        ValidationError,
        "VERIFIED cannot carry uncertainty",
        id="R-VAL-4-verified-delivery-uncertain-refused",
    ),
    pytest.param(
        "certified",
        _set("uncertainty", ORACLE_UNAVAILABLE),
        ValidationError,
        "VERIFIED cannot carry uncertainty",
        id="R-VAL-4-verified-oracle-unavailable-refused",
    ),
    pytest.param(
        "wrong-effect",
        _set("uncertainty", EFFECT_UNCERTAIN),
        ValidationError,
        "WRONG_EFFECT cannot carry uncertainty",
        id="R-VAL-4-wrong-effect-uncertain-refused",
    ),
    pytest.param(
        "halted",
        _set("uncertainty", ORACLE_UNAVAILABLE),
        ValidationError,
        "HALTED_BEFORE_EFFECT cannot carry uncertainty",
        id="R-VAL-4-halted-oracle-unavailable-refused",
    ),
    pytest.param(
        "reconciliation",
        _set("uncertainty", NONE),
        ValidationError,
        "RECONCILIATION_REQUIRED cannot carry uncertainty UNCERTAINTY_NONE",
        id="R-VAL-4-reconciliation-none-refused",
    ),
    pytest.param(
        "reconciliation",
        _set("uncertainty", ORACLE_UNAVAILABLE),
        ValidationError,
        "RECONCILIATION_REQUIRED cannot carry uncertainty",
        id="R-VAL-4-reconciliation-oracle-unavailable-refused",
    ),
    pytest.param(
        "failed-platform",
        _set("uncertainty", EFFECT_UNCERTAIN),
        ValidationError,
        "FAILED_PLATFORM cannot carry uncertainty UNCERTAINTY_EFFECT_UNCERTAIN",
        id="R-VAL-4-failed-platform-effect-uncertain-refused",
    ),
    # R-VAL-5
    pytest.param(
        "absent",
        _set("certificate_id", "cert.mockmed.0001"),
        ValidationError,
        "ABSENT certificate state carries no certificate reference",
        id="R-VAL-5-absent-with-certificate-id-refused",
    ),
    pytest.param(
        "absent",
        _set("certificate_digest", GOOD_DIGEST),
        ValidationError,
        "ABSENT certificate state",
        id="R-VAL-5-absent-with-certificate-digest-refused",
    ),
    pytest.param(
        "absent",
        _set("calibration_corpus_digest", CORPUS_DIGEST),
        ValidationError,
        "ABSENT certificate state",
        id="R-VAL-5-absent-with-corpus-digest-refused",
    ),
    pytest.param(
        "absent",
        _set("calibration_scope", SYNTHETIC),
        ValidationError,
        "ABSENT certificate state",
        id="R-VAL-5-absent-with-scope-refused",
    ),
    pytest.param(
        "certified",
        _set("certificate_state", CertificateState.CERTIFICATE_STATE_ABSENT),
        ValidationError,
        "ABSENT certificate state",
        id="R-VAL-5-absent-state-with-full-reference-refused",
    ),
    pytest.param(
        "tier0",
        _clear("certificate_id"),
        ValidationError,
        "certificate_id",
        id="R-VAL-5-current-without-certificate-id-refused",
    ),
    pytest.param(
        "expired",
        _set("certificate_id", "../cert"),
        ValidationError,
        "certificate_id",
        id="R-VAL-5-expired-with-bad-certificate-id-refused",
    ),
    pytest.param(
        "tier0",
        _clear("certificate_digest"),
        ValidationError,
        "certificate_digest",
        id="R-VAL-5-current-without-certificate-digest-refused",
    ),
    pytest.param(
        "revoked",
        _clear("certificate_digest"),
        ValidationError,
        "certificate_digest",
        id="R-VAL-5-revoked-without-certificate-digest-refused",
    ),
    pytest.param(
        "tier0",
        _clear("calibration_corpus_digest"),
        ValidationError,
        "calibration_corpus_digest",
        id="R-VAL-5-current-without-corpus-digest-refused",
    ),
    pytest.param(
        "tier0",
        _clear("calibration_scope"),
        ValidationError,
        "calibration_scope",
        id="R-VAL-5-current-without-scope-refused",
    ),
    pytest.param(
        "expired",
        _clear("calibration_scope"),
        ValidationError,
        "calibration_scope",
        id="R-VAL-5-expired-without-scope-refused",
    ),
    # R-VAL-6
    pytest.param(
        "certified",
        _set("scalar_reward", math.nan),
        ValidationError,
        "scalar_reward must be finite",
        id="R-VAL-6-scalar-nan-refused",
    ),
    pytest.param(
        "certified",
        _set("scalar_reward", math.inf),
        ValidationError,
        "scalar_reward must be finite",
        id="R-VAL-6-scalar-inf-refused",
    ),
    pytest.param(
        "wrong-effect",
        _set("scalar_reward", -math.inf),
        ValidationError,
        "scalar_reward must be finite",
        id="R-VAL-6-scalar-minus-inf-refused",
    ),
    pytest.param(
        "certified",
        _set("scalar_reward", 1e6 + 1),
        ValidationError,
        r"scalar_reward must be finite with \|x\| <= 1e6",
        id="R-VAL-6-scalar-above-1e6-refused",
    ),
    pytest.param(
        "wrong-effect",
        _set("scalar_reward", -1e6 - 1),
        ValidationError,
        "scalar_reward",
        id="R-VAL-6-scalar-below-minus-1e6-refused",
    ),
    pytest.param(
        "certified",
        _reward_components({"triage_encounter_created": math.nan}),
        ValidationError,
        "reward component triage_encounter_created must be finite",
        id="R-VAL-6-component-nan-refused",
    ),
    pytest.param(
        "certified",
        _reward_components({"triage_encounter_created": 2e6}),
        ValidationError,
        "reward component triage_encounter_created",
        id="R-VAL-6-component-2e6-refused",
    ),
    pytest.param(
        "certified",
        _reward_components({"extra": -math.inf}, replace=False),
        ValidationError,
        "reward component extra",
        id="R-VAL-6-component-minus-inf-refused",
    ),
    pytest.param(
        "certified",
        _reward_components({n: 1.0 / 65 for n in _names(65)}),
        ValidationError,
        "at most 64 reward components",
        id="R-VAL-6-65-components-refused",
    ),
    pytest.param(
        "certified",
        _set("policy_update", MAX_POLICY_UPDATE + 1),
        ValidationError,
        r"policy_update must be in 0..2\^53-1, got 9007199254740992",
        id="R-VAL-6-policy-update-2-pow-53-refused",
    ),
    pytest.param(
        "certified",
        _set("policy_update", -1),
        ValidationError,
        "policy_update must be in 0",
        id="R-VAL-6-policy-update-negative-refused",
    ),
]

RECEIPT_ACCEPTED = [
    pytest.param(name, _noop, id=f"R-MSG-7-built-{name}-receipt-accepted") for name in RECEIPT_BASES
] + [
    pytest.param(
        "certified", _set("oracle_tier", 3), id="R-VAL-1-tier3-not-development-only-accepted"
    ),
    pytest.param("certified", _set("scalar_reward", 1e6), id="R-VAL-6-scalar-1e6-accepted"),
    pytest.param(
        "certified", _set("scalar_reward", 1e-12), id="R-VAL-3-verified-tiny-positive-accepted"
    ),
    pytest.param(
        "wrong-effect", _set("scalar_reward", -1e6), id="R-VAL-6-scalar-minus-1e6-accepted"
    ),
    pytest.param(
        "wrong-effect", _set("scalar_reward", -1.0), id="R-VAL-3-wrong-effect-penalty-accepted"
    ),
    pytest.param(
        "certified",
        _reward_components({n: 1.0 / 64 for n in _names(64)}),
        id="R-VAL-6-64-components-accepted",
    ),
    pytest.param(
        "certified",
        _set("policy_update", MAX_POLICY_UPDATE),
        id="R-VAL-6-policy-update-2-pow-53-minus-1-accepted",
    ),
    pytest.param(
        "reconciliation",
        _set("uncertainty", DELIVERY_UNCERTAIN),
        id="R-VAL-4-reconciliation-delivery-uncertain-accepted",
    ),
    pytest.param(
        "failed-platform", _set("uncertainty", NONE), id="R-VAL-4-failed-platform-none-accepted"
    ),
    pytest.param(
        "failed-platform",
        _set("uncertainty", DELIVERY_UNCERTAIN),
        id="R-VAL-4-failed-platform-delivery-uncertain-accepted",
    ),
]


@pytest.mark.parametrize(("base", "mutation", "error", "match"), RECEIPT_REFUSED)
def test_validate_receipt_refuses(
    base: str, mutation: Mutation, error: type[Exception], match: str
) -> None:
    receipt = _mutated(_receipt(**RECEIPT_BASES[base]), mutation)
    _refuses(validate_receipt, receipt, error, match)


@pytest.mark.parametrize(("base", "mutation"), RECEIPT_ACCEPTED)
def test_validate_receipt_accepts(base: str, mutation: Mutation) -> None:
    validate_receipt(_mutated(_receipt(**RECEIPT_BASES[base]), mutation))


def test_receipt_bases_are_what_their_names_say() -> None:
    """Guard the table: each base receipt has the shape the cases above rely on."""
    certified = _receipt()
    assert certified.certified
    assert certified.certificate_state == CertificateState.CERTIFICATE_STATE_CURRENT
    assert not certified.development_only
    for name in ("tier0", "tier1"):
        receipt = _receipt(**RECEIPT_BASES[name])
        assert receipt.development_only
        assert not receipt.certified
        assert receipt.certificate_state == CertificateState.CERTIFICATE_STATE_CURRENT
    assert _receipt(certificate=None).certificate_state == CertificateState.CERTIFICATE_STATE_ABSENT
    assert (
        _receipt(**RECEIPT_BASES["expired"]).certificate_state
        == CertificateState.CERTIFICATE_STATE_EXPIRED
    )
    assert (
        _receipt(**RECEIPT_BASES["revoked"]).certificate_state
        == CertificateState.CERTIFICATE_STATE_REVOKED
    )
    for name in ("reconciliation", "failed-platform"):
        receipt = _receipt(**RECEIPT_BASES[name])
        assert not receipt.HasField("scalar_reward")
        assert not receipt.reward_components


@pytest.mark.parametrize(
    "policy_update",
    [
        pytest.param(MAX_POLICY_UPDATE, id="R-VAL-6-built-at-2-pow-53-minus-1-accepted"),
        pytest.param(0, id="R-VAL-6-built-at-zero-accepted"),
    ],
)
def test_build_receipt_at_policy_update_bounds(policy_update: int) -> None:
    receipt = _receipt(certificate=None, policy_update=policy_update)
    validate_receipt(receipt)
    assert receipt.policy_update == policy_update


def test_build_receipt_refuses_policy_update_2_pow_53() -> None:
    with pytest.raises(ValidationError, match=r"2\^53"):
        _receipt(certificate=None, policy_update=MAX_POLICY_UPDATE + 1)


# --------------------------------------------------------------------------- validate_descriptor

DESCRIPTOR_REFUSED = [
    pytest.param(
        _set("episode_id", "../../etc/passwd"), "episode_id", id="R-MSG-10-episode-id-path-refused"
    ),
    pytest.param(
        _set("episode_id", "a/b/c/d/e/f"), "episode_id", id="R-MSG-10-episode-id-slashes-refused"
    ),
    pytest.param(
        _set("episode_id", "x" * 129), "episode_id", id="R-MSG-10-episode-id-129-chars-refused"
    ),
    pytest.param(
        _set("episode_id", "abcdefg"), "episode_id", id="R-MSG-10-episode-id-7-chars-refused"
    ),
    pytest.param(
        _set("episode_id", "épisode-0001"), "episode_id", id="R-MSG-10-episode-id-unicode-refused"
    ),
    pytest.param(_set("episode_id", ""), "episode_id", id="R-MSG-10-episode-id-empty-refused"),
    pytest.param(
        _set("episode_id", "episode-0001\n"),
        "episode_id",
        id="R-MSG-10-episode-id-trailing-newline-refused",
    ),
    pytest.param(
        _set("policy_checkpoint_id", "ckpt/../../x"),
        "policy_checkpoint_id",
        id="R-MSG-10-checkpoint-id-path-refused",
    ),
    pytest.param(
        _set("policy_checkpoint_id", ""),
        "policy_checkpoint_id",
        id="R-MSG-10-checkpoint-id-empty-refused",
    ),
    pytest.param(
        _set("policy_update", -1), "policy_update", id="R-VAL-6-policy-update-negative-refused"
    ),
    pytest.param(
        _set("policy_update", MAX_POLICY_UPDATE + 1),
        r"policy_update must be in 0..2\^53-1",
        id="R-VAL-6-policy-update-2-pow-53-refused",
    ),
    pytest.param(
        _set("reward_contract_digest", ""),
        "reward_contract_digest",
        id="R-MSG-9-contract-digest-empty-refused",
    ),
    pytest.param(
        _set("reward_contract_digest", "sha256:" + "A" * 64),
        "reward_contract_digest",
        id="R-MSG-9-contract-digest-uppercase-refused",
    ),
    pytest.param(_set("task_id", "task"), "task_id", id="R-MSG-10-task-id-short-refused"),
    pytest.param(_set("task_id", ""), "task_id", id="R-MSG-10-task-id-present-but-empty-refused"),
    pytest.param(
        _set("environment_id", "env/../../x"),
        "environment_id",
        id="R-MSG-10-environment-id-path-refused",
    ),
    pytest.param(
        _set("runtime_signal", RuntimeSignal.RUNTIME_SIGNAL_UNSPECIFIED),
        "runtime_signal must be a known value other than UNSPECIFIED",
        id="R-MSG-6-runtime-signal-explicit-unspecified-refused",
    ),
    pytest.param(
        _set("runtime_signal", 42), "runtime_signal", id="R-MSG-6-runtime-signal-unknown-refused"
    ),
    pytest.param(
        _identity({"patient_id": ""}),
        "oracle_identity.patient_id must be 1-256 characters",
        id="R-W-2-identity-empty-value-refused",
    ),
    pytest.param(
        _identity({"patient_id": "p" * 257}),
        "oracle_identity.patient_id must be 1-256",
        id="R-W-2-identity-257-char-value-refused",
    ),
    pytest.param(
        _identity({"patient id": "patient-0001"}),
        "oracle_identity key 'patient id'",
        id="R-W-2-identity-key-with-space-refused",
    ),
    pytest.param(
        _identity({"": "patient-0001"}),
        "oracle_identity key ''",
        id="R-W-2-identity-key-empty-refused",
    ),
    pytest.param(_metadata({"score": math.nan}), "metadata", id="R-MSG-9-metadata-nan-refused"),
    pytest.param(_metadata({"score": math.inf}), "metadata", id="R-MSG-9-metadata-inf-refused"),
    pytest.param(
        _metadata({"Prompt": "hi"}),
        "metadata.Prompt names record contents",
        id="R-MSG-9-metadata-key-case-insensitive-refused",
    ),
    pytest.param(
        _metadata({"extra": {"screenshot": "x"}}),
        "metadata.extra.screenshot names record contents",
        id="R-MSG-9-metadata-key-nested-in-dict-refused",
    ),
    pytest.param(
        _metadata({"items": [{"phi": "x"}]}),
        r"metadata.items\[0\].phi names record contents",
        id="R-MSG-9-metadata-key-nested-in-list-refused",
    ),
    pytest.param(
        _metadata({"a": {"b": [1, {"c": {"url": "https://x"}}]}}),
        r"metadata.a.b\[1\].c.url",
        id="R-MSG-9-metadata-key-deeply-nested-refused",
    ),
    pytest.param(
        _metadata({"a": [[{"records": []}]]}),
        r"metadata.a\[0\]\[0\].records",
        id="R-MSG-9-metadata-key-in-nested-lists-refused",
    ),
    pytest.param(
        _metadata({"note": None}),
        "metadata.note",
        id="R-MSG-9-metadata-key-with-null-value-refused",
    ),
]

TOP_LEVEL_FORBIDDEN = [
    pytest.param(key, id=f"R-MSG-9-metadata-{key}-refused")
    for key in ("screenshot", "prompt", "completion", "note", "records", "phi", "url")
] + [
    pytest.param(key, id=f"R-MSG-9-metadata-{key}-refused")
    for key in sorted(FORBIDDEN_METADATA_KEYS)
    if key not in {"screenshot", "prompt", "completion", "note", "records", "phi", "url"}
]

DESCRIPTOR_ACCEPTED = [
    pytest.param(_noop, id="R-MSG-9-base-descriptor-accepted"),
    pytest.param(_clear("runtime_signal"), id="R-MSG-9-runtime-signal-absent-accepted"),
    pytest.param(
        _set("task_id", "mockmed.task.create-triage-encounter"), id="R-MSG-9-task-id-accepted"
    ),
    pytest.param(
        _set("environment_id", "mockmed.environment.synthetic-emr"),
        id="R-MSG-9-environment-id-accepted",
    ),
    pytest.param(_set("episode_id", "e" * 8), id="R-MSG-10-episode-id-8-chars-accepted"),
    pytest.param(_set("episode_id", "e" * 128), id="R-MSG-10-episode-id-128-chars-accepted"),
    pytest.param(_set("policy_update", 0), id="R-VAL-6-policy-update-zero-accepted"),
    pytest.param(
        _set("policy_update", MAX_POLICY_UPDATE),
        id="R-VAL-6-policy-update-2-pow-53-minus-1-accepted",
    ),
    pytest.param(_identity({}), id="R-W-2-identity-absent-accepted-by-shape-check"),
    pytest.param(_identity({"patient_id": "p" * 256}), id="R-W-2-identity-256-char-value-accepted"),
    pytest.param(_metadata({}), id="R-MSG-9-empty-metadata-accepted"),
    pytest.param(_clear("metadata"), id="R-MSG-9-metadata-absent-accepted"),
    pytest.param(
        _metadata({"oracle_identity": {"patient_id": "patient-0001"}}),
        id="R-W-2-metadata-oracle-identity-accepted",
    ),
    pytest.param(
        _metadata(
            {
                "group_uid": "g",
                "sample_index": 3,
                "dataset": {"split": "train", "row_index": 4},
                "tags": ["a", "b"],
                "flag": True,
                "nothing": None,
            }
        ),
        id="R-MSG-9-allowed-keys-accepted",
    ),
    pytest.param(
        _metadata({"kind": "prompt", "fields": ["note", "url"]}),
        id="R-MSG-9-forbidden-words-as-values-accepted",
    ),
    pytest.param(
        _metadata({"prompt_id": "p-1", "screenshot_count": 0, "url_env": "X"}),
        id="R-MSG-9-keys-containing-forbidden-words-accepted",
    ),
]


@pytest.mark.parametrize(("mutation", "match"), DESCRIPTOR_REFUSED)
def test_validate_descriptor_refuses_as_invalid_episode(mutation: Mutation, match: str) -> None:
    error = _refuses(validate_descriptor, _mutated(_descriptor(), mutation), InvalidEpisode, match)
    assert error.reason == "invalid_episode"
    assert error.code == Code.INVALID_ARGUMENT


@pytest.mark.parametrize("key", TOP_LEVEL_FORBIDDEN)
def test_validate_descriptor_refuses_forbidden_metadata_key(key: str) -> None:
    for document, path in (
        ({key: "x"}, f"metadata.{key}"),
        ({"outer": {key: "x"}}, f"metadata.outer.{key}"),
        ({"outer": [{key: "x"}]}, rf"metadata.outer\[0\].{key}"),
    ):
        descriptor = _mutated(_descriptor(), _metadata(document))
        error = _refuses(validate_descriptor, descriptor, InvalidEpisode, path)
        assert error.reason == "invalid_episode"


def _nested(depth: int, *, in_lists: bool = False) -> EpisodeDescriptor:
    """A descriptor whose metadata is ``depth`` levels deep (the metadata object is level 1),
    built level by level through the protobuf API (no recursion, any depth)."""
    descriptor = _descriptor()
    node: Struct | ListValue = descriptor.metadata
    for level in range(2, depth + 1):
        value = node.fields["k"] if isinstance(node, Struct) else node.values.add()
        node = value.list_value if in_lists and level % 2 else value.struct_value
    if isinstance(node, Struct):
        node.fields["leaf"].number_value = 1
    else:
        node.values.add().number_value = 1
    return descriptor


@pytest.mark.parametrize("in_lists", [False, True], ids=["objects", "objects-and-lists"])
def test_metadata_depth_is_bounded_without_recursion(in_lists: bool) -> None:
    validate_descriptor(_nested(MAX_METADATA_DEPTH, in_lists=in_lists))
    for depth in (MAX_METADATA_DEPTH + 1, 1_000, 20_000):  # 20,000: past any recursion limit
        error = _refuses(
            validate_descriptor,
            _nested(depth, in_lists=in_lists),
            InvalidEpisode,
            f"metadata nests deeper than {MAX_METADATA_DEPTH} levels",
        )
        assert error.reason == "invalid_episode"
        assert len(error.message) < 200


def test_metadata_number_without_json_form_is_refused_in_a_list() -> None:
    descriptor = _descriptor()
    descriptor.metadata.fields["xs"].list_value.values.add().number_value = math.inf
    _refuses(validate_descriptor, descriptor, InvalidEpisode, "no JSON form")


@pytest.mark.parametrize(
    "signal",
    [
        pytest.param(value, id=f"R-MSG-9-runtime-signal-{RuntimeSignal.Name(value)}-accepted")
        for value in RuntimeSignal.values()
        if value != RuntimeSignal.RUNTIME_SIGNAL_UNSPECIFIED
    ],
)
def test_validate_descriptor_accepts_every_runtime_signal(signal: int) -> None:
    validate_descriptor(_mutated(_descriptor(), _set("runtime_signal", signal)))


@pytest.mark.parametrize("mutation", DESCRIPTOR_ACCEPTED)
def test_validate_descriptor_accepts(mutation: Mutation) -> None:
    validate_descriptor(_mutated(_descriptor(), mutation))


# --------------------------------------------------------------------------- calibration summary

SUMMARY_REFUSED = [
    pytest.param(
        _set("reward_contract_digest", ""),
        "reward_contract_digest",
        id="R-CAL-2-contract-digest-refused",
    ),
    pytest.param(
        _set("calibration_corpus_digest", "sha256:"),
        "calibration_corpus_digest",
        id="R-CAL-2-corpus-digest-refused",
    ),
    pytest.param(
        _set("checker_configuration_digest", "x"),
        "checker_configuration_digest",
        id="R-CAL-2-checker-digest-refused",
    ),
    pytest.param(_set("trials", 0), "at least one trial", id="R-CAL-2-zero-trials-refused"),
    pytest.param(
        _set("false_accepts", 301),
        "false_accepts cannot exceed trials",
        id="R-CAL-2-false-accepts-above-trials-refused",
    ),
    pytest.param(
        _fault_class(0, trials=49),
        "fault class trials must add up to trials",
        id="R-CAL-2-class-trials-sum-mismatch-refused",
    ),
    pytest.param(
        _fault_class(1, false_accepts=1),
        "fault class false accepts must add up",
        id="R-CAL-2-class-false-accepts-sum-mismatch-refused",
    ),
    pytest.param(
        _fault_class(0, benign=3),
        "fault class benign draws must add up to benign_trials",
        id="R-CAL-7-class-benign-sum-mismatch-refused",
    ),
    pytest.param(
        _chain(_set("rejected_trials", 2), _fault_class(1, rejected=1)),
        "fault class rejected draws must add up to rejected_trials",
        id="R-CAL-7-class-rejected-sum-mismatch-refused",
    ),
    pytest.param(
        _chain(_fault_class(0, trials=0), _fault_class(1, trials=100)),
        "fault class 'extra_record' false_accepts cannot exceed its trials",
        id="R-CAL-2-class-false-accepts-above-class-trials-refused",
    ),
    pytest.param(
        _set("confidence", 0.0),
        r"confidence must be in \(0, 1\)",
        id="R-CAL-1-confidence-zero-refused",
    ),
    pytest.param(
        _set("confidence", 1.0),
        r"confidence must be in \(0, 1\)",
        id="R-CAL-1-confidence-one-refused",
    ),
    pytest.param(_set("confidence", math.nan), "confidence", id="R-CAL-1-confidence-nan-refused"),
    pytest.param(
        _set("threshold", math.inf), "threshold must be finite", id="R-VAL-6-threshold-inf-refused"
    ),
    pytest.param(
        _set("gold_trials", 0),
        r"gold control trial \(R-CAL-3\)",
        id="R-CAL-3-no-gold-trial-refused",
    ),
    pytest.param(
        _set("gold_refused", 1),
        r"gold control trial was not judged VERIFIED \(R-CAL-3\)",
        id="R-CAL-3-gold-refused-refused",
    ),
]

SUMMARY_ACCEPTED = [
    pytest.param(_noop, id="R-CAL-2-summary-with-fault-classes-accepted"),
    pytest.param(
        _chain(
            _set("benign_trials", 5),
            _set("rejected_trials", 2),
            _fault_class(0, benign=4, rejected=2),
            _fault_class(1, benign=1),
        ),
        id="R-CAL-7-benign-and-rejected-counted-apart-accepted",
    ),
    pytest.param(
        _chain(_clear("fault_classes"), _set("false_accepts", 0)),
        id="R-CAL-2-no-fault-classes-accepted",
    ),
    pytest.param(
        _chain(_clear("fault_classes"), _set("false_accepts", 300)),
        id="R-CAL-1-k-equals-n-accepted",
    ),
    pytest.param(
        _chain(_clear("fault_classes"), _set("trials", 1), _set("false_accepts", 0)),
        id="R-CAL-2-single-trial-accepted",
    ),
    pytest.param(_set("confidence", 0.999), id="R-CAL-1-confidence-0.999-accepted"),
    pytest.param(_set("held_out", False), id="R-CAL-2-not-held-out-accepted-by-validator"),
]


@pytest.mark.parametrize(("mutation", "match"), SUMMARY_REFUSED)
def test_validate_calibration_summary_refuses(mutation: Mutation, match: str) -> None:
    _refuses(validate_calibration_summary, _mutated(_summary(), mutation), ValidationError, match)


@pytest.mark.parametrize("mutation", SUMMARY_ACCEPTED)
def test_validate_calibration_summary_accepts(mutation: Mutation) -> None:
    validate_calibration_summary(_mutated(_summary(), mutation))


# --------------------------------------------------------------------------- parse_strict


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _len_field(number: int, payload: bytes) -> bytes:
    """A length-delimited (wire type 2) field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _varint_field(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


EXECUTION_ID = _len_field(99, b"execution_id")


def _envelope() -> SignedEnvelope:
    return sign_envelope(
        "application/vnd.rewardseal.receipt.v1+protobuf", _receipt().SerializeToString(), KEY
    )


CLEAN_MESSAGES: dict[str, Callable[[], Message]] = {
    "receipt": _receipt,
    "certificate": _base_certificate,
    "contract": mockmed_contract,
    "descriptor": _descriptor,
    "summary": _summary,
    "envelope": _envelope,
}


@pytest.mark.parametrize(
    "name", [pytest.param(name, id=f"R-MSG-7-clean-{name}-parses") for name in CLEAN_MESSAGES]
)
def test_parse_strict_accepts_clean_payloads(name: str) -> None:
    message = CLEAN_MESSAGES[name]()
    parsed = parse_strict(type(message), message.SerializeToString())
    assert parsed == message
    assert type(parsed) is type(message)


def test_parse_strict_clean_receipt_still_validates() -> None:
    parsed = parse_strict(RewardEvidenceReceipt, _receipt().SerializeToString())
    validate_receipt(parsed)


STRICT_REFUSED = [
    pytest.param(
        "receipt",
        EXECUTION_ID,
        r"^RewardEvidenceReceipt carries fields",
        id="R-MSG-7-receipt-execution-id-field-99-refused",
    ),
    pytest.param(
        "receipt",
        _len_field(100, b"workflow_digest"),
        "RewardEvidenceReceipt carries fields",
        id="R-MSG-7-receipt-workflow-digest-field-100-refused",
    ),
    pytest.param(
        "receipt",
        _varint_field(99, 1),
        "RewardEvidenceReceipt carries fields",
        id="R-MSG-7-receipt-unknown-varint-refused",
    ),
    pytest.param(
        "receipt",
        _varint_field(1, 7),
        "RewardEvidenceReceipt carries fields",
        id="R-MSG-7-receipt-known-field-wrong-wire-type-refused",
    ),
    pytest.param(
        "receipt",
        _len_field(22, EXECUTION_ID),
        r"RewardEvidenceReceipt.issued_at carries fields",
        id="R-MSG-7-receipt-unknown-field-in-timestamp-refused",
    ),
    pytest.param(
        "receipt",
        _len_field(9, _len_field(1, b"x") + b"\x11" + b"\x00" * 8 + EXECUTION_ID),
        "carries fields this schema does not know",
        id="R-MSG-7-receipt-unknown-field-in-map-entry-refused",
    ),
    pytest.param(
        "certificate",
        _len_field(99, b"qualification_id"),
        "RewardCertificate carries fields",
        id="R-MSG-4-certificate-unknown-field-refused",
    ),
    pytest.param(
        "contract",
        EXECUTION_ID,
        "RewardContract carries fields",
        id="R-MSG-1-contract-unknown-field-refused",
    ),
    pytest.param(
        "contract",
        _len_field(10, _len_field(1, b"extra") + EXECUTION_ID),
        r"RewardContract.components\[1\] carries fields",
        id="R-MSG-1-contract-unknown-field-in-repeated-refused",
    ),
    pytest.param(
        "contract",
        _len_field(12, EXECUTION_ID),
        "RewardContract.certificate_policy carries fields",
        id="R-MSG-1-contract-unknown-field-in-nested-refused",
    ),
    pytest.param(
        "descriptor",
        EXECUTION_ID,
        "EpisodeDescriptor carries fields",
        id="R-MSG-9-descriptor-unknown-field-refused",
    ),
    pytest.param(
        "descriptor",
        _len_field(
            9,
            _len_field(1, _len_field(1, b"k") + _len_field(2, _len_field(3, b"v") + EXECUTION_ID)),
        ),
        "carries fields this schema does not know",
        id="R-MSG-9-descriptor-unknown-field-in-metadata-value-refused",
    ),
    pytest.param(
        "summary",
        EXECUTION_ID,
        "CalibrationSummary carries fields",
        id="R-CAL-2-summary-unknown-field-refused",
    ),
    pytest.param(
        "summary",
        _len_field(6, _len_field(1, b"x") + EXECUTION_ID),
        r"CalibrationSummary.fault_classes\[6\] carries fields",
        id="R-CAL-2-summary-unknown-field-in-fault-class-refused",
    ),
    pytest.param(
        "envelope",
        _len_field(99, b"execute_seal=true"),
        "SignedEnvelope carries fields",
        id="R-MSG-8-envelope-unknown-field-refused",
    ),
    pytest.param(
        "envelope",
        _len_field(3, _len_field(1, b"k") + EXECUTION_ID),
        r"SignedEnvelope.signatures\[1\] carries fields",
        id="R-MSG-8-envelope-unknown-field-in-signature-refused",
    ),
]


@pytest.mark.parametrize(("name", "appended", "match"), STRICT_REFUSED)
def test_parse_strict_refuses_unknown_fields(name: str, appended: bytes, match: str) -> None:
    message = CLEAN_MESSAGES[name]()
    data = message.SerializeToString() + appended
    # The lenient parser takes these bytes: only parse_strict notices what it would drop.
    type(message)().ParseFromString(data)
    _refuses(lambda d: parse_strict(type(message), d), data, ValidationError, match)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"\x0a\x20receipt", id="R-MSG-7-truncated-string-refused"),
        pytest.param(
            b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", id="R-MSG-7-bad-varint-refused"
        ),
        pytest.param(b"\x07", id="R-MSG-7-invalid-wire-type-refused"),
    ],
)
def test_parse_strict_refuses_undecodable_bytes(data: bytes) -> None:
    _refuses(
        lambda d: parse_strict(RewardEvidenceReceipt, d),
        data,
        ValidationError,
        "payload is not a valid RewardEvidenceReceipt",
    )
