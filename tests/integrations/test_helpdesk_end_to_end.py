"""The helpdesk example end to end, for each of its bundles (sql and rest), on real PostgreSQL:

the helpdesk runs as a process (``python -m helpdesk serve``) over a live database with a
read-only role; ``rewardseal-worker contract check`` loads the checked-in bundle; ``calibrate``
writes the contract's own fault classes into a sandbox copy (another database; for rest, a
second helpdesk process serving it) and refuses the live one; the worker serves the bundle
(``--contract``) joined to control, which registers the contract; ``rewardseal-control
certificates issue --scope production`` certifies it from the held-out summary; the worker
adopts the certificate; then every scripted policy plays a task through the HelpdeskActor:
the control is paid 1.0, every hacking policy 0.0, all on certified receipts.

Slow (two or three processes, a 60-trial calibration per bundle): run by
``make test-integrations`` (or ``pytest tests/integrations/test_helpdesk_end_to_end.py``).
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from support.helpdesk_stack import BUNDLES, READER_ROLE, play
from support.linked_stack import (
    ADMIN_TOKEN,
    eventually,
    organization_key,
    scoring_under,
    start_control_plane,
    start_linked_worker,
)

from helpdesk.actor import HelpdeskActor
from helpdesk.bundles import API_TOKEN_ENV, API_URL_ENV, READER_URL_ENV
from helpdesk.cli import main as helpdesk_main
from helpdesk.policies import CONTROL, HACKING_POLICIES
from helpdesk.store import TicketStore
from rewardseal.core.errors import NotFound
from rewardseal.core.signing import TrustSet
from rewardseal.rpc.worker_client import WorkerClient
from rewardseal.v1.enums_pb2 import CalibrationScope, RewardOutcome
from rewardseal_control.cli import main as control_main
from rewardseal_server.localstack import wait_for_banner
from rewardseal_worker.cli import main as worker_main

TOKEN = "helpdesk-e2e-token-" + "h" * 16
TRIALS = "60"  # 0 false accepts in 60 gives epsilon 0.0487, under the contract's 0.05


@contextmanager
def helpdesk_process(db_url: str, run_dir: Path, name: str, seed: int) -> Iterator[str]:
    """``python -m helpdesk serve`` on a free port; yields its base URL."""
    ready, log = run_dir / f"{name}.json", run_dir / f"{name}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "helpdesk", "serve", "--db-url", db_url, "--port", "0",
             "--ready-file", str(ready), "--seed-customers", str(seed)],
            env={**os.environ, "HELPDESK_TOKEN": TOKEN},
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            banner = wait_for_banner(process, ready, 60)
            assert TOKEN not in ready.read_text()
            yield str(banner["url"])
        finally:
            process.terminate()
            assert process.wait(30) == 0, log.read_text()


def worker(*argv: str) -> int:
    return worker_main(list(argv))


async def control_cli(target: str, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    arguments = [*argv, "--target", target, "--token", ADMIN_TOKEN]
    code = await asyncio.to_thread(control_main, arguments, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("kind", ["sql", "rest"])
async def test_helpdesk_from_check_to_certified_receipts(
    kind: str,
    postgres_server,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    live_db, sandbox_db = postgres_server.fresh_database(), postgres_server.fresh_database()
    live_url, sandbox_url = postgres_server.url(live_db), postgres_server.url(sandbox_db)
    # The sandbox copy: the same schema, none of the live data.
    assert helpdesk_main(["init-db", "--db-url", sandbox_url, "--seed-customers", "0"]) == 0
    with helpdesk_process(live_url, tmp_path, "live", seed=20) as live_api:
        assert helpdesk_main(["grant-reader", "--db-url", live_url, "--role", READER_ROLE]) == 0
        monkeypatch.setenv(READER_URL_ENV, live_url.replace("://postgres@", f"://{READER_ROLE}@"))
        monkeypatch.setenv(API_URL_ENV, live_api)
        monkeypatch.setenv(API_TOKEN_ENV, TOKEN)
        bundle = tmp_path / "bundle"
        shutil.copytree(BUNDLES / kind, bundle)
        assert worker("contract", "check", str(bundle)) == 0

        if kind == "sql":
            sandbox_args = ["--sandbox", sandbox_url]
            live_args = ["--sandbox", live_url]
            calibrated = worker("calibrate", str(bundle), *sandbox_args, "--trials", TRIALS,
                                "--seed", "17", "--held-out")  # fmt: skip
        else:
            live_args = ["--sandbox", live_api, "--sandbox-store", sandbox_url]
            with helpdesk_process(sandbox_url, tmp_path, "sandbox", seed=0) as sandbox_api:
                calibrated = worker("calibrate", str(bundle), "--sandbox", sandbox_api,
                                    "--sandbox-store", sandbox_url, "--trials", TRIALS,
                                    "--seed", "17", "--held-out")  # fmt: skip
        assert calibrated == 0
        said = capsys.readouterr().out
        assert "meets the contract's policy" in said
        assert "redrawn" not in said  # the sandbox's schema held every draw
        summary = json.loads((bundle / "calibration.json").read_text())
        assert (summary["trials"], summary["false_accepts"], summary["gold_refused"]) == (60, 0, 0)
        assert summary["held_out"] is True
        # Calibration wrote into the sandbox and left nothing there; never into the live one.
        sandbox_store = TicketStore(sandbox_url)
        try:
            assert sandbox_store.tasks() == []
        finally:
            sandbox_store.close()
        assert worker("calibrate", str(bundle), *live_args, "--trials", "6", "--out",
                      str(tmp_path / "never.json")) == 2  # fmt: skip
        assert not (tmp_path / "never.json").exists()

        organization_key(tmp_path)
        control = await start_control_plane(tmp_path)
        stack = await start_linked_worker(
            tmp_path / "worker", control.target, organization_key(tmp_path), contract_dir=bundle
        )
        try:
            digest = stack.digest

            async def registered() -> bool:
                try:
                    await asyncio.to_thread(control.store.contracts.get_contract, digest)
                except NotFound:
                    return False
                return True

            await eventually(registered)
            certificate_id = f"cert.helpdesk.{kind}.production.1"
            code, _, err = await control_cli(
                control.target, "certificates", "issue", "--contract", digest,
                "--calibration", str(bundle / "calibration.json"), "--scope", "production",
                "--certificate-id", certificate_id,
            )  # fmt: skip
            assert code == 0, err
            await scoring_under(stack, certificate_id)

            tasks = TicketStore(live_url)
            try:
                found = tasks.tasks()
            finally:
                tasks.close()
            client = WorkerClient(
                f"127.0.0.1:{stack.app.port}",
                token=stack.app.settings.token,
                trust=TrustSet([stack.app.key.public_key]),
            )
            actor = HelpdeskActor(live_api, TOKEN)  # sandboxed: one copy per completion
            try:
                for index, policy in enumerate([CONTROL, *HACKING_POLICIES]):
                    opened, _ = await asyncio.to_thread(
                        play, client, digest, actor, policy, found[0], f"ep-e2e-{kind}-{index:03d}"
                    )
                    receipt = opened.receipt
                    assert receipt.certified, policy
                    assert receipt.certificate_id == certificate_id
                    assert (
                        receipt.calibration_scope == CalibrationScope.CALIBRATION_SCOPE_PRODUCTION
                    )
                    if policy == CONTROL:
                        assert receipt.reward_outcome == RewardOutcome.REWARD_OUTCOME_VERIFIED
                        assert opened.scalar == 1.0
                    else:
                        assert receipt.reward_outcome == RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT
                        assert opened.scalar == 0.0, policy
            finally:
                actor.close()
                client.close()
        finally:
            await stack.client.close()
            await stack.app.stop()
            await control.stop()
    postgres_server.discard_database(live_db)
    postgres_server.discard_database(sandbox_db)
