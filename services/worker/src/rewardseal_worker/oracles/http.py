"""The ``rest`` and ``fhir`` oracles: one reader for a system of record behind an HTTP API.

Recipes (tier 2, contract channel ``ORACLE_CHANNEL_API``)::

    {"kind": "rest", "base_url_env": "SOR_URL", "token_env": "SOR_TOKEN",
     "path": "/api/encounters", "collection": "encounters",
     "identity_params": {"patient_id": "patient_id"}, "timeout_seconds": 2.0}
    -> GET <base>/api/encounters?patient_id=P  ->  {"encounters": [record, ...]}

    {"kind": "fhir", "base_url_env": "SOR_URL", "token_env": "SOR_TOKEN",
     "resource": "Encounter", "path": "/fhir",
     "identity_params": {"patient_id": "patient"}, "timeout_seconds": 2.0}
    -> GET <base>/fhir/Encounter?patient=P  ->  FHIR R4 searchset Bundle of Encounters

``identity_params`` maps each contract identity key to the query parameter that carries its value;
values are sent as encoded query parameters, never spliced into the path. ``path`` is fixed by the
recipe (for fhir it is the FHIR service base path, default ``/fhir``). ``token_env`` is optional;
when present the variable must be set and its value is sent as ``Authorization: Bearer``.

No literal URL in a recipe: the base URL always comes from ``base_url_env``. A literal URL (even a
loopback one) would tie the recipe digest to one host and port, and a URL can carry credentials in
its user info or query; the environment keeps both out of the bundle, as relative paths keep the
host's layout out (R-W-6). The base URL must be ``http``/``https`` without user info, query or
fragment; the environment's proxy and ``.netrc`` settings are not used (``trust_env=False``) and
redirects are not followed, so the token goes to that host only.

Both kinds share one class: only the request path and the decoding of the answer differ. Any
transport error, timeout, non-2xx status, body that is not JSON or has the wrong shape, or a
paged FHIR result is :class:`OracleUnavailable`; messages name the kind, the recipe path and the
error class, never the base URL, the token, identity values or record contents.

The FHIR -> record mapping (the inverse of MockMed's, written here: the worker does not depend on
MockMed): ``id``; ``subject.reference`` ``Patient/<id>`` -> ``patient_id``; ``type[0].text`` ->
``type``; the MockMed extensions -> ``note``, ``priority``, ``created_at``; ``status`` from the
raw-status extension when present, else mapped back (in-progress -> open, finished -> closed,
cancelled -> cancelled, anything else -> null). Every record has all seven fields (null when
absent), as the SQL reader answers for the same table. :func:`encounter_from_record` is that
mapping's inverse: the Encounter a sandbox calibration creates for a trial record (R-CAL-8).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

import httpx

from rewardseal.core import strict_json
from rewardseal.core.errors import ValidationError
from rewardseal.core.judging import RECORD_ID_FIELD
from rewardseal_worker.oracles.base import (
    HTTP_ENV_NAME_PATTERN,
    KIND_FHIR,
    KIND_REST,
    MAX_RECORDS,
    OracleUnavailable,
    check_identity,
    check_recipe_shape,
    make_record,
    read_each,
    recipe_collection,
    recipe_identity_fields,
    recipe_timeout,
)

__all__ = [
    "DEFAULT_FHIR_PATH",
    "FHIR_EXTENSION_BASE",
    "encounter_from_record",
    "MAX_RESPONSE_BYTES",
    "HttpReader",
    "check_http_recipe",
    "check_url_path",
    "records_from_bundle",
    "system_of_record_client",
]

DEFAULT_FHIR_PATH: Final = "/fhir"
MAX_RESPONSE_BYTES: Final = 64 * 1024 * 1024
"""A larger answer is refused rather than parsed: the read must stay bounded."""
_PATH_SEGMENT_CHARS: Final = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._~"
)

FHIR_EXTENSION_BASE: Final = "https://rewardseal.example/fhir/StructureDefinition/mockmed-"
_FHIR_EXTENSIONS: Final[Mapping[str, str]] = {
    f"{FHIR_EXTENSION_BASE}note": "note",
    f"{FHIR_EXTENSION_BASE}priority": "priority",
    f"{FHIR_EXTENSION_BASE}status": "status",
    f"{FHIR_EXTENSION_BASE}created-at": "created_at",
}
_FHIR_FIELDS: Final = ("patient_id", "type", "note", "status", "priority", "created_at")
_FHIR_TO_STATUS: Final[Mapping[str, str]] = {
    "in-progress": "open",
    "finished": "closed",
    "cancelled": "cancelled",
}
_PATIENT_PREFIX: Final = "Patient/"
_STATUS_TO_FHIR: Final[Mapping[str, str]] = {v: k for k, v in _FHIR_TO_STATUS.items()}
_AMBULATORY: Final = {
    "system": "http://terminology.hl7.org/CodeSystem/v3-ActCode",
    "code": "AMB",
}


def check_url_path(raw: Any, where: str) -> str:
    """Return ``raw`` if it is an absolute URL path of plain segments (no query, no ``..``)."""
    if not isinstance(raw, str) or not raw.startswith("/") or len(raw) > 512:
        raise ValidationError(f"oracle recipe {where} must be an absolute URL path like /api/x")
    segments = raw[1:].split("/")
    for segment in segments:
        if not segment or segment in (".", "..") or not set(segment) <= _PATH_SEGMENT_CHARS:
            raise ValidationError(
                f"oracle recipe {where} must be '/'-separated segments of letters, digits, "
                "'-', '.', '_' or '~'"
            )
    return raw


def check_http_recipe(recipe: Mapping[str, Any]) -> None:
    """The checks specific to ``rest`` and ``fhir`` (after :func:`~.base.check_recipe_shape`)."""
    name = recipe.get("base_url_env")
    if not isinstance(name, str) or not HTTP_ENV_NAME_PATTERN.match(name):
        raise ValidationError(
            "oracle recipe base_url_env must name an environment variable "
            "(upper-case letters, digits, underscores)"
        )
    if recipe.get("kind") == KIND_REST:
        check_url_path(recipe.get("path"), "path")
    else:
        check_url_path(recipe.get("path", DEFAULT_FHIR_PATH), "path")


def _base_url(name: str, environ: Mapping[str, str]) -> httpx.URL:
    raw = environ.get(name)
    if not raw:
        raise ValidationError(f"environment variable {name} named by the oracle recipe is not set")
    try:
        url = httpx.URL(raw)
    except (httpx.InvalidURL, TypeError, ValueError):
        raise ValidationError(f"environment variable {name} does not hold a valid URL") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise ValidationError(f"environment variable {name} must hold an http(s) URL with a host")
    if url.userinfo or url.query or url.fragment:
        raise ValidationError(
            f"environment variable {name} must hold a URL without user info, query or fragment; "
            "credentials go in the variable named by token_env"
        )
    return url


def _token(name: str, environ: Mapping[str, str]) -> str:
    token = environ.get(name)
    if not token:
        raise ValidationError(f"environment variable {name} named by the oracle recipe is not set")
    if not token.isascii() or not token.isprintable() or token != token.strip():
        raise ValidationError(f"environment variable {name} does not hold a usable bearer token")
    return token


def _string_or_none(value: Any, source: str, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise OracleUnavailable(f"{source}: {what} is not a string")


def _record_from_encounter(resource: Any, source: str) -> dict[str, Any]:
    if not isinstance(resource, Mapping) or resource.get("resourceType") != "Encounter":
        raise OracleUnavailable(f"{source}: an entry is not an Encounter resource")
    subject = resource.get("subject")
    reference = subject.get("reference") if isinstance(subject, Mapping) else None
    if not isinstance(reference, str) or not reference.startswith(_PATIENT_PREFIX):
        raise OracleUnavailable(f"{source}: an Encounter has no Patient/ subject reference")
    fields: dict[str, Any] = dict.fromkeys(_FHIR_FIELDS)
    fields[RECORD_ID_FIELD] = resource.get("id")
    fields["patient_id"] = reference[len(_PATIENT_PREFIX) :]
    types = resource.get("type")
    if types is not None:
        if not isinstance(types, list) or (types and not isinstance(types[0], Mapping)):
            raise OracleUnavailable(f"{source}: an Encounter's type is not a list of concepts")
        if types:
            fields["type"] = _string_or_none(types[0].get("text"), source, "type[0].text")
    status = _string_or_none(resource.get("status"), source, "an Encounter's status")
    fields["status"] = _FHIR_TO_STATUS.get(status) if status is not None else None
    extensions = resource.get("extension", [])
    if not isinstance(extensions, list):
        raise OracleUnavailable(f"{source}: an Encounter's extension is not a list")
    for extension in extensions:
        if not isinstance(extension, Mapping):
            raise OracleUnavailable(f"{source}: an Encounter extension is not an object")
        field = _FHIR_EXTENSIONS.get(extension.get("url"))  # type: ignore[arg-type]
        if field is not None:
            # The raw MockMed status, when present, wins over the mapped FHIR status.
            fields[field] = _string_or_none(
                extension.get("valueString"), source, "an extension value"
            )
    if not isinstance(fields[RECORD_ID_FIELD], str):
        raise OracleUnavailable(f"{source}: an Encounter has no id")
    return make_record(fields, RECORD_ID_FIELD, source)


def encounter_from_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """The FHIR R4 Encounter that the fhir reader maps back to ``record`` (its inverse).

    ``record`` carries ``patient_id`` and any of the mapped fields; a value is written as it is
    (a non-string where FHIR wants a string is the server's to refuse). ``id`` is the server's
    to assign and is not sent.

    Raises:
        ValueError: ``record`` names a field the mapping has no place for, or no patient.
    """
    unknown = sorted(set(record) - set(_FHIR_FIELDS) - {RECORD_ID_FIELD})
    if unknown:
        raise ValueError(f"an Encounter has no place for the fields {unknown}")
    patient = record.get("patient_id")
    if patient is None:
        raise ValueError("an Encounter needs a patient")
    status = record.get("status")
    resource: dict[str, Any] = {
        "resourceType": "Encounter",
        "status": _STATUS_TO_FHIR.get(status, "unknown") if isinstance(status, str) else "unknown",
        "class": dict(_AMBULATORY),
        "subject": {"reference": f"{_PATIENT_PREFIX}{patient}"},
    }
    if record.get("type") is not None:
        resource["type"] = [{"text": record["type"]}]
    extensions = [
        {"url": url, "valueString": record[field]}
        for url, field in _FHIR_EXTENSIONS.items()
        if record.get(field) is not None
    ]
    if extensions:
        resource["extension"] = extensions
    return resource


def records_from_bundle(document: Any, source: str) -> list[dict[str, Any]]:
    """The records of a FHIR R4 searchset Bundle of Encounters (every entry must be one).

    Raises:
        OracleUnavailable: not a searchset Bundle, an entry that is not an Encounter, or a
            paged result (a ``next`` link: an incomplete answer cannot prove an absence).
    """
    if (
        not isinstance(document, Mapping)
        or document.get("resourceType") != "Bundle"
        or document.get("type") != "searchset"
    ):
        raise OracleUnavailable(f"{source}: the answer is not a FHIR searchset Bundle")
    links = document.get("link", [])
    if not isinstance(links, list):
        raise OracleUnavailable(f"{source}: the Bundle's link is not a list")
    if any(isinstance(link, Mapping) and link.get("relation") == "next" for link in links):
        raise OracleUnavailable(f"{source}: the search result is paged (incomplete)")
    entries = document.get("entry", [])
    if not isinstance(entries, list):
        raise OracleUnavailable(f"{source}: the Bundle's entry is not a list")
    records: list[dict[str, Any]] = []
    for entry in entries:
        if not isinstance(entry, Mapping):
            raise OracleUnavailable(f"{source}: a Bundle entry is not an object")
        records.append(_record_from_encounter(entry.get("resource"), source))
    total = document.get("total")
    if total is not None and (isinstance(total, bool) or total != len(records)):
        raise OracleUnavailable(f"{source}: the Bundle's total disagrees with its entries")
    return records


def system_of_record_client(
    base_url: httpx.URL | str,
    headers: Mapping[str, str],
    token: str | None,
    timeout_seconds: float,
    transport: httpx.BaseTransport | None = None,
) -> httpx.Client:
    """The one way the worker talks HTTP to a system of record (the oracle readers, the FHIR
    calibration sandbox): ``headers`` plus a bearer ``token`` when one is given, no redirects
    followed (a redirect could carry the token elsewhere) and no proxy or CA settings read from
    the environment."""
    sent = dict(headers)
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    return httpx.Client(
        base_url=base_url,
        headers=sent,
        timeout=httpx.Timeout(timeout_seconds),
        follow_redirects=False,
        trust_env=False,
        transport=transport,
    )


class HttpReader:
    """Reads the records of one identity from an HTTP API (``rest``) or a FHIR server (``fhir``).

    One ``httpx.Client`` (connection pool, thread-safe) serves every read until :meth:`close`.
    """

    kind: str
    timeout_seconds: float
    local = False

    def __init__(
        self,
        *,
        kind: str,
        base_url: httpx.URL,
        path: str,
        collection: str,
        identity_params: Mapping[str, str],
        timeout_seconds: float,
        token: str | None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        """A reader of ``base_url`` + ``path``; prefer :meth:`from_recipe`."""
        if kind not in (KIND_REST, KIND_FHIR):
            raise ValidationError(f"HttpReader reads 'rest' or 'fhir', not {kind!r}")
        self.kind = kind
        self.timeout_seconds = timeout_seconds
        self._path = check_url_path(path, "path")
        self._collection = collection
        self._identity_params = dict(identity_params)
        self._source = f"{kind} oracle {self._path!r}"
        accept = "application/fhir+json" if kind == KIND_FHIR else "application/json"
        self._client = system_of_record_client(
            base_url, {"Accept": accept}, token, timeout_seconds, transport
        )

    @classmethod
    def from_recipe(cls, recipe: Mapping[str, Any], *, environ: Mapping[str, str]) -> HttpReader:
        """Make a reader from a ``rest`` or ``fhir`` recipe; variables come from ``environ``.

        Raises:
            ValidationError: a recipe problem, or a named variable unset or unusable.
        """
        kind = check_recipe_shape(recipe)
        check_http_recipe(recipe)
        base_url = _base_url(recipe["base_url_env"], environ)
        token_env = recipe.get("token_env")
        token = _token(token_env, environ) if token_env is not None else None
        collection = recipe_collection(recipe)
        if kind == KIND_FHIR:
            path = f"{recipe.get('path', DEFAULT_FHIR_PATH).rstrip('/')}/{recipe['resource']}"
        else:
            path = recipe["path"]
        return cls(
            kind=kind,
            base_url=base_url,
            path=path,
            collection=collection,
            identity_params=recipe_identity_fields(recipe),
            timeout_seconds=recipe_timeout(recipe),
            token=token,
        )

    def read(self, identity: Mapping[str, str]) -> list[dict[str, Any]]:
        """Every record of ``identity``. Blocking, bounded by ``timeout_seconds`` overall.

        Raises:
            IdentityMismatch: when the identity's keys are not the recipe's.
            OracleUnavailable: transport error, timeout, non-2xx, malformed or wrong-shaped
                answer, or more than MAX_RECORDS records.
        """
        check_identity(identity, self._identity_params)
        params = httpx.QueryParams(
            [(self._identity_params[key], identity[key]) for key in sorted(identity)]
        )
        document = self._get(params)
        if self.kind == KIND_FHIR:
            records = records_from_bundle(document, self._source)
        else:
            records = self._rest_records(document)
        if len(records) > MAX_RECORDS:
            raise OracleUnavailable(
                f"{self._source}: more than {MAX_RECORDS} records for one identity"
            )
        return records

    def read_many(
        self, identities: Sequence[Mapping[str, str]]
    ) -> list[list[dict[str, Any]] | OracleUnavailable]:
        """One request per identity (the APIs have no batched search)."""
        return read_each(self, identities)

    def _rest_records(self, document: Any) -> list[dict[str, Any]]:
        rows = document.get(self._collection) if isinstance(document, Mapping) else None
        if not isinstance(rows, list):
            raise OracleUnavailable(f"{self._source}: the answer has no list {self._collection!r}")
        records: list[dict[str, Any]] = []
        for row in rows:
            if not isinstance(row, Mapping):
                raise OracleUnavailable(f"{self._source}: a record is not a JSON object")
            records.append(make_record(row, RECORD_ID_FIELD, self._source))
        return records

    def _get(self, params: httpx.QueryParams) -> Any:
        source = self._source
        deadline = time.monotonic() + self.timeout_seconds
        body = bytearray()
        try:
            with self._client.stream("GET", self._path, params=params) as response:
                if not 200 <= response.status_code < 300:
                    raise OracleUnavailable(f"{source}: answered HTTP {response.status_code}")
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > MAX_RESPONSE_BYTES:
                        raise OracleUnavailable(
                            f"{source}: answer larger than {MAX_RESPONSE_BYTES} bytes"
                        )
                    if time.monotonic() > deadline:
                        raise OracleUnavailable(
                            f"{source}: read timed out after {self.timeout_seconds:g}s"
                        )
        except httpx.TimeoutException:
            raise OracleUnavailable(
                f"{source}: read timed out after {self.timeout_seconds:g}s"
            ) from None
        except (httpx.HTTPError, httpx.InvalidURL, OSError) as exc:
            # from None: httpx messages and chained errors may quote the URL (and its query,
            # which holds identity values).
            raise OracleUnavailable(f"{source}: request failed ({type(exc).__name__})") from None
        if time.monotonic() > deadline:
            raise OracleUnavailable(f"{source}: read timed out after {self.timeout_seconds:g}s")
        try:
            return strict_json.loads(bytes(body))
        except (ValueError, RecursionError):
            # from None: the decoder's message quotes the document around the error.
            raise OracleUnavailable(f"{source}: malformed JSON") from None

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()
