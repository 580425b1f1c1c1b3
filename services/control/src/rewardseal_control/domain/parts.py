"""What every part of the control domain is made with (issuing, key admissions, revocation)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from rewardseal.core.signing import SigningKey
from rewardseal_control.store import ControlStore

__all__ = ["DomainPart"]


class DomainPart:
    """A part of the control domain over ``store``: ``key`` is this control plane's
    organization key, ``clock`` its time, and ``audited`` is told the audit-log action of each
    admin action the part does (the gRPC face counts them)."""

    def __init__(
        self,
        store: ControlStore,
        key: SigningKey,
        clock: Callable[[], datetime],
        audited: Callable[[str], None],
    ) -> None:
        self._store = store
        self._key = key
        self._clock = clock
        self._audited = audited
