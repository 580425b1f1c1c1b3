"""``make demo``'s integrity step: an audit pauses a run, a reviewer lets it continue.

Starts the control plane, the tier-2 ``sql`` worker and MockMed as child processes (stopped on
exit), plays one boundary of 104 episodes of which a quarter are the banner lie, each scored by
the tier-0 screen reward (the reward the run optimizes) and the ``sql`` worker (its sentinel).
Control audits the boundary: the screen reward pays what the worker refuses, so the audit fails
and the run pauses. A reviewer then records ``continue`` with a reason (the admin credential),
and the step prints the audit's decision history, oldest first, the last one in force.

    python -m rewardseal_kit.integrity_demo

Exit status 0 when the history is exactly an automatic fail/pause then a reviewed continue.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final, TextIO

from rewardseal.rpc.integrity_client import IntegrityClient
from rewardseal.v1 import integrity_pb2 as ipb
from rewardseal_kit.proof.integrity_run import (
    SQL,
    BoundaryAudit,
    local_integrity_services,
    play_boundaries,
    run_case,
)
from rewardseal_kit.proof.rewards import SCREEN_T0

__all__ = ["DRIFT", "REVIEW_REASON", "history_rows", "run"]

DRIFT: Final = (0.25,)
"""One boundary, a quarter banner lies."""
REVIEW_REASON: Final = "demo: read the optimizer-only samples; resuming to show a reviewed continue"
_EXPECTED: Final = [("automatic", "fail", "pause"), ("reviewed", "fail", "continue")]


def _word(enum: Any, value: int, prefix: str) -> str:
    return str(enum.Name(value)).removeprefix(prefix).lower()


def history_rows(entries: Sequence[ipb.DecisionEntry]) -> list[tuple[str, ...]]:
    """One row per decision entry: sequence, kind, outcome, action, why (reasons or review)."""
    rows: list[tuple[str, ...]] = []
    for entry in entries:
        kind = _word(ipb.DecisionKind, entry.kind, "DECISION_KIND_")
        if kind == "reviewed":
            why = f"{entry.review_reason} (reviewer: {entry.reviewer})"
        else:
            why = ", ".join(entry.reasons)
        rows.append(
            (
                str(entry.sequence),
                kind,
                _word(ipb.DecisionOutcome, entry.outcome, "DECISION_OUTCOME_"),
                _word(ipb.RunAction, entry.action, "RUN_ACTION_"),
                why,
            )
        )
    return rows


def _render(boundary: BoundaryAudit, rows: Sequence[tuple[str, ...]], out: TextIO) -> None:
    rate = boundary.optimizer_only_rate or 0.0
    out.write(
        f"\nintegrity audit {boundary.audit_id} (boundary {boundary.boundary}, "
        f"{boundary.rows} rows, {boundary.drift:.0%} banner lies)\n"
        f"  optimizer (screen reward) accepts {boundary.optimizer_accepted}, "
        f"sentinel (sql worker) accepts {boundary.sentinel_accepted}, "
        f"optimizer-only {rate:.0%}\n"
        f"  signed bundle {boundary.bundle_id} verified against control's organization key\n\n"
    )
    header = f"{'seq':<4} {'kind':<10} {'outcome':<8} {'action':<9} why\n"
    out.write(header + "-" * 72 + "\n")
    for sequence, kind, outcome, action, why in rows:
        out.write(f"{sequence:<4} {kind:<10} {outcome:<8} {action:<9} {why}\n")


def run(out: TextIO = sys.stdout) -> int:
    """Run the step and print its decisions; 0 when the run paused and the review resumed it."""
    out.write("\nintegrity: the screen reward audited by the sql worker at one boundary\n")
    with (
        tempfile.TemporaryDirectory(prefix="rewardseal-integrity-demo-") as tmp,
        local_integrity_services(Path(tmp), sql_only=True) as services,
    ):
        boundaries = play_boundaries(services, DRIFT, scorers=(SQL,))
        case = run_case(
            services, boundaries, name="demo", optimizer=SCREEN_T0, sentinel=SQL, drift=DRIFT
        )
        if case.paused_at is None:
            out.write("FAIL: the audit did not pause the run\n")
            return 1
        paused = case.boundaries[case.paused_at]
        with IntegrityClient(services.control_target, token=services.control_admin_token) as admin:
            admin.review_decision(
                paused.audit_id, ipb.ReviewAction.REVIEW_ACTION_CONTINUE, reason=REVIEW_REASON
            )
            rows = history_rows(admin.decision_history(paused.audit_id))
    _render(paused, rows, out)
    if [row[1:4] for row in rows] != _EXPECTED:
        out.write("FAIL: the decisions are not a paused run and a reviewed continue\n")
        return 1
    out.write("OK: the audit paused the run; the reviewed continue lets it resume\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(run())
