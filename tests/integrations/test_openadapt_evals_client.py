"""A real HTTP reward client nobody here wrote, unmodified, against the worker's HTTP face.

``openadapt-evals`` 0.98.0 (PyPI, installed ``--no-deps`` with the ``openadapt-types`` it parses
receipts with) ships an HTTP reward endpoint client (``HttpRewardEndpoint``: ``POST
/v1/rewards``) and a TRL reward adapter (``CertifiedRewardFunction``) that fills an unscored
sample with its group's scored mean. Both run here through their public API only against a
real ``rewardseal-worker serve --seed-mockmed --http-port 0`` process. Our side (beginning an
episode, the policy's write to MockMed) is ours; their side is theirs, byte for byte.

Runs only where openadapt-evals is installed (the integrations venv: ``make test-integrations``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.mockmed_episodes import CHECKPOINT, write_triage
from support.worker_process import WorkerProcess, worker_process

evals_reward = pytest.importorskip("openadapt_evals.reward")
evals_trl = pytest.importorskip("openadapt_evals.reward.trl")
from openadapt_types.reward import RewardCertificateStateV1, RewardOutcomeV1  # noqa: E402

HttpRewardEndpoint = evals_reward.HttpRewardEndpoint
EpisodeDescriptor = evals_reward.EpisodeDescriptor
RewardEndpointError = evals_reward.RewardEndpointError
CertifiedRewardFunction = evals_trl.CertifiedRewardFunction


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    """The seeded MockMed worker with its HTTP face, as an operator starts it."""
    root = tmp_path_factory.mktemp("evals")
    with worker_process(
        root / "data", root / "ready.json", extra_args=["--seed-mockmed", "--http-port", "0"]
    ) as running:
        yield running


def url(worker: WorkerProcess) -> str:
    return f"http://127.0.0.1:{worker.banner['http_port']}"


def database(worker: WorkerProcess) -> Path:
    return Path(worker.banner["data_dir"]) / "mockmed" / "mockmed.sqlite"


def begin(worker: WorkerProcess, episode_id: str, patient: str) -> None:
    """Our side: register the episode (its baseline read) before the rollout."""
    answer = httpx.post(
        f"{url(worker)}/v1/episodes",
        headers={"authorization": f"Bearer {worker.token}"},
        json={
            "episode_id": episode_id,
            "reward_contract_digest": worker.digest,
            "oracle_identity": {"patient_id": patient},
        },
        timeout=20,
    )
    assert answer.status_code == 200, answer.text


def endpoint(worker: WorkerProcess, token: str | None = None) -> Any:
    return HttpRewardEndpoint(url(worker), token=token or worker.token, timeout_seconds=20)


def episode(worker: WorkerProcess, episode_id: str, patient: str, **fields: Any) -> Any:
    return EpisodeDescriptor(
        episode_id=episode_id,
        policy_checkpoint_id=CHECKPOINT,
        policy_update=0,
        reward_contract_digest=worker.digest,
        oracle_identity={"patient_id": patient},
        **fields,
    )


def test_verified_pays_one_and_is_certified(worker: WorkerProcess) -> None:
    begin(worker, "episode.evals.0001", "patient-evals-0001")
    write_triage(database(worker), "patient-evals-0001")
    receipt = endpoint(worker).fetch(episode(worker, "episode.evals.0001", "patient-evals-0001"))
    assert receipt.reward_outcome is RewardOutcomeV1.VERIFIED
    assert receipt.scalar_reward == 1.0
    assert receipt.certified is True
    assert receipt.certificate_state is RewardCertificateStateV1.CURRENT
    scored = evals_reward.assess_receipt(
        receipt,
        policy_update=0,
        expected_contract_digest=worker.digest,
        expected_episode_id="episode.evals.0001",
    )
    assert scored.certified is True
    assert scored.scalar == 1.0


def test_wrong_token_is_401(worker: WorkerProcess) -> None:
    with pytest.raises(RewardEndpointError, match="HTTP 401"):
        endpoint(worker, token="not-the-token-of-this-worker").fetch(
            episode(worker, "episode.evals.0002", "patient-evals-0002")
        )


def test_trl_adapter_pays_fills_unscored_and_keeps_halted_apart(worker: WorkerProcess) -> None:
    """Two GRPO groups of two, through the TRL adapter (sync path):

    * group 1: verified (1.0) and unscored (no begin: the judge cannot tell) -> the unscored
      sample gets its group's scored mean, 1.0, never 0.0;
    * group 2: a wrong effect (the banner lie: nothing written) pays the contract's value,
      0.0; a halted episode (runtime_signal column, sent as metadata.runtime_signal) is
      halted_before_effect, not a completed episode's wrong_effect.
    """
    ids = [f"episode.evals.trl.{n}" for n in range(4)]
    patients = [f"patient-evals-trl-{n}" for n in range(4)]
    begin(worker, ids[0], patients[0])
    write_triage(database(worker), patients[0])
    write_triage(database(worker), patients[1])  # written, never begun: no baseline
    begin(worker, ids[2], patients[2])
    begin(worker, ids[3], patients[3])
    reward = CertifiedRewardFunction(
        endpoint(worker),
        reward_contract_digest=worker.digest,
        policy_checkpoint_id=CHECKPOINT,
        num_generations=2,
        require_certified=True,
        policy_update=0,
    )
    rewards = reward(
        ["p", "p", "q", "q"],
        ["c0", "c1", "c2", "c3"],
        episode_id=ids,
        oracle_identity=[{"patient_id": p} for p in patients],
        runtime_signal=["completed", "completed", "completed", "halted_before_effect"],
    )
    assert rewards == [1.0, 1.0, 0.0, 0.0]
    columns = reward.metadata_columns()
    assert columns["reward_outcome"] == [
        "verified",
        "reconciliation_required",
        "wrong_effect",
        "halted_before_effect",
    ]
    assert columns["reward_unscored"] == [False, True, False, False]
    # Certified is the reader's property, not the outcome's (R-SCORE-4): tier 2, current.
    assert columns["reward_certified"] == [True, True, True, True]


def test_trl_adapter_async_all_unscored_group_is_none(worker: WorkerProcess) -> None:
    """TRL's concurrent path (``as_async``): a group with no scored sample stays None."""
    ids = [f"episode.evals.async.{n}" for n in range(2)]
    patients = [f"patient-evals-async-{n}" for n in range(2)]
    for patient in patients:
        write_triage(database(worker), patient)  # neither begun: both unscored
    reward = CertifiedRewardFunction(
        endpoint(worker),
        reward_contract_digest=worker.digest,
        policy_checkpoint_id=CHECKPOINT,
        num_generations=2,
        policy_update=0,
    )
    rewards = asyncio.run(
        reward.as_async()(
            ["p", "p"],
            ["c0", "c1"],
            episode_id=ids,
            oracle_identity=[{"patient_id": p} for p in patients],
        )
    )
    assert rewards == [None, None]
