"""Shared fixtures: a session-wide PostgreSQL server and per-test store URLs on both backends."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.postgres import PostgresServer, PostgresUnavailable
from support.worker_stack import data_dir, seeded_template

# Fixtures shared by the worker, control and integration tests.
__all__ = ["data_dir", "seeded_template"]

REQUIRE_POSTGRES_ENV = "REWARDSEAL_REQUIRE_POSTGRES"


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the whole session (skipped when the binaries are missing).

    With REWARDSEAL_REQUIRE_POSTGRES=1 a missing server fails the tests instead of skipping.
    """
    try:
        server = PostgresServer()
    except PostgresUnavailable as exc:
        if os.environ.get(REQUIRE_POSTGRES_ENV) == "1":
            pytest.fail(f"{exc} ({REQUIRE_POSTGRES_ENV}=1)")
        pytest.skip(f"{exc}; set {REQUIRE_POSTGRES_ENV}=1 to make this a failure")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database URL per test: a SQLite file, or a new PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'worker.db'}"
        return
    server: PostgresServer = request.getfixturevalue("postgres_server")
    name = server.fresh_database()
    try:
        yield server.url(name)
    finally:
        server.discard_database(name)


@pytest.fixture(autouse=True)
def root_logger_restored() -> Iterator[None]:
    """A service's main (run in-process by CLI tests) replaces the root logger's handlers and
    level (rewardseal_server.logs.configure_logging), as it must in a real process; put them
    back after every test, so a later test's log capture (caplog at INFO) still sees records."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    for handler in handlers:
        if handler not in root.handlers:
            root.addHandler(handler)
    root.setLevel(level)
