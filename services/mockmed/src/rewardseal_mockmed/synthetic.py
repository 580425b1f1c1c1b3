"""Synthetic clinical text for MockMed-shaped records: invented, never real patient data.

One vocabulary serves every generator of synthetic encounter notes (MockMed's seeded background
rows, :mod:`rewardseal_mockmed.seeding`, and the ExtraDup variants,
:mod:`rewardseal_mockmed.extradup`), so they read alike and a change to the wording happens in one
place. It lives with MockMed, whose records these are.
"""

from __future__ import annotations

import random
from typing import Final

__all__ = ["COMPLAINTS", "PLANS", "synthetic_note"]

COMPLAINTS: Final[tuple[str, ...]] = (
    "mild headache since morning",
    "sore throat for two days",
    "twisted left ankle during a walk",
    "seasonal allergy flare",
    "low-grade fever overnight",
    "minor cut on the right hand",
    "persistent dry cough",
    "lower back stiffness after lifting",
)
"""Presenting complaints a synthetic note opens with."""

PLANS: Final[tuple[str, ...]] = (
    "vitals stable",
    "recheck blood pressure in two weeks",
    "fluids and rest advised",
    "follow up if symptoms persist",
    "ice and elevation advised",
    "dressing applied",
)
"""Plans a synthetic note closes with."""


def synthetic_note(rng: random.Random) -> str:
    """``"Synthetic: <complaint>; <plan>."``, drawing the complaint, then the plan, from ``rng``.

    The draw order is fixed: callers that seed ``rng`` get the same notes (and the same later
    draws) on every run.
    """
    return f"Synthetic: {rng.choice(COMPLAINTS)}; {rng.choice(PLANS)}."
