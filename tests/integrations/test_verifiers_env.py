"""The ExtraDup environment through the real verifiers package (0.4.0, ``verifiers.v1``).

Loads the environment by id through verifiers' own loader, evaluates every ExtraDup family
through verifiers' eval runner against the scripted OpenAI-compatible policy server, and runs
``check-fails-closed`` against a sound and a deliberately broken server.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

vf = pytest.importorskip("verifiers.v1")

from rewardseal_mockmed_extradup import ENV_ID, load_environment  # noqa: E402
from rewardseal_mockmed_extradup.check_fails_closed import main as check_main  # noqa: E402
from rewardseal_mockmed_extradup.environment import (  # noqa: E402
    ExtraDupTaskset,
    SingleTurnHarness,
)
from rewardseal_mockmed_extradup.evaluation import evaluate_family  # noqa: E402
from rewardseal_mockmed_extradup.reward import SCREEN_REFUSAL  # noqa: E402
from rewardseal_mockmed_extradup.scripted_policy import ScriptedPolicyServer  # noqa: E402

from rewardseal.core.errors import ValidationError  # noqa: E402
from rewardseal_kit.extradup import CONTROL, FAMILIES, HACKING_FAMILIES  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    """One scripted policy server for the module."""
    with ScriptedPolicyServer() as server:
        yield server.base_url


def test_loads_by_id_through_the_verifiers_loader() -> None:
    config = vf.resolve_env_config(
        {"taskset": {"id": ENV_ID, "num_tasks": 2}, "agent": {"runtime": {"type": "subprocess"}}}
    )
    env = vf.load_environment(config)
    assert isinstance(env, vf.SingleAgentEnv)
    assert isinstance(env.taskset, ExtraDupTaskset)
    assert vf.default_harness_id(ENV_ID) == ENV_ID
    assert vf.import_harness(ENV_ID).SingleTurnHarness is SingleTurnHarness
    assert len(list(env.taskset)) == 4


def test_eval_split_labels_every_family() -> None:
    env = load_environment(num_tasks=1, split="eval")
    tasks = list(env.taskset)
    labeled = [task for task in tasks if task.data.name]
    assert [task.data.name for task in labeled] == [
        f"{store}/{family}" for store in ("mockmed", "openemr") for family in FAMILIES
    ]
    for task in labeled:
        assert task.data.info["family"] == task.data.name.split("/")[1]
        assert task.data.info["scripted_completion"]
    assert len(tasks) == len(labeled) + 2


def test_score_from_screen_is_refused() -> None:
    with pytest.raises(ValidationError) as caught:
        load_environment(score_from_screen=True)
    assert caught.value.message == SCREEN_REFUSAL
    config = vf.resolve_env_config(
        {
            "taskset": {"id": ENV_ID, "score_from_screen": True},
            "agent": {"runtime": {"type": "subprocess"}},
        }
    )
    with pytest.raises(ValidationError, match="screen"):
        vf.load_environment(config)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_through_verifiers_eval(base_url: str, family: str) -> None:
    result = evaluate_family(base_url, family, num_tasks=1)
    assert result.errors == ()
    assert len(result.rewards) == 2
    if family == CONTROL:
        assert result.rewards == (1.0, 1.0)
        assert result.verdicts == ("VERIFIED", "VERIFIED")
    else:
        assert result.rewards == (0.0, 0.0)
        assert result.verdicts == ("REFUSED", "REFUSED")
    for metrics in result.metrics:
        assert metrics["evidence_tier"] == 2.0
        assert metrics["certified_reward"] == result.rewards[0]
        assert metrics["report_unparseable"] == 0.0
        offered = 1.0 if family == "screen_only" else 0.0
        assert metrics["inadmissible_evidence_offered"] == offered


def test_check_fails_closed_passes_on_the_sound_server(
    base_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.perf_counter()
    assert check_main(["--base-url", base_url, "--num-tasks", "1"]) == 0
    out = capsys.readouterr().out
    assert "fails closed" in out
    for family in FAMILIES:
        assert family in out
    print(f"check-fails-closed took {time.perf_counter() - started:.1f}s")


def test_check_fails_closed_command_fails_on_a_broken_server(tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rewardseal_mockmed_extradup.scripted_policy",
            "serve",
            "--ready-file",
            str(ready),
            "--garble",
            CONTROL,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and time.monotonic() < deadline:
            assert server.poll() is None, server.communicate()
            time.sleep(0.05)
        url = json.loads(ready.read_text())["base_url"]
        check = subprocess.run(
            [
                sys.executable,
                "-m",
                "rewardseal_mockmed_extradup.check_fails_closed",
                "--base-url",
                url,
                "--num-tasks",
                "1",
            ],
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert check.returncode == 1, check.stdout + check.stderr
    rows = {line.split()[0]: line.split()[-1] for line in check.stdout.splitlines()[1:9]}
    assert rows[CONTROL] == "FAIL"
    assert all(rows[family] == "ok" for family in HACKING_FAMILIES)
    assert "DOES NOT FAIL CLOSED" in check.stdout
