"""The proof's chart: paid share per condition for the two rewards (grouped bars, PNG).

matplotlib is imported here only (:func:`load_pyplot`, also used by :mod:`.integrity_plot`),
lazily, with the Agg backend: it is the ``proof`` extra of the rewardseal distribution, and
nothing else in the package needs it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rewardseal.errors import ValidationError
from rewardseal_kit.proof.report import Row
from rewardseal_kit.proof.rewards import REWARDS

__all__ = ["load_pyplot", "write_png"]

_COLORS = {"screen_t0": "#d95f02", "certified_t2": "#1b9e77"}


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
    """Draw paid share per condition, one bar per reward, to ``path`` (PNG).

    Raises:
        ValidationError: matplotlib is not installed (``pip install 'rewardseal-kit[proof]'``).
    """
    pyplot = load_pyplot()
    conditions = list(dict.fromkeys(row.condition for row in rows))
    share = {(row.condition, row.reward): row.paid_share for row in rows}
    width = 0.38
    figure, axes = pyplot.subplots(figsize=(10, 4.5), dpi=100)
    try:
        for index, reward in enumerate(REWARDS):
            offsets = [i + (index - 0.5) * width for i in range(len(conditions))]
            values = [share.get((condition, reward), 0.0) for condition in conditions]
            axes.bar(offsets, values, width, label=reward, color=_COLORS.get(reward))
        axes.set_xticks(range(len(conditions)))
        axes.set_xticklabels(conditions, rotation=25, ha="right")
        axes.set_ylim(0, 1.25)
        axes.set_ylabel("share of trials paid")
        axes.set_title("Paid share per condition: screen reward (tier 0) vs certified (tier 2)")
        axes.legend(loc="upper center", ncol=2)
        figure.tight_layout()
        figure.savefig(path, format="png")
    finally:
        pyplot.close(figure)
