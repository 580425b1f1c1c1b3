"""The JSON Schemas shipped in this package (``rewardseal/core/schemas/``) and the one check that
applies them, with problems worded for people.

A format that has a schema here is checked by that schema and nothing else: the schema is the
rule, and a parser builds its values from what passed. :data:`ACTION_REPORT_SCHEMA` is the
action report an episode actor executes (docs/trainers.md).

A problem names the place (``actions[2].fields``) and the rule, never the value found there: a
field value may be a patient's data or a pasted secret.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any, Final

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError as SchemaError

from rewardseal.core.errors import ValidationError

__all__ = ["ACTION_REPORT_SCHEMA", "check", "load_schema", "schema_problems"]

ACTION_REPORT_SCHEMA: Final = "action-report.schema.json"
"""The action report (what a policy says it did; executed by an episode actor)."""

_TYPE_WORDS: Final = {
    "boolean": "true or false",
    "string": "a string",
    "object": "an object",
    "array": "a list",
    "integer": "an integer",
    "number": "a number",
}
_REFUSAL: Final = "x-refusal"
"""A schema node's own words for its refusal, where the rule alone would read poorly."""


@cache
def load_schema(name: str, package: str = "rewardseal") -> dict[str, Any]:
    """The schema ``name`` (e.g. :data:`ACTION_REPORT_SCHEMA`) shipped in ``package``'s
    ``schemas/`` folder (this package's by default; the worker ships its bundle schemas)."""
    text = resources.files(package).joinpath("schemas").joinpath(name).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@cache
def _validator(name: str, package: str) -> Draft202012Validator:
    schema = load_schema(name, package)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _plain(value: Any) -> Any:
    """``value`` with every Mapping a dict and every tuple a list: Python callers hand in any
    Mapping, which JSON Schema's "object" (a dict) would refuse."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def _where(error: SchemaError, root: str) -> str:
    parts = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return parts.lstrip(".") or root


def _rule(error: SchemaError) -> str:
    """The rule broken, in words, without the value that broke it."""
    rule, wanted, instance = error.validator, error.validator_value, error.instance
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    if _REFUSAL in schema:
        return str(schema[_REFUSAL])
    if rule == "type":
        kinds = wanted if isinstance(wanted, list) else [wanted]
        return "must be " + " or ".join(_TYPE_WORDS.get(str(kind), str(kind)) for kind in kinds)
    if rule == "additionalProperties" and isinstance(instance, Mapping):
        known = set(schema.get("properties", {}))
        return f"has unknown keys {sorted(str(key) for key in instance if key not in known)}"
    if rule == "required" and isinstance(instance, Mapping) and isinstance(wanted, list):
        return f"lacks {[key for key in wanted if key not in instance]}"
    if rule == "enum":
        return f"must be one of {wanted}"
    if rule == "const":
        return f"must be {wanted!r}"
    if rule == "pattern":
        return f"must match the pattern {wanted}"
    if rule == "maxItems":
        return f"may carry at most {wanted} items"
    if rule == "minLength":
        return "must not be empty"
    if rule == "uniqueItems":
        return "must not repeat an item"
    if rule in ("minimum", "maximum"):
        return f"must be in {schema.get('minimum')}..{schema.get('maximum')}"
    if rule in ("exclusiveMinimum", "exclusiveMaximum", "minItems", "minProperties"):
        return f"breaks {rule} {wanted}"
    return f"breaks the schema's {rule!r} rule"


def schema_problems(
    instance: Any, name: str, *, root: str = "(top level)", package: str = "rewardseal"
) -> list[str]:
    """Every way ``instance`` breaks the schema ``name`` shipped in ``package``, in document
    order; empty when it conforms. ``root`` names the whole document in a problem about it."""
    errors = sorted(
        _validator(name, package).iter_errors(_plain(instance)),
        key=lambda e: list(map(str, e.path)),
    )
    return [f"{_where(error, root)} {_rule(error)}" for error in errors]


def check(instance: Any, name: str, *, root: str = "(top level)") -> None:
    """Refuse ``instance`` unless it conforms to the shipped schema ``name``.

    Raises:
        ValidationError: naming every problem (:func:`schema_problems`).
    """
    problems = schema_problems(instance, name, root=root)
    if problems:
        raise ValidationError("; ".join(problems))
