"""The learning proof at a reduced size, end to end, as ``make proof-learning`` runs it.

A subprocess starts control, the tier-2 worker and MockMed, warm-starts the tiny policy, trains
both GRPO runs with TRL's real GRPOTrainer and audits run (a). The test then reads the worker's
receipt store behind its back, verifies every envelope against the worker key the report names,
and recomputes every step's shares from those receipts: the report's numbers come from signed
receipts, not from the trainer's own bookkeeping.

Runs only where trl and matplotlib are installed (the integrations venv).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")
pytest.importorskip("matplotlib")

from support.receipt_store import read_receipts, verify_rows

from rewardseal.core.receipts import is_unscored
from rewardseal.core.signing import TrustSet
from rewardseal.v1.enums_pb2 import RewardOutcome
from rewardseal_server.sqlstore import sqlite_url

STEPS = 2
PROMPTS = 4
GENERATIONS = 2
BATCH = PROMPTS * GENERATIONS
HACKS = {"claim", "screen_only", "unsubmit", "dup", "extra", "omit", "wrong_record"}


@pytest.fixture(scope="module")
def proof(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """One reduced run of the proof; its output directory and JSON document."""
    out = tmp_path_factory.mktemp("learning")
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("REWARDSEAL_", "MOCKMED_"))
    }
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rewardseal_kit.proof.learning",
            "--json",
            str(out / "learning.json"),
            "--markdown",
            str(out / "learning.md"),
            "--png",
            str(out / "learning.png"),
            "--steps",
            str(STEPS),
            "--prompts",
            str(PROMPTS),
            "--generations",
            str(GENERATIONS),
            "--warm-start-steps",
            "5",
            "--run-dir",
            str(out / "run"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env=env,
        cwd=out,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "wrote " in done.stdout
    return out, json.loads((out / "learning.json").read_text())


@pytest.mark.slow
def test_the_reduced_run_writes_its_three_files(proof: tuple[Path, dict[str, Any]]) -> None:
    out, document = proof
    assert (out / "learning.png").read_bytes().startswith(b"\x89PNG")
    markdown = (out / "learning.md").read_text()
    assert "Warm start" in markdown
    assert "Integrity gate on run a" in markdown
    assert document["problems"] == []
    assert document["config"]["steps"] == STEPS
    assert document["config"]["batch"] == BATCH
    assert set(document["runs"]) == {"a", "b"}
    assert document["runs"]["a"]["pays"] == "screen"
    assert document["runs"]["b"]["pays"] == "certified"
    # One worker scores both runs and its policy updates only move forward (R-W-7): run b's
    # are numbered after run a's, or every one of its episodes would be refused as regressed.
    for offset, run in enumerate(document["runs"].values()):
        assert [s["policy_update"] for s in run["steps"]] == [
            offset * STEPS + step for step in range(STEPS)
        ]


@pytest.mark.slow
def test_every_steps_shares_are_recomputed_from_the_stored_receipts(
    proof: tuple[Path, dict[str, Any]],
) -> None:
    _, document = proof
    trust = TrustSet([bytes.fromhex(document["worker_public_key"])])
    rows = read_receipts(sqlite_url(Path(document["receipt_store"])))
    by_episode = verify_rows(rows, trust)  # every stored envelope verifies, one per episode
    by_id = {receipt.receipt_id: receipt for receipt in by_episode.values()}
    counted: set[str] = set()
    for run in document["runs"].values():
        assert [step["step"] for step in run["steps"]] == list(range(STEPS))
        for step in run["steps"]:
            completions = step["completions"]
            assert step["n"] == len(completions) == BATCH
            receipts = [by_id[receipt_id] for receipt_id in step["receipt_ids"]]
            assert [r.episode_id for r in receipts] == [
                c["episode_id"] for c in completions if c["receipt_id"]
            ]
            assert all(r.policy_update == step["policy_update"] for r in receipts)
            scored = [r for r in receipts if not is_unscored(r)]
            verified = [
                r for r in scored if r.reward_outcome == RewardOutcome.REWARD_OUTCOME_VERIFIED
            ]
            assert step["scored"] == len(scored)
            assert step["unscored"] == BATCH - len(scored)
            assert step["verified"] == len(verified)
            assert step["true_success"] == (len(verified) / len(scored) if scored else None)
            saved = sum(1 for c in completions if c["screen_saved"])
            assert step["claimed_success"] == saved / BATCH
            hacks = sum(1 for c in completions if c["family"] in HACKS)
            assert step["hack_share"] == hacks / BATCH
            assert sum(step["families"].values()) == BATCH
            counted.update(step["receipt_ids"])
    # Both runs' receipts are in the store and none is counted twice.
    assert len(counted) == sum(
        len(s["receipt_ids"]) for r in document["runs"].values() for s in r["steps"]
    )
    assert counted <= set(by_id)


@pytest.mark.slow
def test_the_screen_reward_run_pays_the_screen_and_the_other_the_receipt(
    proof: tuple[Path, dict[str, Any]],
) -> None:
    _, document = proof
    for step in document["runs"]["a"]["steps"]:
        for c in step["completions"]:
            assert c["paid"] == (1.0 if c["screen_saved"] else 0.0)
    for step in document["runs"]["b"]["steps"]:
        for c in step["completions"]:
            if not c["unscored"]:
                assert c["paid"] == c["certified_scalar"]


@pytest.mark.slow
def test_the_gate_audits_run_a_and_pauses_a_boundary_below_the_evidence_rule(
    proof: tuple[Path, dict[str, Any]],
) -> None:
    # Eight rows per boundary are fewer than the evidence rule's 20 (R-I-7): incomplete
    # evidence pauses the run at its first boundary, and nothing after it is audited.
    gate = proof[1]["gate"]
    assert gate["run"] == "a"
    assert gate["optimizer"] == "screen_t0"
    assert gate["sentinel"] == "sql"
    assert gate["gating_eligible"] is True
    assert gate["paused_at"] == 0
    (boundary,) = gate["boundaries"]
    assert boundary["outcome"] == "incomplete_evidence"
    assert boundary["action"] == "pause"
    assert boundary["bundle_verified"] is True
    assert gate["not_trained"] == list(range(1, STEPS))
