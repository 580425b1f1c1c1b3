"""MockMedActor: carry out a policy's ExtraDup action report on MockMed's REST API.

The MockMed-specific :class:`~rewardseal.trainers.actors.EpisodeActor`: a trainer adapter given
one (``CertifiedRewardFunction(actor=MockMedActor(...))``) runs each completion's writes through
MockMed before the worker scores the episode. It lives in the kit, not in ``rewardseal.trainers``,
because it speaks the synthetic world's action-report format and MockMed's API; the trainer
adapters know only the generic protocol.

It plays the fixed contract and the parameterized one (``mockmed_parameterized_contract``: an
encounter of the row's ``encounter_type`` with its ``note``) alike: MockMed takes any type and
note, and the policy's report says which it writes. The episode's ``task_parameters`` are
accepted and never written in the report's place (see :meth:`MockMedActor.act`).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Final

from rewardseal.core.errors import ValidationError
from rewardseal.core.task_parameters import ParameterValue
from rewardseal.trainers.actors import sandbox_identity
from rewardseal.v1.enums_pb2 import RuntimeSignal
from rewardseal_mockmed.contract import IDENTITY_KEY
from rewardseal_mockmed.extradup import MOCKMED_COLLECTION, ActionReport, parse_action_report

__all__ = ["MockMedActor"]

_ENCOUNTERS_PATH: Final = "/api/encounters"
_SERVER_ERROR: Final = 500


class MockMedActor:
    """Executes a JSON action report (see :mod:`rewardseal_mockmed.extradup`) on MockMed's REST API.

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
        *,
        task_parameters: Mapping[str, ParameterValue] | None = None,
    ) -> RuntimeSignal.ValueType:
        """Post the report's creates in order; see the class docstring for the redirect.

        ``task_parameters`` (the type and note the episode was begun with) are not written for
        the policy: a report that writes another type or note, or none, is posted as it is, so
        the worker's read pays only the policy's own write of the row's task.

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
