"""The shipped JSON Schemas: valid schemas, found in the installed package, and problems that
name every place at once without echoing the values found there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

import rewardseal
from rewardseal.core.errors import ValidationError
from rewardseal.core.json_schemas import ACTION_REPORT_SCHEMA, check, load_schema, schema_problems

SECRET = "patient-secret-0001"


def test_every_shipped_schema_is_a_valid_2020_12_schema() -> None:
    shipped = Path(rewardseal.__path__[0]) / "schemas"
    names = sorted(path.name for path in shipped.glob("*.schema.json"))
    assert ACTION_REPORT_SCHEMA in names
    for name in names:
        Draft202012Validator.check_schema(load_schema(name))
        assert json.loads((shipped / name).read_text()) == load_schema(name)


def test_every_problem_of_a_report_is_named_at_once_by_place() -> None:
    report = {
        "actions": [
            {"op": "create", "collection": "encounters", "fields": {"patient_id": 7}},
            {"op": "update", "collection": "", "fields": {"id": SECRET}},
        ],
        "submitted": "yes",
        "evidence": {"tier": 9},
        "extra": SECRET,
    }
    problems = schema_problems(report, ACTION_REPORT_SCHEMA, root="action report")
    assert problems == [
        "action report has unknown keys ['extra']",
        "actions[0].fields.patient_id must be a string",
        "actions[1].collection must not be empty",
        "actions[1].fields has a field name that is empty or 'id' (the store mints ids)",
        "actions[1].op must be one of ['create']",
        "evidence.tier must be in 0..3",
        "submitted must be true or false",
    ]
    with pytest.raises(ValidationError) as caught:
        check(report, ACTION_REPORT_SCHEMA)
    assert SECRET not in caught.value.message


def test_a_conforming_report_has_no_problems() -> None:
    report = {
        "actions": [{"op": "create", "collection": "tickets", "fields": {"queue": "billing"}}],
        "submitted": True,
        "halted": False,
        "evidence": {"tier": 0, "screen_text": "Saved"},
        "claim": None,
    }
    assert schema_problems(report, ACTION_REPORT_SCHEMA) == []
