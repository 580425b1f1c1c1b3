"""Which reader reads which kind of recipe: the full recipe check and the reader factory (R-W-6).

This module sits above the readers: it imports :mod:`.sql`, :mod:`.files` and :mod:`.http`,
which import only :mod:`.base`, so no module of the package imports one that imports it back.
A new kind is one entry of :data:`READER_KINDS` (and its keys in
:data:`~rewardseal_worker.oracles.base.RECIPE_KEYS`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from rewardseal_worker.oracles.base import (
    KIND_FHIR,
    KIND_JSON_FILE,
    KIND_REST,
    KIND_SCREEN_DUMP,
    KIND_SQL,
    OracleReader,
    check_recipe_shape,
)
from rewardseal_worker.oracles.files import JsonFileReader, check_file_recipe
from rewardseal_worker.oracles.http import HttpReader, check_http_recipe
from rewardseal_worker.oracles.sql import SqlReader, check_sql_recipe

Recipe = Mapping[str, Any]


@dataclass(frozen=True)
class ReaderKind:
    """How one kind of recipe is checked and read."""

    check: Callable[[Recipe], None]
    """The kind's own checks, run after :func:`~.base.check_recipe_shape`."""
    make: Callable[[Recipe, Path, Mapping[str, str]], OracleReader]
    """Make the reader from a checked recipe, the bundle directory and the environment."""


def _sql(recipe: Recipe, bundle_dir: Path, environ: Mapping[str, str]) -> OracleReader:
    return SqlReader.from_recipe(recipe, bundle_dir, environ=environ)


def _file(recipe: Recipe, bundle_dir: Path, environ: Mapping[str, str]) -> OracleReader:
    return JsonFileReader.from_recipe(recipe, bundle_dir)


def _http(recipe: Recipe, bundle_dir: Path, environ: Mapping[str, str]) -> OracleReader:
    return HttpReader.from_recipe(recipe, environ=environ)


READER_KINDS: Mapping[str, ReaderKind] = MappingProxyType(
    {
        KIND_SQL: ReaderKind(check_sql_recipe, _sql),
        KIND_JSON_FILE: ReaderKind(check_file_recipe, _file),
        KIND_SCREEN_DUMP: ReaderKind(check_file_recipe, _file),
        KIND_REST: ReaderKind(check_http_recipe, _http),
        KIND_FHIR: ReaderKind(check_http_recipe, _http),
    }
)
"""Every kind this worker reads, with its checks and its reader."""


def validate_recipe(recipe: Recipe) -> str:
    """Check a recipe's shape without touching the SoR or the environment; return its kind.

    Raises:
        ValidationError: credentials, unknown or reserved kind, unknown keys, bad identifiers,
            paths or timeout.
    """
    kind = check_recipe_shape(recipe)
    READER_KINDS[kind].check(recipe)
    return kind


def make_reader(recipe: Recipe, bundle_dir: Path) -> OracleReader:
    """Make the reader a recipe describes; relative paths resolve against ``bundle_dir``.

    An environment variable named by ``url_env`` is read here, once.

    Raises:
        ValidationError: for any recipe problem or a missing environment variable (named, its
            value never shown).
    """
    kind = validate_recipe(recipe)
    return READER_KINDS[kind].make(recipe, bundle_dir, os.environ)
