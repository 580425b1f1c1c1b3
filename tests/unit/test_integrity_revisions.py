"""Reward-system, protocol and profile revisions (R-I-1, R-I-4, R-I-7): validation blockers,
credential scrubbing, and content-digest ids (same content, same id; any change, a new one)."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.integrity_builders import CONTRACT_B, WORKER_2, spec

from rewardseal.core.digest import digest_json, is_digest
from rewardseal.core.errors import IntegritySpecInvalid
from rewardseal.core.integrity import (
    BUILTIN_PROFILES,
    BUILTIN_PROTOCOLS,
    DEFAULT_PROFILE,
    parse_profile,
    parse_protocol,
    parse_reward_system,
    scrub_credentials,
    validate_profile,
    validate_protocol,
    validate_reward_system,
)
from rewardseal.core.integrity.scrubbing import SCRUBBED

EXTERNAL = {"kind": "external", "fingerprints": {"implementation": "judge-llm-v3"}}


def diagnostic(n: int) -> dict[str, Any]:
    return {"kind": "external", "fingerprints": {"implementation": f"diagnostic-{n}"}}


# ---------------------------------------------------------------------------------------------
# Identity: the same content is one revision


def test_identical_specs_dedupe_to_one_revision() -> None:
    first, second = parse_reward_system(spec()), parse_reward_system(copy.deepcopy(spec()))
    assert first.revision_id == second.revision_id
    assert is_digest(first.revision_id)
    # The id is the R-DIG-1 digest of the normalized, scrubbed content.
    assert first.revision_id == digest_json(first.to_json())


def test_equivalent_spellings_are_the_same_revision() -> None:
    """Defaults made explicit, 0 vs 0.0, and the order of diagnostics do not make a new one."""
    terse = spec(diagnostics=[diagnostic(1), diagnostic(2)])
    spelled = spec(diagnostics=[diagnostic(2), diagnostic(1)])
    spelled["mapping"] = {
        "normalization": {"min": 0.0, "max": 1.0, "direction": "maximize"},
        "scale": 1,
        "center": 0,
        "threshold": 0.5,
        "failure_behavior": "reject",
    }
    assert parse_reward_system(terse).revision_id == parse_reward_system(spelled).revision_id


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d["mapping"].update(threshold=0.6),
        lambda d: d["mapping"]["normalization"].update(direction="minimize"),
        lambda d: d["mapping"].update(failure_behavior="abstain"),
        lambda d: d["optimizer"]["fingerprints"].update(artifact="model-sha"),
        lambda d: d["auditors"][0]["fingerprints"].update(implementation="recipe:rest"),
        lambda d: d["auditors"].append({**diagnostic(1), "role": "diagnostic"}),
    ],
)
def test_any_change_gives_a_new_revision(change: Any) -> None:
    changed = spec()
    change(changed)
    assert parse_reward_system(changed).revision_id != parse_reward_system(spec()).revision_id


def test_a_revision_cannot_be_updated() -> None:
    revision = parse_reward_system(spec())
    with pytest.raises(dataclasses.FrozenInstanceError):
        revision.mapping = revision.mapping  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        revision.mapping.threshold = 0.1  # type: ignore[misc]


@settings(max_examples=40, deadline=None)
@given(st.floats(min_value=0.0, max_value=1.0), st.floats(min_value=0.0, max_value=1.0))
def test_ids_are_equal_exactly_when_thresholds_are(left: float, right: float) -> None:
    ids = [parse_reward_system(spec(threshold=t)).revision_id for t in (left, right)]
    assert (ids[0] == ids[1]) == (left == right)


# ---------------------------------------------------------------------------------------------
# Credentials


def test_credentials_are_scrubbed_recursively_before_hashing() -> None:
    secret_bits = ["hunter2", "sk-live-123456", "tok_abcdef", "pa55word", "bearer-xyz-987"]
    sentinel = {
        "kind": "external",
        "fingerprints": {"implementation": "judge"},
        "parameters": {
            "endpoint": "https://svc:hunter2@judge.example/v1?api_key=sk-live-123456&model=m",
            "headers": {"Authorization": "Bearer tok_abcdef", "Accept": "application/json"},
            "nested": [{"database": {"user": "ro", "password": "pa55word"}}],
            "notes": "call with Bearer bearer-xyz-987",
        },
    }
    revision = parse_reward_system(spec(sentinel=sentinel))
    text = json.dumps(revision.to_json())
    for bit in secret_bits:
        assert bit not in text
    params = revision.primary_sentinel.parameters
    assert params["headers"] == {"Authorization": SCRUBBED, "Accept": "application/json"}
    assert params["nested"][0]["database"] == {"user": "ro", "password": SCRUBBED}
    assert params["endpoint"].startswith(f"https://{SCRUBBED}@judge.example/v1?")
    assert "model=m" in params["endpoint"]
    # A rotated credential is the same reward system.
    rotated = copy.deepcopy(sentinel)
    rotated["parameters"]["headers"]["Authorization"] = "Bearer another-token"
    rotated["parameters"]["nested"][0]["database"]["password"] = "new-password"
    assert parse_reward_system(spec(sentinel=rotated)).revision_id == revision.revision_id


def test_scrubbing_keeps_public_identifiers_and_never_mutates_its_input() -> None:
    doc = {"worker_key_id": "ed25519:sha256:ab", "seed": 42, "token_count": 5, "list": [1, 2.5]}
    before = copy.deepcopy(doc)
    scrubbed = scrub_credentials(doc)
    assert doc == before
    assert scrubbed["worker_key_id"] == "ed25519:sha256:ab"
    assert scrubbed["seed"] == 42
    assert scrubbed["token_count"] == SCRUBBED  # "token" is a credential word: erring safe
    assert scrubbed["list"] == [1, 2.5]


@settings(max_examples=60, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(
                st.sampled_from(["a", "password", "url", "X-Api-Key"]), inner, max_size=3
            )
        ),
        max_leaves=10,
    )
)
def test_scrubbing_is_idempotent(value: Any) -> None:
    once = scrub_credentials(value)
    assert scrub_credentials(once) == once


# ---------------------------------------------------------------------------------------------
# Blockers


def blockers_of(doc: dict[str, Any]) -> list[str]:
    found = validate_reward_system(doc)
    assert found == sorted(set(found))
    return found


def test_a_valid_spec_has_no_blockers() -> None:
    assert blockers_of(spec(diagnostics=[diagnostic(1), diagnostic(2), diagnostic(3)])) == []


def test_two_primary_sentinels_are_refused() -> None:
    doc = spec()
    doc["auditors"].append({**EXTERNAL, "role": "primary_sentinel"})
    assert "primary_sentinels_multiple" in blockers_of(doc)


def test_no_primary_sentinel_is_refused() -> None:
    doc = spec()
    doc["auditors"] = [{**EXTERNAL, "role": "diagnostic"}]
    assert "primary_sentinel_missing" in blockers_of(doc)


def test_four_diagnostics_are_refused() -> None:
    doc = spec(diagnostics=[diagnostic(n) for n in range(4)])
    assert blockers_of(doc) == ["diagnostic_auditors_over_limit"]


def test_a_duplicate_auditor_is_refused() -> None:
    same_worker = {
        "kind": "contract",
        "contract_digest": CONTRACT_B,
        "worker_key_id": WORKER_2,
        "fingerprints": {"implementation": "recipe:rest"},
    }
    doc = spec(diagnostics=[same_worker, {**same_worker, "label": "the same worker again"}])
    assert blockers_of(doc) == ["auditor_duplicate:auditors[2]"]


@pytest.mark.parametrize(("threshold", "refused"), [(1.5, True), (-0.1, True), (1.0, False)])
def test_a_threshold_outside_the_mapped_range_is_refused(threshold: float, refused: bool) -> None:
    assert ("threshold_outside_mapped_range" in blockers_of(spec(threshold=threshold))) is refused


def test_threshold_range_follows_scale_and_center() -> None:
    doc = spec(threshold=0.7)
    doc["mapping"].update(scale=0.5, center=0.25)  # mapped range [0.25, 0.75]
    assert blockers_of(doc) == []
    doc["mapping"]["threshold"] = 0.8
    assert blockers_of(doc) == ["threshold_outside_mapped_range"]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_inf_anywhere_are_refused(bad: float) -> None:
    doc = spec()
    doc["mapping"]["scale"] = bad
    doc["auditors"][0]["parameters"] = {"deep": [{"temperature": bad}]}
    found = blockers_of(doc)
    assert "not_finite:$.mapping.scale" in found
    assert "not_finite:$.auditors[0].parameters.deep[0].temperature" in found


def test_unknown_keys_and_bad_values_are_named() -> None:
    doc = spec()
    doc["extra"] = 1
    doc["optimizer"]["tokn"] = "typo"
    doc["mapping"]["normalization"]["direction"] = "upward"
    doc["auditors"][0]["worker_key_id"] = "not-a-key"
    assert blockers_of(doc) == [
        "invalid_value:auditors[0].worker_key_id",
        "invalid_value:mapping.normalization.direction",
        "unknown_key:extra",
        "unknown_key:optimizer.tokn",
    ]


def test_an_external_source_needs_its_implementation_fingerprint() -> None:
    doc = spec()
    doc["optimizer"] = {"kind": "external"}
    assert blockers_of(doc) == ["missing:optimizer.fingerprints.implementation"]


def test_a_refused_spec_raises_with_every_blocker() -> None:
    doc = spec(threshold=3.0, diagnostics=[diagnostic(n) for n in range(4)])
    with pytest.raises(IntegritySpecInvalid) as caught:
        parse_reward_system(doc)
    assert caught.value.metadata["blockers"] == (
        "diagnostic_auditors_over_limit,threshold_outside_mapped_range"
    )
    assert caught.value.code.name == "INVALID_ARGUMENT"


# ---------------------------------------------------------------------------------------------
# Protocols and profiles


def test_builtin_protocols_and_profiles_are_revisions_with_computed_ids() -> None:
    assert {p.core_size for p in BUILTIN_PROTOCOLS.values()} == {192, 384, None}
    assert BUILTIN_PROTOCOLS["balanced_256"].limit == 256
    assert BUILTIN_PROTOCOLS["broad_512"].limit == 512
    assert all(p.seed == 42 for p in BUILTIN_PROTOCOLS.values())
    for protocol in BUILTIN_PROTOCOLS.values():
        assert parse_protocol(protocol.to_json()) == protocol
        assert protocol.revision_id == digest_json(protocol.to_json())
    assert DEFAULT_PROFILE in BUILTIN_PROFILES
    assert BUILTIN_PROFILES["exploratory"].report_only
    for profile in BUILTIN_PROFILES.values():
        assert parse_profile(profile.to_json()) == profile
        assert profile.revision_id == digest_json(profile.to_json())
    ids = [r.revision_id for r in (*BUILTIN_PROTOCOLS.values(), *BUILTIN_PROFILES.values())]
    assert len(set(ids)) == len(ids)


def test_custom_protocols_are_validated_the_same_way() -> None:
    custom = {"name": "tiny_64", "seed": 7, "core_size": 48, "diagnostic_size": 16}
    assert validate_protocol(custom) == []
    assert parse_protocol(custom).revision_id != parse_protocol({**custom, "seed": 8}).revision_id
    bad = {"name": "Bad Name", "core_size": 0, "diagnostic_size": -1, "threshold_band": math.nan}
    assert validate_protocol(bad) == [
        "invalid_value:core_size",
        "invalid_value:diagnostic_size",
        "invalid_value:name",
        "invalid_value:threshold_band",
        "not_finite:$.threshold_band",
    ]
    with pytest.raises(IntegritySpecInvalid):
        parse_protocol({"name": "all", "core_size": None, "diagnostic_size": 5})


def test_custom_profiles_are_validated_the_same_way() -> None:
    custom = {"name": "mine", "thresholds": {"pass_agreement": {"min": 0.9}}}
    assert validate_profile(custom) == []
    assert parse_profile(custom).threshold("pass_agreement") is not None
    bad = {
        "name": "mine",
        "report_only": "yes",
        "thresholds": {"vibes": {"min": 1}, "coverage": {"min": 0.9, "max": 0.5, "avg": 1}},
    }
    assert validate_profile(bad) == [
        "empty_range:thresholds.coverage",
        "invalid_value:report_only",
        "unknown_key:thresholds.coverage.avg",
        "unknown_metric:thresholds.vibes",
    ]
