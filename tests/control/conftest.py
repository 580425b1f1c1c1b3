"""Fixtures of the control-plane tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from support.control import ControlStack, start_control, stop_control

from rewardseal_control.store import ControlStore


@pytest.fixture
def store(store_url: str) -> Iterator[ControlStore]:
    """A migrated, empty control store on each backend."""
    opened = ControlStore(store_url)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
async def control(store_url: str) -> AsyncIterator[ControlStack]:
    """A control plane on a real server (its organization key registered), on each backend.

    A test module that needs another one (an audit function, a clock) defines its own."""
    stack = await start_control(store_url)
    try:
        yield stack
    finally:
        await stop_control(stack)
