"""The integrity gate in a real ``trl.GRPOTrainer`` run of CertifiedToolEpisodes (docs/spec.md
§12, R-I-3, R-I-8): the environment feeds the capture, and ``IntegrityGate`` audits and pauses
the run exactly as it does the single-turn reward function's.

The parts are tests/integrations/test_trl_integrity_gate.py's (MockMed over a seeded SQLite
store, the tier-2 ``sql`` worker as the optimizer, the ``rest`` worker as the independent
sentinel, a real control plane). The policy is the scripted one
(``rewardseal_kit.scripted_tools``) with no script named: every episode closes at once, both
workers refuse it, and under the *inverted* mapping (the optimizer accepts exactly what the
sentinel refuses) the audit of boundary 0 fails on asymmetric acceptance: the gate pauses after
step 1 with a checkpoint. The sentinel episodes were opened in ``reset`` at the bound trainer's
step, before the policy's first turn.

Runs only where trl is installed (the integrations venv: ``make test-integrations``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from integrations.test_trl_integrity_gate import (
    INVERTED_MAPPING,
    NUM_GENERATIONS,
    PROFILE,
    PROTOCOL,
    World,
    offline,
    servers,
    world,
)

from rewardseal.trainers.integrity.buffer import SignalBuffer
from rewardseal.trainers.integrity.capture import IntegrityCapture
from rewardseal.trainers.integrity.monitor import IntegrityBinding, IntegrityMonitor
from rewardseal.trainers.trl import CertifiedToolEpisodes
from rewardseal_kit.scripted_tools import scripted_policy_trainer
from rewardseal_kit.tiny_models import tiny_grpo_config, tiny_llama, tool_calling_tokenizer
from rewardseal_kit.tools.mockmed import CREATE_ENCOUNTER, SUBMIT_ENCOUNTER, mockmed_session
from rewardseal_mockmed.contract import IDENTITY_KEY

__all__ = ["offline", "servers", "world"]  # the fixtures, shared with the gate tests

PROMPTS = 24  # distinct records per boundary: enough evidence to fail (>= 20)


@pytest.fixture(autouse=True)
def silence(monkeypatch: pytest.MonkeyPatch) -> None:
    """TRL's warning that environment_factory is experimental: known, said in the docs."""
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")


@pytest.mark.slow
def test_the_gate_pauses_a_tool_episode_run_on_a_failing_audit(
    world: World, tmp_path: Path
) -> None:
    from datasets import Dataset
    from trl import GRPOTrainer

    from rewardseal.trainers.trl import IntegrityGate

    run_id = "gate-env-fail"
    system_id, parsed = world.create_system(INVERTED_MAPPING)
    checkpoint = f"policy.checkpoint.{run_id}"
    capture = IntegrityCapture(
        world.trainer_control,
        run_id=run_id,
        system_revision_id=system_id,
        protocol_revision_id=PROTOCOL,
        mapping=parsed,
        buffer=SignalBuffer(tmp_path / "signal-buffer"),
        runtime_identity="tests/integrations",
        checkpoint=checkpoint,
        sentinel=world.sentinel,
        sentinel_contract_digest=world.rest.digest,
        boundary_every=2,
    )
    monitor = IntegrityMonitor(
        world.trainer_control,
        IntegrityBinding(system_id, PROTOCOL, PROFILE),
        capture=capture,
        audit_timeout_s=60.0,
    )
    episodes = CertifiedToolEpisodes(
        world.optimizer,
        reward_contract_digest=world.sql.digest,
        policy_checkpoint_id=checkpoint,
        num_generations=NUM_GENERATIONS,
        tools=(CREATE_ENCOUNTER, SUBMIT_ENCOUNTER),
        open_session=lambda identity: mockmed_session(
            world.mockmed.url, world.mockmed.token, identity[IDENTITY_KEY]
        ),
        capture=capture,
        name="mockmed_tools",
    )
    gate = IntegrityGate(monitor)
    tokenizer = tool_calling_tokenizer()
    dataset = Dataset.from_list(
        [
            {
                "prompt": [{"role": "user", "content": "Create one Triage encounter."}],
                "oracle_identity": {IDENTITY_KEY: f"patient-{run_id}-{i:04d}"},
            }
            for i in range(PROMPTS)
        ]
    )
    args = tiny_grpo_config(
        tmp_path / "out",
        max_steps=4,
        batch=PROMPTS * NUM_GENERATIONS,
        num_generations=NUM_GENERATIONS,
        max_completion_length=64,
    )
    trainer = scripted_policy_trainer(GRPOTrainer)(
        model=tiny_llama(tokenizer, max_position_embeddings=4096),
        reward_funcs=[episodes.reward],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        environment_factory=episodes.environment,
        callbacks=[gate],
    )
    episodes.bind(trainer)
    trainer.train()

    # Boundary 0 (the first step's episodes) is audited at the end of step 1: fail -> pause.
    assert trainer.state.global_step == 1
    halted = gate.halted
    assert halted is not None
    assert (halted.action, halted.outcome, halted.boundary) == ("pause", "fail", 0)
    assert "optimizer_only_rate_above_maximum" in halted.reasons
    assert gate.checkpoint == str(tmp_path / "out" / "checkpoint-1")
    assert (tmp_path / "out" / "checkpoint-1" / "trainer_state.json").is_file()
    audits = world.trainer_control.list_audits(run_id=run_id)
    assert [audit.boundary for audit in audits] == [0]
