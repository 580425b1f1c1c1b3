"""The proof's chart: paid share per condition for the two rewards (grouped bars, PNG).

What a reader must not misread, and how the chart keeps them from it:

* An unscored trial (the oracle could not read the system of record) earns nothing and is
  dropped, never paid 0. So it is drawn as its own hatched segment labelled "unscored", stacked
  on the paid share, never as a 0 bar; a refused trial (scored, not paid) is the empty part.
* Every bar says how many trials it stands for (``n``) and how many were paid.
* The legend names each reward in words and tier ("screen reward, tier 0").
* The y-axis is a share: it stops at 1.

:func:`bars` computes what is drawn (pure, tested); :func:`write_png` draws it. matplotlib is
imported here only (:func:`load_pyplot`, also used by :mod:`.integrity_plot`), lazily, with the
Agg backend: it is the ``proof`` extra of the rewardseal distribution, and nothing else in the
package needs it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from rewardseal.core.errors import ValidationError
from rewardseal_kit.proof.report import Row
from rewardseal_kit.proof.rewards import CERTIFIED_T2, REWARDS, SCREEN_T0

__all__ = ["LEGEND", "UNSCORED_LABEL", "Bar", "bars", "load_pyplot", "write_png"]

_COLORS: Final = {SCREEN_T0: "#d95f02", CERTIFIED_T2: "#1b9e77"}
LEGEND: Final = {SCREEN_T0: "screen reward, tier 0", CERTIFIED_T2: "certified reward, tier 2"}
"""How the legend names each reward."""
UNSCORED_LABEL: Final = "unscored (dropped, never paid 0)"
"""The legend entry of the hatched segments."""
_WIDTH: Final = 0.38


@dataclass(frozen=True)
class Bar:
    """One bar: a reward's trials of one condition, as shares of its ``trials``.

    ``paid`` (solid) and ``unscored`` (hatched, stacked on it) never add up to more than 1; what
    is left up to 1 is the share scored and not paid. ``label`` is written above the bar.
    """

    condition: str
    reward: str
    x: float
    trials: int
    paid: float
    unscored: float
    label: str


def _label(row: Row) -> str:
    """``n=3`` and what happened to those trials, in words."""
    lines = [f"n={row.trials}", f"{row.paid} paid"]
    if row.unscored:
        lines.append(f"{row.unscored} unscored")
    return "\n".join(lines)


def bars(rows: Sequence[Row]) -> list[Bar]:
    """The bars to draw: one per row, grouped by condition (in row order), one slot per reward.

    Raises:
        ValidationError: a row's reward is not one the chart knows, or it counts more paid and
            unscored trials than it has (the chart would overflow its axis).
    """
    conditions = list(dict.fromkeys(row.condition for row in rows))
    drawn = []
    for row in rows:
        if row.reward not in REWARDS:
            raise ValidationError(f"the chart has no place for reward {row.reward!r}")
        if row.paid + row.unscored > row.trials:
            raise ValidationError(
                f"{row.condition}/{row.reward}: {row.paid} paid and {row.unscored} unscored "
                f"of {row.trials} trials"
            )
        offset = (REWARDS.index(row.reward) - (len(REWARDS) - 1) / 2) * _WIDTH
        whole = row.trials or 1  # a row of no trials draws nothing (0 of 0)
        drawn.append(
            Bar(
                condition=row.condition,
                reward=row.reward,
                x=conditions.index(row.condition) + offset,
                trials=row.trials,
                paid=row.paid / whole,
                unscored=row.unscored / whole,
                label=_label(row),
            )
        )
    return drawn


def load_pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (files only, no display).

    Raises:
        ValidationError: matplotlib is not installed (``pip install 'rewardseal-kit[proof]'``).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError as exc:
        raise ValidationError(
            "--png needs matplotlib: pip install 'rewardseal-kit[proof]'"
        ) from exc
    return pyplot


def write_png(rows: Sequence[Row], path: Path) -> None:
    """Draw :func:`bars` of ``rows`` to ``path`` (PNG).

    Raises:
        ValidationError: matplotlib is not installed (``pip install 'rewardseal-kit[proof]'``),
            or :func:`bars` refuses the rows.
    """
    drawn = bars(rows)
    pyplot = load_pyplot()
    conditions = list(dict.fromkeys(bar.condition for bar in drawn))
    figure, axes = pyplot.subplots(figsize=(13, 5.5), dpi=100)
    try:
        for reward in REWARDS:
            mine = [bar for bar in drawn if bar.reward == reward]
            xs = [bar.x for bar in mine]
            color = _COLORS[reward]
            axes.bar(xs, [bar.paid for bar in mine], _WIDTH, color=color, label=LEGEND[reward])
            # A scored trial that was not paid is a real 0: a bar of no height, so a thick
            # base line in the reward's colour shows the bar is there (and its label says so).
            # Never under an unscored segment: that is not a 0.
            zeros = [bar.x for bar in mine if not bar.paid and not bar.unscored]
            axes.hlines(
                [0.0] * len(zeros),
                [x - _WIDTH / 2 for x in zeros],
                [x + _WIDTH / 2 for x in zeros],
                colors=color,
                linewidth=3,
            )
            hatched = [bar for bar in mine if bar.unscored]
            axes.bar(
                [bar.x for bar in hatched],
                [bar.unscored for bar in hatched],
                _WIDTH,
                bottom=[bar.paid for bar in hatched],
                color="white",
                edgecolor="#555555",
                hatch="///",
                label=UNSCORED_LABEL if reward == REWARDS[-1] else None,
            )
            for bar in hatched:
                axes.text(
                    bar.x,
                    bar.paid + bar.unscored / 2,
                    "unscored",
                    ha="center",
                    va="center",
                    rotation=90,
                    fontsize=8,
                    bbox={"facecolor": "white", "edgecolor": "none", "pad": 1},
                )
            for bar in mine:
                axes.text(bar.x, 1.01, bar.label, ha="center", va="bottom", fontsize=7)
        axes.set_xticks(range(len(conditions)))
        axes.set_xticklabels(conditions, rotation=25, ha="right")
        axes.set_xlim(-0.6, len(conditions) - 0.4)
        axes.set_ylim(0, 1)
        axes.set_ylabel("share of trials paid")
        axes.set_title(
            "Paid share per condition: screen reward (tier 0) vs certified reward (tier 2)",
            pad=44,
        )
        axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.28), ncol=3, frameon=False)
        figure.tight_layout()
        figure.savefig(path, format="png")
    finally:
        pyplot.close(figure)
