"""The verl batch reward manager against a real worker, without verl or torch (R-T-1..R-T-5).

The worker serves a MockMed bundle whose contract keeps the DEFAULT scoring policy (VERIFIED
1.0, WRONG_EFFECT -1.0): the seeded contract pays wrong effects 0.0, which would hide whether a
fill or a penalty produced a number. Every episode is played like a rollout: BeginEpisode,
rows written into the seeded SQLite system of record, then the manager scores the batch in one
call. The manager's blocking client runs in a thread so the worker keeps serving on the loop.

The episodes are played by tests/support/verl_episodes.py (shared with tests/integrations).
"""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from support.verl_episodes import (
    CHECKPOINT,
    Played,
    check_extra_info,
    free_port,
    manager_kwargs,
    play_batch,
)
from support.worker_stack import RunningStack

from rewardseal.core.errors import CertificationRefused, RewardSealError, ValidationError
from rewardseal.core.signing import SigningKey
from rewardseal.trainers.verl import (
    CertifiedRewardManager,
    ManagerSettings,
    register_with_verl,
    samples_from_batch,
)
from rewardseal_kit import mockmed
from rewardseal_mockmed.seeding import write_encounter


async def score_in_thread(
    manager: CertifiedRewardManager, played: Played, meta_info: dict[str, Any]
) -> Any:
    try:
        return await asyncio.to_thread(
            manager.score_batch, played.extra_infos, played.uids, meta_info
        )
    finally:
        manager.close()


async def test_groups_get_filled_means_and_default_penalty(
    stack: RunningStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VERL_TEST_WORKER_TOKEN", stack.token)
    key_file = stack.data_dir / "worker.pub"
    key_file.write_text(stack.app.key.public_key.hex() + "\n")
    kwargs = manager_kwargs(stack, token_env="VERL_TEST_WORKER_TOKEN")
    del kwargs["token"], kwargs["worker_public_key"]
    kwargs["worker_public_key_file"] = str(key_file)
    manager = CertifiedRewardManager(None, 0, None, **kwargs)
    played = await play_batch(stack, "mean")
    result = await score_in_thread(manager, played, {"global_steps": 3})
    assert result.rewards == played.expected
    check_extra_info(result.extra_info, played)
    # The policy update came from verl's global_steps, and every receipt verified (R-T-5).
    for row in result.rows:
        assert row.receipt is not None
        assert row.receipt.receipt.policy_update == 3
        assert row.receipt.receipt.issuer_key_id == stack.app.key.key_id


async def test_an_all_unscored_group_is_group_constant_and_flagged(stack: RunningStack) -> None:
    manager = CertifiedRewardManager(None, 0, None, **manager_kwargs(stack, policy_update=7))
    played = await play_batch(stack, "dark")
    # Group c: a platform failure and a row without a baseline: nothing in it was scored.
    for index, signal in ((4, "FAILED_PLATFORM"), (5, None)):
        episode_id = f"episode.verl.dark.c.{index}"
        identity = {mockmed.IDENTITY_KEY: f"patient-verl-dark-{index}"}
        if signal is not None:
            await stack.client.begin(episode_id, stack.digest, identity)
        else:
            write_encounter(stack.database, patient_id=identity[mockmed.IDENTITY_KEY])
        info: dict[str, Any] = {"episode_id": episode_id, "oracle_identity": identity}
        if signal is not None:
            info["runtime_signal"] = signal
        played.extra_infos.append(info)
        played.uids.append("uid-dark-c")
    result = await score_in_thread(manager, played, {})
    assert result.rewards == [1.0, 1.0, 1.0, -1.0, 0.0, 0.0]
    columns = result.extra_info
    assert columns["reward_outcome"][4:] == ["FAILED_PLATFORM", "RECONCILIATION_REQUIRED"]
    assert columns["reward_unscored"] == [False, True, False, False, True, True]
    assert columns["reward_group_unscored"] == [False] * 4 + [True, True]
    # No member differs from its mates: under GRPO/RLOO each advantage is exactly zero.
    group_c = result.rewards[4:]
    assert all(value - sum(group_c) / len(group_c) == 0.0 for value in group_c)
    # The explicit policy_update stood in for the missing global_steps.
    assert all(
        row.receipt is not None and row.receipt.receipt.policy_update == 7 for row in result.rows
    )


async def test_require_certified_stops_on_an_expired_certificate(stack: RunningStack) -> None:
    # The seeded certificate expires after 1000 policy updates: at 5000 it is not current.
    manager = CertifiedRewardManager(None, 0, None, **manager_kwargs(stack))
    played = await play_batch(stack, "expired")
    with pytest.raises(CertificationRefused, match="EXPIRED"):
        await score_in_thread(manager, played, {"global_steps": 5000})


async def test_without_require_certified_every_receipt_is_development_only(
    stack: RunningStack,
) -> None:
    manager = CertifiedRewardManager(
        None, 0, None, **manager_kwargs(stack, require_certified=False)
    )
    played = await play_batch(stack, "dev")
    result = await score_in_thread(manager, played, {"global_steps": 5000})
    assert result.rewards == played.expected
    assert result.extra_info["reward_certified"] == [False] * 4
    assert result.extra_info["reward_calibration_scope"] == ["development_only"] * 4


def test_unreachable_worker_pays_nothing_and_keeps_columns_aligned() -> None:
    key = bytes(range(32))
    manager = CertifiedRewardManager(
        None,
        0,
        None,
        worker_target=f"127.0.0.1:{free_port()}",
        token="t",
        worker_public_key=key.hex(),
        reward_contract_digest="sha256:" + "0" * 64,
        policy_checkpoint_id=CHECKPOINT,
        timeout_seconds=2.0,
    )
    infos = [{"episode_id": f"episode.verl.gone.{index}"} for index in range(4)]
    try:
        result = manager.score_batch(infos, ["g0", "g0", "g1", "g1"], {"global_steps": 1})
    finally:
        manager.close()
    columns = result.extra_info
    assert all(len(values) == 4 for values in columns.values())
    assert columns["reward_outcome"] == ["ERROR"] * 4
    assert columns["reward_error"] == ["unavailable"] * 4
    assert columns["reward_unscored"] == [True] * 4
    assert columns["reward_group_unscored"] == [True] * 4
    # Group-constant, so no advantage; no row carries a receipt or a scalar.
    assert result.rewards == [0.0] * 4
    assert all(row.scalar is None and row.receipt is None for row in result.rows)


def test_repeated_episode_ids_are_refused_before_scoring() -> None:
    # verl repeats a dataset row rollout.n times; its extra_info (and an id in it) comes along.
    shared = {"episode_id": "episode.from.dataset.row.7"}
    with pytest.raises(ValidationError, match="R-T-4") as caught:
        samples_from_batch([shared, shared], ["uid-7", "uid-7"])
    assert caught.value.reason == "duplicate_episode_id"
    with pytest.raises(ValidationError, match="episode_id"):
        samples_from_batch([{"oracle_identity": {}}], ["uid-8"])


def test_settings_refuse_what_they_cannot_use() -> None:
    base: dict[str, Any] = {
        "worker_target": "127.0.0.1:1",
        "token": "t",
        "worker_public_key": "ab" * 32,
        "reward_contract_digest": "sha256:" + "0" * 64,
        "policy_checkpoint_id": CHECKPOINT,
    }
    settings = ManagerSettings.from_reward_kwargs(base)
    assert settings.require_certified
    # The same key in standard and url-safe base64 pins the same key id.
    raw = bytes.fromhex(base["worker_public_key"])
    for text in (base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()):
        pinned = ManagerSettings.from_reward_kwargs({**base, "worker_public_key": text})
        assert pinned.trust.key_ids == settings.trust.key_ids
    with pytest.raises(ValidationError, match="unknown reward_kwargs"):
        ManagerSettings.from_reward_kwargs({**base, "endpoint_url": "x"})
    with pytest.raises(ValidationError, match="32-byte"):
        ManagerSettings.from_reward_kwargs({**base, "worker_public_key": "ab" * 8})
    with pytest.raises(ValidationError, match="not set"):
        ManagerSettings.from_reward_kwargs(
            {**{k: v for k, v in base.items() if k != "token"}, "token_env": "NO_SUCH_VAR"},
            env={},
        )


def test_register_without_verl_says_so() -> None:
    if importlib.util.find_spec("verl") is not None:
        pytest.skip("verl is installed here; tests/integrations/test_verl_real.py registers it")
    with pytest.raises(RewardSealError, match="verl is not installed") as caught:
        register_with_verl()
    assert caught.value.reason == "verl_missing"


def test_settings_from_the_workers_ready_file(tmp_path: Path) -> None:
    """``worker_ready_file`` gives address, token, key and digest; none may be given twice."""
    key = SigningKey.generate()
    ready = tmp_path / "worker.json"
    digest = "sha256:" + "1" * 64
    ready.write_text(
        json.dumps(
            {
                "host": "0.0.0.0",
                "port": 8790,
                "transport": "plaintext",
                "token": "file-token",
                "contract_digest": digest,
                "key_id": key.key_id,
                "public_key": key.public_key.hex(),
            }
        )
    )
    base = {"worker_ready_file": str(ready), "policy_checkpoint_id": CHECKPOINT}
    settings = ManagerSettings.from_reward_kwargs(base)
    assert (settings.target, settings.token, settings.reward_contract_digest) == (
        "127.0.0.1:8790",
        "file-token",
        digest,
    )
    assert settings.trust.key_ids == {key.key_id}
    renamed = ManagerSettings.from_reward_kwargs({**base, "worker_target": "reward-worker:1"})
    assert renamed.target == "reward-worker:1"
    with pytest.raises(ValidationError, match=r"do not also give \['token', 'worker_public_key'\]"):
        ManagerSettings.from_reward_kwargs({**base, "token": "t", "worker_public_key": "ab" * 32})
    with pytest.raises(ValidationError, match="cannot read the ready file"):
        ManagerSettings.from_reward_kwargs({**base, "worker_ready_file": str(tmp_path / "no")})
