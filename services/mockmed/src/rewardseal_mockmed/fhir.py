"""MockMed encounters as FHIR R4 ``Encounter`` resources, and search results as a Bundle.

Mapping (every MockMed field stays recoverable, see :func:`record_from_encounter`):

* ``id`` -> ``Encounter.id``;
* ``patient_id`` -> ``Encounter.subject.reference`` = ``Patient/<patient_id>``;
* ``type`` -> ``Encounter.type[0].text`` (absent when NULL);
* ``status`` -> ``Encounter.status``: open -> in-progress, closed -> finished, cancelled ->
  cancelled, anything else (or NULL) -> unknown; the MockMed value itself goes into the
  extension :data:`STATUS_EXTENSION`;
* ``note``, ``priority``, ``created_at`` -> the extensions :data:`NOTE_EXTENSION`,
  :data:`PRIORITY_EXTENSION`, :data:`CREATED_AT_EXTENSION` (``valueString``).

A NULL field has no extension (FHIR JSON carries no nulls). ``Encounter.class`` is required in
R4; every MockMed encounter is ambulatory (``AMB``). A FHIR write (``POST``/``PUT Encounter``,
the interactions a sandbox calibration uses, R-CAL-8) goes through :func:`encounter_write_fields`,
which refuses what the mapping cannot carry instead of dropping it.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final

from rewardseal_mockmed.schema import COLUMNS, WRITABLE_FIELDS

__all__ = [
    "CREATED_AT_EXTENSION",
    "EXTENSION_BASE",
    "FHIR_CONTENT_TYPE",
    "NOTE_EXTENSION",
    "PRIORITY_EXTENSION",
    "STATUS_EXTENSION",
    "STATUS_TO_FHIR",
    "encounter_resource",
    "encounter_write_fields",
    "operation_outcome",
    "patient_reference",
    "record_from_encounter",
    "searchset_bundle",
]

FHIR_CONTENT_TYPE: Final = "application/fhir+json"
EXTENSION_BASE: Final = "https://rewardseal.example/fhir/StructureDefinition/mockmed-"
NOTE_EXTENSION: Final = f"{EXTENSION_BASE}note"
PRIORITY_EXTENSION: Final = f"{EXTENSION_BASE}priority"
STATUS_EXTENSION: Final = f"{EXTENSION_BASE}status"
CREATED_AT_EXTENSION: Final = f"{EXTENSION_BASE}created-at"
_EXTENSIONS: Final = (
    ("note", NOTE_EXTENSION),
    ("priority", PRIORITY_EXTENSION),
    ("status", STATUS_EXTENSION),
    ("created_at", CREATED_AT_EXTENSION),
)
STATUS_TO_FHIR: Final[Mapping[str, str]] = {
    "open": "in-progress",
    "closed": "finished",
    "cancelled": "cancelled",
}
_UNKNOWN_STATUS: Final = "unknown"
_PATIENT_PREFIX: Final = "Patient/"
_AMBULATORY: Final = {
    "system": "http://terminology.hl7.org/CodeSystem/v3-ActCode",
    "code": "AMB",
    "display": "ambulatory",
}


def patient_reference(patient_id: str) -> str:
    """``Patient/<patient_id>``."""
    return f"{_PATIENT_PREFIX}{patient_id}"


def encounter_resource(record: Mapping[str, str | None]) -> dict[str, Any]:
    """One MockMed record as a FHIR R4 ``Encounter`` resource."""
    status = record.get("status")
    resource: dict[str, Any] = {
        "resourceType": "Encounter",
        "id": record["id"],
        "status": STATUS_TO_FHIR.get(status, _UNKNOWN_STATUS) if status else _UNKNOWN_STATUS,
        "class": dict(_AMBULATORY),
        "subject": {"reference": patient_reference(str(record["patient_id"]))},
    }
    if record.get("type") is not None:
        resource["type"] = [{"text": record["type"]}]
    extensions = [
        {"url": url, "valueString": record[field]}
        for field, url in _EXTENSIONS
        if record.get(field) is not None
    ]
    if extensions:
        resource["extension"] = extensions
    return resource


def record_from_encounter(resource: Mapping[str, Any]) -> dict[str, str | None]:
    """The MockMed record an ``Encounter`` of :func:`encounter_resource` was made from.

    Raises:
        ValueError: ``resource`` is not an Encounter with an id and a ``Patient/`` subject.
    """
    if resource.get("resourceType") != "Encounter" or not isinstance(resource.get("id"), str):
        raise ValueError("not an Encounter resource with an id")
    subject = resource.get("subject")
    reference = subject.get("reference") if isinstance(subject, Mapping) else None
    if not isinstance(reference, str) or not reference.startswith(_PATIENT_PREFIX):
        raise ValueError("the Encounter has no Patient/ subject reference")
    record: dict[str, str | None] = {name: None for name in COLUMNS}
    record["id"] = resource["id"]
    record["patient_id"] = reference[len(_PATIENT_PREFIX) :]
    types = resource.get("type")
    if isinstance(types, Sequence) and types and isinstance(types[0], Mapping):
        text = types[0].get("text")
        record["type"] = text if isinstance(text, str) else None
    by_url = {url: field for field, url in _EXTENSIONS}
    for extension in resource.get("extension") or ():
        if isinstance(extension, Mapping) and extension.get("url") in by_url:
            value = extension.get("valueString")
            record[by_url[extension["url"]]] = value if isinstance(value, str) else None
    return record


def encounter_write_fields(resource: Any) -> dict[str, str | None]:
    """The writable fields an Encounter written to MockMed carries (strictly).

    Like :func:`record_from_encounter`, but for a write: a value that is not a string, an
    extension MockMed does not know, or a missing ``Patient/`` subject is refused rather than
    read as NULL; the id and ``created_at`` are the server's (not taken from the resource).

    Raises:
        ValueError: the resource is not an Encounter MockMed can store as it is.
    """
    if not isinstance(resource, Mapping) or resource.get("resourceType") != "Encounter":
        raise ValueError("not an Encounter resource")
    subject = resource.get("subject")
    reference = subject.get("reference") if isinstance(subject, Mapping) else None
    if not isinstance(reference, str) or not reference.startswith(_PATIENT_PREFIX):
        raise ValueError("the Encounter has no Patient/ subject reference")
    fields: dict[str, str | None] = dict.fromkeys(WRITABLE_FIELDS)
    fields["patient_id"] = reference[len(_PATIENT_PREFIX) :]
    types = resource.get("type")
    if types is not None:
        if not isinstance(types, list) or len(types) > 1:
            raise ValueError("the Encounter's type must be a list of at most one concept")
        if types:
            text = types[0].get("text") if isinstance(types[0], Mapping) else None
            if not isinstance(text, str):
                raise ValueError("the Encounter's type[0].text must be a string")
            fields["type"] = text
    by_url = {url: field for field, url in _EXTENSIONS if field in WRITABLE_FIELDS}
    for extension in resource.get("extension") or ():
        url = extension.get("url") if isinstance(extension, Mapping) else None
        if url == CREATED_AT_EXTENSION:
            continue  # the server's own timestamp
        if url not in by_url:
            raise ValueError("the Encounter carries an extension MockMed does not store")
        value = extension.get("valueString")
        if not isinstance(value, str):
            raise ValueError("an Encounter extension's valueString must be a string")
        fields[by_url[url]] = value
    return fields


def searchset_bundle(
    records: Sequence[Mapping[str, str | None]], *, base_url: str
) -> dict[str, Any]:
    """A FHIR R4 ``searchset`` Bundle holding one ``Encounter`` per record (every match)."""
    base = base_url.rstrip("/")
    return {
        "resourceType": "Bundle",
        "id": uuid.uuid4().hex,
        "type": "searchset",
        "total": len(records),
        "entry": [
            {
                "fullUrl": f"{base}/Encounter/{record['id']}",
                "resource": encounter_resource(record),
                "search": {"mode": "match"},
            }
            for record in records
        ],
    }


def operation_outcome(code: str, diagnostics: str) -> dict[str, Any]:
    """A FHIR ``OperationOutcome`` with one error issue (``code`` from the IssueType codes)."""
    return {
        "resourceType": "OperationOutcome",
        "issue": [{"severity": "error", "code": code, "diagnostics": diagnostics}],
    }
