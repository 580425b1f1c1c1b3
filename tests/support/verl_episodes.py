"""Episodes played for the verl reward managers: a worker on a DEFAULT-scoring MockMed bundle
(VERIFIED 1.0, WRONG_EFFECT -1.0, so a fill and a penalty give different numbers), and a batch
of uid groups [V, R | V, W] played like rollouts (BeginEpisode, rows written into the seeded
SQLite system of record). Shared by tests/trainers (no verl) and tests/integrations (real verl).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rewardseal.trainers.groups import METADATA_COLUMNS
from rewardseal.v1.contract_pb2 import ScoringPolicy
from rewardseal_mockmed import contract as mockmed
from rewardseal_mockmed.seeding import write_encounter
from rewardseal_worker.bundle import load_bundle, write_bundle
from rewardseal_worker.calibration import (
    self_signed_certificate,
    summary_from_json,
    summary_to_json,
)
from rewardseal_worker.seed import TIER2_BUNDLE
from support.worker_stack import RunningStack, start_stack, stop_stack

DEFAULT_SCORING_BUNDLE = "mockmed-default-scoring"
CHECKPOINT = "policy.checkpoint.verl.0001"
EXTRA_COLUMNS = ("reward_value", "reward_filled", "reward_group_unscored")


def write_default_scoring_bundle(data_dir: Path, key: Any) -> Path:
    """The seeded tier-2 MockMed bundle with the default scoring policy, self-certified.

    The judge does not read the scoring policy (it is not in the checker configuration), so the
    seeded calibration carries over: only the contract digest it names changes.
    """
    seeded = load_bundle(data_dir / TIER2_BUNDLE)
    assert seeded.calibration is not None
    contract = mockmed.mockmed_contract(tier=2)
    contract.scoring_policy.CopyFrom(ScoringPolicy())
    contract.contract_version = "1-default-scoring"
    docs: dict[str, Any] = {
        "contract": contract,
        "required_doc": mockmed.REQUIRED_EFFECTS,
        "forbidden_doc": mockmed.FORBIDDEN_EFFECTS,
        "recipe_doc": mockmed.TIER2_RECIPE,
    }
    target = data_dir / "contracts" / DEFAULT_SCORING_BUNDLE
    write_bundle(target, **docs)
    bundle = load_bundle(target)
    summary = summary_from_json(seeded.calibration)
    summary.reward_contract_digest = bundle.contract_digest
    certificate = self_signed_certificate(bundle, summary, key)
    write_bundle(
        target,
        **docs,
        certificate=certificate,
        calibration=summary_to_json(summary),
        overwrite=True,
    )
    return target


async def start_default_scoring_stack(data_dir: Path) -> RunningStack:
    """A worker over the default-scoring bundle written into ``data_dir``."""
    probe = await start_stack(data_dir)
    key = probe.app.key
    await stop_stack(probe)
    write_default_scoring_bundle(data_dir, key)
    return await start_stack(data_dir, contract=DEFAULT_SCORING_BUNDLE)


def manager_kwargs(stack: RunningStack, **overrides: Any) -> dict[str, Any]:
    """verl ``reward_kwargs`` pointing at ``stack`` with its key pinned."""
    kwargs: dict[str, Any] = {
        "worker_target": stack.target,
        "token": stack.token,
        "worker_public_key": stack.app.key.public_key.hex(),
        "reward_contract_digest": stack.digest,
        "policy_checkpoint_id": CHECKPOINT,
        "require_certified": True,
        "timeout_seconds": 20.0,
    }
    kwargs.update(overrides)
    return kwargs


@dataclass(frozen=True)
class Played:
    """The verl columns of a played batch and the rewards it must get."""

    extra_infos: list[dict[str, Any]]
    uids: list[str]
    expected: list[float]
    unscored: list[bool]
    group_unscored: list[bool]


async def play_batch(stack: RunningStack, tag: str) -> Played:
    """Play uid groups [VERIFIED, RECONCILIATION_REQUIRED | VERIFIED, WRONG_EFFECT] on MockMed.

    The unscored sample of group a (a row written without a baseline read) takes its mate's
    1.0; group b is paid as scored, 1.0 and the default -1.0.
    """
    plan = [("a", "verified"), ("a", "no-baseline"), ("b", "verified"), ("b", "duplicate")]
    extra_infos: list[dict[str, Any]] = []
    for index, (group, how) in enumerate(plan):
        episode_id = f"episode.verl.{tag}.{group}.{index}"
        patient = f"patient-verl-{tag}-{index}"
        identity = {mockmed.IDENTITY_KEY: patient}
        if how != "no-baseline":
            await stack.client.begin(episode_id, stack.digest, identity)
        write_encounter(stack.database, patient_id=patient, note="Follow-up in 2 weeks.")
        if how == "duplicate":
            write_encounter(stack.database, patient_id=patient, note="Follow-up in 2 weeks.")
        extra_infos.append({"episode_id": episode_id, "oracle_identity": identity})
    return Played(
        extra_infos=extra_infos,
        uids=[f"uid-{tag}-{group}" for group, _ in plan],
        expected=[1.0, 1.0, 1.0, -1.0],
        unscored=[False, True, False, False],
        group_unscored=[False, False, False, False],
    )


def check_extra_info(extra_info: dict[str, list[Any]], played: Played) -> None:
    """Every column has one entry per sample and says what happened to it (R-T-3)."""
    assert set(extra_info) == set(METADATA_COLUMNS) | set(EXTRA_COLUMNS)
    for name, values in extra_info.items():
        assert len(values) == len(played.uids), name
    assert extra_info["reward_value"] == played.expected
    assert extra_info["reward_filled"] == played.unscored
    assert extra_info["reward_unscored"] == played.unscored
    assert extra_info["reward_group_unscored"] == played.group_unscored
    assert extra_info["reward_episode_id"] == [info["episode_id"] for info in played.extra_infos]
    assert extra_info["reward_outcome"] == [
        "VERIFIED",
        "RECONCILIATION_REQUIRED",
        "VERIFIED",
        "WRONG_EFFECT",
    ]
    # certified describes the reader and its bound, also for the unscored sample (R-SCORE-4).
    assert extra_info["reward_certified"] == [True] * 4
    assert extra_info["reward_calibration_scope"][0] == "synthetic"
    assert extra_info["reward_error"] == ["", "", "", ""]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port
