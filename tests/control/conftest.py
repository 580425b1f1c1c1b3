"""Fixtures of the control-plane tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rewardseal_control.store import ControlStore


@pytest.fixture
def store(store_url: str) -> Iterator[ControlStore]:
    """A migrated, empty control store on each backend."""
    opened = ControlStore(store_url)
    try:
        yield opened
    finally:
        opened.close()
