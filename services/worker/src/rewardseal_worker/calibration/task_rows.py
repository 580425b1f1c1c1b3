"""Task rows: the parameter values a calibration draws from a file instead of the declaration
(R-CAL-6, ``calibrate --task-rows FILE.jsonl``).

One JSON object per line, ``{name: value}``, exactly the contract's declared parameters, each of
its type and range (the rule a begin's values meet, R-W-18); blank lines are skipped. Each trial
then takes one row, chosen by its own generator of the run's seed, so a run stays reproducible
from the seed and the file. The corpus digest a sandbox run names covers the rows themselves
(:func:`rewardseal_worker.calibration.sandbox_corpus.sandbox_corpus_digest`), so a certificate
says which rows it was measured on. A refusal names the line and the parameter, never a value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from rewardseal.core import strict_json
from rewardseal.core.errors import RewardSealError, ValidationError
from rewardseal.core.task_parameters import ParameterValue, bound_values, to_wire
from rewardseal.v1.contract_pb2 import RewardContract

__all__ = ["MAX_TASK_ROWS", "TaskRows", "checked_rows", "read_task_rows"]

MAX_TASK_ROWS: Final = 1_000_000
"""The most rows one calibration takes (a dataset's prompts, not a database dump)."""

TaskRows = tuple[Mapping[str, ParameterValue], ...]
"""Checked task rows, in file order."""


def checked_rows(contract: RewardContract, rows: Iterable[Any], *, where: str = "row") -> TaskRows:
    """``rows`` checked against the contract's declaration, as their bound values.

    Raises:
        ValidationError: the contract declares no parameters, there are no rows or too many, or
            a row is not an object of the declared parameters (naming the row and parameter).
    """
    if not contract.task_parameters:
        raise ValidationError("task rows need a contract that declares task parameters")
    checked: list[Mapping[str, ParameterValue]] = []
    for number, row in enumerate(rows, start=1):
        if len(checked) >= MAX_TASK_ROWS:
            raise ValidationError(f"at most {MAX_TASK_ROWS} task rows")
        if not isinstance(row, Mapping):
            raise ValidationError(f"task {where} {number} is not a JSON object")
        try:
            checked.append(bound_values(contract, to_wire(row)))
        except RewardSealError as exc:
            raise ValidationError(
                f"task {where} {number}: {exc.message}", metadata=dict(exc.metadata)
            ) from None
    if not checked:
        raise ValidationError("no task rows: the file holds no JSON object")
    return tuple(checked)


def read_task_rows(contract: RewardContract, path: Path) -> TaskRows:
    """The rows of the JSON Lines file ``path``, checked (see :func:`checked_rows`).

    Raises:
        ValidationError: the file cannot be read, a line is not JSON, or a row is refused.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValidationError(f"task rows file cannot be read ({type(exc).__name__})") from None
    rows: list[Any] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(strict_json.loads(line))
        except (ValueError, RecursionError):
            raise ValidationError(f"task rows line {number} is not JSON") from None
    return checked_rows(contract, rows, where="row")
