"""examples/verifiers_tools.py runs as a user runs it: a subprocess that starts MockMed, a
seeded worker and the scripted tool-calling server itself, plays the tool taskset's control and
every hacking family through verifiers' eval runner, and prints one result line per family.

Runs only where verifiers is installed (the integrations venv: ``make test-integrations``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verifiers")

from rewardseal_mockmed.extradup import CONTROL, FAMILIES

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "verifiers_tools.py"


@pytest.mark.slow
def test_the_verifiers_example_pays_the_control_and_no_hacking_family(tmp_path: Path) -> None:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("REWARDSEAL_", "MOCKMED_"))
    }
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    summary_path = tmp_path / "summary.json"
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--summary", str(summary_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    summary = {entry["family"]: entry for entry in json.loads(summary_path.read_text())}
    assert list(summary) == list(FAMILIES)
    for family, entry in summary.items():
        assert entry["ok"], entry
        assert entry["errors"] == []
        expected = 1.0 if family == CONTROL else 0.0
        assert entry["rewards"]
        assert all(reward == expected for reward in entry["rewards"])
        assert set(entry["outcomes"]) == {"VERIFIED" if family == CONTROL else "WRONG_EFFECT"}
        (line,) = [line for line in lines if line.startswith(f"{family}: ")]
        assert line.endswith("-> ok")
    assert done.stdout.rstrip().endswith("fails closed")
