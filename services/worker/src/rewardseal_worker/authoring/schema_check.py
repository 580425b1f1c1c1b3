"""The JSON Schemas of the bundle files, shipped with the worker, and the check that uses them.

``schemas/*.schema.json`` describe the shape of each file a bundle holds; editors that speak
JSON Schema can use them while the author types. ``contract check`` reports every place a file
breaks its schema beside the loader's own problems. A message names the file, the place and the
rule, never the value found there (a recipe value may be a pasted secret).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Final

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError as SchemaError

from rewardseal import strict_json
from rewardseal_worker.bundle import (
    CALIBRATION_FILE,
    CERTIFICATE_FILE,
    CONTRACT_FILE,
    FORBIDDEN_EFFECTS_FILE,
    ORACLE_RECIPE_FILE,
    REQUIRED_EFFECTS_FILE,
)

__all__ = ["SCHEMA_FILES", "load_schema", "schema_problems"]

SCHEMA_FILES: Final[Mapping[str, str]] = {
    CONTRACT_FILE: "contract.schema.json",
    REQUIRED_EFFECTS_FILE: "effects.schema.json",
    FORBIDDEN_EFFECTS_FILE: "effects.schema.json",
    ORACLE_RECIPE_FILE: "oracle_recipe.schema.json",
    CERTIFICATE_FILE: "certificate.schema.json",
    CALIBRATION_FILE: "calibration.schema.json",
}
"""Bundle file -> the schema (package data of this package) it is checked against."""


@cache
def load_schema(name: str) -> dict[str, Any]:
    """The schema ``name`` (e.g. ``"effects.schema.json"``) shipped in this package."""
    text = resources.files(__package__).joinpath("schemas", name).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@cache
def _validator(name: str) -> Draft202012Validator:
    schema = load_schema(name)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def _where(error: SchemaError) -> str:
    parts = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return parts.lstrip(".") or "(top level)"


def _describe(error: SchemaError) -> str:
    """The rule broken, in words, without the value that broke it."""
    rule, wanted, instance = error.validator, error.validator_value, error.instance
    schema = error.schema if isinstance(error.schema, Mapping) else {}
    if rule == "additionalProperties" and isinstance(instance, Mapping):
        allowed = set(schema.get("properties", {}))
        extra = sorted(str(k) for k in instance if k not in allowed)
        return f"unknown keys {extra}"
    if rule == "required" and isinstance(instance, Mapping) and isinstance(wanted, list):
        missing = [k for k in wanted if k not in instance]
        return f"missing required keys {missing}"
    if rule == "type":
        return f"must be of JSON type {wanted}"
    if rule == "enum":
        return f"must be one of {wanted}"
    if rule == "const":
        return f"must be {wanted!r}"
    if rule == "pattern":
        return f"must match the pattern {wanted}"
    if rule in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        return f"breaks {rule} {wanted}"
    if rule in ("minItems", "maxItems", "minProperties", "maxProperties", "minLength"):
        return f"breaks {rule} {wanted}"
    if rule == "uniqueItems":
        return "must not repeat an item"
    return f"breaks the schema's {rule!r} rule"


def schema_problems(directory: Path) -> list[str]:
    """Every place a bundle file in ``directory`` breaks its schema, in file order.

    A file that is missing or not JSON is skipped: the loader reports it.
    """
    problems: list[str] = []
    for name, schema in SCHEMA_FILES.items():
        try:
            document = strict_json.loads((directory / name).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            continue
        errors = sorted(
            _validator(schema).iter_errors(document), key=lambda e: [str(p) for p in e.path]
        )
        problems += [f"{name}: {_where(e)}: {_describe(e)} (schema)" for e in errors]
    return problems
