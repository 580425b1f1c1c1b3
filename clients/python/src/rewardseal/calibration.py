"""Calibration arithmetic and ``calibration.json``.

The exact one-sided Clopper-Pearson bound (R-CAL-1, R-CAL-4), and the one reader and writer of
``calibration.json``, the file a worker's calibration leaves beside a bundle and that
``rewardseal-control certificates issue`` sends to the control plane.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from google.protobuf import json_format

from rewardseal.core import strict_json
from rewardseal.core.errors import ValidationError
from rewardseal.core.validation import validate_calibration_summary
from rewardseal.v1.certificate_pb2 import CalibrationSummary

METHOD = "clopper_pearson_one_sided"
"""The only method a calibration summary may name."""
EPSILON_KEY: Final = "epsilon"
"""The convenience field :func:`summary_to_json` adds; readers recompute it, never trust it."""
CALIBRATION_JSON: Final = "calibration.json"
"""The name readers give the document in their messages unless told another."""


def clopper_pearson_upper(false_accepts: int, trials: int, delta: float = 0.05) -> float:
    """Exact one-sided upper bound on a false-accept rate at confidence ``1 - delta``.

    With k false accepts in n trials it is the ``1 - delta`` quantile of Beta(k + 1, n - k),
    and 1.0 when k == n.
    """
    if trials < 1:
        raise ValidationError("the bound needs at least one trial")
    if not 0 <= false_accepts <= trials:
        raise ValidationError(f"false accepts {false_accepts} must be in 0..{trials}")
    if not 0 < delta < 1:
        raise ValidationError(f"delta must be in (0, 1), got {delta!r}")
    if false_accepts == trials:
        return 1.0
    # Imported here, not at module level: scipy.stats costs seconds to import and every CLI
    # (worker, control, kit) imports this module, while only calibration and issuing call it.
    from scipy.stats import beta

    return float(beta.ppf(1.0 - delta, false_accepts + 1, trials - false_accepts))


def delta_from_summary(summary: CalibrationSummary) -> float:
    """The certificate's delta, ``1 - confidence``, without binary floating-point noise.

    ``1 - 0.95`` is 0.050000000000000044 in binary floating point; rounded to 12 decimals it is
    0.05, so a delta of 0.05 meets a contract policy whose maximum is 0.05.
    """
    return round(1.0 - summary.confidence, 12)


def epsilon_from_summary(summary: CalibrationSummary) -> float:
    """Recompute epsilon from a summary's own counts and confidence; never trust a given one."""
    if summary.method != METHOD:
        raise ValidationError(f"calibration method {summary.method!r} is not {METHOD!r}")
    return clopper_pearson_upper(summary.false_accepts, summary.trials, 1.0 - summary.confidence)


def summary_to_json(summary: CalibrationSummary) -> dict[str, Any]:
    """``calibration.json``: the summary's proto3 JSON mapping (original field names, defaults
    included) plus a top-level ``"epsilon"`` that readers recompute and never trust (R-CAL-4).
    """
    doc: dict[str, Any] = json_format.MessageToDict(
        summary,
        preserving_proto_field_name=True,
        always_print_fields_with_no_presence=True,
    )
    doc[EPSILON_KEY] = epsilon_from_summary(summary)
    return doc


def summary_from_json(
    doc: Mapping[str, Any], *, source: str = CALIBRATION_JSON
) -> CalibrationSummary:
    """Parse a decoded ``calibration.json``; the ``"epsilon"`` convenience field is dropped
    unread (R-CAL-4: whoever issues recomputes it from the counts). ``source`` names the
    document in error messages (a path, say).

    Raises:
        ValidationError: not an object, unknown fields, wrong types, or a summary that breaks
            R-CAL-2/3.
    """
    if not isinstance(doc, Mapping):
        raise ValidationError(f"{source} must be a JSON object")
    body = {k: v for k, v in doc.items() if k != EPSILON_KEY}
    summary = CalibrationSummary()
    try:
        json_format.ParseDict(body, summary)
    except json_format.ParseError as exc:
        raise ValidationError(f"{source} is not a calibration summary ({exc})") from None
    validate_calibration_summary(summary)
    return summary


def read_calibration(path: Path) -> CalibrationSummary:
    """Read and parse the ``calibration.json`` file at ``path`` (see :func:`summary_from_json`).

    Raises:
        ValidationError: the file is missing, unreadable or not strict JSON, or not a valid
            calibration summary; every message starts with ``path``.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValidationError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise ValidationError(f"{path}: not readable JSON ({exc})") from None
    try:
        document = strict_json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValidationError(f"{path}: not readable JSON ({exc})") from None
    return summary_from_json(document, source=str(path))
