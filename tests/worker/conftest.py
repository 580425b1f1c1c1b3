"""Worker fixtures: the tier-2 and tier-0 MockMed workers over a private seeded data dir."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support.worker_stack import RunningStack, start_stack, stop_stack

__all__ = ["RunningStack", "start_stack", "stop_stack"]


@pytest.fixture
async def stack(data_dir: Path) -> AsyncIterator[RunningStack]:
    """The tier-2 MockMed worker over a private data dir."""
    running = await start_stack(data_dir)
    yield running
    await stop_stack(running)


@pytest.fixture
async def tier0_stack(data_dir: Path) -> AsyncIterator[RunningStack]:
    """The tier-0 (screen dump) MockMed worker over a private data dir."""
    running = await start_stack(data_dir, contract="mockmed-tier0")
    yield running
    await stop_stack(running)
