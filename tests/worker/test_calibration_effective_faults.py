"""Calibration counts only effective faults (R-CAL-7), on the orders schema of issue 26.

An ordinary schema, ``orders(id, customer_id, sku, qty INTEGER, status TEXT DEFAULT
'pending')``, and the contract "create exactly one order for customer C with sku S and qty Q",
authored with ``contract init`` and ``contract seal``. On a faithful sandbox copy (the typed
``qty``, the ``DEFAULT``) a trial writing ``qty`` as ``"3"`` is stored as the integer 3 and a
trial omitting ``status`` gets ``'pending'``: the SoR holds the correct record, so those draws
are benign, never false accepts, and the contract certifies. A draw the sandbox refuses to store
(a constraint) is counted rejected. A genuinely accepted fault (a wrong sku, judged by a
contract whose ``expect`` omits the sku) still counts: epsilon goes up and ``--explain`` names
it by class, effect and field, quoting no value.
"""

from __future__ import annotations

import io
import json
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from support.postgres import PostgresServer

from rewardseal.core.calibration import epsilon_from_summary, summary_from_json
from rewardseal.core.errors import ValidationError
from rewardseal.core.signing import SigningKey
from rewardseal.v1.enums_pb2 import CalibrationScope
from rewardseal_worker.authoring.calibration_report import print_explanation
from rewardseal_worker.bundle import load_bundle
from rewardseal_worker.calibration import calibrate, self_signed_certificate
from rewardseal_worker.calibration.fault_classes import setup_for
from rewardseal_worker.calibration.runner import NO_EFFECTIVE_FAULT_MESSAGE, JudgedTrial
from rewardseal_worker.calibration.sandbox import _normalized_away, open_sandbox
from rewardseal_worker.calibration.trials import FieldTouch, Trial, judge_trial
from rewardseal_worker.cli import main

SKU, QTY = "SKU-7", 3
ORDERS_DDL = (
    "CREATE TABLE orders (id {key}, customer_id TEXT, sku TEXT, qty INTEGER{qty}, "
    "status TEXT DEFAULT 'pending')"
)
SQLITE_KEY = "INTEGER PRIMARY KEY"
POSTGRES_KEY = "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"
TRIALS, SEED = 300, 26


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write_json(path: Path, doc: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(doc, indent=2) + "\n")


def orders_bundle(
    directory: Path, capsys: pytest.CaptureFixture[str], *, expect_sku: bool = True
) -> Path:
    """The orders contract, authored as a new user would: init, edit the documents, seal."""
    assert run(capsys, "contract", "init", str(directory), "--recipe", "sql")[0] == 0
    recipe = json.loads((directory / "oracle_recipe.json").read_text())
    write_json(directory / "oracle_recipe.json", {**recipe, "table": "orders"})
    expect: dict[str, Any] = {"qty": QTY, "status": "pending"}
    if expect_sku:
        expect["sku"] = SKU
    fields = ["customer_id", "sku", "qty", "status"]
    order_created = {
        "name": "order_created",
        "collection": "orders",
        "select": {"customer_id": {"identity": "customer_id"}},
        "expect": expect,
        "required_fields": ["customer_id", "sku", "qty"],
        "new_records": 1,
        "allowed_fields": fields,
    }
    write_json(directory / "required_effects.json", {"effects": [order_created]})
    order_cancelled = {
        "name": "order_cancelled",
        "collection": "orders",
        "select": {"customer_id": {"identity": "customer_id"}, "status": "cancelled"},
    }
    write_json(directory / "forbidden_effects.json", {"effects": [order_cancelled]})
    code, _, err = run(capsys, "contract", "seal", str(directory))
    assert code == 0, err
    code, out, _ = run(capsys, "contract", "check", str(directory))
    assert code == 0, out
    return directory


def sqlite_orders(path: Path, *, qty: str = "") -> Path:
    with sqlite3.connect(path) as conn:
        conn.execute(ORDERS_DDL.format(key=SQLITE_KEY, qty=qty))
    return path


def order_rows(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        count: int = conn.execute("SELECT count(*) FROM orders").fetchone()[0]
    return count


@pytest.fixture(autouse=True)
def live_sor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The live orders database, which no sandbox here is (R-CAL-5)."""
    live = sqlite_orders(tmp_path / "live.sqlite")
    monkeypatch.setenv("SOR_DATABASE_URL", f"sqlite:///{live}")
    return live


def _certifies(directory: Path) -> None:
    """The summary meets the contract's policy: a certificate is issued from it."""
    bundle = load_bundle(directory)
    summary = summary_from_json(json.loads((directory / "calibration.json").read_text()))
    certificate = self_signed_certificate(bundle, summary, SigningKey.generate())
    assert certificate.epsilon == pytest.approx(epsilon_from_summary(summary))
    assert certificate.epsilon <= bundle.contract.certificate_policy.max_epsilon
    assert certificate.calibration_scope == CalibrationScope.CALIBRATION_SCOPE_SYNTHETIC


def _assert_benign_not_false_accepts(out: str, directory: Path) -> None:
    summary = summary_from_json(json.loads((directory / "calibration.json").read_text()))
    classes = {c.name: c for c in summary.fault_classes}
    wrong_field = classes["wrong_field"]
    # The coerced qty and the defaulted status are stored as the correct record: benign.
    assert wrong_field.benign > 0
    assert summary.benign_trials == sum(c.benign for c in summary.fault_classes)
    assert summary.false_accepts == 0
    assert summary.trials + summary.benign_trials + summary.rejected_trials == TRIALS
    assert "meets the contract's policy" in out
    assert "accepted faults  none" in out
    assert "wrong_field/type_confused  effect order_created  fields qty" in out
    assert "wrong_field/omitted_field  effect order_created  fields status" in out
    header = next(line for line in out.splitlines() if "fault class" in line)
    assert header.split() == [
        "fault",
        "class",
        "draws",
        "faults",
        "benign",
        "rejected",
        "false",
        "accepts",
    ]


def test_the_orders_schema_certifies_on_a_faithful_sqlite_copy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], live_sor: Path
) -> None:
    directory = orders_bundle(tmp_path / "orders", capsys)
    sandbox = sqlite_orders(tmp_path / "sandbox.sqlite")
    code, out, err = run(
        capsys,
        "calibrate",
        str(directory),
        "--sandbox",
        str(sandbox),
        "--trials",
        str(TRIALS),
        "--seed",
        str(SEED),
        "--explain",
    )
    assert code == 0, err
    _assert_benign_not_false_accepts(out, directory)
    _certifies(directory)
    assert order_rows(sandbox) == 0  # every trial's rows deleted again
    assert order_rows(live_sor) == 0  # the live SoR never touched


def test_the_orders_schema_certifies_on_a_faithful_postgresql_copy(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    postgres_server: PostgresServer,
) -> None:
    directory = orders_bundle(tmp_path / "orders", capsys)
    name = postgres_server.fresh_database()
    try:
        url = postgres_server.url(name)
        engine = sa.create_engine(url)
        with engine.begin() as conn:
            conn.execute(sa.text(ORDERS_DDL.format(key=POSTGRES_KEY, qty="")))
        code, out, err = run(
            capsys,
            "calibrate",
            str(directory),
            "--sandbox",
            url,
            "--trials",
            str(TRIALS),
            "--seed",
            str(SEED),
            "--explain",
        )
        assert code == 0, err
        _assert_benign_not_false_accepts(out, directory)
        _certifies(directory)
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM orders")).scalar() == 0
        engine.dispose()
    finally:
        postgres_server.discard_database(name)


def test_draws_the_sandbox_refuses_to_store_are_counted_rejected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``qty NOT NULL CHECK (qty BETWEEN 1 AND 9)``: a NULL or a too large qty is refused by the
    SoR, so no policy could leave it there: counted apart, per class, and the contract still
    certifies on the faults that remain."""
    directory = orders_bundle(tmp_path / "orders", capsys)
    sandbox = sqlite_orders(
        tmp_path / "sandbox.sqlite", qty=" NOT NULL CHECK (qty BETWEEN 1 AND 9)"
    )
    code, out, err = run(
        capsys,
        "calibrate",
        str(directory),
        "--sandbox",
        str(sandbox),
        "--trials",
        str(TRIALS),
        "--seed",
        str(SEED),
        "--explain",
    )
    assert code == 0, err
    summary = summary_from_json(json.loads((directory / "calibration.json").read_text()))
    wrong_field = {c.name: c for c in summary.fault_classes}["wrong_field"]
    assert wrong_field.rejected > 0
    assert summary.rejected_trials == sum(c.rejected for c in summary.fault_classes)
    assert summary.trials + summary.benign_trials + summary.rejected_trials == TRIALS
    assert summary.false_accepts == 0
    assert "draws the sandbox refused to store" in out
    assert "wrong_field/null_field  effect order_created  fields qty" in out
    # A separate cancelled order carrying no qty cannot be stored either.
    assert "forbidden_present/separate_record  effect order_cancelled  fields status" in out
    _certifies(directory)
    assert order_rows(sandbox) == 0


def test_a_genuinely_accepted_fault_still_counts_and_explain_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The task's trials (a wrong sku among them) written into the faithful sandbox and judged
    by a contract whose ``expect`` omits the sku: the sandbox stores the wrong sku (the read-back
    differs from gold), so the draw is an effective fault that the weak checker pays; it counts
    as a false accept, epsilon goes up past the policy, and the explanation names class, effect
    and field without quoting a value."""
    task = load_bundle(orders_bundle(tmp_path / "orders", capsys))
    weak = load_bundle(orders_bundle(tmp_path / "weak", capsys, expect_sku=False))
    sandbox = sqlite_orders(tmp_path / "sandbox.sqlite")
    environ = {"SOR_DATABASE_URL": f"sqlite:///{tmp_path / 'live.sqlite'}"}
    weak_judge = open_sandbox(weak, str(sandbox), environ=environ)
    weak_setup = setup_for(weak, None)

    def judged_by_the_weak_checker(setup: Any, rng: Any, trial: Trial) -> JudgedTrial:
        return weak_judge(weak_setup, rng, trial)

    try:
        result = calibrate(task, seed=SEED, trials=TRIALS, judge=judged_by_the_weak_checker)
    finally:
        weak_judge.close()
    leaks = result.false_accept_trials
    assert leaks
    assert {(leak.fault_class, leak.effect, leak.fields) for leak in leaks} == {
        ("wrong_field", "order_created", ("sku",))
    }
    summary = result.summary
    assert summary.false_accepts == len(leaks)
    assert {c.name: c.false_accepts for c in summary.fault_classes}["wrong_field"] == len(leaks)
    assert result.epsilon == pytest.approx(epsilon_from_summary(summary))
    assert result.epsilon > task.contract.certificate_policy.max_epsilon
    out = io.StringIO()
    print_explanation(result, out)
    text = out.getvalue()
    assert f"accepted faults  {len(leaks)}" in text
    assert text.count("effect order_created  fields sku") == len(leaks)
    assert "tighten the effect's expect" in text
    assert SKU not in text  # the contract's names only, never a value
    assert order_rows(sandbox) == 0


@pytest.mark.parametrize(
    ("stored", "gold", "benign"),
    [
        pytest.param(3, 3, True, id="coerced-to-the-gold-integer"),
        pytest.param("3", 3, False, id="text-stays-text"),
        pytest.param(3.0, 3, True, id="a-number-equal-to-gold"),
        pytest.param(True, 1, False, id="a-bool-is-no-number"),
        pytest.param("pending", "pending", True, id="defaulted-to-gold"),
        pytest.param(None, "pending", False, id="left-null"),
        pytest.param(None, None, True, id="extra-field-dropped"),
        pytest.param("stat", None, False, id="extra-field-kept"),
    ],
)
def test_a_draw_is_benign_only_when_every_written_field_reads_back_as_gold(
    stored: Any, gold: Any, benign: bool
) -> None:
    touch = FieldTouch("rec-1", "qty", gold)
    current = [{"id": "42", "qty": stored}, {"id": "43", "qty": 3}]
    assert _normalized_away([touch], {"rec-1": "42"}, current) is benign
    assert _normalized_away([], {"rec-1": "42"}, current) is False  # no field fault: effective
    assert _normalized_away([touch], {"rec-1": "41"}, current) is False  # record not read back


def test_a_run_with_no_effective_fault_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = load_bundle(orders_bundle(tmp_path / "orders", capsys))

    def everything_benign(setup: Any, rng: Any, trial: Trial) -> JudgedTrial:
        return JudgedTrial(judge_trial(setup, rng, trial), benign=True)

    with pytest.raises(ValidationError, match=NO_EFFECTIVE_FAULT_MESSAGE):
        calibrate(bundle, seed=SEED, trials=12, judge=everything_benign)
