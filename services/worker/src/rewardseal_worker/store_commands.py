"""How the worker's store commands (``migrate``, ``outbox dead-letter``) run: one wrapper.

Each command is a function of (stdout, environment) returning its exit status; this runs it
under :func:`rewardseal_server.cli_failures.run_cli`, so every store command words a failure
the same way (0 done, 2 a usage error, 1 a store that cannot be reached) and names
``$REWARDSEAL_WORKER_DB_URL`` when the URL came from there.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import TextIO

from rewardseal_server.cli_failures import run_cli
from rewardseal_worker.settings import ENV_PREFIX

__all__ = ["PROG", "run_store_command"]

PROG = "rewardseal-worker"

StoreCommand = Callable[[TextIO, Mapping[str, str]], int]
"""A command body: it writes to the stdout it is given and reads the environment it is given."""


def run_store_command(
    command: StoreCommand,
    out: TextIO | None = None,
    err: TextIO | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """Run ``command`` with ``out`` (default stdout) and ``env`` (default ``os.environ``)."""
    stdout = out or sys.stdout
    environment = os.environ if env is None else env
    return run_cli(
        PROG,
        lambda: command(stdout, environment),
        err=err or sys.stderr,
        db_env=f"{ENV_PREFIX}DB_URL",
    )
