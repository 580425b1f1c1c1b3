"""``rewardseal-worker calibrate DIR --sandbox``: the contract's own fault classes written into a
sandbox copy of the system of record (SQLite, PostgreSQL, a REST API over one, a JSON file) and
read back through the bundle's reader; the live target refused; a gold control that the sandbox
does not pay refuses the whole calibration."""

from __future__ import annotations

import io
import json
import sqlite3
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import sqlalchemy as sa
from support.postgres import PostgresServer

from rewardseal.core.calibration import epsilon_from_summary, summary_from_json
from rewardseal_mockmed import contract as mockmed
from rewardseal_worker.authoring.entry import run_authoring_command
from rewardseal_worker.bundle import load_bundle, write_bundle
from rewardseal_worker.calibration.sandbox_corpus import SANDBOX_CORPUS_DIGEST
from rewardseal_worker.cli import build_parser, main

TICKETS_DDL = (
    "CREATE TABLE tickets (id INTEGER PRIMARY KEY {auto}, customer_id TEXT NOT NULL, "
    "subject TEXT, body TEXT, status TEXT, created_at TEXT, priority TEXT)"
)
TOKEN = "sandbox-api-token-" + "s" * 16


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def sqlite_sor(path: Path, *extra_ddl: str) -> Path:
    with sqlite3.connect(path) as conn:
        conn.execute(TICKETS_DDL.format(auto="AUTOINCREMENT"))
        for statement in extra_ddl:
            conn.execute(statement)
    return path


def rows(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        count: int = conn.execute("SELECT count(*) FROM tickets").fetchone()[0]
    return count


@pytest.fixture(autouse=True)
def live_sor_elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The live SoR of the sql bundles: a file none of these sandboxes is (calibration refuses
    to run where it cannot tell, R-CAL-5); a test that names its own live SoR sets it again."""
    monkeypatch.setenv("SOR_DATABASE_URL", f"sqlite:///{tmp_path / 'live.sqlite'}")


@pytest.fixture
def sql_bundle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    directory = tmp_path / "crm"
    assert run(capsys, "contract", "init", str(directory), "--recipe", "sql")[0] == 0
    return directory


def calibrated(directory: Path) -> dict[str, object]:
    doc: dict[str, object] = json.loads((directory / "calibration.json").read_text())
    return doc


def test_calibrate_sql_on_a_sqlite_sandbox_writes_counts_and_leaves_the_sandbox_clean(
    sql_bundle: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    live = sqlite_sor(tmp_path / "live.sqlite")
    sandbox = sqlite_sor(tmp_path / "sandbox.sqlite")
    monkeypatch.setenv("SOR_DATABASE_URL", f"sqlite:///{live}")
    code, out, err = run(
        capsys,
        "calibrate",
        str(sql_bundle),
        "--sandbox",
        str(sandbox),
        "--trials",
        "12",
        "--seed",
        "7",
    )
    assert code == 0, err
    assert "progress" not in err
    assert "[" not in err
    doc = calibrated(sql_bundle)
    summary = summary_from_json(doc)
    assert summary.reward_contract_digest == load_bundle(sql_bundle).contract_digest
    assert summary.calibration_corpus_digest == SANDBOX_CORPUS_DIGEST
    assert (summary.trials, summary.false_accepts, summary.generator_seed) == (12, 0, 7)
    assert summary.gold_trials == 2
    assert not summary.held_out
    names = [c.name for c in summary.fault_classes]
    assert names == [
        "extra_record",
        "duplicate_record",
        "missing_record",
        "wrong_field",
        "wrong_subject",
        "forbidden_present",
    ]
    assert sum(c.trials for c in summary.fault_classes) == 12
    assert "records" not in json.dumps(doc)  # counts only, never the corpus
    assert f"epsilon {epsilon_from_summary(summary):.6f}" in out
    assert "does NOT meet the contract's policy" in out  # 0 in 12 gives 0.22 > 0.05
    assert "0 false accepts in 59 trials would meet it" in out
    assert rows(sandbox) == 0  # every trial's rows deleted again
    assert rows(live) == 0  # the live SoR never touched
    # the bundle with its calibration still loads as serve loads it
    assert load_bundle(sql_bundle).calibration is not None


def test_calibrate_refuses_the_live_sor_as_its_sandbox(
    sql_bundle: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    live = sqlite_sor(tmp_path / "live.sqlite")
    monkeypatch.setenv("SOR_DATABASE_URL", f"sqlite:///{live}")
    # the same file by another spelling: a relative path through a symlinked directory
    (tmp_path / "alias").symlink_to(tmp_path)
    monkeypatch.chdir(tmp_path)
    for spelling in (str(live), "alias/live.sqlite", f"sqlite:///{tmp_path / 'alias/live.sqlite'}"):
        code, _out, err = run(capsys, "calibrate", str(sql_bundle), "--sandbox", spelling)
        assert code == 2
        assert err.count("\n") == 1  # one line
        assert "the sandbox is the bundle's own read target" in err
        assert "$SOR_DATABASE_URL" in err
    assert not (sql_bundle / "calibration.json").exists()
    assert rows(live) == 0


def test_calibrate_refuses_when_the_gold_control_is_not_verified(
    sql_bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A sandbox that closes every new ticket (a trigger) never pays the correct effect: the
    checker cannot be calibrated there, and no summary is written (R-CAL-3)."""
    sandbox = sqlite_sor(
        tmp_path / "sandbox.sqlite",
        "CREATE TRIGGER close_all AFTER INSERT ON tickets BEGIN "
        "UPDATE tickets SET status = 'closed' WHERE id = NEW.id; END",
    )
    code, _, err = run(
        capsys, "calibrate", str(sql_bundle), "--sandbox", str(sandbox), "--trials", "6"
    )
    assert code == 2
    assert "a gold control trial was not VERIFIED" in err
    assert "outcome REWARD_OUTCOME_WRONG_EFFECT" in err  # and why
    assert not (sql_bundle / "calibration.json").exists()


def test_calibrate_refuses_a_sandbox_without_the_table(
    sql_bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty.sqlite"
    sqlite3.connect(empty).close()
    code, _, err = run(capsys, "calibrate", str(sql_bundle), "--sandbox", str(empty))
    assert code == 2
    assert "the sandbox has no table 'tickets'" in err
    missing = tmp_path / "missing.sqlite"
    code, _, err = run(capsys, "calibrate", str(sql_bundle), "--sandbox", str(missing))
    assert code == 2
    assert "does not exist" in err
    assert not missing.exists()  # not created empty


def test_calibrate_sql_on_a_postgresql_sandbox_and_refuse_its_live_database(
    sql_bundle: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    postgres_server: PostgresServer,
) -> None:
    sandbox_name = postgres_server.fresh_database()
    # The live database is asked who it is (R-CAL-5): it must exist and answer here.
    live_name = postgres_server.fresh_database()
    try:
        engine = sa.create_engine(postgres_server.url(sandbox_name))
        with engine.begin() as conn:
            ddl = TICKETS_DDL.format(auto="GENERATED ALWAYS AS IDENTITY")
            conn.execute(sa.text(ddl.replace("INTEGER", "BIGINT")))
        engine.dispose()
        live_url, sandbox_url = postgres_server.url(live_name), postgres_server.url(sandbox_name)
        monkeypatch.setenv("SOR_DATABASE_URL", live_url)
        # the live database under another spelling of the same host: refused
        aliased = live_url.replace("127.0.0.1", "localhost")
        assert aliased != live_url
        code, _, err = run(capsys, "calibrate", str(sql_bundle), "--sandbox", aliased)
        assert code == 2
        assert "own read target" in err

        code, out, err = run(
            capsys,
            "calibrate",
            str(sql_bundle),
            "--sandbox",
            sandbox_url,
            "--trials",
            "6",
            "--held-out",
            "--seed",
            "11",
        )
        assert code == 0, err
        summary = summary_from_json(calibrated(sql_bundle))
        assert (summary.trials, summary.false_accepts, summary.held_out) == (6, 0, True)
        assert "held-out" in out
        engine = sa.create_engine(sandbox_url)
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM tickets")).scalar() == 0
        engine.dispose()
    finally:
        postgres_server.discard_database(sandbox_name)
        postgres_server.discard_database(live_name)


class _TicketsApi(BaseHTTPRequestHandler):
    """A sandbox deployment of a tickets API: GET /api/tickets?customer_id=X over a SQLite file."""

    database: Path

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            self.send_response(401)
            self.end_headers()
            return
        customer = parse_qs(parts.query).get("customer_id", [""])[0]
        with sqlite3.connect(self.database) as conn:
            conn.row_factory = sqlite3.Row
            found = conn.execute("SELECT * FROM tickets WHERE customer_id = ?", (customer,))
            records = [dict(row) for row in found]
        body = json.dumps({"tickets": records}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def tickets_api(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    database = sqlite_sor(tmp_path / "api-sandbox.sqlite")
    handler = type("Handler", (_TicketsApi,), {"database": database})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", database
    finally:
        server.shutdown()
        server.server_close()


def test_calibrate_rest_through_a_sandbox_api_and_refuse_the_live_api(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tickets_api: tuple[str, Path],
) -> None:
    url, database = tickets_api
    directory = tmp_path / "helpdesk-api"
    assert run(capsys, "contract", "init", str(directory), "--recipe", "rest")[0] == 0
    monkeypatch.setenv("SOR_API_TOKEN", TOKEN)
    monkeypatch.setenv("SOR_API_URL", url.replace("127.0.0.1", "localhost") + "/")
    store = f"sqlite:///{database}"
    code, _, err = run(
        capsys, "calibrate", str(directory), "--sandbox", url, "--sandbox-store", store
    )
    assert code == 2
    assert "own read target" in err

    monkeypatch.setenv("SOR_API_URL", "https://tickets.example.invalid")
    code, _, err = run(capsys, "calibrate", str(directory), "--sandbox", url)
    assert code == 2
    assert "--sandbox-store" in err

    code, _out, err = run(
        capsys,
        "calibrate",
        str(directory),
        "--sandbox",
        url,
        "--sandbox-store",
        store,
        "--trials",
        "12",
    )
    assert code == 0, err
    summary = summary_from_json(calibrated(directory))
    assert (summary.trials, summary.false_accepts) == (12, 0)
    assert rows(database) == 0


def test_calibrate_json_file_in_a_sandbox_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "files"
    assert run(capsys, "contract", "init", str(directory), "--recipe", "json_file")[0] == 0
    code, _, err = run(capsys, "calibrate", str(directory), "--sandbox", str(directory))
    assert code == 2
    assert "own read target" in err
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    code, _, err = run(
        capsys, "calibrate", str(directory), "--sandbox", str(sandbox), "--trials", "12"
    )
    assert code == 0, err
    assert summary_from_json(calibrated(directory)).false_accepts == 0
    assert list(sandbox.iterdir()) == []


def test_calibrate_a_fhir_bundle_refuses_before_any_write_when_the_live_server_is_unknown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fhir bundle calibrates since R-CAL-8 (tests/worker/test_fhir_calibration.py), through
    the sandbox server's FHIR interactions; it is refused, before any write, while the live
    server cannot be compared (R-CAL-5), and a sandbox that is no URL is refused by name."""
    directory = tmp_path / "fhir"
    assert run(capsys, "contract", "init", str(directory), "--recipe", "fhir")[0] == 0
    code, _, err = run(capsys, "calibrate", str(directory), "--sandbox", "http://127.0.0.1:9")
    assert code == 2
    assert "$SOR_FHIR_URL is not set here" in err
    code, _, err = run(capsys, "calibrate", str(directory), "--sandbox", str(tmp_path))
    assert code == 2
    assert "a fhir sandbox is the base URL of a sandbox deployment" in err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_calibrate_draws_a_progress_bar_on_a_terminal_and_redraws_faults_the_schema_cannot_hold(
    sql_bundle: Path, tmp_path: Path
) -> None:
    """A sandbox without the ``priority`` column cannot hold the extra-field fault that writes
    it: those draws are drawn again (and counted), the run still covers every class."""
    sandbox = tmp_path / "narrow.sqlite"
    with sqlite3.connect(sandbox) as conn:
        conn.execute(
            "CREATE TABLE tickets (id INTEGER PRIMARY KEY, customer_id TEXT NOT NULL, "
            "subject TEXT, body TEXT, status TEXT, created_at TEXT)"
        )
    out, err = io.StringIO(), _Terminal()
    args = build_parser().parse_args(
        ["calibrate", str(sql_bundle), "--sandbox", str(sandbox), "--trials", "24", "--seed", "3"]
    )
    assert run_authoring_command(args, out, err) == 0, err.getvalue()
    assert "calibrating [" in err.getvalue()
    assert err.getvalue().endswith("27/27\n")  # 24 fault and 3 gold trials, drawn to the end
    assert "redrawn" in out.getvalue()
    summary = summary_from_json(calibrated(sql_bundle))
    assert summary.false_accepts == 0
    assert {c.name: c.trials for c in summary.fault_classes}["wrong_field"] == 4


def test_calibrate_refuses_a_contract_that_pins_another_corpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The MockMed contract pins its ExtraDup corpus: a sandbox run must not claim it."""
    directory = tmp_path / "contracts" / "mockmed"
    write_bundle(
        directory,
        contract=mockmed.mockmed_contract(tier=2),
        required_doc=mockmed.REQUIRED_EFFECTS,
        forbidden_doc=mockmed.FORBIDDEN_EFFECTS,
        recipe_doc=mockmed.TIER2_RECIPE,
    )
    code, _, err = run(capsys, "calibrate", str(directory), "--sandbox", str(tmp_path / "x.db"))
    assert code == 2
    assert f"pins calibration corpus {mockmed.CORPUS_DIGEST}" in err
    assert not (directory / "calibration.json").exists()


def test_calibrate_says_which_rule_refused_when_the_sandbox_holds_no_trial(
    sql_bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A NOT NULL column the effects never name: no row of any trial fits, and calibration
    stops with a message that points at the sandbox's schema."""
    sandbox = tmp_path / "strict.sqlite"
    with sqlite3.connect(sandbox) as conn:
        conn.execute(TICKETS_DDL.format(auto="").replace("priority TEXT", "tenant TEXT NOT NULL"))
    code, _, err = run(capsys, "calibrate", str(sql_bundle), "--sandbox", str(sandbox))
    assert code == 2
    assert "50 draws of a 'gold' trial could not be written into the sandbox" in err
    assert "a constraint of the sandbox's schema" in err
    assert rows(sandbox) == 0
    assert not (sql_bundle / "calibration.json").exists()
