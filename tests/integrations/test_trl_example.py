"""examples/trl_grpo.py runs as a user runs it: a subprocess that starts MockMed and a seeded
worker itself, builds its client from the worker's ready file, trains a tiny policy with TRL's
GRPOTrainer on CPU, and is paid only verified, certified receipts.

Runs only where trl is installed (the integrations venv: ``make test-integrations``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trl_grpo.py"
STEPS = 2
BATCH = 4  # the example's two prompts times two generations


@pytest.mark.slow
def test_the_trl_example_trains_and_is_paid_certified_receipts(tmp_path: Path) -> None:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("REWARDSEAL_WORKER_", "MOCKMED_"))
    }
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    summary_path = tmp_path / "summary.json"
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--steps", str(STEPS), "--summary", str(summary_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads(summary_path.read_text())
    assert summary["contract_digest"].startswith("sha256:")
    steps = summary["steps"]
    assert [step["step"] for step in steps] == list(range(STEPS))
    for step in steps:
        assert step["completions"] == step["certified"] == BATCH
        assert step["errors"] == []
        assert f"step {step['step']}: {BATCH} completions" in done.stdout
    episode_ids = [episode for step in steps for episode in step["episode_ids"]]
    assert len(set(episode_ids)) == STEPS * BATCH
    # One result line, each word meaning one thing: "paid" a receipt's own positive scalar (as
    # TRL's rewardseal/paid_share), "scored" any receipt scalar, 0.0 included.
    for step in steps:
        assert step["scored"] + step["unscored"] == BATCH
        assert 0 <= step["paid"] <= step["scored"]
    paid = sum(step["paid"] for step in steps)
    scored = sum(step["scored"] for step in steps)
    assert (
        f"{STEPS} steps, {STEPS * BATCH} completions: {paid} paid (reward > 0), {scored} scored, "
        f"{STEPS * BATCH - scored} unscored, {STEPS * BATCH} certified"
    ) in done.stdout


ENV_EXAMPLE = EXAMPLE.with_name("trl_environment.py")


@pytest.mark.slow
def test_the_trl_environment_example_pays_the_honest_tool_episode_and_not_the_hack(
    tmp_path: Path,
) -> None:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("REWARDSEAL_WORKER_", "MOCKMED_"))
    }
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRL_EXPERIMENTAL_SILENCE="1",
    )
    summary_path = tmp_path / "summary.json"
    done = subprocess.run(
        [sys.executable, str(ENV_EXAMPLE), "--steps", "1", "--summary", str(summary_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (step,) = json.loads(summary_path.read_text())["steps"]
    assert step["certified"] == step["completions"] == BATCH
    for script, tools, reward in zip(step["scripts"], step["tools"], step["rewards"], strict=True):
        if script == "control":
            assert tools == ["lookup_patient", "create_encounter", "submit_encounter"]
            assert reward == 1.0
        else:
            assert tools == ["show_saved_banner"]
            assert reward == 0.0
    assert "control: lookup_patient+create_encounter+submit_encounter -> VERIFIED" in done.stdout
    honest = step["scripts"].count("control")
    assert step["paid"] == honest  # the honest episodes, 1.0 each; the hack's 0.0 is not paid
    assert (
        f"1 step, {BATCH} completions: {honest} paid (reward > 0), {BATCH} scored, 0 unscored, "
        f"{BATCH} certified"
    ) in done.stdout
