"""The receipt chart of a contract page: geometry for an inline SVG, drawn by the template.

Stacked bars of receipts by outcome per span of policy updates, and the certified share of
each span as a line on its own 0-100 % scale. Only numbers and fixed class names come out of
here; the template writes the markup (autoescaped), and the colours live in the stylesheet,
so the page needs neither a script nor an inline style.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from rewardseal_control.store.receipts import TimelineBucket

__all__ = ["Bar", "Chart", "timeline_chart"]

WIDTH: Final = 720
HEIGHT: Final = 240
_LEFT: Final = 48
_RIGHT: Final = 48
_TOP: Final = 12
_BOTTOM: Final = 36


@dataclass(frozen=True)
class Bar:
    """One rectangle: a span's receipts of one outcome."""

    x: float
    y: float
    width: float
    height: float
    outcome: str
    title: str


@dataclass(frozen=True)
class Chart:
    """Everything the template needs to draw the chart."""

    width: int
    height: int
    plot_left: int
    plot_right: int
    plot_top: int
    plot_bottom: int
    bars: Sequence[Bar]
    share_points: str
    """``x,y x,y ...`` of the certified-share line (SVG polyline points)."""
    share_dots: Sequence[tuple[float, float, str]]
    """``(x, y, title)`` of each span's certified share (a dot; one span draws no line)."""
    x_labels: Sequence[tuple[float, str]]
    y_max: int
    outcomes: Sequence[tuple[str, str]]
    """``(label, class suffix)`` of the outcomes drawn, in stacking order (the legend)."""


def css_name(outcome: str) -> str:
    """The stylesheet class suffix of an outcome label (``wrong effect`` -> ``wrong-effect``)."""
    return outcome.replace(" ", "-")


def timeline_chart(buckets: Sequence[TimelineBucket], outcome_label: Callable[[int], str]) -> Chart:
    """The chart of ``buckets`` (not empty), oldest span on the left."""
    plot_width = WIDTH - _LEFT - _RIGHT
    plot_height = HEIGHT - _TOP - _BOTTOM
    y_max = max(bucket.total for bucket in buckets)
    slot = plot_width / len(buckets)
    # Never wider than 36 px: one span alone is a bar, not a wall.
    bar_width = min(max(slot * 0.7, 1.0), 36.0)
    bars: list[Bar] = []
    points: list[str] = []
    dots: list[tuple[float, float, str]] = []
    labels: list[tuple[float, str]] = []
    drawn: list[str] = []
    every = max(1, len(buckets) // 8)
    for index, bucket in enumerate(buckets):
        x = _LEFT + index * slot + (slot - bar_width) / 2
        base = float(HEIGHT - _BOTTOM)
        span = (
            f"update {bucket.first_update}"
            if bucket.first_update == bucket.last_update
            else f"updates {bucket.first_update}-{bucket.last_update}"
        )
        for outcome, count in sorted(bucket.counts.items()):
            label = outcome_label(outcome)
            if label not in drawn:
                drawn.append(label)
            height = plot_height * count / y_max
            base -= height
            bars.append(
                Bar(
                    x=round(x, 2),
                    y=round(base, 2),
                    width=round(bar_width, 2),
                    height=round(height, 2),
                    outcome=css_name(label),
                    title=f"{span}: {count} {label}",
                )
            )
        share = bucket.certified / bucket.total if bucket.total else 0.0
        centre = x + bar_width / 2
        height_at = round(_TOP + plot_height * (1 - share), 2)
        points.append(f"{centre:.2f},{height_at:.2f}")
        dots.append((round(centre, 2), height_at, f"{span}: {100 * share:.1f} % certified"))
        if index % every == 0:
            labels.append((round(centre, 2), str(bucket.first_update)))
    return Chart(
        width=WIDTH,
        height=HEIGHT,
        plot_left=_LEFT,
        plot_right=WIDTH - _RIGHT,
        plot_top=_TOP,
        plot_bottom=HEIGHT - _BOTTOM,
        bars=bars,
        share_points=" ".join(points),
        share_dots=dots,
        x_labels=labels,
        y_max=y_max,
        outcomes=[(label, css_name(label)) for label in drawn],
    )
