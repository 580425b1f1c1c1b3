"""The integrity proof's chart: per boundary, optimizer vs sentinel acceptance and the decision.

One panel per case. Each boundary has two stacked bars (optimizer, sentinel): the share of rows
that side accepted, solid, then the share it left unscored, hatched grey on top (an unscored row
is never drawn as a refusal); the label above is the acceptance among scored rows, as in the
Markdown, and the unscored count. Above each boundary: the decision (PASS / FAIL) and its action; a
run that paused gets a red line after that boundary and its later boundaries are shaded "not
trained". A binding refused as a gate is a panel that says so, with its blockers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from rewardseal_kit.proof.integrity.run import BoundaryAudit, CaseRun
from rewardseal_kit.proof.plot import load_pyplot

__all__ = ["write_integrity_png"]

_OPTIMIZER: Final = "#d95f02"
_SENTINEL: Final = "#1b9e77"
_UNSCORED: Final = "#bdbdbd"
_DECISION_COLORS: Final = {"pass": "#1a7f37", "warn": "#b08800", "fail": "#cf222e"}
_WIDTH: Final = 0.36


def _bars(axes: Any, boundaries: Sequence[BoundaryAudit]) -> None:
    for side, color, offset in (("optimizer", _OPTIMIZER, -0.5), ("sentinel", _SENTINEL, 0.5)):
        xs = [b.boundary + offset * _WIDTH for b in boundaries]
        accepted = [getattr(b, f"{side}_accepted") / b.rows for b in boundaries]
        unscored = [getattr(b, f"{side}_unscored") / b.rows for b in boundaries]
        axes.bar(xs, accepted, _WIDTH, color=color, label=f"{side} accepts")
        axes.bar(
            xs,
            unscored,
            _WIDTH,
            bottom=accepted,
            color="white",
            edgecolor=_UNSCORED,
            hatch="///",
            label="unscored (no verdict)",
        )
        tops = [a + u for a, u in zip(accepted, unscored, strict=True)]
        for x, b, top in zip(xs, boundaries, tops, strict=True):
            # The label is the acceptance among scored rows (as the Markdown); unscored apart.
            count = getattr(b, f"{side}_unscored")
            scored = b.rows - count
            label = "-" if scored == 0 else f"{getattr(b, f'{side}_accepted') / scored:.0%}"
            if count:
                label += f"\n+{count}\nunscored"
            axes.text(x, top + 0.02, label, ha="center", va="bottom", fontsize=7)


def _only(boundary: BoundaryAudit) -> str:
    rate = boundary.optimizer_only_rate
    return "optimizer-only -" if rate is None else f"optimizer-only {rate:.0%}"


def _case_panel(axes: Any, case: CaseRun, drift: Sequence[float]) -> None:
    axes.set_title(
        f"Case {case.name}: optimizer {case.optimizer} / sentinel {case.sentinel}",
        fontsize=10,
        loc="left",
    )
    axes.set_xlim(-0.6, len(drift) - 0.4)
    axes.set_ylim(0, 1.6)  # room above the bars for the labels and the decision
    axes.set_yticks([0.0, 0.25, 0.5, 0.75, 1.0])
    axes.set_yticklabels(["0%", "25%", "50%", "75%", "100%"])
    axes.set_xticks(range(len(drift)))
    axes.set_xticklabels(
        [f"boundary {i}\n{share:.0%} banner lies" for i, share in enumerate(drift)]
    )
    axes.set_ylabel("share of rows")
    if not case.gating_eligible:
        # "primary_sentinel_correlated:shared_worker_key" -> one line per shared part.
        head, *parts = (blocker.split(":")[-1] for blocker in case.binding_blockers)
        shared = "\n".join(f"  {part.replace('_', ' ')}" for part in parts)
        axes.text(
            (len(drift) - 1) / 2,
            0.7,
            f"REFUSED AS A GATE\n{head}\n{shared}\n\nno boundary audited as a gate",
            ha="center",
            va="center",
            fontsize=9,
            color=_DECISION_COLORS["fail"],
            bbox={"boxstyle": "round", "facecolor": "#fff5f5", "edgecolor": "#cf222e"},
        )
        return
    _bars(axes, case.boundaries)
    for b in case.boundaries:
        axes.text(
            b.boundary,
            1.36,
            f"{b.outcome.upper()}: {b.action}\n{_only(b)}",
            ha="center",
            fontsize=9,
            fontweight="bold",
            color=_DECISION_COLORS.get(b.outcome, "black"),
        )
    if case.paused_at is not None:
        edge = case.paused_at + 0.5
        axes.axvline(edge, color=_DECISION_COLORS["fail"], linewidth=2)
        axes.text(edge + 0.03, 1.53, "run paused", color=_DECISION_COLORS["fail"], fontsize=9)
        if case.not_trained:
            axes.axvspan(edge, len(drift) - 0.4, color="#eeeeee", zorder=0)
            middle = (edge + len(drift) - 0.4) / 2
            axes.text(middle, 0.5, "not trained", ha="center", color="#666666", fontsize=10)


def write_integrity_png(cases: Mapping[str, CaseRun], drift: Sequence[float], path: Path) -> None:
    """Draw every case's panel to ``path`` (PNG).

    Raises:
        ValidationError: matplotlib is not installed (``pip install 'rewardseal-kit[proof]'``).
    """
    pyplot = load_pyplot()
    figure, panels = pyplot.subplots(
        1, len(cases), figsize=(5.2 * len(cases), 4.8), dpi=100, sharey=True
    )
    try:
        for axes, case in zip(panels, cases.values(), strict=True):
            _case_panel(axes, case, drift)
        handles, labels = panels[0].get_legend_handles_labels()
        unique = dict(sorted(zip(labels, handles, strict=True), key=lambda item: item[0][0]))
        figure.legend(unique.values(), unique.keys(), loc="lower center", ncol=len(unique))
        figure.suptitle(
            "Integrity proof: a policy drifting toward the banner lie, audited at every boundary"
        )
        figure.tight_layout(rect=(0, 0.07, 1, 0.95))
        figure.savefig(path, format="png")
    finally:
        pyplot.close(figure)
