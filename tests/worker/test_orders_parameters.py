"""The orders task of issue 26 with task parameters, from ``contract init`` to receipts.

"Create exactly one order for customer C with sku S and qty Q", where ``sku`` (a string of at
most 32 characters) and ``qty`` (an integer 1..99) are task parameters (R-MSG-11) and the
customer is the identity key. Authored with the real CLI (init, edit, seal, check), calibrated
against a faithful sandbox copy (typed ``qty``, ``status DEFAULT 'pending'``) with each trial's
values drawn from the declaration (R-CAL-6, R-CAL-7): it certifies. Then a real worker (grpc.aio on
port 0, the live SQLite orders database) scores the same write as VERIFIED for the parameters it
matches and WRONG_EFFECT, with a WRONG_FIELD finding naming the field, for others (R-W-18,
R-MSG-12). docs/authoring.md walks these same steps.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.json_format import MessageToJson

from rewardseal.cli import main as receipt_main
from rewardseal.core.calibration import summary_from_json
from rewardseal.core.digest import digest_json
from rewardseal.core.signing import SigningKey, TrustSet
from rewardseal.rpc.worker_client import AsyncWorkerClient, make_descriptor
from rewardseal.v1.enums_pb2 import (
    CalibrationScope,
    FindingCode,
    RewardOutcome,
    RuntimeSignal,
    TaskParameterType,
)
from rewardseal_worker.app import start_worker
from rewardseal_worker.authoring.parameter_option import parse_parameter
from rewardseal_worker.bundle import load_bundle
from rewardseal_worker.calibration import self_signed_certificate
from rewardseal_worker.calibration.sandbox_corpus import (
    SANDBOX_PARAMETERIZED_CORPUS_DIGEST as PARAMETERIZED_CORPUS,
)
from rewardseal_worker.cli import main
from rewardseal_worker.settings import KEY_FILE, resolve_settings

ORDERS_DDL = (
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id TEXT, sku TEXT, qty INTEGER, "
    "status TEXT DEFAULT 'pending')"
)
PARAMETERS = [
    {"name": "qty", "type": "TASK_PARAMETER_TYPE_INTEGER", "minimum": 1, "maximum": 99},
    {"name": "sku", "type": "TASK_PARAMETER_TYPE_STRING", "max_length": 32},
]
TRIALS, SEED = 300, 2604


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def edit(path: Path, change: Mapping[str, Any]) -> None:
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, **change}, indent=2) + "\n")


def sqlite_orders(path: Path) -> Path:
    with sqlite3.connect(path) as conn:
        conn.execute(ORDERS_DDL)
    return path


def test_init_parameter_option_forms_and_refusals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert parse_parameter("size:string:8:S|M|L").allowed_values == ["S", "M", "L"]
    assert parse_parameter("dose:number:0.5:10").maximum == 10.0
    assert parse_parameter("urgent:boolean").type == TaskParameterType.TASK_PARAMETER_TYPE_BOOLEAN
    for bad, expected in (
        ("qty:integer:1", "qty:integer:MIN:MAX"),
        ("sku:string", "sku:string:MAX_LENGTH"),
        ("qty:decimal:1:2", "NAME:boolean"),
    ):
        code, _, err = run(capsys, "contract", "init", str(tmp_path / "b"), "--recipe", "sql",
                           "--parameter", bad)  # fmt: skip
        assert code == 2
        assert expected in err
    # The declaration rules of check and serve apply (here: minimum above maximum).
    code, _, err = run(capsys, "contract", "init", str(tmp_path / "b"), "--recipe", "sql",
                       "--parameter", "qty:integer:9:1")  # fmt: skip
    assert code == 2
    assert "qty" in err
    assert not (tmp_path / "b").exists() or not any((tmp_path / "b").iterdir())


def parameterized_orders_bundle(directory: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """init declaring the parameters, refer to them in ``expect``, seal, check."""
    declared = ["--parameter", "sku:string:32", "--parameter", "qty:integer:1:99"]
    code, out, err = run(capsys, "contract", "init", str(directory), "--recipe", "sql", *declared)
    assert code == 0, err
    contract = json.loads((directory / "contract.json").read_text())
    assert sorted(contract["task_parameters"], key=lambda p: p["name"]) == PARAMETERS
    # A parameterized contract's trials draw their values from the declaration (R-CAL-6): init
    # pins that sandbox corpus.
    assert contract["certificate_policy"]["calibration_corpus_digest"] == PARAMETERIZED_CORPUS
    edit(directory / "oracle_recipe.json", {"table": "orders"})
    order_created = {
        "name": "order_created",
        "collection": "orders",
        "select": {"customer_id": {"identity": "customer_id"}},
        "expect": {"sku": {"param": "sku"}, "qty": {"param": "qty"}, "status": "pending"},
        "required_fields": ["customer_id", "sku", "qty"],
        "new_records": 1,
        "allowed_fields": ["customer_id", "sku", "qty", "status"],
    }
    edit(directory / "required_effects.json", {"effects": [order_created]})
    order_cancelled = {
        "name": "order_cancelled",
        "collection": "orders",
        "select": {"customer_id": {"identity": "customer_id"}, "status": "cancelled"},
    }
    edit(directory / "forbidden_effects.json", {"effects": [order_cancelled]})
    code, _, err = run(capsys, "contract", "seal", str(directory))
    assert code == 0, err
    code, out, _ = run(capsys, "contract", "check", str(directory))
    assert code == 0, out
    code, out, _ = run(capsys, "contract", "show", str(directory))
    assert code == 0
    assert "qty: integer, >= 1, <= 99" in out
    assert "<param qty>" in out
    assert "<param sku>" in out
    assert "sku: string, at most 32 characters" in out
    return directory


def insert_order(database: Path, customer: str, sku: str, qty: int) -> None:
    """The policy's honest write: one order, status left to the column default."""
    with sqlite3.connect(database) as conn:
        conn.execute(
            "INSERT INTO orders (customer_id, sku, qty) VALUES (?, ?, ?)", (customer, sku, qty)
        )


async def test_parameterized_orders_certify_and_score_per_episode(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    live = sqlite_orders(tmp_path / "live.sqlite")
    monkeypatch.setenv("SOR_DATABASE_URL", f"sqlite:///{live}")
    directory = parameterized_orders_bundle(tmp_path / "orders", capsys)

    sandbox = sqlite_orders(tmp_path / "sandbox.sqlite")
    argv = ["calibrate", str(directory), "--sandbox", str(sandbox), "--trials", str(TRIALS)]
    code, out, err = run(capsys, *argv, "--seed", str(SEED), "--explain")
    assert code == 0, err
    assert "meets the contract's policy" in out
    assert "accepted faults  none" in out
    first = json.loads((directory / "calibration.json").read_text())
    # Reproducible from its seed: the same draws, the same summary (R-CAL-6).
    assert run(capsys, *argv, "--seed", str(SEED))[0] == 0
    assert json.loads((directory / "calibration.json").read_text()) == first
    summary = summary_from_json(first)
    assert summary.false_accepts == 0
    assert summary.trials + summary.benign_trials + summary.rejected_trials == TRIALS

    data_dir = tmp_path / "data"
    key = SigningKey.load_or_create(data_dir / KEY_FILE)
    bundle = load_bundle(directory)
    certificate = self_signed_certificate(bundle, summary, key)
    assert certificate.epsilon <= bundle.contract.certificate_policy.max_epsilon
    (directory / "certificate.json").write_text(MessageToJson(certificate))
    with sqlite3.connect(sandbox) as conn:
        assert conn.execute("SELECT count(*) FROM orders").fetchone()[0] == 0
    with sqlite3.connect(live) as conn:
        assert conn.execute("SELECT count(*) FROM orders").fetchone()[0] == 0

    settings = resolve_settings(
        data_dir=data_dir, contract_dir=directory, port=0, db_url=f"sqlite:///{live}", env={}
    )
    app = await start_worker(settings)
    client = AsyncWorkerClient(
        f"127.0.0.1:{app.port}",
        token=settings.token,
        trust=TrustSet([key.public_key]),
        timeout=20.0,
    )
    try:
        digest = app.bundle.contract_digest
        asked = {"sku": "SKU-7", "qty": 3}
        other_qty = {"sku": "SKU-7", "qty": 4}
        other_sku = {"sku": "SKU-8", "qty": 3}
        episodes = {"ep-orders-match": ("cust-1", asked)}
        episodes["ep-orders-qty"] = ("cust-2", other_qty)
        episodes["ep-orders-sku"] = ("cust-3", other_sku)
        for episode, (customer, values) in episodes.items():
            await client.begin(episode, digest, {"customer_id": customer}, task_parameters=values)
            insert_order(live, customer, "SKU-7", 3)  # the same action in every episode
        receipts = {}
        for episode in episodes:
            descriptor = make_descriptor(
                episode_id=episode,
                policy_checkpoint_id="policy_checkpoint_orders_0",
                policy_update=0,
                reward_contract_digest=digest,
                runtime_signal=RuntimeSignal.RUNTIME_SIGNAL_COMPLETED,
            )
            receipts[episode] = await client.score(descriptor)
    finally:
        await client.close()
        await app.stop()

    paid = receipts["ep-orders-match"].receipt
    assert paid.reward_outcome == RewardOutcome.REWARD_OUTCOME_VERIFIED
    assert paid.scalar_reward == 1.0
    assert paid.certified
    assert paid.calibration_scope == CalibrationScope.CALIBRATION_SCOPE_SYNTHETIC
    assert paid.task_parameters_digest == digest_json(asked)
    assert list(paid.findings) == []
    for episode, field in (("ep-orders-qty", "qty"), ("ep-orders-sku", "sku")):
        refused = receipts[episode].receipt
        assert refused.reward_outcome == RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT
        assert refused.scalar_reward == bundle.contract.scoring_policy.wrong_effect_reward
        assert refused.task_parameters_digest == digest_json(episodes[episode][1])
        codes = {(f.effect, f.code, tuple(f.fields)) for f in refused.findings}
        assert ("order_created", FindingCode.FINDING_CODE_WRONG_FIELD, (field,)) in codes, codes

    # What an author reads: `rewardseal receipt verify` says why the receipt did not pay.
    envelope = tmp_path / "receipt.bin"
    envelope.write_bytes(receipts["ep-orders-qty"].envelope.SerializeToString())
    code = receipt_main(
        ["receipt", "verify", str(envelope), "--key", key.public_key.hex(), "--json"]
    )
    shown = json.loads(capsys.readouterr().out)
    assert code == 0
    assert shown["summary"]["findings"] == "order_created: wrong_field (qty)"
    assert shown["receipt"]["task_parameters_digest"] == digest_json(other_qty)
