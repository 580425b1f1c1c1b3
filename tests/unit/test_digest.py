"""Digests and canonical JSON (R-DIG-1, R-DIG-2, R-MSG-1, R-MSG-2).

A digest is ``"sha256:" + 64 lowercase hex`` over the RFC 8785 canonical JSON of the proto3 JSON
mapping. The contract digest covers the normalized contract: identity keys and components sorted,
scoring defaults made explicit. It never depends on where or when a contract was loaded.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import rfc8785
from google.protobuf import json_format
from hypothesis import given, settings
from hypothesis import strategies as st
from support.builders import make_certificate

from rewardseal.core.contract import (
    SCORING_DEFAULTS,
    certificate_digest,
    contract_digest,
    normalize_contract,
)
from rewardseal.core.digest import (
    canonical_bytes,
    canonical_json,
    canonical_string,
    digest_bytes,
    digest_json,
    is_digest,
)
from rewardseal.core.errors import ValidationError
from rewardseal.v1.contract_pb2 import RewardComponent, RewardContract
from rewardseal.v1.enums_pb2 import OracleChannel, TaskParameterType
from rewardseal_mockmed.contract import CORPUS_DIGEST, mockmed_contract

DIGEST_RE = re.compile(r"\Asha256:[0-9a-f]{64}\Z")


# ---------------------------------------------------------------------------------------------
# Format and canonical JSON (R-DIG-1)
# ---------------------------------------------------------------------------------------------


def test_digest_bytes_known_answer():
    empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert digest_bytes(b"") == "sha256:" + empty
    assert digest_bytes(b"abc") == "sha256:" + hashlib.sha256(b"abc").hexdigest()


def test_digest_json_hashes_the_canonical_bytes():
    document = {"z": [1, 2.5, "x"], "a": {"c": None, "b": False}}
    assert digest_json(document) == "sha256:" + hashlib.sha256(canonical_json(document)).hexdigest()


@pytest.mark.parametrize(
    "make_digest",
    [
        pytest.param(lambda: digest_bytes(b"\x00\xff"), id="R-DIG-1-bytes-well-formed"),
        pytest.param(lambda: digest_json({"a": 1}), id="R-DIG-1-json-well-formed"),
        pytest.param(lambda: digest_json(mockmed_contract()), id="R-DIG-1-message-well-formed"),
        pytest.param(
            lambda: contract_digest(mockmed_contract()), id="R-DIG-2-contract-well-formed"
        ),
        pytest.param(
            lambda: certificate_digest(make_certificate()), id="R-DIG-2-certificate-well-formed"
        ),
    ],
)
def test_digest_format(make_digest: Callable[[], str]):
    digest = make_digest()
    assert DIGEST_RE.match(digest)
    assert len(digest) == len("sha256:") + 64
    assert is_digest(digest)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("sha256:" + "A" * 64, id="R-DIG-1-uppercase-hex-not-a-digest"),
        pytest.param("sha256:" + "a" * 63, id="R-DIG-1-63-hex-not-a-digest"),
        pytest.param("sha256:" + "a" * 65, id="R-DIG-1-65-hex-not-a-digest"),
        pytest.param("sha512:" + "a" * 64, id="R-DIG-1-other-algorithm-not-a-digest"),
        pytest.param("a" * 64, id="R-DIG-1-no-prefix-not-a-digest"),
        pytest.param("sha256:" + "g" * 64, id="R-DIG-1-non-hex-not-a-digest"),
        pytest.param("sha256:" + "a" * 64 + "\n", id="R-DIG-1-trailing-newline-not-a-digest"),
        pytest.param(" sha256:" + "a" * 64, id="R-DIG-1-leading-space-not-a-digest"),
        pytest.param("", id="R-DIG-1-empty-not-a-digest"),
    ],
)
def test_malformed_digest_is_not_a_digest(value):
    assert is_digest(value) is False


CANONICAL_CASES = [
    pytest.param(
        {"b": 1.0, "a": [True, None, "x"]},
        b'{"a":[true,null,"x"],"b":1}',
        id="R-DIG-1-known-answer",
    ),
    pytest.param({"b": 1, "a": 2, "c": 3}, b'{"a":2,"b":1,"c":3}', id="R-DIG-1-keys-sorted"),
    pytest.param(
        {"outer": {"z": 1, "y": {"b": 2, "a": 1}}},
        b'{"outer":{"y":{"a":1,"b":2},"z":1}}',
        id="R-DIG-1-nested-keys-sorted",
    ),
    pytest.param({"a": [1, 2], "b": "x y"}, b'{"a":[1,2],"b":"x y"}', id="R-DIG-1-no-whitespace"),
    pytest.param(1.0, b"1", id="R-DIG-1-float-1.0-is-1"),
    pytest.param(-0.0, b"0", id="R-DIG-1-negative-zero-is-0"),
    pytest.param(0.5, b"0.5", id="R-DIG-1-float-0.5-is-0.5"),
    pytest.param(1e21, b"1e+21", id="R-DIG-1-float-1e21-exponent-form"),
    pytest.param("é", '"é"'.encode(), id="R-DIG-1-non-ascii-is-utf8-not-escaped"),
]


@pytest.mark.parametrize(("value", "expected"), CANONICAL_CASES)
def test_canonical_json_is_rfc8785(value, expected):
    assert canonical_json(value) == expected


def test_canonical_json_of_a_message_uses_original_field_names():
    text = canonical_json(mockmed_contract()).decode()
    assert '"contract_id":' in text
    assert '"identity_keys":' in text
    assert "contractId" not in text
    assert " " not in text  # no whitespace between tokens
    assert "\n" not in text


def test_canonical_json_is_the_same_for_equal_documents_in_any_key_order():
    forward = {"a": 1, "b": {"c": 2, "d": [3, 4]}}
    backward = {"b": {"d": [3, 4], "c": 2}, "a": 1}
    assert canonical_json(forward) == canonical_json(backward)
    assert digest_json(forward) == digest_json(backward)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(math.nan, id="R-DIG-1-nan-raises"),
        pytest.param(math.inf, id="R-DIG-1-inf-raises"),
        pytest.param(-math.inf, id="R-DIG-1-minus-inf-raises"),
        pytest.param({"weight": math.nan}, id="R-DIG-1-nested-nan-raises"),
        pytest.param([1.0, math.inf], id="R-DIG-1-inf-in-list-raises"),
        pytest.param(2**60, id="R-DIG-1-integer-beyond-2^53-raises"),
    ],
)
def test_value_without_canonical_form_raises(value):
    with pytest.raises(ValidationError, match="canonical"):
        canonical_json(value)
    with pytest.raises(ValidationError):
        digest_json(value)


# ---------------------------------------------------------------------------------------------
# Contract normalization (R-MSG-1, R-MSG-2, R-DIG-2)
# ---------------------------------------------------------------------------------------------


def three_component_contract(order: list[tuple[str, float]], keys: list[str]) -> RewardContract:
    contract = mockmed_contract()
    del contract.components[:]
    contract.components.extend(RewardComponent(name=n, weight=w) for n, w in order)
    del contract.oracle.identity_keys[:]
    contract.oracle.identity_keys.extend(keys)
    return contract


COMPONENTS = [("alpha", 1.0), ("beta", 2.0), ("gamma", 0.5)]


def test_digest_is_independent_of_component_and_identity_key_order():
    forward = three_component_contract(COMPONENTS, ["patient_id", "clinic_id", "visit_id"])
    backward = three_component_contract(
        [COMPONENTS[2], COMPONENTS[0], COMPONENTS[1]], ["visit_id", "patient_id", "clinic_id"]
    )
    assert forward != backward  # different as written
    assert contract_digest(forward) == contract_digest(backward)
    assert normalize_contract(forward) == normalize_contract(backward)


def test_normalization_sorts_by_name():
    contract = three_component_contract(
        [COMPONENTS[2], COMPONENTS[1], COMPONENTS[0]], ["visit_id", "clinic_id"]
    )
    normalized = normalize_contract(contract)
    assert [c.name for c in normalized.components] == ["alpha", "beta", "gamma"]
    assert [c.weight for c in normalized.components] == [1.0, 2.0, 0.5]  # weights travel along
    assert list(normalized.oracle.identity_keys) == ["clinic_id", "visit_id"]


def test_normalization_makes_every_scoring_default_explicit():
    contract = mockmed_contract()
    contract.ClearField("scoring_policy")
    normalized = normalize_contract(contract)
    for name, default in SCORING_DEFAULTS.items():
        assert normalized.scoring_policy.HasField(name)
        assert getattr(normalized.scoring_policy, name) == default


def test_normalize_contract_does_not_mutate_its_input():
    contract = three_component_contract(
        [COMPONENTS[2], COMPONENTS[0], COMPONENTS[1]], ["visit_id", "patient_id"]
    )
    contract.ClearField("scoring_policy")
    before = contract.SerializeToString(deterministic=True)
    normalize_contract(contract)
    contract_digest(contract)
    assert contract.SerializeToString(deterministic=True) == before
    assert [c.name for c in contract.components] == ["gamma", "alpha", "beta"]
    assert list(contract.oracle.identity_keys) == ["visit_id", "patient_id"]
    assert not contract.HasField("scoring_policy")


def test_normalization_is_idempotent():
    contract = three_component_contract(COMPONENTS[::-1], ["b_key", "a_key"])
    once = normalize_contract(contract)
    assert normalize_contract(once) == once
    assert contract_digest(once) == contract_digest(contract)


def unset_policy_contract() -> RewardContract:
    contract = mockmed_contract()
    contract.ClearField("scoring_policy")
    return contract


@pytest.mark.parametrize(
    ("field", "value", "same"),
    [
        pytest.param("verified_reward", 1.0, True, id="R-MSG-2-verified-1.0-explicit-same-digest"),
        pytest.param(
            "halted_before_effect_reward", 0.0, True, id="R-MSG-2-halted-0.0-explicit-same-digest"
        ),
        pytest.param("refused_reward", 0.0, True, id="R-MSG-2-refused-0.0-explicit-same-digest"),
        pytest.param(
            "rejected_policy_reward", 0.0, True, id="R-MSG-2-rejected-0.0-explicit-same-digest"
        ),
        pytest.param(
            "wrong_effect_reward", -1.0, True, id="R-MSG-2-wrong-effect-minus-1-explicit-same"
        ),
        pytest.param(
            "wrong_effect_reward", 0.0, False, id="R-MSG-2-wrong-effect-0.0-explicit-differs"
        ),
        pytest.param("verified_reward", 2.0, False, id="R-MSG-2-verified-2.0-differs"),
        pytest.param("refused_reward", -0.5, False, id="R-MSG-2-refused-minus-0.5-differs"),
    ],
)
def test_explicit_scoring_value_versus_unset(field, value, same):
    unset = unset_policy_contract()
    explicit = unset_policy_contract()
    setattr(explicit.scoring_policy, field, value)
    assert explicit.scoring_policy.HasField(field)
    assert (contract_digest(explicit) == contract_digest(unset)) is same


def test_present_but_empty_scoring_policy_equals_absent_policy():
    absent = unset_policy_contract()
    empty = unset_policy_contract()
    empty.scoring_policy.SetInParent()
    assert empty.HasField("scoring_policy")
    assert contract_digest(empty) == contract_digest(absent)


def _set(path: str, value: object) -> Callable[[RewardContract], None]:
    def mutate(contract: RewardContract) -> None:
        *parents, leaf = path.split(".")
        target = contract
        for parent in parents:
            target = getattr(target, parent)
        setattr(target, leaf, value)

    return mutate


def _add_identity_key(contract: RewardContract) -> None:
    contract.oracle.identity_keys.append("clinic_id")


def _rename_identity_key(contract: RewardContract) -> None:
    contract.oracle.identity_keys[0] = "person_id"


def _rename_component(contract: RewardContract) -> None:
    contract.components[0].name = "triage_encounter_written"


def _reweigh_component(contract: RewardContract) -> None:
    contract.components[0].weight = 2.0


def _add_component(contract: RewardContract) -> None:
    contract.components.add(name="note_present", weight=1.0)


def _add_parameter(contract: RewardContract) -> None:
    contract.task_parameters.add(
        name="note", type=TaskParameterType.TASK_PARAMETER_TYPE_STRING, max_length=64
    )


def _bound_parameter(contract: RewardContract) -> None:
    _add_parameter(contract)
    contract.task_parameters[0].max_length = 65


OTHER_DIGEST = "sha256:" + "9" * 64

# (top-level field, what changes, mutation)
SINGLE_FIELD_CHANGES: list[tuple[str, str, Callable[[RewardContract], None]]] = [
    ("contract_id", "contract_id", _set("contract_id", "mockmed.other-contract")),
    ("contract_version", "contract_version", _set("contract_version", "2")),
    ("task_id", "task_id", _set("task_id", "mockmed.task.other")),
    ("task_digest", "task_digest", _set("task_digest", OTHER_DIGEST)),
    ("environment_id", "environment_id", _set("environment_id", "mockmed.environment.other")),
    ("environment_digest", "environment_digest", _set("environment_digest", OTHER_DIGEST)),
    (
        "required_effects_digest",
        "required_effects_digest",
        _set("required_effects_digest", OTHER_DIGEST),
    ),
    (
        "forbidden_effects_digest",
        "forbidden_effects_digest",
        _set("forbidden_effects_digest", OTHER_DIGEST),
    ),
    ("oracle", "oracle.channel", _set("oracle.channel", OracleChannel.ORACLE_CHANNEL_API)),
    ("oracle", "oracle.identity_keys-added", _add_identity_key),
    ("oracle", "oracle.identity_keys-renamed", _rename_identity_key),
    (
        "oracle",
        "oracle.oracle_recipe_digest",
        _set("oracle.oracle_recipe_digest", OTHER_DIGEST),
    ),
    ("components", "components-renamed", _rename_component),
    ("components", "components-weight", _reweigh_component),
    ("components", "components-added", _add_component),
    (
        "scoring_policy",
        "scoring.verified_reward",
        _set("scoring_policy.verified_reward", 0.5),
    ),
    (
        "scoring_policy",
        "scoring.halted_before_effect_reward",
        _set("scoring_policy.halted_before_effect_reward", -0.1),
    ),
    ("scoring_policy", "scoring.refused_reward", _set("scoring_policy.refused_reward", -0.1)),
    (
        "scoring_policy",
        "scoring.rejected_policy_reward",
        _set("scoring_policy.rejected_policy_reward", -0.1),
    ),
    (
        "scoring_policy",
        "scoring.wrong_effect_reward",
        _set("scoring_policy.wrong_effect_reward", -1.0),
    ),
    (
        "certificate_policy",
        "certificate.max_epsilon",
        _set("certificate_policy.max_epsilon", 0.01),
    ),
    ("certificate_policy", "certificate.max_delta", _set("certificate_policy.max_delta", 0.01)),
    ("certificate_policy", "certificate.threshold", _set("certificate_policy.threshold", 0.75)),
    (
        "certificate_policy",
        "certificate.calibration_corpus_digest",
        _set("certificate_policy.calibration_corpus_digest", OTHER_DIGEST),
    ),
    (
        "certificate_policy",
        "certificate.max_expiry_policy_updates",
        _set("certificate_policy.max_expiry_policy_updates", 999),
    ),
    ("task_parameters", "task_parameters-added", _add_parameter),
]


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(mutate, id=f"R-DIG-2-{label}-changes-digest")
        for _, label, mutate in SINGLE_FIELD_CHANGES
    ],
)
def test_changing_any_single_contract_field_changes_the_digest(mutate):
    original = mockmed_contract()
    changed = mockmed_contract()
    mutate(changed)
    assert changed != original
    assert contract_digest(changed) != contract_digest(original)


def test_every_contract_field_is_covered_by_the_change_table():
    # A new field in the proto must get a row above (R-DIG-2: the digest covers everything).
    covered = {field for field, _, _ in SINGLE_FIELD_CHANGES}
    assert {f.name for f in RewardContract.DESCRIPTOR.fields} == covered


def test_task_parameter_bounds_and_order_enter_the_digest():
    # R-MSG-11: a bound is part of what the digest covers; the order an author wrote is not.
    one, two = mockmed_contract(), mockmed_contract()
    _add_parameter(one)
    _bound_parameter(two)
    assert contract_digest(one) != contract_digest(two)
    first, second = mockmed_contract(), mockmed_contract()
    for contract, names in ((first, ("a", "b")), (second, ("b", "a"))):
        for name in names:
            contract.task_parameters.add(
                name=name,
                type=TaskParameterType.TASK_PARAMETER_TYPE_STRING,
                max_length=8,
                allowed_values=["y", "x"] if name == "a" else ["x", "y"],
            )
    assert contract_digest(first) == contract_digest(second)


def test_mockmed_contract_policy_uses_the_published_corpus():
    assert mockmed_contract().certificate_policy.calibration_corpus_digest == CORPUS_DIGEST


# ---------------------------------------------------------------------------------------------
# Certificate digest (R-DIG-2)
# ---------------------------------------------------------------------------------------------


def test_certificate_digest_covers_the_signature():
    certificate = make_certificate()
    tampered = make_certificate()
    signature = bytearray(tampered.signature)
    signature[0] ^= 0x01
    tampered.signature = bytes(signature)
    assert certificate_digest(tampered) != certificate_digest(certificate)


def test_certificate_digest_differs_from_the_unsigned_body():
    certificate = make_certificate()
    unsigned = make_certificate()
    unsigned.ClearField("signature")
    assert certificate_digest(unsigned) != certificate_digest(certificate)


def test_certificate_digest_is_stable_across_rebuilds():
    # Ed25519 signatures are deterministic, so an equal certificate has an equal digest.
    assert certificate_digest(make_certificate()) == certificate_digest(make_certificate())


@pytest.mark.parametrize(
    "overrides",
    [
        pytest.param({"certificate_id": "cert.mockmed.0002"}, id="R-DIG-2-certificate_id"),
        pytest.param({"epsilon": 0.02}, id="R-DIG-2-epsilon"),
        pytest.param({"issued_at_policy_update": 101}, id="R-DIG-2-issued_at_policy_update"),
        pytest.param({"expiry_policy_updates": 51}, id="R-DIG-2-expiry_policy_updates"),
    ],
)
def test_certificate_digest_changes_with_a_signed_field(overrides):
    assert certificate_digest(make_certificate(**overrides)) != certificate_digest(
        make_certificate()
    )


# ---------------------------------------------------------------------------------------------
# Independence from file path, time and input field order (R-DIG-1)
# ---------------------------------------------------------------------------------------------


def test_digest_does_not_depend_on_file_path_time_or_field_order(tmp_path: Path):
    contract = mockmed_contract()
    expected = contract_digest(contract)

    first = tmp_path / "bundle-a" / "contract.json"
    second = tmp_path / "elsewhere" / "deeper" / "other-name.json"
    first.parent.mkdir(parents=True)
    second.parent.mkdir(parents=True)
    # Two spellings: original field names in proto order, and camelCase with keys reversed.
    first.write_text(json_format.MessageToJson(contract, preserving_proto_field_name=True))
    camel = json.loads(json_format.MessageToJson(contract))
    second.write_text(json.dumps(dict(reversed(list(camel.items()))), indent=4))
    os.utime(first, (1_000_000_000, 1_000_000_000))
    os.utime(second, (2_000_000_000, 2_000_000_000))

    parsed = [json_format.Parse(p.read_text(), RewardContract()) for p in (first, second)]
    assert [contract_digest(p) for p in parsed] == [expected, expected]


def test_digest_survives_a_binary_round_trip():
    contract = mockmed_contract()
    parsed = RewardContract()
    parsed.ParseFromString(contract.SerializeToString())
    assert contract_digest(parsed) == contract_digest(contract)


# --- The fast path of canonical_json agrees with RFC 8785 (rfc8785.dumps) ---

_json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1),
    st.text(),
)
_json_trees = st.recursive(
    _json_leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5), st.dictionaries(st.text(max_size=8), inner, max_size=5)
    ),
    max_leaves=30,
)


@given(_json_trees)
@settings(max_examples=300, deadline=None)
def test_fast_canonical_json_equals_rfc8785(value):
    try:
        expected = rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, UnicodeEncodeError):
        with pytest.raises(ValidationError):
            canonical_json(value)
        return
    assert canonical_json(value) == expected


@pytest.mark.parametrize(
    "value",
    [
        {"\U0001f600": 1, "\uffff": 2, "a": 3},  # astral key: UTF-16 order differs from code points
        {"a\U0001f600z": 1, "a\uffff": 2, "a\xe9": 3},  # astral code point inside a non-ASCII key
        {"x": 1.5, "y": [0.1, 1e21]},  # floats take the RFC 8785 path
        {"big": 2**60},  # outside the JSON-safe integers
    ],
    ids=["astral-keys", "astral-inside-key", "floats", "big-int"],
)
def test_values_outside_the_fast_path_still_canonical(value):
    try:
        expected = rfc8785.dumps(value)
    except rfc8785.CanonicalizationError:
        with pytest.raises(ValidationError):
            canonical_json(value)
        return
    assert canonical_json(value) == expected


# --- canonical_string: the string form callers that write canonical text themselves use ---


@given(st.text())
@settings(max_examples=300, deadline=None)
def test_canonical_string_equals_rfc8785(text):
    assert canonical_bytes(canonical_string(text)) == rfc8785.dumps(text)


@pytest.mark.parametrize(
    "text",
    ["\x00\x1f\x7f", '"\\/', "\u2028\u2029", "é\U0001f600", "\ud800"],
    ids=["controls", "quote-backslash-solidus", "line-separators", "non-ascii", "lone-surrogate"],
)
def test_canonical_string_edge_cases(text):
    try:
        expected = rfc8785.dumps(text)
    except (rfc8785.CanonicalizationError, UnicodeEncodeError):
        with pytest.raises(ValidationError, match="canonical"):
            canonical_bytes(canonical_string(text))
        return
    assert canonical_bytes(canonical_string(text)) == expected
