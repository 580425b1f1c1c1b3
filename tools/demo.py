"""``make demo``, part two: the full local stack and a scripted trainer.

    python tools/demo.py [--keep DIR]

Starts, in a temporary directory and each on a free loopback port, the processes ``make up``
runs (tools/stack.py does the process management): control (SQLite), the seeded tier-2 worker
(registered with control) and MockMed over the worker's seeded MockMed database, writing its
screen dump where the worker's tier-0 bundle reads it; then a second worker on the tier-0
(screen-dump) bundle and a third on the parameterized bundle (task parameters per episode,
R-MSG-11), unlinked, certified by its own synthetic certificate.

The scripted trainer begins every episode on the worker, acts THROUGH MockMed's REST API
(``POST /api/encounters`` for writes, ``POST /ui/claim`` for what the UI claims without a write)
and streams all descriptors through the Python client's ``stream()``: the three seeded episodes
(honest, banner lie, duplicate) and every ExtraDup family at tier 2, then the lie again at
tier 0. Then one parameterized episode pair: begun with one row's values and with another's,
the same write is VERIFIED for the first and WRONG_EFFECT for the second, each receipt printed
with its outcome, findings and task_parameters_digest (R-W-18, R-MSG-12). It prints one table
(episode, family, tier, outcome, scalar or "unscored", certified, scope) and, once the worker's
outbox has drained, control's receipt summary for the contract.

Every process it started is stopped on the way out (also on errors, Ctrl-C and SIGTERM). Exit
status 0 only if the control family paid (VERIFIED, certified) and no hacking family did.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Final, TextIO

import grpc
import stack

from rewardseal.cli.receipt import describe
from rewardseal.core.errors import RewardSealError
from rewardseal.core.signing import TrustSet
from rewardseal.rpc.control_client import ControlClient
from rewardseal.rpc.worker_client import VerifiedReceipt, WorkerClient, make_descriptor
from rewardseal.v1 import control_service_pb2 as control_pb
from rewardseal.v1.enums_pb2 import CalibrationScope, RewardOutcome
from rewardseal.v1.episode_pb2 import EpisodeDescriptor
from rewardseal_kit.proof.conditions import PARAMS_NOTE, MockMedUI, params_task
from rewardseal_mockmed.contract import IDENTITY_KEY
from rewardseal_mockmed.extradup import (
    CONTROL,
    FAMILIES,
    mockmed_write_spec,
    parse_action_report,
    scripted_report,
)
from rewardseal_server.sqlstore import sqlite_url

CHECKPOINT: Final = stack.CHECKPOINT
TIER0_CONTRACT: Final = Path("contracts") / "mockmed-tier0"
"""The tier-0 (screen-dump) bundle ``--seed-mockmed`` writes, relative to the worker's data."""
PARAMS_CONTRACT: Final = Path("contracts") / "mockmed-params"
"""The parameterized bundle (encounter type and note per episode) ``--seed-mockmed`` writes."""
PARAMS_ROWS: Final = (
    ("episode_params_01", "params.row", "patient-params-0005", "Triage"),
    ("episode_params_02", "params.other row", "patient-params-0006", "Consult"),
)
"""(episode, family, patient, the encounter type its task row asks for); every one writes a
Triage encounter, so only the first row's write is the task."""
SCREEN_FILE: Final = Path("mockmed") / "screen.json"
"""Where the tier-0 bundle reads the screen dump, relative to the worker's data directory."""
DRAIN_TIMEOUT_SECONDS: Final = 60.0
SEEDED: Final = (
    ("episode_honest_01", "honest", "patient-honest-0001"),
    ("episode_lie_01", "banner lie", "patient-lie-0002"),
    ("episode_dup_01", "duplicate", "patient-dup-0003"),
)
TIER0_LIE: Final = ("episode_lie_02", "banner lie", "patient-lie-tier0-0004")
PAYING: Final = frozenset({"honest", f"extradup.{CONTROL}", PARAMS_ROWS[0][1]})
"""Families a sound reward pays; every other tier-2 family is a hack it must refuse."""


@dataclass(frozen=True)
class Row:
    """One line of the demo table."""

    episode: str
    family: str
    tier: int
    receipt: VerifiedReceipt


@dataclass(frozen=True)
class Episode:
    """One scripted episode before it is scored."""

    episode_id: str
    family: str
    patient_id: str


class Stopped(Exception):
    """SIGTERM arrived: unwind so every started process is stopped."""


# ---------------------------------------------------------------------- the stack


@contextmanager
def local_stack(root: Path, out: TextIO) -> Iterator[dict[str, Any]]:
    """Control, the tier-2 worker, MockMed and the tier-0 worker; always stopped afterwards."""
    main = stack.Layout(root / "stack")
    tier0 = stack.Layout(root / "tier0")
    params = stack.Layout(root / "params")
    for layout in (main, tier0, params):
        layout.run_dir.mkdir(parents=True, mode=0o700)
    tokens = stack.make_tokens(main)
    started: list[tuple[stack.Layout, str]] = []

    def start(
        layout: stack.Layout,
        service: str,
        command: Sequence[str],
        env: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        started.append((layout, service))
        env = env if env is not None else stack.service_env(service, tokens)
        banner = stack.start_service(layout, service, command, env)
        banner["pid"] = stack.read_pid(layout.pid_file(service))
        return banner

    worker_data = main.data(stack.WORKER)
    try:
        control = start(main, stack.CONTROL, stack.control_command(main))
        control_target = f"{stack.HOST}:{control['port']}"
        worker_command = stack.worker_command(
            main, control_target, organization_key=control["organization_public_key"]
        )
        # Admitted for the seeded contract by a one-time enrollment credential (R-C-11).
        worker = start(main, stack.WORKER, worker_command, stack.worker_env(control_target, tokens))
        # Linked, the worker certifies only under a certificate control lists (R-C-9).
        worker["certificate_id"] = stack.certify_worker(control_target, worker, tokens)
        screen = worker_data / SCREEN_FILE
        mockmed = start(main, stack.MOCKMED, stack.mockmed_command(main, screen_file=screen))
        # The tier-0 worker shares the seeded data (keys, bundles, screen) but not the store,
        # and is not registered with control: its receipts are uncertified by design.
        tier0_command = stack.worker_command(
            tier0,
            None,
            seed=False,
            data_dir=worker_data,
            extra=(
                "--contract",
                str(worker_data / TIER0_CONTRACT),
                "--db-url",
                sqlite_url(tier0.run_dir / "worker-tier0.sqlite"),
            ),
        )
        worker0 = start(tier0, stack.WORKER, tier0_command)
        # The parameterized bundle likewise, with the synthetic certificate the seeding signed.
        params_command = stack.worker_command(
            params,
            None,
            seed=False,
            data_dir=worker_data,
            extra=(
                "--contract",
                str(worker_data / PARAMS_CONTRACT),
                "--db-url",
                sqlite_url(params.run_dir / "worker-params.sqlite"),
            ),
        )
        worker_params = start(params, stack.WORKER, params_command)
        services = {
            "control": control,
            "worker": worker,
            "mockmed": mockmed,
            "tier0": worker0,
            "params": worker_params,
        }
        for name, banner in services.items():
            out.write(f"{name:8} pid {banner['pid']:<8} {stack.HOST}:{banner['port']}\n")
        yield {"services": services, "tokens": tokens, "control_target": control_target}
    finally:
        for layout, service in reversed(started):
            stack.stop_service(layout, service)


# ---------------------------------------------------------------------- the trainer


def act_seeded(mockmed: MockMedUI, family: str, patient_id: str) -> None:
    """The seeded episodes: the honest write, the banner lie, the duplicate write."""
    gold = dict(mockmed_write_spec(patient_id).fields)
    if family == "banner lie":
        mockmed.claim(patient_id)
        return
    mockmed.submit(gold)
    if family == "duplicate":
        mockmed.submit(gold)


def act_family(mockmed: MockMedUI, family: str, patient_id: str) -> None:
    """Play ``family``'s scripted action report through MockMed's REST API.

    Submitted creates become REST writes; a family that says it saved but wrote nothing for
    this patient gets only the UI claim (the banner a screen-based reward would pay).
    """
    report = parse_action_report(scripted_report(family, mockmed_write_spec(patient_id)))
    wrote_for_patient = False
    if report.submitted:
        for action in report.actions:
            fields = {IDENTITY_KEY: patient_id, **dict(action.fields)}
            mockmed.submit(fields)
            wrote_for_patient = wrote_for_patient or fields[IDENTITY_KEY] == patient_id
    if not report.halted and not wrote_for_patient:
        mockmed.claim(patient_id)


def _descriptor(digest: str, episode: Episode) -> EpisodeDescriptor:
    return make_descriptor(
        episode_id=episode.episode_id,
        policy_checkpoint_id=CHECKPOINT,
        policy_update=0,
        reward_contract_digest=digest,
        oracle_identity={IDENTITY_KEY: episode.patient_id},
    )


def _client(banner: Mapping[str, Any], token: str) -> WorkerClient:
    return WorkerClient(
        f"{stack.HOST}:{banner['port']}",
        token=token,
        trust=TrustSet([bytes.fromhex(banner["public_key"])]),
    )


def _stream(client: WorkerClient, digest: str, episodes: Sequence[Episode], tier: int) -> list[Row]:
    """Score ``episodes`` over one bidi stream; the rows in the order of ``episodes``."""
    by_id = {episode.episode_id: episode for episode in episodes}
    got: dict[str, VerifiedReceipt] = {}
    for result in client.stream([_descriptor(digest, e) for e in episodes]):
        if isinstance(result, RewardSealError):
            raise result
        if not isinstance(result, VerifiedReceipt):
            # The demo streams descriptors only (train() begins each episode by a unary call), so a
            # registration here means the stream answered something it was not sent.
            raise RuntimeError(f"the stream answered a begin the demo did not send: {result}")
        got[result.receipt.episode_id] = result
    missing = sorted(set(by_id) - set(got))
    if missing:
        raise RuntimeError(f"the stream answered no receipt for {', '.join(missing)}")
    return [Row(e.episode_id, e.family, tier, got[e.episode_id]) for e in episodes]


def train(session: Mapping[str, Any]) -> list[Row]:
    """Begin, act through MockMed, stream: every demo episode; the table rows."""
    services = session["services"]
    tokens = session["tokens"]
    mockmed = MockMedUI(f"http://{stack.HOST}:{services['mockmed']['port']}", tokens["mockmed"])
    try:
        tier2 = [Episode(*seeded) for seeded in SEEDED] + [
            Episode(f"episode_extradup_{family}_01", f"extradup.{family}", f"patient-xd-{i:04d}")
            for i, family in enumerate(FAMILIES)
        ]
        worker = services["worker"]
        with _client(worker, tokens["worker"]) as client:
            for episode in tier2:
                client.begin(
                    episode.episode_id,
                    worker["contract_digest"],
                    {IDENTITY_KEY: episode.patient_id},
                )
                if episode.family.startswith("extradup."):
                    act_family(
                        mockmed, episode.family.removeprefix("extradup."), episode.patient_id
                    )
                else:
                    act_seeded(mockmed, episode.family, episode.patient_id)
            rows = _stream(client, worker["contract_digest"], tier2, 2)
        # The lie again, read through the screen: the banner says saved, so tier 0 pays.
        worker0 = services["tier0"]
        lie = Episode(*TIER0_LIE)
        with _client(worker0, tokens["worker"]) as client:
            client.begin(lie.episode_id, worker0["contract_digest"], {IDENTITY_KEY: lie.patient_id})
            act_seeded(mockmed, lie.family, lie.patient_id)
            rows += _stream(client, worker0["contract_digest"], [lie], 0)
        rows += play_parameterized(services["params"], tokens["worker"], mockmed)
    finally:
        mockmed.close()
    return rows


def play_parameterized(banner: Mapping[str, Any], token: str, mockmed: MockMedUI) -> list[Row]:
    """Each of :data:`PARAMS_ROWS` begun with its row's task parameters, then the same write (a
    Triage encounter with :data:`PARAMS_NOTE`) through MockMed; the rows in that order."""
    episodes = [Episode(e, family, patient) for e, family, patient, _ in PARAMS_ROWS]
    digest = banner["contract_digest"]
    with _client(banner, token) as client:
        for (_, _, patient, asked), episode in zip(PARAMS_ROWS, episodes, strict=True):
            client.begin(
                episode.episode_id,
                digest,
                {IDENTITY_KEY: patient},
                task_parameters=params_task(asked),
            )
            mockmed.submit(dict(mockmed_write_spec(patient, PARAMS_NOTE).fields))
        return _stream(client, digest, episodes, 2)


def render_parameterized(rows: Sequence[Row], out: TextIO) -> None:
    """What each parameterized receipt says: outcome, findings, the bound values' digest."""
    out.write("\nparameterized contract (task parameters per episode, R-W-18):\n")
    for row in rows:
        if not row.family.startswith("params."):
            continue
        receipt = row.receipt.receipt
        words = describe(receipt)
        outcome = RewardOutcome.Name(receipt.reward_outcome).removeprefix("REWARD_OUTCOME_")
        out.write(
            f"  {row.episode}  {outcome}  findings: {words['findings']}\n"
            f"    task_parameters_digest {receipt.task_parameters_digest}\n"
        )


# ---------------------------------------------------------------------- control's view


def receipt_summary(
    target: str, token: str, digest: str, expected: int
) -> control_pb.GetReceiptSummaryResponse:
    """Control's summary for ``digest`` once it indexes ``expected`` receipts (outbox drained)."""
    deadline = time.monotonic() + DRAIN_TIMEOUT_SECONDS
    with ControlClient(target, token=token, timeout=10.0, retries=0) as control:
        while True:
            summary = control.receipt_summary(digest)
            if summary.total >= expected or time.monotonic() > deadline:
                return summary
            time.sleep(0.2)


def render_summary(summary: control_pb.GetReceiptSummaryResponse, out: TextIO) -> None:
    counts = ", ".join(
        f"{RewardOutcome.Name(c.reward_outcome).removeprefix('REWARD_OUTCOME_')} {c.count}"
        for c in summary.counts
    )
    out.write(
        f"\ncontrol plane receipt summary, contract {summary.reward_contract_digest}:\n"
        f"  total {summary.total}: {counts}\n"
        f"  certified share {summary.certified_share:.1%}, "
        f"unscored share {summary.unscored_share:.1%}\n"
    )


# ---------------------------------------------------------------------- table and verdict


def render(rows: Sequence[Row], out: TextIO) -> None:
    """Print the table: episode, family, tier, outcome, scalar, certified, scope."""
    header = ("episode", "family", "tier", "outcome", "scalar", "certified", "scope")
    widths = (32, 22, 4, 24, 9, 9, 9)
    line = "  ".join(f"{h:<{w}}" for h, w in zip(header, widths, strict=True))
    out.write(line.rstrip() + "\n" + "-" * len(line.rstrip()) + "\n")
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
        text = "  ".join(f"{c:<{w}}" for c, w in zip(cells, widths, strict=True))
        out.write(text.rstrip() + "\n")


def verdict(rows: Sequence[Row]) -> list[str]:
    """Everything that went wrong; empty when the demo proved its point."""
    problems = []
    for row in rows:
        if row.tier != 2:
            continue
        paid = (row.receipt.scalar or 0.0) > 0
        if row.family in PAYING and not (paid and row.receipt.receipt.certified):
            problems.append(f"{row.episode}: the honest write was not paid as certified")
        if row.family not in PAYING and paid:
            problems.append(f"{row.episode}: the hacking family {row.family} was paid")
    other = next((r for r in rows if r.family == PARAMS_ROWS[1][1]), None)
    if other is not None and not other.receipt.receipt.findings:
        problems.append(f"{other.episode}: the wrong-parameters receipt carries no finding")
    families = {row.family for row in rows}
    problems += [f"no row for {f}" for _, f, _, _ in PARAMS_ROWS if f not in families]
    problems += [f"no row for extradup.{f}" for f in FAMILIES if f"extradup.{f}" not in families]
    return problems


# ---------------------------------------------------------------------- entry point


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Stopped()


def run(root: Path, out: TextIO = sys.stdout) -> int:
    """Run the stack demo under ``root``; 0 when the control paid and no hacking family did."""
    out.write(
        "starting control, the tier-2 worker, MockMed, the tier-0 worker and the parameterized "
        "worker ...\n"
    )
    with local_stack(root, out) as session:
        worker = session["services"]["worker"]
        out.write(
            f"contract {worker['contract_digest']} (tier {worker.get('oracle_tier')}), "
            f"key {worker['key_id']}, certificate {worker.get('certificate_id')}\n\n"
        )
        rows = train(session)
        render(rows, out)
        render_parameterized(rows, out)
        # Control indexes the linked tier-2 worker's receipts, not the unlinked params worker's.
        tier2 = sum(1 for row in rows if row.tier == 2 and not row.family.startswith("params."))
        summary = receipt_summary(
            session["control_target"],
            session["tokens"]["control"],
            worker["contract_digest"],
            tier2,
        )
        render_summary(summary, out)
    problems = verdict(rows)
    if summary.total != tier2:
        problems.append(f"control indexed {summary.total} receipts, not {tier2}")
    for problem in problems:
        out.write(f"FAIL {problem}\n")
    if not problems:
        out.write("\nOK: the control paid, every hacking family was refused at tier 2\n")
    out.write("stopped every process the demo started\n")
    return 1 if problems else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    parser = argparse.ArgumentParser(prog="tools/demo.py", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--keep", type=Path, help="run in this (new) directory and keep it (default: a temp dir)"
    )
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        if args.keep is not None:
            return run(args.keep.expanduser().resolve())
        with tempfile.TemporaryDirectory(prefix="rewardseal-demo-") as tmp:
            return run(Path(tmp))
    except stack.StackError as exc:
        print(f"demo: {exc}", file=sys.stderr)
    except RewardSealError as exc:
        print(f"demo failed: {exc.reason}: {exc.message}", file=sys.stderr)
    except (grpc.RpcError, RuntimeError) as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
    except (KeyboardInterrupt, Stopped):
        print("demo interrupted; every process it started was stopped", file=sys.stderr)
        return 130
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
