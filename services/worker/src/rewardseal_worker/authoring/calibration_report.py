"""What ``rewardseal-worker calibrate`` prints about a run: the per-family table, and with
``--explain`` each accepted fault (R-CAL-7).

The table counts, per fault class (family), the draws made, the effective faults among them
(the trials epsilon is computed over), the benign draws (the sandbox stored the correct record)
and the draws the sandbox refused to store, and the false accepts. ``--explain`` names each
accepted fault by its class, how it was made, the contract effect and the fields involved: the
contract's own names, never a value read from the SoR.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TextIO

from rewardseal.v1.certificate_pb2 import CalibrationSummary
from rewardseal_worker.calibration.runner import CalibrationResult, DrawSite

__all__ = ["print_explanation", "print_family_table"]

_HEADER = ("fault class", "draws", "faults", "benign", "rejected", "false accepts")


def print_family_table(summary: CalibrationSummary, out: TextIO) -> None:
    """The per-family table: draws, effective faults, benign, rejected, false accepts."""
    rows = [
        (c.name, c.trials + c.benign + c.rejected, c.trials, c.benign, c.rejected, c.false_accepts)
        for c in summary.fault_classes
    ]
    width = max([len(_HEADER[0]), *(len(r[0]) for r in rows)])
    widths = [max(6, len(h)) for h in _HEADER[1:]]
    print(f"  {_HEADER[0]:<{width}}  " + "  ".join(f"{h:>6}" for h in _HEADER[1:]), file=out)
    for name, *counts in rows:
        cells = "  ".join(f"{n:>{w}}" for n, w in zip(counts, widths, strict=True))
        print(f"  {name:<{width}}  {cells}", file=out)


def _site(draw: DrawSite) -> str:
    fields = ", ".join(draw.fields) if draw.fields else "-"
    return f"{draw.fault_class}/{draw.variant}  effect {draw.effect or '-'}  fields {fields}"


def _grouped(draws: Sequence[DrawSite]) -> list[str]:
    counts = Counter(_site(d) for d in draws)
    return [f"  {n:>4} x {site}" for site, n in sorted(counts.items())]


def print_explanation(result: CalibrationResult, out: TextIO) -> None:
    """Each accepted fault, one line each; benign and rejected draws grouped by where they were.

    What to do about an accepted fault is in docs/authoring.md: tighten ``expect``, add
    ``allowed_fields``, declare the column types the SoR really has.
    """
    leaks = result.false_accept_trials
    print(f"accepted faults  {len(leaks) or 'none'}", file=out)
    for leak in leaks:
        print(f"  trial {leak.trial:<6} {_site(leak)}", file=out)
    if leaks:
        print(
            "                 the checker paid these faults: tighten the effect's expect, add "
            "allowed_fields, or declare the field's type (docs/authoring.md)",
            file=out,
        )
    if result.benign_draws:
        print(
            f"benign           {len(result.benign_draws)} draws the sandbox stored as the correct "
            "record (a type coercion, a column default, a trigger): not faults",
            file=out,
        )
        for line in _grouped(result.benign_draws):
            print(line, file=out)
    if result.rejected_draws:
        print(
            f"rejected         {len(result.rejected_draws)} draws the sandbox refused to store (a "
            "constraint of its schema): faults that cannot happen there",
            file=out,
        )
        for line in _grouped(result.rejected_draws):
            print(line, file=out)
