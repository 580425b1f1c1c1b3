"""Bring your own system of record, end to end: ``contract init`` -> edit -> ``seal`` -> ``check``
-> ``calibrate --held-out`` against a sandbox copy -> ``serve --contract DIR --control`` (the
worker registers the contract) -> ``rewardseal-control certificates issue --scope production``
(R-MSG-5: the organization key registered at control, a held-out summary) -> the worker adopts
the certificate -> one honest episode on the live SoR scores VERIFIED, certified, PRODUCTION."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from support.linked_stack import (
    ADMIN_TOKEN,
    eventually,
    in_use,
    organization_key,
    scoring_under,
    start_control_plane,
    start_linked_worker,
)
from support.postgres import PostgresServer

from rewardseal.core.errors import NotFound
from rewardseal.rpc.worker_client import make_descriptor
from rewardseal.v1.enums_pb2 import CalibrationScope, RewardOutcome, RuntimeSignal
from rewardseal_control.cli import main as control_main
from rewardseal_worker.cli import main as worker_main

DDL = (
    "CREATE TABLE tickets (id {key}, customer_id TEXT NOT NULL, "
    "subject TEXT, body TEXT, status TEXT, created_at TEXT, priority TEXT)"
)
KEYS = {
    "sqlite": "INTEGER PRIMARY KEY AUTOINCREMENT",
    "postgresql": "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
}


@pytest.fixture(params=["sqlite", "postgresql"])
def crm_databases(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(live URL, sandbox URL) of a CRM's tickets table: two SQLite files, or two databases of
    the session's PostgreSQL server."""
    if request.param == "sqlite":
        urls = [f"sqlite:///{tmp_path / name}" for name in ("crm.sqlite", "crm-copy.sqlite")]
        names: list[str] = []
    else:
        server: PostgresServer = request.getfixturevalue("postgres_server")
        names = [server.fresh_database(), server.fresh_database()]
        urls = [server.url(name) for name in names]
    for url in urls:
        engine = sa.create_engine(url)
        with engine.begin() as conn:
            conn.execute(sa.text(DDL.format(key=KEYS[request.param])))
        engine.dispose()
    try:
        yield urls[0], urls[1]
    finally:
        for name in names:
            server.discard_database(name)


def worker(*argv: str) -> int:
    return worker_main(list(argv))


async def control_cli(target: str, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    arguments = [*argv, "--target", target, "--token", ADMIN_TOKEN]
    code = await asyncio.to_thread(control_main, arguments, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


async def test_init_to_certified_receipt_with_a_production_certificate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crm_databases: tuple[str, str]
) -> None:
    live, sandbox = crm_databases
    monkeypatch.setenv("SOR_DATABASE_URL", live)

    bundle = tmp_path / "crm-bundle"
    assert worker("contract", "init", str(bundle), "--recipe", "sql") == 0
    # The author's edit: a policy fit for a short calibration (0 in 12 gives epsilon 0.22).
    contract = json.loads((bundle / "contract.json").read_text())
    contract["certificate_policy"]["max_epsilon"] = 0.3
    (bundle / "contract.json").write_text(json.dumps(contract))
    assert worker("contract", "seal", str(bundle)) == 0
    assert worker("contract", "check", str(bundle)) == 0
    assert (
        worker("calibrate", str(bundle), "--sandbox", sandbox, "--trials", "12", "--held-out") == 0
    )
    not_held_out = json.loads((bundle / "calibration.json").read_text())
    not_held_out["held_out"] = False
    (tmp_path / "not-held-out.json").write_text(json.dumps(not_held_out))

    organization_key(tmp_path)  # made before control starts, so the worker can pin it
    control = await start_control_plane(tmp_path)
    stack = await start_linked_worker(
        tmp_path / "worker", control.target, organization_key(tmp_path), contract_dir=bundle
    )
    try:
        digest = stack.digest
        assert in_use(stack) is None

        async def registered() -> bool:
            try:
                await asyncio.to_thread(control.store.contracts.get_contract, digest)
            except NotFound:
                return False
            return True

        await eventually(registered)  # the worker registers its contract as it joins control

        code, _, err = await control_cli(
            control.target, "certificates", "issue", "--contract", digest,
            "--calibration", str(tmp_path / "not-held-out.json"), "--scope", "production",
        )  # fmt: skip
        assert code != 0
        assert "held-out" in err

        code, _out, err = await control_cli(
            control.target, "certificates", "issue", "--contract", digest,
            "--calibration", str(bundle / "calibration.json"), "--scope", "production",
            "--certificate-id", "cert.crm.production.1",
        )  # fmt: skip
        assert code == 0, err
        await scoring_under(stack, "cert.crm.production.1")

        identity = {"customer_id": "cust-000123"}
        await stack.client.begin("episode-crm-000001", digest, identity)
        engine = sa.create_engine(live)  # the policy's honest write on the live SoR
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO tickets (customer_id, subject, body, status) "
                    "VALUES ('cust-000123', 'Printer on fire', 'Third floor.', 'open')"
                )
            )
        engine.dispose()
        receipt = (
            await stack.client.score(
                make_descriptor(
                    episode_id="episode-crm-000001",
                    policy_checkpoint_id="policy_checkpoint_crm_0",
                    policy_update=0,
                    reward_contract_digest=digest,
                    runtime_signal=RuntimeSignal.RUNTIME_SIGNAL_COMPLETED,
                )
            )
        ).receipt
        assert receipt.reward_outcome == RewardOutcome.REWARD_OUTCOME_VERIFIED
        assert receipt.scalar_reward == 1.0
        assert receipt.certified
        assert receipt.certificate_id == "cert.crm.production.1"
        assert receipt.calibration_scope == CalibrationScope.CALIBRATION_SCOPE_PRODUCTION
    finally:
        await stack.client.close()
        await stack.app.stop()
        await control.stop()
