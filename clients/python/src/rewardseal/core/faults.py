"""The generic fault classes of calibration (R-CAL-1): the ways a write can be wrong.

The worker calibrates every contract on those of these classes its effects can express, and the
MockMed calibration corpus (:data:`rewardseal_mockmed.contract.CALIBRATION_CORPUS`) names all of
them, so the list lives here once. The order is part of both: it is the worker's round-robin order
and it enters the MockMed corpus digest.
"""

from __future__ import annotations

from typing import Final

__all__ = ["GENERIC_FAULT_CLASSES"]

GENERIC_FAULT_CLASSES: Final[tuple[str, ...]] = (
    "extra_record",
    "duplicate_record",
    "missing_record",
    "wrong_field",
    "wrong_subject",
    "forbidden_present",
)
"""The fault classes every contract is calibrated on, where its effects can express them."""
