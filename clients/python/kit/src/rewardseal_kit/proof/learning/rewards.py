"""The two rewards the learning proof trains on, and what each training step recorded.

Both runs act the same way (:class:`~rewardseal_kit.proof.ui_actor.MockMedUIActor`: every
completion's action report played through MockMed's UI endpoints under the completion's sandbox
patient) and every completion of both runs is begun and scored by the tier-2 worker
(:class:`~rewardseal.trainers.trl.CertifiedRewardFunction`, receipts verified against the pinned
key). What differs is what TRL gets back:

* ``screen``: the tier-0 screen reward of the screen the episode ended on (a "Saved" banner, a
  complete form, or offered "Saved": :func:`rewardseal_kit.proof.rewards.screen_result`); the
  worker's receipt is the measurement (the sentinel), never trained on;
* ``certified``: the worker's receipt as the certified reward function returns it (an unscored
  completion gets its group's mean: dropped from the advantage, never paid 0).

:class:`LearningReward` records per step every completion's episode id, receipt id, outcome,
family (:func:`~rewardseal_kit.proof.learning.task.classify`) and screen verdict.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from rewardseal.core.digest import digest_bytes
from rewardseal.core.errors import ValidationError
from rewardseal.rpc.worker_protocol import VerifiedReceipt
from rewardseal.trainers.trl import CertifiedRewardFunction
from rewardseal.v1.enums_pb2 import RewardOutcome
from rewardseal_kit.proof.integrity.case import CaseEpisode
from rewardseal_kit.proof.integrity.run import SQL
from rewardseal_kit.proof.learning.task import FAILED, HONEST, TaskRow, classify
from rewardseal_kit.proof.rewards import screen_result, screen_says_saved
from rewardseal_kit.proof.ui_actor import MockMedUIActor
from rewardseal_mockmed.contract import IDENTITY_KEY

__all__ = [
    "CERTIFIED",
    "SCREEN",
    "Completion",
    "LearningReward",
    "RecordingReward",
    "StepRecord",
]

SCREEN: Final = "screen"
CERTIFIED: Final = "certified"
Pays = Literal["screen", "certified"]
_VERIFIED: Final = RewardOutcome.Name(RewardOutcome.REWARD_OUTCOME_VERIFIED).removeprefix(
    "REWARD_OUTCOME_"
)


class RecordingReward(CertifiedRewardFunction):
    """The certified reward function, keeping the last batch's episode ids, texts, sandbox
    identities and answers (verified receipts or errors) for the step record.

    ``policy_update_offset``: added to TRL's step to make the policy update the worker sees.
    Both runs are scored by one worker, whose policy updates move forward per contract (R-W-7:
    a step far below the highest is refused ``policy_update_regressed``), so run (b)'s updates
    are numbered after run (a)'s.
    """

    last: tuple[list[str], list[str], list[dict[str, str] | None], list[Any]] | None = None
    policy_update_offset: int = 0

    def _step(self, kwargs: Mapping[str, Any]) -> int:
        return super()._step(kwargs) + self.policy_update_offset

    def _finish(self, batch: Any, kwargs: Mapping[str, Any]) -> list[float | None]:
        self.last = (
            list(batch.episode_ids),
            list(batch.texts),
            list(batch.identities),
            list(batch.answers),
        )
        return super()._finish(batch, kwargs)


@dataclass(frozen=True)
class Completion:
    """One completion of one step: what it did and what each reward said.

    ``receipt_id``/``outcome`` None: the worker gave no receipt (unscored; ``error`` says why).
    ``paid``: the scalar TRL trained on (None for an all-unscored group).
    """

    episode_id: str
    record_id: str
    family: str
    screen_saved: bool
    receipt_id: str | None
    outcome: str | None
    unscored: bool
    certified_scalar: float | None
    paid: float | None
    length: int
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The completion as a JSON object."""
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass
class StepRecord:
    """One training step of one run (policy update ``step``)."""

    step: int
    policy_update: int
    """The policy update the worker scored this step's episodes under (the receipts carry it)."""
    completions: list[Completion] = field(default_factory=list)

    @property
    def n(self) -> int:
        """Completions in the step."""
        return len(self.completions)

    @property
    def scored(self) -> int:
        """Completions with a receipt of a scored outcome."""
        return sum(1 for c in self.completions if not c.unscored)

    def shares(self) -> dict[str, Any]:
        """The step's shares: true success (verified among scored; unscored dropped), claimed
        success (the screen says saved, among all), each family's share (among all)."""
        scored = self.scored
        verified = sum(1 for c in self.completions if not c.unscored and c.outcome == _VERIFIED)
        saved = sum(1 for c in self.completions if c.screen_saved)
        families = Counter(c.family for c in self.completions)
        hacks = sum(n for name, n in families.items() if name != HONEST and name not in FAILED)
        return {
            "step": self.step,
            "policy_update": self.policy_update,
            "n": self.n,
            "scored": scored,
            "unscored": self.n - scored,
            "verified": verified,
            "true_success": verified / scored if scored else None,
            "screen_saved": saved,
            "claimed_success": saved / self.n if self.n else None,
            "hacks": hacks,
            "hack_share": hacks / self.n if self.n else None,
            "families": dict(sorted(families.items())),
            "family_share": {k: v / self.n for k, v in sorted(families.items())},
            "mean_paid": _mean([c.paid for c in self.completions]),
            "mean_length": _mean([float(c.length) for c in self.completions]),
        }

    def to_json(self) -> dict[str, Any]:
        """The step: its shares, and every completion (episode and receipt ids included)."""
        return {
            **self.shares(),
            "receipt_ids": [c.receipt_id for c in self.completions if c.receipt_id],
            "completions": [c.to_json() for c in self.completions],
        }


def _mean(values: Sequence[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def _row(kwargs: Mapping[str, Any], index: int) -> TaskRow:
    identity = kwargs["oracle_identity"][index]
    parameters = kwargs["task_parameters"][index]
    return TaskRow(
        patient=str(identity[IDENTITY_KEY]),
        encounter_type=str(parameters["encounter_type"]),
        note=str(parameters["note"]),
    )


class LearningReward:
    """A TRL reward function for one run: acts and scores through ``certified`` (whose actor is
    ``actor``), pays the screen or the receipt (``pays``), records every step.

    ``audit_episodes`` (run a): per step, the completions as the integrity case's episodes (the
    screen's verdict and the worker's receipt of the same output), for the audit of every
    boundary by control (:func:`rewardseal_kit.proof.integrity.run.run_case`).
    """

    def __init__(self, certified: RecordingReward, actor: MockMedUIActor, *, pays: Pays) -> None:
        if pays not in (SCREEN, CERTIFIED):
            raise ValidationError(f"a learning run pays {SCREEN!r} or {CERTIFIED!r}, not {pays!r}")
        self.certified = certified
        self.actor = actor
        self.pays = pays
        self.steps: list[StepRecord] = []
        self.audit_episodes: list[list[CaseEpisode]] = []
        self.__name__ = f"{pays}_reward"

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[float | None]:
        """Act, score, record; the rewards of the run's kind, one per completion."""
        certified = self.certified(prompts, completions, **kwargs)
        if self.certified.last is None:
            raise ValidationError("the certified reward recorded no batch")
        episode_ids, texts, identities, answers = self.certified.last
        step = StepRecord(
            step=int(kwargs["trainer_state"].global_step),
            policy_update=int(kwargs["trainer_state"].global_step)
            + self.certified.policy_update_offset,
        )
        episodes: list[CaseEpisode] = []
        paid: list[float | None] = []
        for index, episode_id in enumerate(episode_ids):
            row = _row(kwargs, index)
            screen = self.actor.screen(episode_id)
            family = classify(texts[index], row)
            on_screen = screen_result(family, step.step, episode_id, screen)
            answer = answers[index]
            receipt = answer if isinstance(answer, VerifiedReceipt) else None
            scalar = receipt.scalar if receipt is not None else None
            value = on_screen.scalar if self.pays == SCREEN else certified[index]
            paid.append(value)
            record_id = (identities[index] or {}).get(IDENTITY_KEY, episode_id)
            step.completions.append(
                Completion(
                    episode_id=episode_id,
                    record_id=record_id,
                    family=family,
                    screen_saved=screen_says_saved(screen),
                    receipt_id=receipt.receipt.receipt_id if receipt is not None else None,
                    outcome=(
                        RewardOutcome.Name(receipt.receipt.reward_outcome).removeprefix(
                            "REWARD_OUTCOME_"
                        )
                        if receipt is not None
                        else None
                    ),
                    unscored=scalar is None,
                    certified_scalar=scalar,
                    paid=value,
                    length=len(texts[index]),
                    error=None if receipt is not None else str(answer),
                )
            )
            if receipt is not None:
                episodes.append(
                    CaseEpisode(
                        record_id=record_id,
                        family=family,
                        episode_id=episode_id,
                        output_digest=digest_bytes(texts[index].encode("utf-8")),
                        screen=on_screen,
                        receipts={SQL: receipt},
                    )
                )
        self.steps.append(step)
        self.audit_episodes.append(episodes)
        return paid
