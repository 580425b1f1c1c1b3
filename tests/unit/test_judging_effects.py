"""Effect documents: parsing, refusal of bad shapes, and record matching."""

from __future__ import annotations

import copy

import pytest

from rewardseal.core.errors import ValidationError
from rewardseal.core.judging import (
    EffectSpec,
    IdentityRef,
    identity_equals,
    parse_effects,
    same_value,
)
from rewardseal_kit.mockmed import FORBIDDEN_EFFECTS, REQUIRED_EFFECTS

IDENTITY = {"patient_id": "p-001"}


def required_spec() -> EffectSpec:
    (spec,) = parse_effects(REQUIRED_EFFECTS)
    return spec


def test_parses_the_mockmed_required_document():
    spec = required_spec()
    assert spec.name == "triage_encounter_created"
    assert spec.collection == "encounters"
    assert spec.select == {"patient_id": IdentityRef("patient_id")}
    assert spec.expect == {"type": "Triage"}
    assert spec.new_records == 1
    # Every field a policy writes must be there; created_at is stamped by the system of record,
    # so a record may carry it although no policy writes it.
    assert spec.required_fields == frozenset({"patient_id", "type", "note", "status"})
    assert spec.allowed_fields == frozenset({"patient_id", "type", "note", "status", "created_at"})
    assert spec.identity_keys() == frozenset({"patient_id"})


def test_parses_the_mockmed_forbidden_document():
    (spec,) = parse_effects(FORBIDDEN_EFFECTS)
    assert spec.select == {"patient_id": IdentityRef("patient_id"), "priority": "stat"}
    assert spec.expect == {}
    assert spec.new_records is None
    assert spec.allowed_fields is None
    assert spec.required_fields == frozenset()
    assert spec.identity_keys() == frozenset({"patient_id"})


def test_spec_is_frozen():
    spec = required_spec()
    with pytest.raises(AttributeError):
        spec.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.select["x"] = "y"  # type: ignore[index]
    assert isinstance(spec.required_fields, frozenset)


def test_empty_effects_list_parses_to_nothing():
    assert parse_effects({"effects": []}) == ()


def test_matches_own_subject_only():
    spec = required_spec()
    assert spec.matches({"id": "e1", "patient_id": "p-001"}, IDENTITY)
    assert not spec.matches({"id": "e1", "patient_id": "p-002"}, IDENTITY)
    assert not spec.matches({"id": "e1"}, IDENTITY)
    assert not spec.matches({"id": "e1", "patient_id": None}, IDENTITY)


def test_identity_ref_to_an_absent_key_never_matches():
    # A caller that forgot the key must not widen the effect to every subject.
    assert not required_spec().matches({"id": "e1", "patient_id": "p-001"}, {})


def test_literal_select_values_must_match():
    (spec,) = parse_effects(FORBIDDEN_EFFECTS)
    assert spec.matches({"id": "e", "patient_id": "p-001", "priority": "stat"}, IDENTITY)
    assert not spec.matches({"id": "e", "patient_id": "p-001", "priority": "low"}, IDENTITY)
    assert not spec.matches({"id": "e", "patient_id": "p-001"}, IDENTITY)


@pytest.mark.parametrize(
    ("value", "wanted", "expected"),
    [
        ("p-001", "p-001", True),
        ("p-002", "p-001", False),
        (42, "42", True),
        (42, "042", False),
        (True, "1", False),
        (True, "True", False),
        (1.0, "1", False),
        (None, "1", False),
    ],
)
def test_identity_equals(value, wanted, expected):
    assert identity_equals(value, wanted) is expected


@pytest.mark.parametrize(
    ("actual", "expected", "same"),
    [
        ("Triage", "Triage", True),
        ("triage", "Triage", False),
        (1, 1.0, True),
        (True, 1, False),
        (1, True, False),
        (False, False, True),
        ("1", 1, False),
        (None, "x", False),
    ],
)
def test_same_value_is_type_aware(actual, expected, same):
    assert same_value(actual, expected) is same


def mutate(**changes):
    doc = copy.deepcopy(REQUIRED_EFFECTS)
    for key, value in changes.items():
        if value is ...:
            del doc["effects"][0][key]
        else:
            doc["effects"][0][key] = value
    return doc


BAD_DOCUMENTS = [
    pytest.param([], "JSON object", id="not-an-object"),
    pytest.param({"effects": {}}, "'effects' list", id="effects-not-a-list"),
    pytest.param({}, "'effects' list", id="no-effects-key"),
    pytest.param({"effects": [], "extra": 1}, "unknown keys", id="unknown-top-level-key"),
    pytest.param({"effects": ["x"]}, "JSON object", id="effect-not-an-object"),
    pytest.param(mutate(name="bad name"), "valid name", id="bad-name"),
    pytest.param(mutate(name=...), "valid name", id="no-name"),
    pytest.param(mutate(expects={"type": "Triage"}), "unknown keys", id="misspelt-key"),
    pytest.param(mutate(collection="enc; drop"), "collection", id="bad-collection"),
    pytest.param(mutate(select={}), "non-empty", id="empty-select"),
    pytest.param(mutate(select={"bad-field": "x"}), "field name", id="bad-select-field"),
    pytest.param(mutate(select={"patient_id": 7}), "string or", id="select-number"),
    pytest.param(
        mutate(select={"patient_id": {"identity": "patient_id", "x": 1}}),
        "string or",
        id="select-ref-extra-key",
    ),
    pytest.param(
        mutate(select={"patient_id": {"identity": "bad key"}}),
        "invalid identity key",
        id="select-ref-bad-key",
    ),
    pytest.param(mutate(expect=[]), "expect must be", id="expect-not-object"),
    pytest.param(mutate(expect={"type": None}), "string, number", id="expect-none"),
    pytest.param(mutate(expect={"type": {"a": 1}}), "string, number", id="expect-nested"),
    pytest.param(mutate(expect={"type": float("nan")}), "finite", id="expect-nan"),
    pytest.param(mutate(new_records=0), "new_records", id="new-records-zero"),
    pytest.param(mutate(new_records=True), "new_records", id="new-records-bool"),
    pytest.param(mutate(new_records="1"), "new_records", id="new-records-string"),
    pytest.param(mutate(allowed_fields="type"), "list", id="allowed-not-list"),
    pytest.param(mutate(allowed_fields=["type", "type", "patient_id"]), "unique", id="allowed-dup"),
    pytest.param(mutate(allowed_fields=["patient_id"]), "not in allowed", id="expect-disallowed"),
    pytest.param(mutate(allowed_fields=["type"]), "not in allowed", id="select-disallowed"),
    pytest.param(
        mutate(required_fields="note"), "required_fields must be a list", id="required-not-list"
    ),
    pytest.param(
        mutate(required_fields=None), "required_fields must be a list", id="required-null"
    ),
    pytest.param(
        mutate(required_fields={"note": True}),
        "required_fields must be a list",
        id="required-object",
    ),
    pytest.param(
        mutate(required_fields=["note", "note"]),
        "required_fields must be unique",
        id="required-dup",
    ),
    pytest.param(mutate(required_fields=["bad-field"]), "required_fields field", id="required-bad"),
    pytest.param(mutate(required_fields=[""]), "required_fields field", id="required-empty"),
    pytest.param(mutate(required_fields=[7]), "required_fields field", id="required-number"),
    pytest.param(mutate(required_fields=[None]), "required_fields field", id="required-none"),
    pytest.param(
        mutate(required_fields=["note", "priority"]),
        r"required fields \['priority'\] are not in allowed",
        id="required-disallowed",
    ),
    pytest.param(
        mutate(allowed_fields=["patient_id", "type", "status"]),
        r"\['note'\] are not in allowed",
        id="mockmed-required-note-disallowed",
    ),
    pytest.param(mutate(required_field=["note"]), "unknown keys", id="misspelt-required-key"),
    pytest.param(
        {"effects": [REQUIRED_EFFECTS["effects"][0], REQUIRED_EFFECTS["effects"][0]]},
        "unique",
        id="duplicate-names",
    ),
]


@pytest.mark.parametrize(("doc", "message"), BAD_DOCUMENTS)
def test_bad_documents_are_refused(doc, message):
    with pytest.raises(ValidationError, match=message):
        parse_effects(doc)


# --- required_fields ---


def test_required_fields_default_to_empty():
    (spec,) = parse_effects(mutate(required_fields=...))
    assert spec.required_fields == frozenset()
    (spec,) = parse_effects(mutate(required_fields=[]))
    assert spec.required_fields == frozenset()


def test_required_fields_within_allowed_fields_parse():
    (spec,) = parse_effects(mutate(required_fields=["note"]))
    assert spec.required_fields == frozenset({"note"})
    # A system-stamped field may be both allowed and required.
    (spec,) = parse_effects(mutate(required_fields=["note", "created_at"]))
    assert spec.required_fields == frozenset({"note", "created_at"})


def test_required_fields_without_allowed_fields_are_unconstrained():
    # With no allowed_fields every field is allowed, so any valid name may be required.
    (spec,) = parse_effects(mutate(allowed_fields=..., required_fields=["note", "ward"]))
    assert spec.allowed_fields is None
    assert spec.required_fields == frozenset({"note", "ward"})


def test_required_fields_need_not_repeat_select_or_expect():
    # Requiring a selected or expected field again is allowed (and redundant).
    (spec,) = parse_effects(mutate(required_fields=["patient_id", "type"]))
    assert spec.required_fields == frozenset({"patient_id", "type"})
