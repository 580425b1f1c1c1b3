"""What every task of the worker's control link shares: its log, its call deadline and the
backoff between tries (:mod:`rewardseal_worker.control_link`).

The link's parts (:mod:`.control_link`, :mod:`.control_registration`,
:mod:`.receipt_forwarding`, :mod:`.key_refusals`) log under ONE name,
``rewardseal_worker.control_link``: it is the name operators filter on (docs/operations.md)
for everything the link says, whichever part says it.
"""

from __future__ import annotations

from typing import Final

__all__ = ["CALL_TIMEOUT_SECONDS", "LINK_LOGGER", "MAX_BACKOFF_SECONDS", "backoff"]

LINK_LOGGER: Final = "rewardseal_worker.control_link"
"""The name of the link's log (see the module docstring)."""

CALL_TIMEOUT_SECONDS = 10.0
"""The deadline of one call to control."""

MAX_BACKOFF_SECONDS = 30.0
"""The longest wait between two tries of a task."""


def backoff(attempt: int) -> float:
    """Seconds to wait before retry number ``attempt`` (exponential, capped)."""
    return float(min(0.25 * 2 ** min(attempt, 10), MAX_BACKOFF_SECONDS))
