"""Episode actors: carry out a policy's completion against a system of record (SPEC §11).

A trainer adapter with an actor runs the whole rollout for each completion: it mints an episode
id, asks the actor for the completion's oracle identity, opens the episode (BeginEpisode records
the baseline read), lets the actor execute the completion, and scores the batch.

Why an identity per completion: TRL copies a dataset row to every member of its group, and the
worker allows one open episode per identity (R-W-3). If every completion of a group wrote for the
row's own patient, the second BeginEpisode would be refused (``identity_busy``) and, worse, two
completions' rows would be indistinguishable. So each completion gets its own sandbox patient,
derived from the row's patient and the episode id.
"""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Final, Protocol, runtime_checkable

from rewardseal.errors import ValidationError
from rewardseal.extradup import MOCKMED_COLLECTION, ActionReport, parse_action_report
from rewardseal.mockmed import IDENTITY_KEY
from rewardseal.v1.enums_pb2 import RuntimeSignal

__all__ = ["EpisodeActor", "MockMedActor", "SANDBOX_SEPARATOR", "sandbox_identity"]

SANDBOX_SEPARATOR: Final = "~"
"""Joins a row's patient id and the per-completion suffix (not used in the seeded ids)."""
_SUFFIX_HEX: Final = 12
_MAX_IDENTITY_VALUE: Final = 256
_ENCOUNTERS_PATH: Final = "/api/encounters"
_SERVER_ERROR: Final = 500


@runtime_checkable
class EpisodeActor(Protocol):
    """Executes one completion of a policy for one episode."""

    def identity_for(self, row_identity: Mapping[str, str], episode_id: str) -> dict[str, str]:
        """The oracle identity this completion's episode is opened and scored under."""
        ...

    def act(
        self,
        completion: str,
        identity: Mapping[str, str],
        row_identity: Mapping[str, str],
        episode_id: str,
    ) -> RuntimeSignal.ValueType:
        """Carry out ``completion`` and say how the run ended (the worker's runtime signal).

        ``FAILED_PLATFORM`` only for the platform's own failure (the system of record refused
        service), never for a bad completion: that is the policy's fault and must be read.
        """
        ...


def sandbox_identity(row_patient_id: str, episode_id: str) -> str:
    """``<row patient>~<12 hex of sha256(episode id)>``: unique per completion, stable per id.

    A hash rather than a slice of the id, so any episode id (minted or not) gives a short,
    well-formed suffix. Raises ValidationError when the result would exceed the 256-character
    identity limit shared by the worker (R-W-2) and MockMed.
    """
    if not row_patient_id:
        raise ValidationError("the dataset row has no patient id to derive a sandbox from")
    suffix = hashlib.sha256(episode_id.encode("utf-8")).hexdigest()[:_SUFFIX_HEX]
    value = f"{row_patient_id}{SANDBOX_SEPARATOR}{suffix}"
    if len(value) > _MAX_IDENTITY_VALUE:
        raise ValidationError(
            f"patient id {row_patient_id[:32]!r}... is too long for a sandbox identity"
        )
    return value


class MockMedActor:
    """Executes a JSON action report (see :mod:`rewardseal.extradup`) on MockMed's REST API.

    Only ``encounters`` creates are posted (other collections are skipped: MockMed has none).
    A create for the dataset row's patient is redirected to the completion's sandbox patient;
    any other patient id (a decoy, for instance) is posted as written, so a write on the wrong
    record still misses the identity the worker reads.
    """

    def __init__(self, base_url: str, token: str, *, timeout: float = 10.0) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValidationError(f"MockMed base URL must be http(s), got {base_url!r}")
        if not token:
            raise ValidationError("a MockMed bearer token is required")
        self._url = base_url.rstrip("/") + _ENCOUNTERS_PATH
        self._token = token
        self._timeout = timeout

    def identity_for(self, row_identity: Mapping[str, str], episode_id: str) -> dict[str, str]:
        """``{"patient_id": "<row patient>~<suffix>"}`` for this completion."""
        row_patient = row_identity.get(IDENTITY_KEY, "")
        return {IDENTITY_KEY: sandbox_identity(row_patient, episode_id)}

    def act(
        self,
        completion: str,
        identity: Mapping[str, str],
        row_identity: Mapping[str, str],
        episode_id: str,
    ) -> RuntimeSignal.ValueType:
        """Post the report's creates in order; see the class docstring for the redirect.

        An unparseable report writes nothing and completes (the read then finds nothing:
        WRONG_EFFECT). A 4xx answer is a refused write and the run goes on. A 5xx answer or an
        unreachable MockMed stops the run: FAILED_PLATFORM. ``"halted": true`` gives
        HALTED_BEFORE_EFFECT after what was submitted has been executed.
        """
        try:
            report = parse_action_report(completion)
        except ValidationError:
            return RuntimeSignal.RUNTIME_SIGNAL_COMPLETED
        if report.submitted and not self._post_all(report, identity, row_identity):
            return RuntimeSignal.RUNTIME_SIGNAL_FAILED_PLATFORM
        if report.halted:
            return RuntimeSignal.RUNTIME_SIGNAL_HALTED_BEFORE_EFFECT
        return RuntimeSignal.RUNTIME_SIGNAL_COMPLETED

    def _post_all(
        self, report: ActionReport, identity: Mapping[str, str], row_identity: Mapping[str, str]
    ) -> bool:
        """Post every encounter create; False as soon as the platform fails."""
        row_patient = row_identity.get(IDENTITY_KEY)
        for action in report.actions:
            if action.collection != MOCKMED_COLLECTION:
                continue
            fields = dict(action.fields)
            if row_patient is not None and fields.get(IDENTITY_KEY) == row_patient:
                fields[IDENTITY_KEY] = identity[IDENTITY_KEY]
            if not self._post(fields):
                return False
        return True

    def _post(self, fields: Mapping[str, str | None]) -> bool:
        """One POST; True when MockMed answered (201 or a 4xx refusal), False on its failure."""
        request = urllib.request.Request(
            self._url,
            data=json.dumps(dict(fields)).encode("utf-8"),
            method="POST",
            headers={
                "Authorization": f"Bearer {self._token}",
                "Content-Type": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self._timeout) as response:
                response.read()
        except urllib.error.HTTPError as exc:
            exc.close()
            return exc.code < _SERVER_ERROR
        except (urllib.error.URLError, TimeoutError, ConnectionError):
            return False
        return True
