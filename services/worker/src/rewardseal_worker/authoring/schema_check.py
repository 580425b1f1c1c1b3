"""The JSON Schemas of the bundle files, shipped with the worker, and the check that uses them.

``schemas/*.schema.json`` describe the shape of each file a bundle holds; editors that speak
JSON Schema can use them while the author types. ``contract check`` reports every place a file
breaks its schema beside the loader's own problems. A message names the file, the place and the
rule, never the value found there (a recipe value may be a pasted secret); the wording is the
one :mod:`rewardseal.core.json_schemas` gives every shipped schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from rewardseal.core import json_schemas, strict_json
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


def load_schema(name: str) -> dict[str, Any]:
    """The schema ``name`` (e.g. ``"effects.schema.json"``) shipped in this package."""
    return json_schemas.load_schema(name, __package__)


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
        found = json_schemas.schema_problems(document, schema, package=__package__)
        problems += [f"{name}: {problem} (schema)" for problem in found]
    return problems
