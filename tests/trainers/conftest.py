"""Fixtures of the trainer tests: a control plane with the integrity service on a SQLite file,
and ``stack``, a worker over the default-scoring MockMed bundle (what the verl tests score
against; a file that needs the seeded tier-2 worker defines its own ``stack``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support.integrity_trainer import integrity_control
from support.verl_episodes import start_default_scoring_stack
from support.worker_stack import RunningStack, stop_stack

__all__ = ["integrity_control", "stack"]


@pytest.fixture
async def stack(data_dir: Path) -> AsyncIterator[RunningStack]:
    """A worker over the default-scoring MockMed bundle, stopped after the test."""
    running = await start_default_scoring_stack(data_dir)
    yield running
    await stop_stack(running)
