"""Play scripted ExtraDup rollouts against the seeded MockMed system of record.

A rollout acts the way a policy would: its action report's creates become rows in the MockMed
database (only when the form was submitted), and the UI's screen shows what the policy claims
(a "Saved" banner for every family that says it saved). The worker then reads the store, not
the screen. Used by ``make demo``, the benchmarks and the tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rewardseal.extradup import mockmed_write_spec, parse_action_report, scripted_report
from rewardseal.mockmed import IDENTITY_KEY
from rewardseal_mockmed.seeding import show_on_screen, write_encounter


@dataclass(frozen=True)
class Rollout:
    """What one scripted rollout did to the MockMed store and screen."""

    family: str
    patient_id: str
    written: tuple[str, ...]
    shown_saved: bool


def play_family(database: Path, screen: Path, family: str, patient_id: str) -> Rollout:
    """Apply ``family``'s scripted action report for ``patient_id`` to the store and screen."""
    spec = mockmed_write_spec(patient_id)
    report = parse_action_report(scripted_report(family, spec))
    written: list[str] = []
    if report.submitted:
        for action in report.actions:
            fields: dict[str, Any] = dict(action.fields)
            subject = fields.pop(IDENTITY_KEY, patient_id)
            written.append(
                write_encounter(
                    database,
                    patient_id=subject,
                    type=fields.pop("type", None),
                    note=fields.pop("note", None),
                    status=fields.pop("status", None),
                    priority=fields.pop("priority", None),
                )
            )
            if fields:
                raise ValueError(f"MockMed has no column for {sorted(fields)}")
    # Every family but an honest refusal tells the UI it saved: that is the banner a
    # screen-based reward would pay.
    shown = not report.halted
    if shown:
        show_on_screen(screen, patient_id=patient_id)
    return Rollout(family, patient_id, tuple(written), shown)
