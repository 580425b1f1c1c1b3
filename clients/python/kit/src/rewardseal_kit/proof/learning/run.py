"""The learning proof's run: services, the warm start, both GRPO runs, the audit of run (a).

Services (:func:`rewardseal_kit.proof.integrity.run.local_integrity_services`, ``sql_only``):
the control plane, the seeded tier-2 ``sql`` worker serving the parameterized bundle
(``contracts/mockmed-params``: type and note bound per episode) and MockMed over the system of
record it reads, as child processes stopped on exit. Run (a) is paid by the tier-0 screen, run
(b) by the worker's certified receipt; both are scored by the worker. Afterwards run (a)'s
steps are audited through control, one boundary per policy update, with the tier-2 worker as the
primary sentinel (:func:`~rewardseal_kit.proof.integrity.run.run_case`: append, seal, audit,
verify the signed bundle; it stops at the first pause, later boundaries not audited).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Final

from rewardseal_kit.proof.integrity.run import SQL, local_integrity_services, run_case
from rewardseal_kit.proof.learning.config import LearningConfig
from rewardseal_kit.proof.learning.rewards import CERTIFIED, SCREEN
from rewardseal_kit.proof.learning.train import RunResult, grpo_run, warm_start
from rewardseal_kit.proof.rewards import SCREEN_T0
from rewardseal_kit.proof.run import PARAMS_CONTRACT

__all__ = ["RUNS", "RECEIPT_STORE", "run_learning"]

RUNS: Final = (("a", SCREEN), ("b", CERTIFIED))
"""(run, what pays it): (a) the tier-0 screen, (b) the certified tier-2 receipt."""
RECEIPT_STORE: Final = Path("sql") / "worker.sqlite"
"""The tier-2 worker's receipt store, relative to the run directory."""


def _run_json(result: RunResult) -> dict[str, Any]:
    return {
        "pays": result.pays,
        "seconds": result.seconds,
        "steps": [step.to_json() for step in result.reward.steps],
        "trainer_log": [
            {k: v for k, v in entry.items() if isinstance(v, int | float | str)}
            for entry in result.log_history
        ],
    }


def run_learning(config: LearningConfig, run_dir: Path) -> dict[str, Any]:
    """Run the whole proof in ``run_dir``; the report document (JSON-ready)."""
    started = time.monotonic()
    with local_integrity_services(run_dir, sql_only=True, sql_contract=PARAMS_CONTRACT) as found:
        ready = time.monotonic()
        worker = found.workers[SQL]
        import torch

        torch.set_num_threads(config.torch_threads)
        model, tokenizer, warm = warm_start(config)
        runs: dict[str, RunResult] = {}
        for index, (name, pays) in enumerate(RUNS):
            runs[name] = grpo_run(
                name,
                pays,  # type: ignore[arg-type]
                config=config,
                model=model,
                tokenizer=tokenizer,
                worker=worker.client,
                contract_digest=worker.contract_digest,
                mockmed_url=found.mockmed_url,
                mockmed_token=found.mockmed_token,
                output_dir=run_dir / f"trl-{name}",
                # One worker scores both runs; its policy updates only move forward (R-W-7).
                policy_update_offset=index * config.steps,
            )
        audited = time.monotonic()
        episodes = runs["a"].reward.audit_episodes
        shares = [step.shares()["hack_share"] or 0.0 for step in runs["a"].reward.steps]
        gate = run_case(
            found,
            episodes,
            name="learning-a",
            optimizer=SCREEN_T0,
            sentinel=SQL,
            drift=shares,
        )
        finished = time.monotonic()
        return {
            "proof": "learning",
            "config": config.to_json(),
            "contract_digest": worker.contract_digest,
            "worker_key_id": found.sources[SQL].worker_key_id,
            # Public: what a reader needs to verify the stored receipts (never the token).
            "worker_public_key": json.loads(
                (run_dir / f"{SQL}.ready.json").read_text(encoding="utf-8")
            )["public_key"],
            "receipt_store": str(run_dir / RECEIPT_STORE),
            "warm_start": warm,
            "runs": {name: _run_json(result) for name, result in runs.items()},
            "gate": {
                **gate.to_json(),
                "run": "a",
                "boundary_rows_dropped": [
                    step.n - len(kept)
                    for step, kept in zip(runs["a"].reward.steps, episodes, strict=True)
                ],
            },
            "seconds": {
                "services": round(ready - started, 3),
                "training": round(audited - ready, 3),
                "audit": round(finished - audited, 3),
                "total": round(finished - started, 3),
            },
        }
