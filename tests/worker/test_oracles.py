"""Oracle readers (R-W-6): read-only SQL by identity, JSON files and screen dumps, recipe checks.

Every read failure is OracleUnavailable (an outcome), every recipe problem ValidationError, and
no message carries record contents, identity values, a database URL or a credential.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import sqlalchemy as sa

from rewardseal.core.errors import IdentityMismatch, ValidationError
from rewardseal.core.judging import judge_episode, parse_effects
from rewardseal.v1.enums_pb2 import RewardOutcome, RuntimeSignal
from rewardseal_kit.mockmed import FORBIDDEN_EFFECTS, REQUIRED_EFFECTS, TIER0_RECIPE, TIER2_RECIPE
from rewardseal_worker import oracles
from rewardseal_worker.oracles import OracleUnavailable, make_reader, validate_recipe
from rewardseal_worker.oracles import sql as sql_module
from rewardseal_worker.oracles.base import RECIPE_KEYS
from rewardseal_worker.oracles.files import JsonFileReader
from rewardseal_worker.oracles.registry import READER_KINDS
from rewardseal_worker.oracles.sql import SqlReader

ME = {"patient_id": "p-001"}
SECRET_NOTE = "confidential: patient reports chest pain"
ROWS = [
    ("enc-1", "p-001", "Intake", SECRET_NOTE, "closed", None),
    ("enc-2", "p-002", "Triage", "other patient", "open", None),
    ("enc-3", "p-001", "Triage", "second visit", "open", "low"),
]


def create_db(path: Path, rows=ROWS) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE encounters (id TEXT PRIMARY KEY, patient_id TEXT NOT NULL, "
            "type TEXT, note TEXT, status TEXT, priority TEXT)"
        )
        conn.execute("CREATE INDEX encounters_patient ON encounters (patient_id)")
        conn.executemany("INSERT INTO encounters VALUES (?, ?, ?, ?, ?, ?)", rows)
    return path


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """``data_dir/contracts/mockmed`` beside ``data_dir/mockmed/mockmed.sqlite``, like the seed."""
    data = tmp_path / "data"
    (data / "contracts" / "mockmed").mkdir(parents=True)
    create_db(data / "mockmed" / "mockmed.sqlite")
    return data


@pytest.fixture
def bundle_dir(data_dir: Path) -> Path:
    return data_dir / "contracts" / "mockmed"


@pytest.fixture
def reader(bundle_dir: Path):
    made = make_reader(TIER2_RECIPE, bundle_dir)
    yield made
    made.close()


def sql_recipe(**changes):
    recipe = json.loads(json.dumps(TIER2_RECIPE))
    recipe.update(changes)
    return recipe


def visits_recipe(sqlite_path: str, identity_column: str) -> dict[str, object]:
    """A recipe reading the ``visits`` table (id column ``vid``) by ``identity_column``."""
    return {
        "kind": "sql",
        "database": {"sqlite_path": sqlite_path},
        "table": "visits",
        "id_column": "vid",
        "identity_fields": {"patient_id": identity_column},
    }


def file_recipe(kind="json_file", **changes):
    recipe = {
        "kind": kind,
        "path": "sor.json",
        "collection": "encounters",
        "identity_fields": {"patient_id": "patient_id"},
        "timeout_seconds": 2.0,
    }
    recipe.update(changes)
    return recipe


class TestSqlReader:
    def test_reads_the_identitys_rows_only(self, reader):
        assert isinstance(reader, SqlReader)
        assert reader.kind == "sql"
        assert reader.timeout_seconds == 2.0
        records = reader.read(ME)
        assert records == [
            {
                "id": "enc-1",
                "patient_id": "p-001",
                "type": "Intake",
                "note": SECRET_NOTE,
                "status": "closed",
                "priority": None,
            },
            {
                "id": "enc-3",
                "patient_id": "p-001",
                "type": "Triage",
                "note": "second visit",
                "status": "open",
                "priority": "low",
            },
        ]
        assert reader.read({"patient_id": "nobody"}) == []

    def test_identity_is_a_bound_parameter_and_uses_the_index(self, reader, bundle_dir):
        statements = []

        def capture(conn, cursor, statement, parameters, context, executemany):
            statements.append((statement, parameters))

        sa.event.listen(reader.engine, "before_cursor_execute", capture)
        hostile = {"patient_id": "p-001' OR '1'='1"}
        assert reader.read(hostile) == []
        ((statement, parameters),) = statements
        assert "p-001" not in statement
        assert "p-001' OR '1'='1" in parameters
        # R-W-6: the read follows the identity's index, so its cost does not grow with the table.
        db = bundle_dir / "../../mockmed/mockmed.sqlite"
        with sqlite3.connect(db) as conn:
            plan = conn.execute(f"EXPLAIN QUERY PLAN {statement}", parameters).fetchall()
        assert any("INDEX encounters_patient" in str(step) for step in plan), plan

    def test_reader_cannot_write(self, reader, data_dir):
        with (
            pytest.raises(sa.exc.OperationalError, match="readonly"),
            reader.engine.begin() as conn,
        ):
            conn.execute(sa.text("DELETE FROM encounters"))
        with (
            pytest.raises(sa.exc.OperationalError, match="readonly"),
            reader.engine.begin() as conn,
        ):
            conn.execute(sa.text("INSERT INTO encounters (id, patient_id) VALUES ('x', 'p-001')"))
        with sqlite3.connect(data_dir / "mockmed" / "mockmed.sqlite") as conn:
            assert conn.execute("SELECT count(*) FROM encounters").fetchone() == (3,)

    def test_missing_database_file(self, tmp_path):
        bundle = tmp_path / "contracts" / "mockmed"
        bundle.mkdir(parents=True)
        reader = make_reader(TIER2_RECIPE, bundle)
        with pytest.raises(OracleUnavailable, match="could not be opened") as caught:
            reader.read(ME)
        assert str(tmp_path) not in str(caught.value)
        # Read-only mode never creates the file it was asked to read.
        assert not (tmp_path / "mockmed" / "mockmed.sqlite").exists()

    def test_missing_table(self, bundle_dir):
        reader = make_reader(sql_recipe(table="orders"), bundle_dir)
        with pytest.raises(OracleUnavailable, match="table does not exist"):
            reader.read(ME)

    def test_missing_column(self, bundle_dir):
        recipe = sql_recipe(identity_fields={"patient_id": "subject"})
        with pytest.raises(OracleUnavailable, match="column does not exist"):
            make_reader(recipe, bundle_dir).read(ME)

    def test_missing_id_column(self, bundle_dir):
        recipe = sql_recipe(id_column="encounter_id")
        with pytest.raises(OracleUnavailable):
            make_reader(recipe, bundle_dir).read(ME)

    def test_errors_never_carry_identity_or_path(self, bundle_dir, tmp_path):
        reader = make_reader(sql_recipe(table="orders"), bundle_dir)
        with pytest.raises(OracleUnavailable) as caught:
            reader.read({"patient_id": "p-very-private"})
        message = str(caught.value)
        assert "p-very-private" not in message
        assert str(tmp_path) not in message
        assert caught.value.__cause__ is None
        assert caught.value.__suppress_context__

    def test_not_a_database(self, data_dir, bundle_dir):
        (data_dir / "mockmed" / "mockmed.sqlite").write_bytes(b"this is not sqlite" * 100)
        with pytest.raises(OracleUnavailable, match="sql table 'encounters'"):
            make_reader(TIER2_RECIPE, bundle_dir).read(ME)

    def test_timeout(self, tmp_path):
        # An unindexed identity column makes the read a full scan of thousands of VM steps; a
        # one-microsecond deadline has passed by the first progress-handler check.
        rows = [(f"e{i}", f"p-{i}", "Triage", "n", "open", None) for i in range(20_000)]
        create_db(tmp_path / "big.sqlite", rows)
        recipe = sql_recipe(
            database={"sqlite_path": "big.sqlite"},
            identity_fields={"patient_id": "note"},
            timeout_seconds=1e-6,
        )
        reader = make_reader(recipe, tmp_path)
        with pytest.raises(OracleUnavailable, match="timed out"):
            reader.read({"patient_id": "missing"})
        # The same full scan under a generous deadline completes, twice on the pooled connection.
        relaxed = make_reader(dict(recipe, timeout_seconds=30.0), tmp_path)
        assert relaxed.read({"patient_id": "missing"}) == []
        assert relaxed.read({"patient_id": "missing"}) == []

    def test_too_many_records(self, bundle_dir, monkeypatch):
        monkeypatch.setattr(sql_module, "MAX_RECORDS", 1)
        reader = make_reader(TIER2_RECIPE, bundle_dir)
        with pytest.raises(OracleUnavailable, match="more than 1 records"):
            reader.read(ME)
        assert len(reader.read({"patient_id": "p-002"})) == 1

    def test_integer_columns_and_ids(self, tmp_path):
        db = tmp_path / "ints.sqlite"
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TABLE visits (vid INTEGER PRIMARY KEY, patient INTEGER, n REAL)")
            conn.executemany("INSERT INTO visits VALUES (?, ?, ?)", [(7, 42, 1.5), (8, 43, 2)])
        recipe = visits_recipe("ints.sqlite", "patient")
        assert make_reader(recipe, tmp_path).read({"patient_id": "42"}) == [
            {"id": "7", "patient": 42, "n": 1.5}
        ]

    def test_batched_reads_equal_single_reads_where_values_are_spelled_otherwise(self, tmp_path):
        # The batched read groups rows by their identity column; a REAL column reads 42.0 for
        # the identity "42" (and a NOCASE column matches other spellings). Whatever the batch,
        # each identity gets what its own read gives.
        db = tmp_path / "reals.sqlite"
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TABLE visits (vid TEXT PRIMARY KEY, score REAL)")
            conn.executemany("INSERT INTO visits VALUES (?, ?)", [("v1", 42), ("v2", 43.5)])
        reader = make_reader(visits_recipe("reals.sqlite", "score"), tmp_path)
        identities = [{"patient_id": "42"}, {"patient_id": "43.5"}, {"patient_id": "7"}]
        singles = [reader.read(identity) for identity in identities]
        assert singles == [[{"id": "v1", "score": 42.0}], [{"id": "v2", "score": 43.5}], []]
        assert reader.read_many(identities) == singles
        assert reader.read_many(identities[:1]) == singles[:1]

    def test_a_second_id_field_is_refused(self, tmp_path):
        db = tmp_path / "ids.sqlite"
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TABLE t (pk TEXT, id TEXT, patient_id TEXT)")
            conn.execute("INSERT INTO t VALUES ('a', 'b', 'p-001')")
        recipe = sql_recipe(database={"sqlite_path": "ids.sqlite"}, table="t", id_column="pk")
        with pytest.raises(OracleUnavailable, match="'id' besides"):
            make_reader(recipe, tmp_path).read(ME)

    def test_path_with_uri_characters(self, tmp_path):
        odd = tmp_path / "we?ird #dir %41"
        create_db(odd / "db.sqlite")
        recipe = sql_recipe(database={"sqlite_path": "db.sqlite"})
        assert len(make_reader(recipe, odd).read(ME)) == 2

    def test_reads_from_worker_threads(self, reader):
        with ThreadPoolExecutor(max_workers=4) as pool:
            results = list(pool.map(lambda _: len(reader.read(ME)), range(16)))
        assert results == [2] * 16

    def test_identity_keys_must_match(self, reader):
        with pytest.raises(IdentityMismatch):
            reader.read({})
        with pytest.raises(IdentityMismatch):
            reader.read({"patient_id": "p-001", "site": "x"})
        with pytest.raises(IdentityMismatch):
            reader.read({"patient_id": ""})


class TestUrlEnv:
    def test_sqlite_url_from_the_environment(self, data_dir, bundle_dir, monkeypatch):
        db = data_dir / "mockmed" / "mockmed.sqlite"
        monkeypatch.setenv("MOCKMED_DB_URL", f"sqlite:///{db}")
        reader = make_reader(sql_recipe(database={"url_env": "MOCKMED_DB_URL"}), bundle_dir)
        assert len(reader.read(ME)) == 2
        with (
            pytest.raises(sa.exc.OperationalError, match="readonly"),
            reader.engine.begin() as conn,
        ):
            conn.execute(sa.text("DELETE FROM encounters"))

    def test_missing_variable_is_named(self, bundle_dir, monkeypatch):
        monkeypatch.delenv("REWARDSEAL_TEST_MISSING_URL", raising=False)
        recipe = sql_recipe(database={"url_env": "REWARDSEAL_TEST_MISSING_URL"})
        with pytest.raises(ValidationError, match="REWARDSEAL_TEST_MISSING_URL"):
            make_reader(recipe, bundle_dir)

    @pytest.mark.parametrize(
        "value",
        [
            "not a url at all hunter2",
            "mysql://user:hunter2@db.internal/sor",
            "sqlite://",
            "sqlite:///:memory:",
        ],
    )
    def test_bad_urls_are_refused_without_showing_them(self, bundle_dir, monkeypatch, value):
        monkeypatch.setenv("SOR_URL", value)
        with pytest.raises(ValidationError, match="SOR_URL") as caught:
            make_reader(sql_recipe(database={"url_env": "SOR_URL"}), bundle_dir)
        assert "hunter2" not in str(caught.value)
        assert "db.internal" not in str(caught.value)

    def test_postgresql_never_shows_the_url(self, bundle_dir, monkeypatch):
        # Driver installed or not, nothing about the URL may surface; port 1 refuses at once.
        monkeypatch.setenv("SOR_URL", "postgresql://reader:hunter2@127.0.0.1:1/sor")
        recipe = sql_recipe(database={"url_env": "SOR_URL"}, timeout_seconds=1.0)
        if importlib.util.find_spec("psycopg") is None:
            with pytest.raises(ValidationError, match="not installed") as refused:
                make_reader(recipe, bundle_dir)
            assert "hunter2" not in str(refused.value)
            return
        reader = make_reader(recipe, bundle_dir)
        with pytest.raises(OracleUnavailable) as caught:
            reader.read(ME)
        assert "hunter2" not in str(caught.value)
        assert "127.0.0.1" not in str(caught.value)
        assert caught.value.__cause__ is None
        reader.close()


CREDENTIAL_RECIPES = [
    pytest.param(sql_recipe(password="hunter2"), id="password"),
    pytest.param(sql_recipe(db_password="hunter2"), id="suffixed-password"),
    pytest.param(sql_recipe(token="hunter2"), id="token"),
    pytest.param(sql_recipe(api_token="hunter2"), id="api-token"),
    pytest.param(sql_recipe(client_secret="hunter2"), id="secret"),
    pytest.param(sql_recipe(dsn="host=db password=hunter2"), id="dsn"),
    pytest.param(sql_recipe(url="postgresql://u:hunter2@db/sor"), id="url"),
    pytest.param(sql_recipe(database={"url": "postgresql://u:hunter2@db/sor"}), id="nested-url"),
    pytest.param(
        sql_recipe(database={"sqlite_path": "sqlite://u:hunter2@x"}), id="url-shaped-value"
    ),
    pytest.param(
        sql_recipe(database={"url_env": "X", "Password": "hunter2"}), id="nested-password"
    ),
    pytest.param(file_recipe(credentials={"user": "hunter2"}), id="credentials"),
    pytest.param(file_recipe(path="https://u:hunter2@files/sor.json"), id="remote-path"),
]


@pytest.mark.parametrize("recipe", CREDENTIAL_RECIPES)
def test_credential_looking_recipes_are_refused(recipe, tmp_path):
    with pytest.raises(ValidationError, match=r"credential|URL") as caught:
        make_reader(recipe, tmp_path)
    assert "hunter2" not in str(caught.value)


BAD_RECIPES = [
    pytest.param(sql_recipe(table="encounters; drop table x"), "table", id="table-injection"),
    pytest.param(sql_recipe(table='enc"ounters'), "table", id="table-quote"),
    pytest.param(sql_recipe(id_column="id--"), "id_column", id="id-column"),
    pytest.param(
        sql_recipe(identity_fields={"patient_id": "patient id"}), "identity_fields", id="column"
    ),
    pytest.param(sql_recipe(identity_fields={}), "identity_fields", id="no-identity-fields"),
    pytest.param(
        sql_recipe(identity_fields={"bad key": "patient_id"}), "identity_fields", id="bad-key"
    ),
    pytest.param(sql_recipe(database={}), "database", id="empty-database"),
    pytest.param(
        sql_recipe(database={"url_env": "A", "sqlite_path": "x.db"}), "database", id="both"
    ),
    pytest.param(sql_recipe(database={"url_env": "1BAD"}), "url_env", id="bad-env-name"),
    pytest.param(
        sql_recipe(database={"sqlite_path": "/abs/sor.sqlite"}), "relative", id="abs-sqlite"
    ),
    pytest.param(sql_recipe(timeout_seconds=0), "timeout", id="zero-timeout"),
    pytest.param(sql_recipe(timeout_seconds=True), "timeout", id="bool-timeout"),
    pytest.param(sql_recipe(timeout_seconds=float("inf")), "timeout", id="inf-timeout"),
    pytest.param(sql_recipe(timeout_seconds=301), "timeout", id="huge-timeout"),
    pytest.param(sql_recipe(path="x.json"), "unknown keys", id="sql-with-path"),
    pytest.param(file_recipe(table="encounters"), "unknown keys", id="file-with-table"),
    pytest.param(file_recipe(collection="a b"), "collection", id="bad-collection"),
    pytest.param(file_recipe(path="/etc/sor.json"), "relative", id="abs-path"),
    pytest.param(file_recipe(path="C:\\sor.json"), "relative", id="windows-path"),
    pytest.param(file_recipe(path=""), "relative path", id="empty-path"),
    pytest.param(file_recipe(kind="rest"), "unknown keys", id="rest-with-file-keys"),
    pytest.param(file_recipe(kind="fhir"), "unknown keys", id="fhir-with-file-keys"),
    pytest.param(file_recipe(kind="ldap"), "kind must be one of", id="unknown-kind"),
    pytest.param(file_recipe(kind=None), "kind must be one of", id="no-kind"),
    pytest.param([], "JSON object", id="not-an-object"),
]


@pytest.mark.parametrize(("recipe", "message"), BAD_RECIPES)
def test_bad_recipes_are_refused(recipe, message, tmp_path):
    with pytest.raises(ValidationError, match=message):
        make_reader(recipe, tmp_path)


def test_mockmed_recipes_are_valid():
    assert validate_recipe(TIER2_RECIPE) == "sql"
    assert validate_recipe(TIER0_RECIPE) == "screen_dump"


def test_every_recipe_kind_has_one_reader():
    assert set(READER_KINDS) == set(RECIPE_KEYS)


def test_oracle_modules_import_downwards_only():
    """base imports no reader, the readers import base only, the registry sits above them."""
    package = Path(oracles.__file__).parent
    imports: dict[str, set[str]] = {}
    for path in package.glob("*.py"):
        if path.stem == "__init__":
            continue
        tree = ast.parse(path.read_text())
        imports[path.stem] = {
            node.module.rsplit(".", 1)[-1]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            and node.module is not None
            and node.module.startswith("rewardseal_worker.oracles.")
        }
    assert imports == {
        "base": set(),
        "sql": {"base"},
        "files": {"base"},
        "http": {"base"},
        "registry": {"base", "sql", "files", "http"},
        "probe": {"base"},  # the SoR's probe (R-W-16) reads through any reader's protocol
    }


def test_sql_reader_validates_identifiers_itself():
    engine = sa.create_engine("sqlite://")
    with pytest.raises(ValidationError, match="table"):
        SqlReader(
            engine,
            table="x; drop table y",
            id_column="id",
            identity_fields={"patient_id": "patient_id"},
            timeout_seconds=1.0,
            sqlite=True,
        )


def write_sor(path: Path, records, **extra) -> Path:
    path.write_text(json.dumps({"collections": {"encounters": records}, **extra}))
    return path


FILE_RECORDS = [
    {"id": "enc-1", "patient_id": "p-001", "type": "Intake", "note": SECRET_NOTE},
    {"id": 2, "patient_id": "p-002", "type": "Triage"},
    {"id": "enc-3", "patient_id": "p-001", "type": "Triage", "priority": None},
]


class TestJsonFileReader:
    @pytest.mark.parametrize("kind", ["json_file", "screen_dump"])
    def test_reads_the_identitys_records(self, tmp_path, kind):
        write_sor(tmp_path / "sor.json", FILE_RECORDS, banner={"p-001": "Saved"})
        reader = make_reader(file_recipe(kind), tmp_path)
        assert isinstance(reader, JsonFileReader)
        assert reader.kind == kind
        assert reader.read(ME) == [FILE_RECORDS[0], FILE_RECORDS[2]]
        assert reader.read({"patient_id": "p-002"}) == [
            {"id": "2", "patient_id": "p-002", "type": "Triage"}
        ]
        reader.close()

    def test_one_class_serves_both_kinds(self, tmp_path):
        kinds = {type(make_reader(file_recipe(k), tmp_path)) for k in ("json_file", "screen_dump")}
        assert kinds == {JsonFileReader}

    def test_relative_path_resolves_against_the_bundle(self, tmp_path):
        bundle = tmp_path / "contracts" / "mockmed"
        bundle.mkdir(parents=True)
        (tmp_path / "mockmed").mkdir()
        write_sor(tmp_path / "mockmed" / "screen.json", FILE_RECORDS)
        reader = make_reader(TIER0_RECIPE, bundle)
        assert reader.path == (tmp_path / "mockmed" / "screen.json").resolve()
        assert len(reader.read(ME)) == 2

    def test_file_is_reread_on_every_call(self, tmp_path):
        sor = write_sor(tmp_path / "sor.json", [])
        reader = make_reader(file_recipe(), tmp_path)
        assert reader.read(ME) == []
        write_sor(sor, FILE_RECORDS)
        assert len(reader.read(ME)) == 2

    @pytest.mark.parametrize(
        ("content", "message"),
        [
            pytest.param(None, "cannot be read", id="missing-file"),
            pytest.param(b'{"collections": {"encounters": [' + SECRET_NOTE.encode(), "malformed",
                         id="truncated"),
            pytest.param(b"\xff\xfe not utf8", "malformed", id="not-utf8"),
            pytest.param(b'{"collections": {"encounters": [{"id": NaN}]}}', "malformed",
                         id="nan"),
            pytest.param(b"[]", "no 'collections'", id="top-level-list"),
            pytest.param(b'{"encounters": []}', "no 'collections'", id="no-collections"),
            pytest.param(b'{"collections": {}}', "not a list", id="no-collection"),
            pytest.param(b'{"collections": {"encounters": {}}}', "not a list", id="not-a-list"),
            pytest.param(b'{"collections": {"encounters": ["x"]}}', "not a JSON object",
                         id="record-not-object"),
            pytest.param(b'{"collections": {"encounters": [{"patient_id": "p-001"}]}}',
                         "no usable 'id'", id="record-without-id"),
            pytest.param(b'{"collections": {"encounters": [{"id": true, "patient_id": "p-001"}]}}',
                         "no usable 'id'", id="boolean-id"),
            pytest.param(
                b'{"collections": {"encounters": [{"id": "e", "patient_id": "p-001", '
                b'"note": {"text": "' + SECRET_NOTE.encode() + b'"}}]}}',
                "not a JSON scalar", id="nested-value"),
        ],
    )  # fmt: skip
    def test_unreadable_files(self, tmp_path, content, message):
        if content is not None:
            (tmp_path / "sor.json").write_bytes(content)
        reader = make_reader(file_recipe(), tmp_path)
        with pytest.raises(OracleUnavailable, match=message) as caught:
            reader.read(ME)
        assert SECRET_NOTE not in str(caught.value)
        assert str(tmp_path) not in str(caught.value)

    def test_file_too_large(self, tmp_path, monkeypatch):
        from rewardseal_worker.oracles import files

        monkeypatch.setattr(files, "MAX_FILE_BYTES", 10)
        write_sor(tmp_path / "sor.json", FILE_RECORDS)
        with pytest.raises(OracleUnavailable, match="larger than"):
            make_reader(file_recipe(), tmp_path).read(ME)

    def test_directory_instead_of_file(self, tmp_path):
        (tmp_path / "sor.json").mkdir()
        with pytest.raises(OracleUnavailable, match="cannot be read"):
            make_reader(file_recipe(), tmp_path).read(ME)

    def test_identity_keys_must_match(self, tmp_path):
        write_sor(tmp_path / "sor.json", FILE_RECORDS)
        with pytest.raises(IdentityMismatch):
            make_reader(file_recipe(), tmp_path).read({"subject": "p-001"})


def test_banner_lie_tier2_wrong_effect_tier0_verified(data_dir, bundle_dir):
    """R-W-5 / R-MM-2: the screen says saved and shows the row; the store has nothing."""
    required, forbidden = parse_effects(REQUIRED_EFFECTS), parse_effects(FORBIDDEN_EFFECTS)
    sql_reader = make_reader(TIER2_RECIPE, bundle_dir)
    write_sor(data_dir / "mockmed" / "screen.json", [], banner={"p-001": "Saved"})
    screen_reader = make_reader(TIER0_RECIPE, bundle_dir)
    baselines = {"sql": sql_reader.read(ME), "screen": screen_reader.read(ME)}
    # The lying rollout: the UI shows a saved Triage encounter, the database is untouched.
    shown = {
        "id": "enc-ui-1",
        "patient_id": "p-001",
        "type": "Triage",
        "note": "chest pain",
        "status": "open",
    }
    write_sor(data_dir / "mockmed" / "screen.json", [shown], banner={"p-001": "Saved"})
    decisions = {
        name: judge_episode(
            required,
            forbidden,
            ME,
            baselines[name],
            reader.read(ME),
            RuntimeSignal.RUNTIME_SIGNAL_COMPLETED,
        )
        for name, reader in (("sql", sql_reader), ("screen", screen_reader))
    }
    assert decisions["sql"].outcome == RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT
    assert decisions["sql"].verdicts[0].reason == "missing"
    assert decisions["screen"].outcome == RewardOutcome.REWARD_OUTCOME_VERIFIED
