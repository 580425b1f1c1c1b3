"""Train a policy with TRL's GRPOTrainer, paid only by certified receipts (docs/trainers.md).

    python examples/trl_grpo.py                 # starts MockMed and a seeded worker for the run
    python examples/trl_grpo.py --ready-file worker.json --mockmed-url http://127.0.0.1:8080
    REWARDSEAL_WORKER_READY_FILE=worker.json MOCKMED_URL=... python examples/trl_grpo.py

Needs ``trl`` (and torch, transformers, datasets: ``pip install trl``; the repository's
``make setup-integrations`` venv has them) beside the rewardseal packages. Nothing is
downloaded: the policy is a two-layer Llama with a character-level tokenizer built in code
(:mod:`rewardseal_kit.tiny_models`), so it trains in seconds on a CPU and its completions are
noise. The point is the plumbing a real run needs, end to end:

1. **Where the worker is.** The worker's address, bearer token, Ed25519 key and contract
   digest all come from its ready file (``rewardseal-worker serve --ready-file PATH``), read by
   ``WorkerClient.from_ready_file`` or, with no ``--ready-file``, ``WorkerClient.from_env``
   (``REWARDSEAL_WORKER_READY_FILE``, or ``REWARDSEAL_WORKER_TARGET``, ``..._TOKEN``,
   ``..._PUBLIC_KEY``, ``REWARDSEAL_CONTRACT_DIGEST``). With neither, this script starts
   MockMed and a seeded tier-2 worker (``rest`` oracle over MockMed's API) in a temporary
   directory and uses that worker's ready file.
2. **Who acts.** ``MockMedActor`` (an ``EpisodeActor``) executes each completion's action
   report on MockMed's REST API under a sandbox patient of its own; MockMed's bearer token is
   ``MOCKMED_TOKEN``.
3. **What pays.** ``CertifiedRewardFunction`` begins every episode of a batch in one call, lets
   the actor act, scores the batch in one call, verifies every receipt against the pinned key,
   and never turns an unscored episode into 0.0.
4. **What trained each checkpoint** (``--control HOST:PORT``, with the trainer credential in
   ``REWARDSEAL_CONTROL_TOKEN``; the worker must forward its receipts to that control plane).
   ``RewardAttestationCallback`` writes ``reward-attestation.dsse.json`` into every
   ``checkpoint-N`` the trainer saves (``--save-steps``, default every step): control's signed
   statement of the receipts that trained it (docs/provenance.md). Check one with
   ``rewardseal attest verify OUT/checkpoint-N/reward-attestation.dsse.json --org-key KEY``.

It prints one line per training step and one for the run, in the words of
:class:`rewardseal.trainers.groups.BatchTally` (``8 completions: 0 paid (reward > 0), 8 scored,
0 unscored, 8 certified``: *paid* is a receipt with a positive scalar, as TRL's
``rewardseal/paid_share`` metric counts it; *scored* any receipt scalar, 0.0 included, as
``rewardseal/scored_share``), and exits 0 when every completion was scored with a verified,
certified receipt (and, with ``--control``, every saved checkpoint was attested);
``--summary PATH`` writes the same as JSON. The tiny policy's completions are noise, so expect
them scored (``WRONG_EFFECT``, 0.0) and not paid.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from rewardseal.rpc.control_client import ControlClient
from rewardseal.rpc.worker_client import WorkerClient
from rewardseal.trainers.groups import BatchTally
from rewardseal.trainers.trl import CertifiedRewardFunction, RewardAttestationCallback
from rewardseal_kit.actors import MockMedActor
from rewardseal_mockmed.contract import IDENTITY_KEY

TALLY_FIELDS = tuple(field.name for field in fields(BatchTally))

CHECKPOINT = "policy_checkpoint_example_0"
NUM_GENERATIONS = 2
PROMPTS = 2  # per step: a batch of PROMPTS * NUM_GENERATIONS completions


@dataclass(frozen=True)
class Services:
    """The worker client and where the actor writes."""

    worker: WorkerClient
    mockmed_url: str
    mockmed_token: str


@contextmanager
def services(args: argparse.Namespace) -> Iterator[Services]:
    """The services ``args`` name, or MockMed and a seeded worker started for this run."""
    if args.ready_file or os.environ.get("REWARDSEAL_WORKER_READY_FILE"):
        url = args.mockmed_url or os.environ.get("MOCKMED_URL")
        token = os.environ.get("MOCKMED_TOKEN")
        if not url or not token:
            raise SystemExit("give --mockmed-url (or MOCKMED_URL) and MOCKMED_TOKEN")
        worker = (
            WorkerClient.from_ready_file(args.ready_file, timeout=30.0)
            if args.ready_file
            else WorkerClient.from_env(timeout=30.0)
        )
        with worker:
            yield Services(worker, url, token)
        return
    # Nothing given: start both here (the processes `make up` runs), stopped on exit.
    from rewardseal_kit.proof.run import local_services

    with tempfile.TemporaryDirectory(prefix="rewardseal-trl-") as tmp:
        run_dir = Path(tmp)
        with local_services(run_dir, params=False) as started:
            # The ready file holds everything the client needs; nothing is copied by hand.
            worker = WorkerClient.from_ready_file(run_dir / "worker.ready.json", timeout=30.0)
            with worker:
                yield Services(worker, started.mockmed_url, started.mockmed_token)


class LoggedReward(CertifiedRewardFunction):
    """The reward function, printing what each training step was paid."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.steps: list[dict[str, Any]] = []

    def __call__(self, prompts: Any, completions: Any, **kwargs: Any) -> list[float | None]:
        rewards = super().__call__(prompts, completions, **kwargs)
        columns = self.metadata_columns()
        # Counted from the receipts, as TRL's rewardseal/paid_share and scored_share metrics are:
        # "paid" is a receipt's own positive scalar, never a group fill for an unscored sample.
        tally = self.last_tally()
        step = {
            "step": kwargs["trainer_state"].global_step,
            **asdict(tally),
            "errors": [error for error in columns["reward_error"] if error],
            "outcomes": sorted(set(columns["reward_outcome"])),
            "episode_ids": list(columns["reward_episode_id"]),
        }
        self.steps.append(step)
        print(
            f"step {step['step']}: {tally.line()} (outcomes {', '.join(step['outcomes'])})",
            flush=True,
        )
        return rewards


def train(
    found: Services,
    steps: int,
    output_dir: Path,
    *,
    control: ControlClient | None = None,
    save_steps: int = 1,
) -> tuple[list[dict[str, Any]], Any]:
    """A GRPO run of ``steps`` steps on the tiny policy: what each step was paid, and (with
    ``control``) the attestation callback, which attested a checkpoint every ``save_steps``."""
    from datasets import Dataset
    from trl import GRPOTrainer

    from rewardseal_kit.tiny_models import char_tokenizer, tiny_grpo_config, tiny_llama

    tokenizer = char_tokenizer(padding_side="left")
    model = tiny_llama(tokenizer)
    patients = [f"patient-example-{index:04d}" for index in range(PROMPTS * steps)]
    dataset = Dataset.from_list(
        [
            {
                "prompt": f"Create one Triage encounter for {patient}. Answer with JSON:",
                # The identity the worker reads; the actor derives one sandbox per completion.
                "oracle_identity": {IDENTITY_KEY: patient},
            }
            for patient in patients
        ]
    )
    reward = LoggedReward(
        found.worker,
        reward_contract_digest=found.worker.reward_contract_digest,  # from the ready file
        policy_checkpoint_id=CHECKPOINT,
        num_generations=NUM_GENERATIONS,
        require_certified=True,
        actor=MockMedActor(found.mockmed_url, found.mockmed_token),
        name="mockmed_certified",
    )
    # The receipts that trained each checkpoint: this run's contract and checkpoint id.
    attest = None if control is None else RewardAttestationCallback.for_rewards(control, reward)
    args = tiny_grpo_config(
        output_dir,
        max_steps=steps,
        batch=PROMPTS * NUM_GENERATIONS,
        num_generations=NUM_GENERATIONS,
        save_steps=None if attest is None else save_steps,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[] if attest is None else [attest],
    )
    trainer.train()
    return reward.steps, attest


def run_tally(steps: Sequence[dict[str, Any]]) -> BatchTally:
    """The steps' tallies added up: the run's one result line."""
    return sum(
        (BatchTally(**{name: step[name] for name in TALLY_FIELDS}) for step in steps),
        BatchTally(0, 0, 0, 0, 0),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ready-file", type=Path, help="the worker's ready file")
    parser.add_argument("--mockmed-url", help="MockMed's base URL (with --ready-file)")
    parser.add_argument("--steps", type=int, default=2, help="training steps (default 2)")
    parser.add_argument("--output-dir", type=Path, help="TRL's output directory")
    parser.add_argument("--summary", type=Path, help="write what each step was paid as JSON")
    parser.add_argument(
        "--control",
        metavar="HOST:PORT",
        help="attest every saved checkpoint at this control plane (REWARDSEAL_CONTROL_TOKEN)",
    )
    parser.add_argument(
        "--save-steps", type=int, default=1, help="with --control: save every N steps (1)"
    )
    args = parser.parse_args(argv)
    with (
        services(args) as found,
        tempfile.TemporaryDirectory(prefix="rewardseal-grpo-") as scratch,
        control_client(args.control) as control,
    ):
        steps, attest = train(
            found,
            args.steps,
            args.output_dir or Path(scratch),
            control=control,
            save_steps=args.save_steps,
        )
        digest = found.worker.reward_contract_digest
    total = run_tally(steps)
    summary: dict[str, Any] = {"contract_digest": digest, "steps": steps}
    attested_all = True
    if attest is not None:
        summary["attestations"] = [
            {"path": str(a.path), "receipts": a.receipt_count, "merkle_root": a.merkle_root}
            for a in attest.attested
        ]
        summary["unattested"] = [{"path": str(p), "why": why} for p, why in attest.unattested]
        for a in attest.attested:
            print(
                f"attested {a.path.parent.name}: {a.receipt_count} receipts, root {a.merkle_root}"
            )
        attested_all = bool(attest.attested) and not attest.unattested
    if args.summary is not None:
        args.summary.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    # The one result line: the same words as each step's line, for the whole run.
    print(f"{len(steps)} step{'' if len(steps) == 1 else 's'}, {total.line()}")
    return 0 if steps and total.certified == total.completions and attested_all else 1


@contextmanager
def control_client(target: str | None) -> Iterator[ControlClient | None]:
    """The trainer's control client for ``--control`` (token: ``REWARDSEAL_CONTROL_TOKEN``)."""
    if target is None:
        yield None
        return
    token = os.environ.get("REWARDSEAL_CONTROL_TOKEN")
    if not token:
        raise SystemExit("--control needs control's trainer credential in REWARDSEAL_CONTROL_TOKEN")
    with ControlClient(target, token=token, timeout=30.0) as client:
        yield client


if __name__ == "__main__":
    sys.exit(main())
