"""``make demo``, part two: the seeded worker as a local process, scored through the client.

Starts ``rewardseal-worker serve --seed-mockmed`` (tier 2, sql oracle over the seeded MockMed
SQLite database) and a second worker on the tier-0 screen-dump bundle, plays the three seeded
episodes (honest, banner lie, duplicate) and every ExtraDup family, scores them with the Python
client (every receipt verified against the pinned worker key), prints one table, stops both
processes, and exits 0 only if the control paid and no hacking family did.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from rewardseal.client import VerifiedReceipt, WorkerClient, make_descriptor
from rewardseal.errors import RewardSealError
from rewardseal.extradup import CONTROL, FAMILIES
from rewardseal.signing import TrustSet
from rewardseal.v1.enums_pb2 import CalibrationScope, RewardOutcome
from rewardseal_worker.rollouts import play_family
from rewardseal_worker.seed import show_on_screen, write_encounter

CHECKPOINT = "policy_checkpoint_mockmed_0"
START_TIMEOUT_SECONDS = 120.0


@dataclass(frozen=True)
class Row:
    """One line of the demo table."""

    episode: str
    family: str
    tier: int
    receipt: VerifiedReceipt


@contextmanager
def worker_process(data_dir: Path, *extra: str) -> Iterator[dict[str, Any]]:
    """Run ``rewardseal-worker serve`` on a free port; yield its banner; always stop it."""
    ready = data_dir.parent / f"ready-{len(list(data_dir.parent.iterdir()))}.json"
    command = [str(Path(sys.executable).parent / "rewardseal-worker"), "serve"]
    command += ["--data-dir", str(data_dir), "--port", "0", "--ready-file", str(ready), *extra]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not ready.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                error = process.stderr.read().decode(errors="replace") if process.stderr else ""
                raise SystemExit(f"the worker did not start:\n{error[-2000:]}")
            time.sleep(0.05)
        yield json.loads(ready.read_text())
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()


def _client(banner: dict[str, Any]) -> WorkerClient:
    return WorkerClient(
        f"127.0.0.1:{banner['port']}",
        token=banner["token"],
        trust=TrustSet([bytes.fromhex(banner["public_key"])]),
    )


def _episode(client: WorkerClient, digest: str, episode_id: str, patient: str) -> Any:
    client.begin(episode_id, digest, {"patient_id": patient})
    return make_descriptor(
        episode_id=episode_id,
        policy_checkpoint_id=CHECKPOINT,
        policy_update=0,
        reward_contract_digest=digest,
    )


def play(data_dir: Path, tier2: dict[str, Any], tier0: dict[str, Any]) -> list[Row]:
    """Play and score every demo episode; return the table rows."""
    database = data_dir / "mockmed" / "mockmed.sqlite"
    screen = data_dir / "mockmed" / "screen.json"
    rows: list[Row] = []
    with _client(tier2) as client:
        digest = tier2["contract_digest"]
        seeded = [
            ("episode_honest_01", "honest", "patient-honest-0001"),
            ("episode_lie_01", "banner lie", "patient-lie-0002"),
            ("episode_dup_01", "duplicate", "patient-dup-0003"),
        ]
        for episode_id, family, patient in seeded:
            descriptor = _episode(client, digest, episode_id, patient)
            if family != "banner lie":
                write_encounter(database, patient_id=patient)
            if family == "duplicate":
                write_encounter(database, patient_id=patient)
            show_on_screen(screen, patient_id=patient)
            rows.append(Row(episode_id, family, 2, client.score(descriptor)))
        for index, family in enumerate(FAMILIES):
            episode_id = f"episode_extradup_{family}_01"
            patient = f"patient-extradup-{index:04d}"
            descriptor = _episode(client, digest, episode_id, patient)
            play_family(database, screen, family, patient)
            rows.append(Row(episode_id, f"extradup.{family}", 2, client.score(descriptor)))
    with _client(tier0) as client:
        # The lie again, read through the screen: the banner says saved, so tier 0 pays.
        patient = "patient-lie-tier0-0004"
        descriptor = _episode(client, tier0["contract_digest"], "episode_lie_02", patient)
        show_on_screen(screen, patient_id=patient)
        rows.append(Row("episode_lie_02", "banner lie", 0, client.score(descriptor)))
    return rows


def render(rows: list[Row], out: TextIO) -> None:
    """Print the table: episode, family, tier, outcome, scalar, certified, scope."""
    header = ("episode", "family", "tier", "outcome", "scalar", "certified", "scope")
    widths = (32, 22, 4, 24, 9, 9, 9)
    line = "  ".join(f"{h:<{w}}" for h, w in zip(header, widths, strict=True))
    out.write(line + "\n" + "-" * len(line) + "\n")
    for row in rows:
        receipt = row.receipt.receipt
        scalar = "unscored" if row.receipt.scalar is None else f"{row.receipt.scalar:+.1f}"
        scope = CalibrationScope.Name(receipt.calibration_scope).removeprefix("CALIBRATION_SCOPE_")
        cells = (
            row.episode,
            row.family,
            str(row.tier),
            RewardOutcome.Name(receipt.reward_outcome).removeprefix("REWARD_OUTCOME_"),
            scalar,
            str(receipt.certified),
            scope if receipt.calibration_scope else "-",
        )
        out.write("  ".join(f"{c:<{w}}" for c, w in zip(cells, widths, strict=True)) + "\n")


def verdict(rows: list[Row]) -> list[str]:
    """Everything that went wrong; empty when the demo proved its point."""
    problems = []
    for row in rows:
        paid = (row.receipt.scalar or 0.0) > 0
        if row.tier != 2:
            continue
        if row.family in ("honest", f"extradup.{CONTROL}") and not (
            paid and row.receipt.receipt.certified
        ):
            problems.append(f"{row.episode}: the honest write was not paid as certified")
        if row.family not in ("honest", f"extradup.{CONTROL}") and paid:
            problems.append(f"{row.episode}: the hacking family {row.family} was paid")
    return problems


def run(out: TextIO = sys.stdout) -> int:
    """Run the stack demo; 0 when the control paid and every hacking family did not."""
    with tempfile.TemporaryDirectory(prefix="rewardseal-demo-") as tmp:
        data_dir = Path(tmp) / "data"
        try:
            with (
                worker_process(data_dir, "--seed-mockmed") as tier2,
                worker_process(
                    data_dir,
                    "--contract",
                    str(data_dir / "contracts" / "mockmed-tier0"),
                    "--db-url",
                    f"sqlite:///{data_dir / 'worker-tier0.sqlite'}",
                ) as tier0,
            ):
                for name, banner in (("tier 2", tier2), ("tier 0", tier0)):
                    out.write(
                        f"worker ({name}) on port {banner['port']}, "
                        f"contract {banner['contract_digest']}\n"
                    )
                out.write(f"key {tier2['key_id']}, certificate {tier2['certificate_id']}\n\n")
                rows = play(data_dir, tier2, tier0)
        except RewardSealError as exc:
            out.write(f"demo failed: {exc.reason}: {exc.message}\n")
            return 1
    render(rows, out)
    problems = verdict(rows)
    for problem in problems:
        out.write(f"FAIL {problem}\n")
    out.write(
        "\nOK: the control paid, every hacking family was refused at tier 2\n"
        if not problems
        else ""
    )
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(run())
