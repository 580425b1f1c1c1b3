"""The fault switch: make MockMed's reads slow, down, failing or malformed (tests only).

Modes (reads are ``GET /api/encounters``, ``GET /fhir/...`` and ``GET /screen.json``; writes,
the health check and the switch itself are never affected):

* ``none``: normal service;
* ``slow``: sleep ``delay_seconds`` before answering (then answer normally);
* ``down``: answer 503;
* ``error500``: answer 500;
* ``malformed``: answer 200 with a JSON content type and a body that is not JSON.
"""

from __future__ import annotations

import threading
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["DEFAULT_DELAY_SECONDS", "MALFORMED_BODY", "FaultMode", "FaultSetting", "FaultSwitch"]

FaultMode = Literal["none", "slow", "down", "error500", "malformed"]
DEFAULT_DELAY_SECONDS: Final = 1.0
MAX_DELAY_SECONDS: Final = 600.0
MALFORMED_BODY: Final = b'{"resourceType": "Bundle", "encounters": [{"id": "enc-'
"""What a malformed read answers: truncated JSON (a parser must refuse it)."""


class FaultSetting(BaseModel):
    """The body of ``POST /admin/faults`` and the answer of ``GET /admin/faults``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: FaultMode
    delay_seconds: float = Field(
        default=DEFAULT_DELAY_SECONDS, ge=0.0, le=MAX_DELAY_SECONDS, allow_inf_nan=False
    )


class FaultSwitch:
    """The current fault setting. Thread-safe."""

    def __init__(self) -> None:
        """Start in mode ``none``."""
        self._lock = threading.Lock()
        self._setting = FaultSetting(mode="none")

    def get(self) -> FaultSetting:
        """The current setting."""
        with self._lock:
            return self._setting

    def set(self, setting: FaultSetting) -> FaultSetting:
        """Switch to ``setting``; return it."""
        with self._lock:
            self._setting = setting
            return setting
