"""Trainer adapters stop the run on a receipt that answers another request (R-T-5).

A real man in the middle (tests/support/mitm.py) in front of a real worker swaps validly signed
receipts between samples or hands back one from an earlier episode. The client turns each into
a ReceiptMismatch; the adapters must then neither pay the moved receipt nor quietly fill the
sample from its group's mean: the run stops, like on a setup error. Their TLS settings reach
the clients they build (a real mutual-TLS port, tests/support/secure_front.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from support.mitm import Tamper, man_in_the_middle
from support.mockmed_episodes import CHECKPOINT, write_triage
from support.secure_front import secure_front
from support.tls_certs import TlsWorld
from support.verl_episodes import manager_kwargs, play_batch, start_default_scoring_stack
from support.worker_stack import RunningStack, start_stack, stop_stack

from rewardseal.core.errors import (
    DuplicateEpisode,
    IdentityBusy,
    ReceiptMismatch,
    ValidationError,
)
from rewardseal.rpc.worker_client import AsyncWorkerClient, WorkerClient
from rewardseal.trainers.grader import OpenAIGrader
from rewardseal.trainers.groups import SampleResult, is_setup_error, stop_on_setup_errors
from rewardseal.trainers.trl import CertifiedRewardFunction
from rewardseal.trainers.verl import CertifiedRewardManager, ManagerSettings
from rewardseal.trainers.verl.loop import LoopScorer, settings_from_config
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt, SignedEnvelope
from rewardseal_kit.mockmed import IDENTITY_KEY

KINDS = ["sync", "async"]


@pytest.fixture
async def stack(data_dir: Path) -> AsyncIterator[RunningStack]:
    """The seeded tier-2 MockMed worker (VERIFIED pays 1.0, WRONG_EFFECT 0.0)."""
    running = await start_stack(data_dir)
    yield running
    await stop_stack(running)


def swap_first_two(method: str, request: Any, answer: Any) -> Any:
    """Swap the signed envelopes of a ScoreEpisodes answer's first two entries.

    The unsigned ``episode_id`` echoes stay in place, so only the signed receipt can tell.
    """
    if method == "ScoreEpisodes":
        first = SignedEnvelope()
        first.CopyFrom(answer.results[0].envelope)
        answer.results[0].envelope.CopyFrom(answer.results[1].envelope)
        answer.results[1].envelope.CopyFrom(first)
    return answer


def replace_envelope(method: str, envelope: Any) -> Any:
    """An answer hook that hands ``envelope`` back for every ``method`` call."""

    def hook(called: str, request: Any, answer: Any) -> Any:
        if called == method:
            answer.envelope.CopyFrom(envelope)
        return answer

    return hook


async def play_pair(stack: RunningStack, tag: str) -> tuple[list[str], list[dict[str, str]]]:
    """Two begun episodes: the first wrote the honest row (1.0), the second nothing (0.0)."""
    ids = [f"episode.bind.{tag}.{index}" for index in range(2)]
    identities = [{IDENTITY_KEY: f"patient-bind-{tag}-{index}"} for index in range(2)]
    for episode_id, identity in zip(ids, identities, strict=True):
        await stack.client.begin(episode_id, stack.digest, identity)
    write_triage(stack.database, identities[0][IDENTITY_KEY])
    return ids, identities


# --------------------------------------------------------------------------------------------
# TRL
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_trl_reward_function_refuses_a_swapped_batch_rather_than_paying(
    stack: RunningStack, kind: str
) -> None:
    ids, identities = await play_pair(stack, f"trl.{kind}")
    async with man_in_the_middle(stack.target, Tamper(answer=swap_first_two)) as mitm:
        sync_client = WorkerClient(mitm.target, token=stack.token, trust=stack.trust, timeout=20)
        async_client = AsyncWorkerClient(
            mitm.target, token=stack.token, trust=stack.trust, timeout=20
        )
        function = CertifiedRewardFunction(
            sync_client,
            reward_contract_digest=stack.digest,
            policy_checkpoint_id=CHECKPOINT,
            num_generations=2,
            policy_update=0,
        )
        kwargs: dict[str, Any] = {
            "prompts": ["Create the triage encounter."] * 2,
            "completions": ["done", "done"],
            "episode_id": ids,
            "oracle_identity": identities,
        }

        async def scored() -> list[float | None]:
            if kind == "sync":
                return await asyncio.to_thread(lambda: function(**kwargs))
            return await function.as_async(async_client)(**kwargs)

        try:
            with pytest.raises(ReceiptMismatch):
                await scored()
        finally:
            sync_client.close()
            await async_client.close()
    # The stopped batch still shows what happened to each sample: nothing was paid.
    columns = function.metadata_columns()
    assert columns["reward_error"] == ["receipt_mismatch", "receipt_mismatch"]
    assert columns["reward_outcome"] == ["ERROR", "ERROR"]


async def test_trl_as_async_builds_a_tls_client(stack: RunningStack, tmp_path: Path) -> None:
    world = TlsWorld.create(tmp_path / "tls")
    ids, identities = await play_pair(stack, "trl.tls")
    async with secure_front(stack, world.server_tls()) as target:
        rules = CertifiedRewardFunction(
            WorkerClient(stack.target, token=stack.token, trust=stack.trust),
            reward_contract_digest=stack.digest,
            policy_checkpoint_id=CHECKPOINT,
            num_generations=2,
            policy_update=0,
        )
        function = rules.as_async(
            target=target, token=stack.token, trust=stack.trust, tls=world.client_tls()
        )
        try:
            rewards = await function(
                prompts=["p", "p"],
                completions=["done", "done"],
                episode_id=ids,
                oracle_identity=identities,
            )
        finally:
            await function.client.close()
            rules.client.close()
    assert rewards == [1.0, 0.0]
    with pytest.raises(ValidationError, match="tls"):
        rules.as_async(function.client, tls=world.client_tls())


# --------------------------------------------------------------------------------------------
# verl batch manager
# --------------------------------------------------------------------------------------------


async def test_verl_manager_refuses_a_swapped_batch_rather_than_paying(data_dir: Path) -> None:
    stack = await start_default_scoring_stack(data_dir)
    try:
        played = await play_batch(stack, "bind")
        async with man_in_the_middle(stack.target, Tamper(answer=swap_first_two)) as mitm:
            manager = CertifiedRewardManager(**manager_kwargs(stack, worker_target=mitm.target))
            try:
                with pytest.raises(ReceiptMismatch):
                    await asyncio.to_thread(
                        manager.score_batch, played.extra_infos, played.uids, {"global_steps": 1}
                    )
            finally:
                manager.close()
    finally:
        await stop_stack(stack)


async def test_verl_manager_scores_over_mutual_tls_from_reward_kwargs(
    data_dir: Path, tmp_path: Path
) -> None:
    world = TlsWorld.create(tmp_path / "tls")
    stack = await start_default_scoring_stack(data_dir)
    try:
        played = await play_batch(stack, "tls")
        async with secure_front(stack, world.server_tls()) as target:
            kwargs = manager_kwargs(
                stack,
                worker_target=target,
                tls_ca=str(world.ca.cert),
                tls_cert=str(world.client.cert),
                tls_key=str(world.client.key),
            )
            manager = CertifiedRewardManager(**kwargs)
            assert manager.settings.tls is not None
            try:
                result = await asyncio.to_thread(
                    manager.score_batch, played.extra_infos, played.uids, {"global_steps": 1}
                )
            finally:
                manager.close()
    finally:
        await stop_stack(stack)
    assert result.rewards == played.expected


def test_verl_tls_settings_are_checked(tmp_path: Path) -> None:
    world = TlsWorld.create(tmp_path / "tls")
    base: dict[str, Any] = {
        "worker_target": "127.0.0.1:1",
        "token": "t",
        "worker_public_key": "ab" * 32,
        "reward_contract_digest": "sha256:" + "0" * 64,
        "policy_checkpoint_id": CHECKPOINT,
    }
    assert ManagerSettings.from_reward_kwargs(base).tls is None
    pinned = ManagerSettings.from_reward_kwargs({**base, "tls_ca": str(world.ca.cert)})
    assert pinned.tls is not None
    assert pinned.tls.cert_chain is None
    with pytest.raises(ValidationError, match="private key"):
        ManagerSettings.from_reward_kwargs({**base, "tls_cert": str(world.client.cert)})
    with pytest.raises(ValidationError, match="cannot read"):
        ManagerSettings.from_reward_kwargs({**base, "tls_ca": str(tmp_path / "missing.pem")})
    with pytest.raises(ValidationError, match="unknown reward_kwargs"):
        ManagerSettings.from_reward_kwargs({**base, "tls_certificate": "x"})


# --------------------------------------------------------------------------------------------
# verl reward loop (its verl-free scorer)
# --------------------------------------------------------------------------------------------


def loop_scorer(stack: RunningStack, target: str) -> LoopScorer:
    scorer = LoopScorer()
    scorer._init_scorer(settings_from_config(None, manager_kwargs(stack, worker_target=target)))
    return scorer


def sample(episode_id: str, identity: dict[str, str]) -> dict[str, Any]:
    return {"episode_id": episode_id, "oracle_identity": identity}


async def test_verl_loop_refuses_another_samples_receipt(stack: RunningStack) -> None:
    ids, identities = await play_pair(stack, "loop")
    async with man_in_the_middle(stack.target) as mitm:
        scorer = loop_scorer(stack, mitm.target)
        try:
            first = await scorer.score_one(sample(ids[0], identities[0]), "g", {"global_steps": 1})
            assert first["reward_score"] == 1.0
            mitm.tamper.answer = replace_envelope("ScoreEpisode", mitm.kept[0])
            with pytest.raises(ReceiptMismatch):
                await scorer.score_one(sample(ids[1], identities[1]), "g", {"global_steps": 1})
        finally:
            await scorer.aclose()


async def test_verl_loop_rescore_is_bound_to_its_own_receipt(stack: RunningStack) -> None:
    ids, identities = await play_pair(stack, "rescore")
    async with man_in_the_middle(stack.target) as mitm:
        scorer = loop_scorer(stack, mitm.target)
        try:
            first = await scorer.score_one(sample(ids[0], identities[0]), "g", {"global_steps": 1})
            other = await scorer.score_one(sample(ids[1], identities[1]), "g", {"global_steps": 1})
            # An honest re-score is idempotent: the stored receipt, fetched and bound.
            again = await scorer.score_one(sample(ids[0], identities[0]), "g", {"global_steps": 1})
            receipt_id = first["reward_extra_info"]["reward_receipt_id"]
            assert again["reward_extra_info"]["reward_receipt_id"] == receipt_id
            assert again["reward_score"] == 1.0
            # The same id at another step is the duplicate it is: unscored, never paid.
            later = await scorer.score_one(sample(ids[0], identities[0]), "g", {"global_steps": 2})
            assert later["reward_score"] is None
            assert later["reward_extra_info"]["reward_error"] == DuplicateEpisode.reason
            # A re-score whose GetReceipt is answered with another sample's receipt stops.
            other_id = other["reward_extra_info"]["reward_receipt_id"]
            other_envelope = next(
                e
                for e in mitm.kept
                if RewardEvidenceReceipt.FromString(e.payload).receipt_id == other_id
            )
            mitm.tamper.answer = replace_envelope("GetReceipt", other_envelope)
            with pytest.raises(ReceiptMismatch):
                await scorer.score_one(sample(ids[0], identities[0]), "g", {"global_steps": 1})
        finally:
            await scorer.aclose()


# --------------------------------------------------------------------------------------------
# OpenAI grader shape
# --------------------------------------------------------------------------------------------


async def test_grader_refuses_another_episodes_receipt(stack: RunningStack) -> None:
    ids, identities = await play_pair(stack, "grader")
    async with man_in_the_middle(stack.target) as mitm:
        client = WorkerClient(mitm.target, token=stack.token, trust=stack.trust, timeout=20)
        grader = OpenAIGrader(client)

        def item(index: int) -> dict[str, Any]:
            return {
                "episode_id": ids[index],
                "policy_checkpoint_id": CHECKPOINT,
                "policy_update": 0,
                "reward_contract_digest": stack.digest,
                "metadata": {"oracle_identity": identities[index]},
            }

        try:
            paid = await asyncio.to_thread(grader, {"output_text": "done"}, item(0))
            assert paid == 1.0
            replace = replace_envelope("GradeOpenAI", mitm.kept[0])

            def pay_with_episode_0(method: str, request: Any, answer: Any) -> Any:
                # Episode 0's receipt and the score it earns, for episode 1 (a real 0.0).
                answer = replace(method, request, answer)
                answer.score = 1.0
                return answer

            mitm.tamper.answer = pay_with_episode_0
            with pytest.raises(ReceiptMismatch):
                await asyncio.to_thread(grader, {"output_text": "done"}, item(1))
        finally:
            client.close()


# --------------------------------------------------------------------------------------------
# The shared rule
# --------------------------------------------------------------------------------------------


def test_a_receipt_mismatch_stops_the_run_and_a_busy_identity_does_not() -> None:
    mismatch = ReceiptMismatch("episode_id is 'b', expected 'a'")
    assert is_setup_error(mismatch)
    busy = SampleResult(episode_id="episode.a", receipt=None, error=IdentityBusy("open"))
    stop_on_setup_errors([busy])
    moved = SampleResult(episode_id="episode.b", receipt=None, error=mismatch)
    with pytest.raises(ReceiptMismatch):
        stop_on_setup_errors([busy, moved])
