"""Control's reward-integrity package loads whichever of its modules a process imports first.

The integrity aggregates build on the control store's tables and the integrity commands on the
control CLI's helpers, while the store composes those aggregates and the CLI dispatches those
commands. Both composers import their integrity parts where they use them, so importing an
integrity module first (a test, a tool, a future caller) never meets a half-loaded module.
Each import runs in a fresh interpreter: in this one the modules are long loaded.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

FIRST_IMPORTS = (
    "rewardseal_control.integrity.store.revisions",
    "rewardseal_control.integrity.store.shards",
    "rewardseal_control.integrity.store.audits",
    "rewardseal_control.integrity.store.decisions",
    "rewardseal_control.integrity.cli.commands",
    "rewardseal_control.integrity.cli.audits",
    "rewardseal_control.integrity.service",
)


@pytest.mark.parametrize("module", FIRST_IMPORTS)
def test_an_integrity_module_imports_first_in_a_fresh_process(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", f"import {module}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
