"""The integrity gate on the driver of verl's reward loop (R-I-3, R-I-8, R-I-9), on a real worker
and a real control plane, without verl or torch.

The per-sample half is the reward-loop scorer's own ``score_one`` (what each ``run_single``
answers in a Ray worker); the driver half is :class:`LoopGate.after_batch` with the whole batch
and those per-sample scores, as ``assemble_rm_scores`` hands them over: ONE capture gets the
batch's rows (the optimizer's own scores, None for the unscored sample, never the group fill),
then the gate audits the boundary. Four records and no sentinel are far below the evidence rule,
so the audit is ``incomplete_evidence``, which pauses like a failure.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from support.control import ControlStack
from support.integrity_trainer import check_paused, create_binding, driver_gate
from support.verl_episodes import Played, manager_kwargs, play_batch
from support.worker_stack import RunningStack

from rewardseal.core.errors import IntegrityHalted, ValidationError
from rewardseal.trainers.integrity.capture import output_digest
from rewardseal.trainers.integrity.gate import StepGate
from rewardseal.trainers.verl.loop import LoopScorer, settings_from_config
from rewardseal.trainers.verl.loop_gate import LoopGate, install_loop_gate, installed_loop_gate

TEXTS = [f"loop response {index}" for index in range(4)]


async def score_per_sample(stack: RunningStack, played: Played, step: int) -> list[float | None]:
    """Each sample scored on its own, as the reward-loop workers do; their ``reward_score``s."""
    scorer = LoopScorer()
    scorer._init_scorer(settings_from_config(None, manager_kwargs(stack)))
    try:
        answers = await asyncio.gather(
            *(
                scorer.score_one(info, uid, {"global_steps": step})
                for info, uid in zip(played.extra_infos, played.uids, strict=True)
            )
        )
    finally:
        await scorer.aclose()
    return [answer["reward_score"] for answer in answers]


async def test_the_driver_captures_the_whole_batch_once_and_a_paused_boundary_halts(
    stack: RunningStack, integrity_control: ControlStack, tmp_path: Path
) -> None:
    binding = await create_binding(integrity_control)
    with driver_gate(integrity_control, binding, tmp_path / "buffer", boundary_every=2) as made:
        client, capture, gate = made.client, made.capture, made.gate
        # Policy update 5 is no boundary: nothing captured, nothing audited.
        odd = await play_batch(stack, "loopodd")
        odd_scores = await score_per_sample(stack, odd, 5)
        await asyncio.to_thread(
            lambda: gate.after_batch(
                odd.extra_infos, odd.uids, odd_scores, texts=TEXTS, meta_info={"global_steps": 5}
            )
        )
        assert capture.last_rows == []
        assert gate.gate.outcomes == {}
        # Policy update 6 is: the batch's four rows are captured, sealed, audited: a pause.
        even = await play_batch(stack, "loopeven")
        scores = await score_per_sample(stack, even, 6)
        with pytest.raises(IntegrityHalted) as caught:
            await asyncio.to_thread(
                lambda: gate.after_batch(
                    even.extra_infos, even.uids, scores, texts=TEXTS, meta_info={"global_steps": 6}
                )
            )
        audits = await asyncio.to_thread(client.list_audits, run_id=capture.run_id)
    # The rows carry each worker's own score: the unscored sample stays None (R-T-1).
    assert scores == [1.0, None, 1.0, -1.0]
    rows = capture.last_rows
    assert [row.episode_id for row in rows] == [info["episode_id"] for info in even.extra_infos]
    assert [row.optimizer_raw for row in rows] == scores
    assert [row.output_digest for row in rows] == [output_digest(text) for text in TEXTS]
    assert [row.group_id for row in rows] == even.uids
    assert {row.policy_update for row in rows} == {6}
    assert 6 in capture.shard_ids
    check_paused(gate.gate, caught, audits, boundary=6)


async def test_the_configured_policy_update_stands_in_for_global_steps(
    stack: RunningStack, integrity_control: ControlStack, tmp_path: Path
) -> None:
    # verl 0.9.1's reward batches carry no global_steps: the workers state the configured one.
    binding = await create_binding(integrity_control)
    buffer = tmp_path / "buffer"
    with driver_gate(integrity_control, binding, buffer, boundary_every=2, policy_update=3) as made:
        capture, gate = made.capture, made.gate
        played = await play_batch(stack, "loopconf")
        scores = await score_per_sample(stack, played, 3)
        await asyncio.to_thread(
            lambda: gate.after_batch(
                played.extra_infos, played.uids, scores, texts=TEXTS, meta_info={}
            )
        )
    assert gate.step_of({}) == 3
    assert gate.step_of({"global_steps": 8}) == 8
    assert capture.last_rows == []  # 3 is not a boundary of every 2
    assert gate.gate.outcomes == {}


async def test_a_malformed_batch_is_refused_before_anything_is_captured_or_audited(
    integrity_control: ControlStack, tmp_path: Path
) -> None:
    binding = await create_binding(integrity_control)
    infos = [{"episode_id": f"episode.loopbad.{index}"} for index in range(2)]
    with driver_gate(integrity_control, binding, tmp_path / "buffer") as made:
        client, capture, gate = made.client, made.capture, made.gate
        step = {"global_steps": 2}
        with pytest.raises(ValidationError, match="1 reward scores for 2 samples"):
            gate.after_batch(infos, ["u", "u"], [1.0], texts=TEXTS[:2], meta_info=step)
        with pytest.raises(ValidationError, match="policy update"):
            gate.after_batch(infos, ["u", "u"], [1.0, 0.0], texts=TEXTS[:2], meta_info={})
        with pytest.raises(ValidationError, match="episode_id"):
            gate.after_batch([{}, {}], ["u", "u"], [1.0, 0.0], texts=TEXTS[:2], meta_info=step)
        with pytest.raises(ValidationError, match="response text"):
            gate.after_batch(infos, ["u", "u"], [1.0, 0.0], texts=None, meta_info=step)
        audits = await asyncio.to_thread(client.list_audits, run_id=capture.run_id)
    assert len(capture.buffer) == 0
    assert capture.last_rows == []
    assert gate.gate.outcomes == {}
    assert audits == []


def test_the_installed_gate_is_per_process_and_replaceable() -> None:
    assert installed_loop_gate() is None
    first = LoopGate(None, StepGate(None))
    assert install_loop_gate(first) is None
    try:
        assert installed_loop_gate() is first
    finally:
        assert install_loop_gate(None) is first
    assert installed_loop_gate() is None
