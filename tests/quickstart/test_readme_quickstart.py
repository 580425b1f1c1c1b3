"""The README's quickstart, executed as it stands on a fresh clone (issue 28; `make
test-quickstart`, left out of `make test`: several minutes, most of them the fresh .venv).

The `sh` block under the README's *Quickstart* heading is read from this checkout's README and run
by bash, line by line in one shell, in an empty temporary directory, with ``REPO_URL`` set to this
checkout: ``git clone`` therefore takes its committed HEAD (uncommitted edits are not in the
clone), and ``make demo`` in the clone sets up the clone's own ``.venv`` from requirements.lock
through pip as a newcomer's would (the machine's pip cache and configured indexes; nothing of
this checkout's .venv is reused). Then what the README says to look at is checked in the output.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HEADING = "## Quickstart"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1500),
    pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed"),
]


def quickstart_block() -> str:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text[text.index(HEADING) :]
    found = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert found, "no sh block under the README's Quickstart"
    return found.group(1)


def test_the_quickstart_block_is_short_and_starts_with_a_clone() -> None:
    commands = [line for line in quickstart_block().splitlines() if line.strip()]
    assert commands[0].startswith('git clone "$REPO_URL" rewardseal')
    assert any(line.startswith("make demo") for line in commands)
    assert len(commands) <= 10


def test_the_readme_quickstart_runs_on_a_fresh_clone(tmp_path: Path) -> None:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("REWARDSEAL_", "MOCKMED_", "VIRTUAL_ENV", "PYTHONPATH"))
    }
    # The machine's python3 makes the clone's venv, as `make` would for a newcomer.
    env["PATH"] = os.pathsep.join(
        part for part in env.get("PATH", "").split(os.pathsep) if "/.venv" not in part
    )
    env["REPO_URL"] = str(REPO)
    done = subprocess.run(
        ["bash", "-e", "-c", quickstart_block()],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=1400,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    clone = tmp_path / "rewardseal"
    assert (clone / ".venv" / ".setup-stamp").exists()  # its own venv, made by `make demo`
    # What the README tells a newcomer to look at.
    table = {}
    for line in done.stdout.splitlines():
        cells = re.split(r"\s{2,}", line.strip())  # cells: runs of two or more spaces apart
        if len(cells) == 7 and cells[0].startswith("episode_"):
            table[cells[0]] = cells
    assert table["episode_honest_01"][3:6] == ["VERIFIED", "+1.0", "True"], output[-6000:]
    assert table["episode_lie_01"][3] != "VERIFIED"
    assert table["episode_lie_01"][4] in ("+0.0", "unscored")
    assert table["episode_lie_02"][3:6] == ["VERIFIED", "+1.0", "False"]
    assert "OK: the control paid" in done.stdout
    assert re.search(r"^\d+\s+automatic\s+fail\s+pause", done.stdout, re.MULTILINE), output
