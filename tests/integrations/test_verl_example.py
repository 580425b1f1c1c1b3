"""examples/verl_v1_agent_loop.py runs as a user runs it: a subprocess that starts MockMed and a
seeded worker itself, runs ``CertifiedAgentLoop`` through verl 0.9.1's agent-loop worker code
with the scripted LLM server on the tiny models' tokenizer, and prints one line per session.

Runs only where verl is installed (the integrations venv: ``make test-integrations``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")

from rewardseal_mockmed.extradup import CONTROL, FAMILIES

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "verl_v1_agent_loop.py"
SESSIONS = 2  # the example's rollout.n


@pytest.mark.slow
def test_the_verl_example_pays_the_control_and_no_hacking_family(tmp_path: Path) -> None:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("REWARDSEAL_", "MOCKMED_"))
    }
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
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
    sessions = json.loads(summary_path.read_text())
    assert [s["family"] for s in sessions] == [f for f in FAMILIES for _ in range(SESSIONS)]
    assert len({s["episode_id"] for s in sessions}) == len(sessions)  # one episode per session
    for session in sessions:
        assert session["certified"] is True
        if session["family"] == CONTROL:
            assert (session["reward"], session["outcome"]) == (1.0, "VERIFIED")
        else:
            assert (session["reward"], session["outcome"]) == (0.0, "WRONG_EFFECT")
    lines = [line for line in done.stdout.splitlines() if " session " in line]
    assert len(lines) == len(sessions)
    assert all(line.endswith("-> ok") for line in lines)
    paid = sum(1 for s in sessions if s["family"] == CONTROL)
    assert (
        f"{len(sessions)} sessions: {paid} paid (reward > 0), {len(sessions) - paid} scored and "
        "not paid, 0 unscored -> as expected"
    ) in done.stdout
