"""MockMedUIActor: a policy's action report played through MockMed's UI, its screen kept.

The learning proof's actor (:mod:`rewardseal_kit.proof.learning`): the same redirect to the
completion's sandbox patient as :class:`~rewardseal_kit.actors.MockMedActor`, and every report
played as :func:`~rewardseal_kit.proof.conditions.play_report` plays the proof's scripted ones,
so a screen-based checker can judge the screen each episode ended on.
"""

from __future__ import annotations

from collections.abc import Mapping

from rewardseal.core.errors import Unavailable, ValidationError
from rewardseal.core.task_parameters import ParameterValue
from rewardseal.v1.enums_pb2 import RuntimeSignal
from rewardseal_kit.actors import MockMedActor
from rewardseal_kit.proof.conditions import MockMedUI, Screen, play_report
from rewardseal_mockmed.contract import IDENTITY_KEY
from rewardseal_mockmed.extradup import Action, ActionReport, parse_action_report

__all__ = ["MockMedUIActor"]


class MockMedUIActor(MockMedActor):
    """Plays a completion's action report through MockMed's UI endpoints, as a browser-driving
    agent's clicks would land, and keeps the screen each episode ended on.

    Unlike :class:`MockMedActor` it also plays the reports that write nothing: no action and no
    evidence is the banner claim (``POST /ui/claim`` for the sandbox patient: "Saved" with
    nothing stored), screen evidence is the text offered, an unsubmitted report fills the form
    (``POST /ui/draft``). :meth:`screen` answers what a screen-based checker sees for an
    episode (:func:`~rewardseal_kit.proof.conditions.play_report`). A create for the row's patient
    is redirected to the completion's sandbox patient, as :class:`MockMedActor` does.
    """

    def __init__(self, base_url: str, token: str, *, timeout: float = 10.0) -> None:
        super().__init__(base_url, token, timeout=timeout)
        self._ui = MockMedUI(base_url.rstrip("/"), token)
        self._screens: dict[str, Screen] = {}

    def close(self) -> None:
        """Close the UI client's connection pool."""
        self._ui.close()

    def screen(self, episode_id: str) -> Screen:
        """The screen ``episode_id`` ended on (blank when it wrote or showed nothing).

        Raises:
            ValidationError: the actor never acted for that episode.
        """
        try:
            return self._screens[episode_id]
        except KeyError:
            raise ValidationError(f"no screen recorded for episode {episode_id!r}") from None

    def act(
        self,
        completion: str,
        identity: Mapping[str, str],
        row_identity: Mapping[str, str],
        episode_id: str,
        *,
        task_parameters: Mapping[str, ParameterValue] | None = None,
    ) -> RuntimeSignal.ValueType:
        """Play the report; COMPLETED, or FAILED_PLATFORM when MockMed failed (5xx, away).

        An unparseable report or a write MockMed refused (4xx) leaves a blank screen and
        completes. ``task_parameters`` are never written for the policy.
        """
        self._screens[episode_id] = Screen(banner=None)
        try:
            report = parse_action_report(completion)
        except ValidationError:
            return RuntimeSignal.RUNTIME_SIGNAL_COMPLETED
        sandbox = identity[IDENTITY_KEY]
        row_patient = row_identity.get(IDENTITY_KEY)
        redirected = ActionReport(
            actions=tuple(
                Action(
                    op="create",
                    collection=action.collection,
                    fields={
                        name: (sandbox if name == IDENTITY_KEY and value == row_patient else value)
                        for name, value in action.fields.items()
                    },
                )
                for action in report.actions
            ),
            submitted=report.submitted,
            evidence=report.evidence,
            halted=report.halted,
            claim=report.claim,
        )
        try:
            self._screens[episode_id] = play_report(redirected, sandbox, self._ui)
        except ValidationError:
            return RuntimeSignal.RUNTIME_SIGNAL_COMPLETED
        except Unavailable:
            return RuntimeSignal.RUNTIME_SIGNAL_FAILED_PLATFORM
        if report.halted:
            return RuntimeSignal.RUNTIME_SIGNAL_HALTED_BEFORE_EFFECT
        return RuntimeSignal.RUNTIME_SIGNAL_COMPLETED
