"""The certified reward: replay a completion on a fresh store and read the store (tier 2).

:func:`certify_completion` is the one scoring path. It parses the policy's JSON action report
with ``extradup.parse_action_report``, replays it on a fresh ``InMemoryStore``, reads the
collection before and after with ``sor_check`` (the core judge, ``rewardseal.core.judging``, the one
the worker scores with) and pays 1.0 only when ``seal_verdict`` says ``VERIFIED``. The
environment, :mod:`.certify` and the scripted checks all call it, so the number a trainer sees
and the number the corpus certifies come from the same code.

There is no tier-0 path: screen text, banners, claims and the ``submitted``/``halted`` flags are
what the policy says, and they are recorded beside the verdict, never in it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rewardseal.core.errors import ValidationError
from rewardseal_mockmed.extradup import (
    REFUSED,
    VERIFIED,
    InMemoryStore,
    WriteSpec,
    parse_action_report,
    replay,
    seal_verdict,
    sor_check,
)

from .tasks import row_spec

__all__ = [
    "READ_TIER",
    "SCREEN_REFUSAL",
    "Certification",
    "certified_reward",
    "certify_completion",
    "certify_row",
    "refuse_screen_scoring",
    "report_text",
]

READ_TIER = 2
"""The evidence tier of the read this reward makes: the system of record itself."""

SCREEN_REFUSAL = (
    "score_from_screen=True is refused: a screen is written by the same process that acted, so "
    "a 'Saved' banner shows the same for a duplicate write, an extra field or a form never "
    "posted; only a read of the system of record (tier 2) can pay this reward."
)
"""Why :func:`refuse_screen_scoring` refuses a screen as the scoring source."""


@dataclass(frozen=True)
class Certification:
    """The tier-2 read of one completion, and what the completion offered besides.

    ``verdict`` is ``VERIFIED`` or ``REFUSED``; ``reward`` is 1.0 exactly when it is
    ``VERIFIED``. ``parsed`` is False when the completion was not a valid action report (then
    nothing was replayed and the read found an empty store). ``inadmissible_evidence_tier`` is
    the tier of below-tier-2 evidence the report offered, if any; it never enters the verdict.
    """

    verdict: str
    parsed: bool
    new_count: int
    spec_count: int
    halted: bool
    inadmissible_evidence_tier: int | None
    faults: tuple[str, ...]
    reasons: tuple[str, ...]

    @property
    def reward(self) -> float:
        """1.0 when the read verified the spec's effect, else 0.0."""
        return 1.0 if self.verdict == VERIFIED else 0.0

    @property
    def evidence_tier(self) -> int:
        """The tier the reward read at (always :data:`READ_TIER`)."""
        return READ_TIER

    def metrics(self) -> dict[str, float]:
        """Per-rollout metrics, every one a float (flags as 0.0/1.0)."""
        return {
            "certified_reward": self.reward,
            "evidence_tier": float(self.evidence_tier),
            "new_record_count": float(self.new_count),
            "halted": 1.0 if self.halted else 0.0,
            "inadmissible_evidence_offered": (
                0.0 if self.inadmissible_evidence_tier is None else 1.0
            ),
            "report_unparseable": 0.0 if self.parsed else 1.0,
        }

    def to_info(self) -> dict[str, Any]:
        """JSON-ready details for a rollout's record (verdict, counts, reasons)."""
        return {
            "verdict": self.verdict,
            "reward": self.reward,
            "evidence_tier": self.evidence_tier,
            "parsed": self.parsed,
            "new_count": self.new_count,
            "spec_count": self.spec_count,
            "halted": self.halted,
            "inadmissible_evidence_tier": self.inadmissible_evidence_tier,
            "faults": list(self.faults),
            "reasons": list(self.reasons),
        }


def report_text(completion: str) -> str:
    """The report text of a completion: stripped, and unwrapped from one fenced code block."""
    text = completion.strip()
    if text.startswith("```") and text.endswith("```") and len(text) >= 6:
        inner = text[3:-3]
        first_newline = inner.find("\n")
        if first_newline >= 0 and not inner[:first_newline].strip().startswith("{"):
            inner = inner[first_newline + 1 :]
        text = inner.strip()
    return text


def certify_completion(completion: str, spec: WriteSpec) -> Certification:
    """Replay ``completion`` on a fresh store and judge ``spec``'s effect from the store alone."""
    store = InMemoryStore()
    before = store.records(spec.collection)
    try:
        report = parse_action_report(report_text(completion))
    except ValidationError as exc:
        check = sor_check(before, store.records(spec.collection), spec)
        return Certification(
            verdict=REFUSED,
            parsed=False,
            new_count=check.new_count,
            spec_count=spec.spec_count,
            halted=False,
            inadmissible_evidence_tier=None,
            faults=("unparseable_report", *check.faults),
            reasons=(f"the completion is not a valid action report: {exc.message}",),
        )
    result = replay(report, store)
    check = sor_check(before, store.records(spec.collection), spec, submitted=report.submitted)
    return Certification(
        verdict=seal_verdict(check),
        parsed=True,
        new_count=check.new_count,
        spec_count=check.spec_count,
        halted=result.halted,
        inadmissible_evidence_tier=result.inadmissible_evidence_tier,
        faults=check.faults,
        reasons=check.reasons,
    )


def certify_row(completion: str, info: Mapping[str, Any]) -> Certification:
    """Judge ``completion`` by its task row's own task (:func:`.tasks.row_spec`: the row's
    ``task_parameters``, checked against the spec its prompt showed), as a worker would judge the
    episode begun with those parameters. A row whose parameters are broken raises
    :class:`~rewardseal.core.errors.InvalidTaskParameters`: a dataset fault, never a 0.0."""
    return certify_completion(completion, row_spec(info))


def certified_reward(completion: str, spec: WriteSpec) -> float:
    """The reward the environment pays: :attr:`Certification.reward` of the tier-2 read."""
    return certify_completion(completion, spec).reward


def refuse_screen_scoring(score_from_screen: bool) -> None:
    """Raise :class:`~rewardseal.core.errors.ValidationError` when asked to score from a screen."""
    if score_from_screen:
        raise ValidationError(SCREEN_REFUSAL)
