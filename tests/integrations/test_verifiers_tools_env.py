"""The multi-turn tool taskset ``rewardseal-mockmed-tools`` through the real verifiers (0.4.0).

Real parts: a seeded worker process (``rewardseal-worker serve``, its ready file), MockMed over
the worker's SQLite system of record, verifiers' own loader and eval runner (interception
server included). The only stand-in is the policy: the scripted OpenAI-compatible server,
whose ``scripted-tools/<family>`` models emit tool calls. Every family plays multi-turn through
the tools; the worker's receipt pays; an unscored episode raises and is dropped.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

vf = pytest.importorskip("verifiers.v1")

from rewardseal_mockmed_extradup.check_fails_closed import main as check_main  # noqa: E402
from rewardseal_mockmed_extradup.evaluation import evaluate_tools_family  # noqa: E402
from rewardseal_mockmed_extradup.scripted_policy import ScriptedPolicyServer  # noqa: E402
from rewardseal_mockmed_extradup.tools_environment import (  # noqa: E402
    DEFAULT_TOKEN_ENV,
    TOOLS_ENV_ID,
    ToolCallingHarness,
    ToolsTaskset,
    rollout_policy_update,
    tools_env_config,
)
from support.mockmed_episodes import CHECKPOINT  # noqa: E402
from support.mockmed_service import RunningMockMed, running_mockmed  # noqa: E402
from support.worker_process import WorkerProcess, worker_process  # noqa: E402

from rewardseal_mockmed.extradup import CONTROL, HACKING_FAMILIES  # noqa: E402

pytestmark = pytest.mark.slow

TRAINERS_DOC = Path(__file__).resolve().parents[2] / "docs" / "trainers.md"


@pytest.fixture
def worker(data_dir: Path, tmp_path: Path) -> Iterator[WorkerProcess]:
    with worker_process(data_dir, tmp_path / "worker-ready.json") as process:
        yield process


@pytest.fixture
def mockmed(
    data_dir: Path, tmp_path: Path, worker: WorkerProcess, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RunningMockMed]:
    database = data_dir / "mockmed" / "mockmed.sqlite"
    with running_mockmed(f"sqlite:///{database}", tmp_path) as service:
        monkeypatch.setenv(DEFAULT_TOKEN_ENV, service.token)
        yield service


@pytest.fixture
def policy() -> Iterator[str]:
    with ScriptedPolicyServer() as server:
        yield server.base_url


def _worker_kwargs(worker: WorkerProcess, **extra: Any) -> dict[str, Any]:
    return {
        "worker_ready_file": str(worker.ready),
        "policy_checkpoint_id": CHECKPOINT,
        **extra,
    }


def test_loads_by_id_with_its_own_harness(worker: WorkerProcess) -> None:
    config = tools_env_config(worker=_worker_kwargs(worker), mockmed_url="http://127.0.0.1:1")
    env = vf.load_environment(config)
    assert isinstance(env.taskset, ToolsTaskset)
    assert vf.default_harness_id(TOOLS_ENV_ID) == TOOLS_ENV_ID
    assert vf.import_harness(TOOLS_ENV_ID).ToolCallingHarness is ToolCallingHarness


def test_honest_and_dup_through_a_vf_eval(
    worker: WorkerProcess, mockmed: RunningMockMed, policy: str
) -> None:
    env = tools_env_config(worker=_worker_kwargs(worker), mockmed_url=mockmed.url, num_tasks=2)
    honest = evaluate_tools_family(policy, CONTROL, env)
    assert honest.errors == ()
    assert honest.rewards == (1.0, 1.0)
    assert honest.verdicts == ("VERIFIED", "VERIFIED")
    dup = evaluate_tools_family(policy, "dup", env)
    assert dup.errors == ()
    assert dup.rewards == (0.0, 0.0)
    assert all(verdict != "VERIFIED" for verdict in dup.verdicts)


def test_an_unscored_episode_raises_and_is_dropped(
    worker: WorkerProcess, mockmed: RunningMockMed, policy: str
) -> None:
    # After an episode at update 3, one at update 0 is below the worker's window (the default
    # max_policy_lag is 2): policy_update_regressed, no receipt. The reward raises Unscored and
    # verifiers marks the trace errored (trace.has_error), the trace prime-rl drops.
    def env(update: int) -> Any:
        kwargs = _worker_kwargs(worker, policy_update=update)
        return tools_env_config(worker=kwargs, mockmed_url=mockmed.url, num_tasks=1)

    ahead = evaluate_tools_family(policy, CONTROL, env(3))
    assert ahead.errors == ()
    assert ahead.rewards == (1.0,)
    behind = evaluate_tools_family(policy, CONTROL, env(0))
    assert behind.rewards == ()
    assert behind.verdicts == ("UNSCORED",)
    assert len(behind.errors) == 1
    assert "Unscored" in behind.errors[0]
    assert "policy_update_regressed" in behind.errors[0]


def test_the_policy_version_is_read_from_the_rollouts_sampling() -> None:
    # prime-rl: vf.SamplingConfig(**{"extra_body": {"cache_salt": "3"}}); verifiers 0.4
    # flattens extra_body into the config's extra fields.
    assert rollout_policy_update(vf.SamplingConfig(extra_body={"cache_salt": "3"})) == 3
    assert rollout_policy_update(vf.SamplingConfig(cache_salt="12")) == 12
    assert rollout_policy_update({"extra_body": {"cache_salt": "4"}}) == 4
    # No salt, or a salt that is not a plain decimal, says nothing about the version.
    for sampling in (None, vf.SamplingConfig(), {"cache_salt": True}):
        assert rollout_policy_update(sampling) is None
    for salt in ("abc", "03", "-1", "1.5", ""):
        assert rollout_policy_update(vf.SamplingConfig(cache_salt=salt)) is None


@pytest.fixture
def lag_one_worker(data_dir: Path, tmp_path: Path) -> Iterator[WorkerProcess]:
    ready = tmp_path / "lag1-ready.json"
    with worker_process(data_dir, ready, extra_args=["--max-policy-lag", "1"]) as process:
        yield process


def test_each_rollout_is_scored_at_the_policy_version_prime_rl_sent(
    lag_one_worker: WorkerProcess,
    data_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    policy: str,
) -> None:
    # prime-rl's orchestrator sends each rollout's policy version as
    # sampling.extra_body.cache_salt (its dispatcher's policy_version_at_start). An async run
    # scores version 3, then a late rollout of version 2 (within --max-policy-lag 1: scored at
    # its own version), then one of version 1 (below the window: refused, the trace errored and
    # dropped, never 0.0). The taskset's worker.policy_update (9 here) is only the fallback.
    database = data_dir / "mockmed" / "mockmed.sqlite"
    with running_mockmed(f"sqlite:///{database}", tmp_path) as service:
        monkeypatch.setenv(DEFAULT_TOKEN_ENV, service.token)
        kwargs = _worker_kwargs(lag_one_worker, policy_update=9)
        env = tools_env_config(worker=kwargs, mockmed_url=service.url, num_tasks=1)

        def at(version: str | None) -> Any:
            sampling = None if version is None else {"extra_body": {"cache_salt": version}}
            return evaluate_tools_family(policy, CONTROL, env, sampling=sampling)

        newest, late, stale = at("3"), at("2"), at("1")
        for got, version in ((newest, 3), (late, 2)):
            assert got.errors == ()
            assert got.rewards == (1.0,)
            (info,) = got.infos
            assert info["rewardseal"]["policy_update"] == {"value": version, "source": "cache_salt"}
        assert stale.rewards == ()  # dropped: no reward at all, not a 0.0
        assert stale.verdicts == ("UNSCORED",)
        (error,) = stale.errors
        assert "Unscored" in error
        assert "policy_update_regressed" in error
        # No version in the sampling (vf-eval, another orchestrator): the configured update.
        fallback = at(None)
        assert fallback.rewards == (1.0,)
        (info,) = fallback.infos
        assert info["rewardseal"]["policy_update"] == {
            "value": 9,
            "source": "worker.policy_update",
        }


def test_check_fails_closed_for_the_tools_env(
    worker: WorkerProcess, mockmed: RunningMockMed, policy: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "--env",
        TOOLS_ENV_ID,
        "--base-url",
        policy,
        "--num-tasks",
        "1",
        "--worker-ready-file",
        str(worker.ready),
        "--policy-checkpoint-id",
        CHECKPOINT,
        "--mockmed-url",
        mockmed.url,
    ]
    assert check_main(argv) == 0, capsys.readouterr()
    out = capsys.readouterr().out
    assert "fails closed" in out
    for family in (CONTROL, *HACKING_FAMILIES):
        assert family in out
    assert os.environ[DEFAULT_TOKEN_ENV] == mockmed.token


def test_check_fails_closed_fails_when_the_control_does_not_pay(
    worker: WorkerProcess, mockmed: RunningMockMed, capsys: pytest.CaptureFixture[str]
) -> None:
    # The control garbled: it answers "Saved." and calls no tool, so nothing is written and
    # the worker pays 0.0; the check must say the reward does not fail closed.
    with ScriptedPolicyServer(garble=[CONTROL]) as broken:
        argv = [
            "--env",
            TOOLS_ENV_ID,
            "--base-url",
            broken.base_url,
            "--num-tasks",
            "1",
            "--worker-ready-file",
            str(worker.ready),
            "--policy-checkpoint-id",
            CHECKPOINT,
            "--mockmed-url",
            mockmed.url,
        ]
        assert check_main(argv) == 1
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split()[-1] for line in out.splitlines()[1:9]}
    assert rows[CONTROL] == "FAIL"
    assert all(rows[family] == "ok" for family in HACKING_FAMILIES)
    assert "DOES NOT FAIL CLOSED" in out


def test_check_fails_closed_refuses_the_tools_env_without_a_worker() -> None:
    with pytest.raises(SystemExit) as caught:
        check_main(["--env", TOOLS_ENV_ID, "--mockmed-url", "http://127.0.0.1:1"])
    assert caught.value.code == 2


def test_the_documented_toml_is_a_valid_eval_config() -> None:
    from verifiers.v1.configs.cli.eval import EvalConfig

    text = TRAINERS_DOC.read_text()
    match = re.search(r"<!-- vf-eval-toml -->\n```toml\n(.*?)\n```", text, re.DOTALL)
    assert match, "docs/trainers.md lost its vf-eval TOML block"
    data = tomllib.loads(match.group(1))
    config = EvalConfig.model_validate(data)
    assert config.env.taskset.id == TOOLS_ENV_ID
    assert isinstance(config.env.taskset, vf.TasksetConfig)
    taskset = vf.resolve_env_config(data["env"]).taskset
    assert taskset.worker["worker_ready_file"]
    assert taskset.mockmed_token_env == DEFAULT_TOKEN_ENV
