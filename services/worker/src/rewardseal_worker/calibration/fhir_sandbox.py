"""A sandbox FHIR server as a calibration store: trials written as FHIR interactions (R-CAL-8).

Each trial record becomes an ``Encounter`` (:func:`~rewardseal_worker.oracles.http.
encounter_from_record`, the inverse of the fhir reader's mapping) created with ``POST``,
changed with ``PUT`` and removed with ``DELETE`` on the sandbox server's ``<path>/Encounter``;
the bundle's own fhir reader then reads it back through the server's search. A record the
mapping has no place for (a field no Encounter carries) is a draw made for another schema
(:class:`~.runner.TrialNotWritable`, drawn again); a write the server refuses (4xx, an
OperationOutcome) is the SoR refusing the fault (:class:`~.runner.TrialRejected`); a server that
cannot be reached or fails (5xx) stops calibration. Messages name the interaction and the
status, never the URL, the token or a resource.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import httpx

from rewardseal.core.errors import ValidationError
from rewardseal.core.judging import RECORD_ID_FIELD
from rewardseal_worker.calibration.runner import TrialNotWritable, TrialRejected
from rewardseal_worker.calibration.trials import Record
from rewardseal_worker.oracles.http import encounter_from_record, system_of_record_client

__all__ = ["FhirSandboxStore"]

_FHIR_JSON = "application/fhir+json"


class FhirSandboxStore:
    """Encounters on a sandbox FHIR server, written with the FHIR REST interactions."""

    def __init__(
        self,
        base_url: str,
        resource_path: str,
        token: str | None,
        *,
        timeout_seconds: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        """``resource_path`` is the server's path of the resource type (``/fhir/Encounter``)."""
        self._path = resource_path.rstrip("/")
        self._client = system_of_record_client(
            base_url,
            {"Accept": _FHIR_JSON, "Content-Type": _FHIR_JSON},
            token,
            timeout_seconds,
            transport,
        )

    def _send(self, method: str, path: str, record: Record | None = None) -> httpx.Response:
        body: bytes | None = None
        if record is not None:
            try:
                resource = encounter_from_record(
                    {k: v for k, v in record.items() if k != RECORD_ID_FIELD}
                )
            except ValueError as exc:
                raise TrialNotWritable(str(exc)) from None
            body = json.dumps(resource).encode()
        try:
            response = self._client.request(method, path, content=body)
        except httpx.HTTPError as exc:
            raise ValidationError(
                f"calibration stopped: the sandbox FHIR server could not be reached on {method} "
                f"({type(exc).__name__})"
            ) from None
        if 400 <= response.status_code < 500 and response.status_code not in (401, 403, 404):
            raise TrialRejected(
                f"the sandbox FHIR server refused a {method} (HTTP {response.status_code})"
            )
        if response.status_code >= 300:
            raise ValidationError(
                f"calibration stopped: the sandbox FHIR server answered {method} with HTTP "
                f"{response.status_code}"
            )
        return response

    def insert(self, records: Sequence[Record]) -> dict[str, str]:
        """Create one Encounter per record. FHIR has no transaction here: when one create is
        refused, the ones already made are deleted again before the refusal propagates, as a
        database store's rollback would leave nothing."""
        ids: dict[str, str] = {}
        try:
            for record in records:
                ids[str(record[RECORD_ID_FIELD])] = self._create(record)
        except (TrialNotWritable, ValidationError):
            self.delete(list(ids.values()))
            raise
        return ids

    def _create(self, record: Record) -> str:
        response = self._send("POST", self._path, record)
        try:
            created: Any = response.json()
        except ValueError:
            created = None
        new_id = created.get("id") if isinstance(created, dict) else None
        if not isinstance(new_id, str) or not new_id:
            raise ValidationError(
                "calibration stopped: the sandbox FHIR server's create answer has no id"
            )
        return new_id

    def update(self, sandbox_id: str, record: Record) -> None:
        self._send("PUT", f"{self._path}/{_segment(sandbox_id)}", record)

    def delete(self, sandbox_ids: Sequence[str]) -> None:
        for sandbox_id in sandbox_ids:
            self._send("DELETE", f"{self._path}/{_segment(sandbox_id)}")

    def close(self) -> None:
        self._client.close()


def _segment(sandbox_id: str) -> str:
    """A server-assigned id as one path segment (FHIR ids are ``[A-Za-z0-9-.]{1,64}``)."""
    if not sandbox_id or not all(c.isascii() and (c.isalnum() or c in "-.") for c in sandbox_id):
        raise ValidationError("calibration stopped: the sandbox FHIR server gave an unusable id")
    return sandbox_id
