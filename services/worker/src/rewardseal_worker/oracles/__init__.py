"""Oracle readers of the system of record (R-W-6): recipes in, records out.

Use :func:`make_reader`; a read failure is :class:`OracleUnavailable`, an outcome, not an error.
The package reads bottom up: :mod:`.base` (the protocol and the checks every kind shares), the
readers (:mod:`.sql`, :mod:`.files`, :mod:`.http`), then :mod:`.registry` (kind -> reader).
"""

from rewardseal_worker.oracles.base import (
    RESERVED_KINDS,
    OracleReader,
    OracleUnavailable,
)
from rewardseal_worker.oracles.registry import make_reader, validate_recipe

__all__ = [
    "RESERVED_KINDS",
    "OracleReader",
    "OracleUnavailable",
    "make_reader",
    "validate_recipe",
]
