"""The oracle reader protocol and the recipe checks every kind shares (R-W-6).

An oracle recipe is a JSON document in a contract bundle that says how to read the system of
record (SoR). It carries no credentials: a database URL, an API base URL or a bearer token comes
from an environment variable the recipe names (``url_env``, ``base_url_env``, ``token_env``), read
when the reader is made. Relative paths resolve against the
bundle directory and absolute paths are refused, so the recipe digest never depends on where a
bundle happens to sit.

Recipe problems are :class:`rewardseal.core.errors.ValidationError` (the bundle is wrong). A SoR
that cannot be read is :class:`OracleUnavailable`, which is an *outcome* (FAILED_PLATFORM,
ORACLE_UNAVAILABLE), never an RPC error.

The readers (:mod:`.sql`, :mod:`.files`, :mod:`.http`) build on this module; which reader a
kind gets, and the full check of a recipe, are :mod:`rewardseal_worker.oracles.registry`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, Protocol

from rewardseal.core.errors import IdentityMismatch, ValidationError
from rewardseal.core.judging import EFFECT_NAME_PATTERN, IDENTIFIER_PATTERN, RECORD_ID_FIELD

HTTP_ENV_NAME_PATTERN = re.compile(r"^[A-Z_][A-Z0-9_]{0,127}\Z")
"""Variables named by ``*_env`` credential keys: conventional upper-case names only, so that a
token pasted where its variable's name belongs is refused (and never echoed in a message)."""
QUERY_PARAM_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]{0,63}\Z")
"""Query parameter names an HTTP recipe may send identity values in (FHIR allows ``:`` and ``.``
modifiers, e.g. ``subject:Patient``)."""

KIND_SQL = "sql"
KIND_JSON_FILE = "json_file"
KIND_SCREEN_DUMP = "screen_dump"
KIND_REST = "rest"
KIND_FHIR = "fhir"
HTTP_KINDS = frozenset({KIND_REST, KIND_FHIR})
RESERVED_KINDS: frozenset[str] = frozenset()
"""Kinds docs/spec.md R-W-6 names that this worker cannot read yet (none left)."""

DEFAULT_TIMEOUT_SECONDS = 2.0
MAX_TIMEOUT_SECONDS = 300.0
MAX_RECORDS = 10_000
"""Most records one identity may have in one read; more means the recipe selects too widely."""

_CREDENTIAL_WORDS = (
    "password",
    "passwd",
    "secret",
    "token",
    "credential",
    "dsn",
    "api_key",
    "apikey",
    "private_key",
    "authorization",
    "bearer",
)
_ENV_REFERENCE_SUFFIX = "_env"
"""A key ending in this names an environment variable (a reference, not a credential)."""
_URL_KEYS = frozenset({"url", "uri", "connection_string", "conninfo"})

_COMMON_KEYS = frozenset({"kind", "identity_fields", "timeout_seconds"})
_HTTP_KEYS = frozenset({"kind", "identity_params", "timeout_seconds", "base_url_env", "token_env"})
RECIPE_KEYS: Mapping[str, frozenset[str]] = {
    KIND_SQL: _COMMON_KEYS | {"database", "table", "id_column"},
    KIND_JSON_FILE: _COMMON_KEYS | {"path", "collection"},
    KIND_SCREEN_DUMP: _COMMON_KEYS | {"path", "collection"},
    KIND_REST: _HTTP_KEYS | {"path", "collection"},
    KIND_FHIR: _HTTP_KEYS | {"resource", "path"},
}
"""The keys each readable kind accepts; anything else is refused, not ignored."""


class OracleUnavailable(Exception):
    """The SoR could not be read (unreachable, timed out, malformed).

    The message never holds record contents, identity values or a database URL.
    """


class OracleReader(Protocol):
    """Reads the records of one identity from the SoR.

    ``read`` is blocking; callers run it in a thread and may also bound it by
    ``timeout_seconds``. It raises :class:`OracleUnavailable` for any I/O or database error.
    """

    kind: str
    timeout_seconds: float
    local: bool
    """Reads a file on this host, with no network round trip to wait for: the worker may run
    small batches, reads included, on its event loop (rewardseal_worker.engine.INLINE_BATCH)."""

    def read(self, identity: Mapping[str, str]) -> list[dict[str, Any]]:
        """Every record of ``identity``: a string ``"id"`` plus field -> JSON scalar."""
        ...

    def read_many(
        self, identities: Sequence[Mapping[str, str]]
    ) -> list[list[dict[str, Any]] | OracleUnavailable]:
        """``read`` for each identity, in order; a failed read yields its error, not a raise.

        Readers may answer a whole batch with one round trip; the result must equal reading
        each identity on its own.
        """
        ...

    def close(self) -> None:
        """Release connections and files; the reader is not used afterwards."""
        ...


def read_each(
    reader: OracleReader, identities: Sequence[Mapping[str, str]]
) -> list[list[dict[str, Any]] | OracleUnavailable]:
    """``read_many`` for readers with no batched read: one ``read`` per identity."""
    results: list[list[dict[str, Any]] | OracleUnavailable] = []
    for identity in identities:
        try:
            results.append(reader.read(identity))
        except OracleUnavailable as exc:
            results.append(exc)
    return results


def _walk(value: Any, path: str) -> Iterable[tuple[str, Any, str]]:
    if isinstance(value, Mapping):
        for key, inner in value.items():
            where = f"{path}.{key}" if path else str(key)
            yield str(key), inner, where
            yield from _walk(inner, where)
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _walk(inner, f"{path}[{index}]")


def check_no_credentials(recipe: Mapping[str, Any]) -> None:
    """Refuse a recipe that carries, or looks like it carries, a credential (R-W-6).

    Messages name the offending key, never its value.
    """
    for key, value, where in _walk(recipe, ""):
        lowered = key.lower()
        stem = lowered.removesuffix(_ENV_REFERENCE_SUFFIX)
        if stem != lowered and stem and any(word in stem for word in _CREDENTIAL_WORDS):
            # ``token_env`` names a variable. Its value must look like a variable name (upper
            # case, see HTTP_ENV_NAME_PATTERN), so a pasted secret is refused, never echoed.
            if not isinstance(value, str) or not HTTP_ENV_NAME_PATTERN.match(value):
                raise ValidationError(
                    f"oracle recipe key {where!r} must name an environment variable "
                    "(upper-case letters, digits, underscores); recipes carry no credentials"
                )
            continue
        if any(word in lowered for word in _CREDENTIAL_WORDS) or lowered in _URL_KEYS:
            raise ValidationError(
                f"oracle recipe key {where!r} looks like a credential; recipes carry no "
                "credentials, name an environment variable with 'url_env' instead"
            )
        if isinstance(value, str) and ("://" in value or value.lower().startswith("bearer ")):
            raise ValidationError(
                f"oracle recipe value at {where!r} looks like a URL; recipes carry no "
                "credentials, name an environment variable with 'url_env' instead"
            )


def check_identifier(value: Any, where: str) -> str:
    """Return ``value`` if it is a safe table/column/collection name, else ValidationError."""
    if not isinstance(value, str) or not IDENTIFIER_PATTERN.match(value):
        raise ValidationError(f"oracle recipe {where} must match {IDENTIFIER_PATTERN.pattern}")
    return value


def recipe_timeout(recipe: Mapping[str, Any]) -> float:
    """The recipe's ``timeout_seconds`` (default 2.0), checked to be in (0, 300]."""
    raw = recipe.get("timeout_seconds", DEFAULT_TIMEOUT_SECONDS)
    if (
        isinstance(raw, bool)
        or not isinstance(raw, int | float)
        or not math.isfinite(raw)
        or not 0 < raw <= MAX_TIMEOUT_SECONDS
    ):
        raise ValidationError(
            f"oracle recipe timeout_seconds must be a number in (0, {MAX_TIMEOUT_SECONDS:g}]"
        )
    return float(raw)


def recipe_identity_fields(recipe: Mapping[str, Any]) -> dict[str, str]:
    """Contract identity key -> column/field name (``identity_fields``), or -> query parameter
    name for the HTTP kinds (``identity_params``)."""
    http = recipe.get("kind") in HTTP_KINDS
    name = "identity_params" if http else "identity_fields"
    raw = recipe.get(name)
    if not isinstance(raw, Mapping) or not raw:
        raise ValidationError(f"oracle recipe {name} must be a non-empty JSON object")
    fields: dict[str, str] = {}
    for key, column in raw.items():
        if not isinstance(key, str) or not EFFECT_NAME_PATTERN.match(key):
            raise ValidationError(f"oracle recipe {name} key {key!r} is not a valid name")
        if http:
            if not isinstance(column, str) or not QUERY_PARAM_PATTERN.match(column):
                raise ValidationError(
                    f"oracle recipe {name}.{key} must match {QUERY_PARAM_PATTERN.pattern}"
                )
            fields[key] = column
        else:
            fields[key] = check_identifier(column, f"{name}.{key}")
    return fields


FHIR_RESOURCE_COLLECTIONS: Mapping[str, str] = {"Encounter": "encounters"}
"""FHIR resource types the fhir reader maps to records, and the collection each one fills."""


def recipe_collection(recipe: Mapping[str, Any]) -> str:
    """The table (sql), collection (json_file, screen_dump, rest) or the collection of the FHIR
    resource (fhir) the recipe reads."""
    kind = recipe.get("kind")
    if kind == KIND_FHIR:
        resource = recipe.get("resource")
        if not isinstance(resource, str) or resource not in FHIR_RESOURCE_COLLECTIONS:
            raise ValidationError(
                f"oracle recipe resource must be one of {sorted(FHIR_RESOURCE_COLLECTIONS)}"
            )
        return FHIR_RESOURCE_COLLECTIONS[resource]
    field = "table" if kind == KIND_SQL else "collection"
    return check_identifier(recipe.get(field), field)


def check_relative_path(raw: Any, where: str) -> str:
    """Return ``raw`` if it is a non-empty relative path; absolute paths are refused.

    An absolute path would tie the recipe (and so its digest) to one host's layout.
    """
    if not isinstance(raw, str) or not raw or "\x00" in raw:
        raise ValidationError(f"oracle recipe {where} must be a non-empty relative path")
    if PurePosixPath(raw).is_absolute() or PureWindowsPath(raw).is_absolute() or "\\" in raw:
        raise ValidationError(f"oracle recipe {where} must be relative to the bundle directory")
    return raw


def resolve_relative(raw: Any, bundle_dir: Path, where: str) -> Path:
    """Resolve a relative recipe path against the bundle directory (see check_relative_path)."""
    return (bundle_dir / check_relative_path(raw, where)).resolve()


def check_identity(identity: Mapping[str, str], identity_fields: Mapping[str, str]) -> None:
    """Refuse an identity whose keys differ from the recipe's identity_fields (R-W-2)."""
    if set(identity) != set(identity_fields):
        raise IdentityMismatch(
            f"identity keys {sorted(identity)} differ from the oracle's {sorted(identity_fields)}"
        )
    for key, value in identity.items():
        if not isinstance(value, str) or not value:
            raise IdentityMismatch(f"identity value for {key!r} must be a non-empty string")


def check_recipe_shape(recipe: Mapping[str, Any]) -> str:
    """The checks every kind shares, without touching the SoR or the environment; return the
    kind. Each reader adds its own kind's checks (:mod:`rewardseal_worker.oracles.registry`).

    Raises:
        ValidationError: credentials, unknown or reserved kind, unknown keys, bad identifiers,
            collection or timeout.
    """
    if not isinstance(recipe, Mapping):
        raise ValidationError("an oracle recipe must be a JSON object")
    # Credentials first: their message must win over "unknown key".
    check_no_credentials(recipe)
    kind = recipe.get("kind")
    if kind in RESERVED_KINDS:
        raise ValidationError(f"oracle kind {kind!r} is not available yet")
    if not isinstance(kind, str) or kind not in RECIPE_KEYS:
        raise ValidationError(
            f"oracle recipe kind must be one of {sorted(RECIPE_KEYS)}, got {kind!r}"
        )
    unknown = set(recipe) - RECIPE_KEYS[kind]
    if unknown:
        raise ValidationError(f"oracle recipe of kind {kind!r} has unknown keys {sorted(unknown)}")
    recipe_timeout(recipe)
    recipe_identity_fields(recipe)
    recipe_collection(recipe)
    return kind


def make_record(fields: Mapping[str, Any], id_field: str, source: str) -> dict[str, Any]:
    """A record from raw fields: ``"id"`` as a string, other fields as JSON scalars.

    Raises:
        OracleUnavailable: when the id is missing or a value is not a JSON scalar; the message
            names the source and the field, never a value.
    """
    raw_id = fields.get(id_field)
    if raw_id is None or isinstance(raw_id, bool) or not isinstance(raw_id, str | int):
        raise OracleUnavailable(f"{source}: a record has no usable {id_field!r}")
    record: dict[str, Any] = {RECORD_ID_FIELD: str(raw_id)}
    for field, value in fields.items():
        if field == id_field:
            continue
        if field == RECORD_ID_FIELD:
            # The record's "id" key is reserved for the id column; a second "id" would be lost.
            raise OracleUnavailable(f"{source}: a field named 'id' besides the id field")
        if value is not None and not isinstance(value, str | int | float | bool):
            raise OracleUnavailable(f"{source}: field {field!r} is not a JSON scalar")
        if isinstance(value, float) and not math.isfinite(value):
            raise OracleUnavailable(f"{source}: field {field!r} is not a finite number")
        record[str(field)] = value
    return record
