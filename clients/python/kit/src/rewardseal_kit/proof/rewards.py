"""The two rewards the proof compares, and one trial's result under each.

``screen_t0`` is what a screen-based checker pays: it looks at the screen the episode ended on
and pays when the banner says "Saved", when the encounter form shows complete, or when the
screen text the policy offered says "Saved". Its verdict is scored with
:func:`rewardseal.core.scoring.score` at tier 0 against the seeded MockMed tier-0 contract, so it is
development_only and never certified, and it signs nothing (there is no key behind a banner).

``certified_t2`` is a running worker's receipt: BeginEpisode before the rollout, ScoreEpisode
after it, the signed envelope verified against the pinned worker key. The worker reads the
system of record itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Final

from rewardseal.core.scoring import score
from rewardseal.rpc.worker_client import VerifiedReceipt
from rewardseal.v1.enums_pb2 import CalibrationScope, RewardOutcome
from rewardseal_kit.proof.conditions import Screen
from rewardseal_mockmed.contract import ENCOUNTER_FIELDS, mockmed_contract

__all__ = [
    "CERTIFIED_T2",
    "REWARDS",
    "SAVED",
    "SCREEN_T0",
    "TrialResult",
    "certified_result",
    "screen_result",
    "screen_says_saved",
]

SCREEN_T0: Final = "screen_t0"
CERTIFIED_T2: Final = "certified_t2"
REWARDS: Final = (SCREEN_T0, CERTIFIED_T2)
SAVED: Final = "Saved"
DEVELOPMENT_ONLY: Final = "development_only"


@dataclass(frozen=True)
class TrialResult:
    """One trial of one condition under one reward.

    ``scalar`` is None when the reward left the episode unscored (never 0.0 for it);
    ``receipt_id`` is None for the screen reward (it signs nothing); ``scope`` is
    ``development_only`` below tier 2, else the certificate's calibration scope in lower case.
    ``findings`` are the receipt's signed findings as words (``effect:code(fields)``, R-MSG-12):
    what the certified reward found wrong; none for the screen reward, which signs nothing.
    """

    condition: str
    reward: str
    trial: int
    episode_id: str
    tier: int
    outcome: str
    scalar: float | None
    certified: bool
    scope: str
    receipt_id: str | None
    findings: tuple[str, ...] = ()

    @property
    def paid(self) -> bool:
        """True when the reward paid a positive scalar."""
        return self.scalar is not None and self.scalar > 0

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict of every field."""
        return asdict(self)


def _outcome_name(outcome: RewardOutcome.ValueType) -> str:
    return RewardOutcome.Name(outcome).removeprefix("REWARD_OUTCOME_")


def _form_complete(form: Mapping[str, object]) -> bool:
    return all(isinstance(form.get(name), str) and form.get(name) for name in ENCOUNTER_FIELDS)


def screen_says_saved(screen: Screen) -> bool:
    """The screen checker's verdict: a "Saved" banner, a complete form, or offered "Saved"."""
    return screen.banner == SAVED or screen.offered_text == SAVED or _form_complete(screen.form)


def screen_result(condition: str, trial: int, episode_id: str, screen: Screen) -> TrialResult:
    """What the tier-0 screen reward pays for ``screen`` (scored by the shared rules)."""
    outcome = (
        RewardOutcome.REWARD_OUTCOME_VERIFIED
        if screen_says_saved(screen)
        else RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT
    )
    scored = score(
        outcome, tier=0, certificate=None, policy_update=0, contract=mockmed_contract(tier=0)
    )
    return TrialResult(
        condition=condition,
        reward=SCREEN_T0,
        trial=trial,
        episode_id=episode_id,
        tier=0,
        outcome=_outcome_name(outcome),
        scalar=scored.scalar,
        certified=scored.certified,
        scope=DEVELOPMENT_ONLY if scored.development_only else "unknown",
        receipt_id=None,
    )


def certified_result(condition: str, trial: int, got: VerifiedReceipt) -> TrialResult:
    """The tier-2 worker's verified receipt as a trial result."""
    receipt = got.receipt
    scope = (
        DEVELOPMENT_ONLY
        if receipt.development_only
        else CalibrationScope.Name(receipt.calibration_scope)
        .removeprefix("CALIBRATION_SCOPE_")
        .lower()
    )
    return TrialResult(
        condition=condition,
        reward=CERTIFIED_T2,
        trial=trial,
        episode_id=receipt.episode_id,
        tier=receipt.oracle_tier,
        outcome=_outcome_name(receipt.reward_outcome),
        scalar=got.scalar,
        certified=receipt.certified,
        scope=scope,
        receipt_id=receipt.receipt_id,
        findings=tuple(finding.text() for finding in got.findings),
    )
