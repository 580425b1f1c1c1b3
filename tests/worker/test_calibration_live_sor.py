"""Calibration never touches the live system of record (R-CAL-5).

``rewardseal-worker calibrate`` writes trial rows into its sandbox; a sandbox that is the live SoR
under another spelling (a hard link, a symlink, a relative or ``..`` path, a ``file:`` URI, a
SQLAlchemy URL, a PostgreSQL server named by its socket, an API by ``localhost``) would put them
where episodes are judged. Each is refused before the first write, and the live file is checked
unchanged: its rows, its bytes and its mtime. A live SoR that cannot be determined (its variable
unset, its server unreachable) is refused too, unless the operator passes the unsafe flag.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from support.postgres import SUPERUSER, PostgresServer

from rewardseal.core.errors import ValidationError
from rewardseal_worker.bundle import ContractBundle, load_bundle
from rewardseal_worker.calibration.live_sor import UNSAFE_UNKNOWN_FLAG, refuse_live_target
from rewardseal_worker.cli import build_parser, main

TICKETS_DDL = (
    "CREATE TABLE tickets (id INTEGER PRIMARY KEY {auto}, customer_id TEXT NOT NULL, "
    "subject TEXT, body TEXT, status TEXT, created_at TEXT, priority TEXT)"
)
LIVE_REFUSAL = "refused: the sandbox is the bundle's own read target (the live system of record)"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def sqlite_sor(path: Path) -> Path:
    with sqlite3.connect(path) as conn:
        conn.execute(TICKETS_DDL.format(auto="AUTOINCREMENT"))
        conn.execute(
            "INSERT INTO tickets (customer_id, subject, status) VALUES ('c-1', 'live', 'open')"
        )
    return path


def fingerprint(path: Path) -> tuple[int, int, str]:
    """(rows, mtime in ns, sha256 of the bytes): what a single trial write would change."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        count: int = conn.execute("SELECT count(*) FROM tickets").fetchone()[0]
    return count, path.stat().st_mtime_ns, hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def sql_bundle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A sql bundle that names its live SoR through ``url_env`` ($SOR_DATABASE_URL)."""
    directory = tmp_path / "crm"
    assert run(capsys, "contract", "init", str(directory), "--recipe", "sql")[0] == 0
    assert load_bundle(directory).recipe["database"] == {"url_env": "SOR_DATABASE_URL"}
    return directory


@pytest.fixture
def live(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The live SQLite SoR (one row), named by $SOR_DATABASE_URL; the tests run in tmp_path."""
    (tmp_path / "data").mkdir()
    path = sqlite_sor(tmp_path / "data" / "live.sqlite")
    monkeypatch.setenv("SOR_DATABASE_URL", f"sqlite:///{path}")
    monkeypatch.chdir(tmp_path)
    return path


def assert_refused_untouched(
    capsys: pytest.CaptureFixture[str], bundle: Path, sandbox: str, live: Path
) -> str:
    before = fingerprint(live)
    code, out, err = run(capsys, "calibrate", str(bundle), "--sandbox", sandbox, "--trials", "6")
    assert code == 2, out
    assert err.count("\n") == 1, err  # one line
    assert fingerprint(live) == before  # not one trial row, not one byte
    assert not (bundle / "calibration.json").exists()
    return err


def test_calibration_refuses_a_hard_link_of_the_live_sqlite_file(
    sql_bundle: Path, live: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The attack of the finding: a "sandbox" that is a hard link of the live file has another
    path but the same inode; 185 trial rows reached the live file when paths were compared."""
    link = tmp_path / "sandbox-copy.sqlite"
    os.link(live, link)
    assert link.resolve() != live.resolve()  # no path comparison could tell
    err = assert_refused_untouched(capsys, sql_bundle, str(link), live)
    assert LIVE_REFUSAL in err
    assert "$SOR_DATABASE_URL points at it; use a copy" in err
    # and the real copy beside it is accepted: the live file still has its one row only
    copy = sqlite_sor(tmp_path / "real-copy.sqlite")
    before = fingerprint(live)
    code, _, err = run(
        capsys, "calibrate", str(sql_bundle), "--sandbox", str(copy), "--trials", "6"
    )
    assert code == 0, err
    assert fingerprint(live) == before


SPELLINGS: dict[str, Callable[[Path, Path], str]] = {
    "same path": lambda live, tmp: str(live),
    "relative path": lambda live, tmp: "data/live.sqlite",
    "dot-dot path": lambda live, tmp: "data/../data/./live.sqlite",
    "symlink": lambda live, tmp: _symlink(live, tmp / "alias.sqlite"),
    "symlinked directory": lambda live, tmp: _symlink(tmp / "data", tmp / "alias") + "/live.sqlite",
    "home-relative path": lambda live, tmp: "~/live.sqlite",
    "file: URI": lambda live, tmp: f"file:{live}?mode=rw",
    "file:/// URI, percent-escaped": lambda live, tmp: (
        "file://" + str(live).replace("live.sqlite", "%6Cive.sqlite")
    ),
    "file: URI, relative": lambda live, tmp: "file:data/live.sqlite?cache=shared",
    "SQLAlchemy URL": lambda live, tmp: f"sqlite:///{live}",
    "SQLAlchemy URL, relative": lambda live, tmp: "sqlite:///data/../data/live.sqlite",
    "SQLAlchemy URL with driver": lambda live, tmp: f"sqlite+pysqlite:///{live}",
    "SQLAlchemy URL of a file: URI": lambda live, tmp: f"sqlite:///file:{live}?mode=ro&uri=true",
    "SQLAlchemy URL of a hard link": lambda live, tmp: "sqlite:///" + _hard_link(live, tmp),
}


def _symlink(target: Path, link: Path) -> str:
    link.symlink_to(target)
    return str(link)


def _hard_link(target: Path, tmp: Path) -> str:
    link = tmp / "linked.sqlite"
    os.link(target, link)
    return str(link)


@pytest.mark.parametrize("spelling", SPELLINGS, ids=list(SPELLINGS))
def test_calibration_refuses_every_spelling_of_the_live_sqlite_file(
    spelling: str,
    sql_bundle: Path,
    live: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "data"))
    sandbox = SPELLINGS[spelling](live, tmp_path)
    err = assert_refused_untouched(capsys, sql_bundle, sandbox, live)
    assert LIVE_REFUSAL in err


@pytest.mark.parametrize(
    "live_url",
    ["sqlite:///data/live.sqlite", "sqlite+pysqlite:///data/../data/live.sqlite", "symlink"],
)
def test_calibration_refuses_the_live_file_however_the_variable_spells_it(
    live_url: str,
    sql_bundle: Path,
    live: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The other side: $SOR_DATABASE_URL relative, with a driver, or through a symlink, against
    a hard link given as a plain path."""
    if live_url == "symlink":
        live_url = "sqlite:///" + _symlink(live, tmp_path / "via-link.sqlite")
    monkeypatch.setenv("SOR_DATABASE_URL", live_url)
    err = assert_refused_untouched(capsys, sql_bundle, _hard_link(live, tmp_path), live)
    assert LIVE_REFUSAL in err


def test_a_bundle_relative_sqlite_sor_is_refused_as_a_hard_link_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A recipe naming its file by ``sqlite_path`` (relative to the bundle) is compared by inode
    as well; no variable is involved, so nothing is unknown."""
    directory = tmp_path / "crm"
    assert run(capsys, "contract", "init", str(directory), "--recipe", "sql")[0] == 0
    bundle = load_bundle(directory)
    recipe = {**bundle.recipe, "database": {"sqlite_path": "sor.sqlite"}}
    sqlite_sor(directory / "sor.sqlite")
    link = _hard_link(directory / "sor.sqlite", tmp_path)
    with pytest.raises(ValidationError, match=r"own read target.*sor\.sqlite; use a copy"):
        refuse_live_target(_with_recipe(bundle, recipe), link, {})
    assert (
        refuse_live_target(_with_recipe(bundle, recipe), str(sqlite_sor(tmp_path / "c")), {})
        is None
    )


def _with_recipe(bundle: ContractBundle, recipe: dict[str, Any]) -> ContractBundle:
    return dataclasses.replace(bundle, recipe=recipe)


def test_calibration_refuses_when_the_live_sor_is_unknown(
    sql_bundle: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """$SOR_DATABASE_URL unset: calibrate cannot tell whether the sandbox is the live SoR, so it
    refuses before any write in one line naming the variable; with the unsafe flag it proceeds,
    and says so."""
    monkeypatch.delenv("SOR_DATABASE_URL", raising=False)
    sandbox = sqlite_sor(tmp_path / "sandbox.sqlite")
    before = fingerprint(sandbox)
    code, out, err = run(
        capsys, "calibrate", str(sql_bundle), "--sandbox", str(sandbox), "--trials", "6"
    )
    assert code == 2, out
    assert err.count("\n") == 1
    assert "refused before any write: $SOR_DATABASE_URL is not set here" in err
    assert "set $SOR_DATABASE_URL to the live SoR's database URL" in err
    assert UNSAFE_UNKNOWN_FLAG in err
    assert fingerprint(sandbox) == before  # not even the sandbox was written
    assert not (sql_bundle / "calibration.json").exists()

    code, out, err = run(
        capsys,
        "calibrate",
        str(sql_bundle),
        "--sandbox",
        str(sandbox),
        "--trials",
        "6",
        UNSAFE_UNKNOWN_FLAG,
    )
    assert code == 0, err
    assert f"note: UNSAFE ({UNSAFE_UNKNOWN_FLAG}): $SOR_DATABASE_URL is not set here" in err
    assert "NOT compared" in err
    assert (sql_bundle / "calibration.json").exists()

    # the flag never lets the live file itself through
    monkeypatch.setenv("SOR_DATABASE_URL", f"sqlite:///{sandbox}")
    before = fingerprint(sandbox)
    code, _, err = run(
        capsys, "calibrate", str(sql_bundle), "--sandbox", str(sandbox), UNSAFE_UNKNOWN_FLAG
    )
    assert code == 2
    assert LIVE_REFUSAL in err
    assert fingerprint(sandbox) == before


def test_the_unsafe_flag_is_named_unsafe_in_help() -> None:
    parser = build_parser()
    calibrate = parser._subparsers._group_actions[0].choices["calibrate"]  # type: ignore[union-attr]
    help_text = " ".join(calibrate.format_help().split())
    assert f"{UNSAFE_UNKNOWN_FLAG} UNSAFE: calibrate even when the live SoR cannot be" in help_text


@pytest.mark.parametrize("value", ["not a url", "mysql://db.internal/crm"])
def test_a_live_variable_that_names_no_usable_database_is_unknown(
    value: str,
    sql_bundle: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SOR_DATABASE_URL", value)
    sandbox = sqlite_sor(tmp_path / "sandbox.sqlite")
    code, _, err = run(capsys, "calibrate", str(sql_bundle), "--sandbox", str(sandbox))
    assert code == 2
    assert "refused before any write: $SOR_DATABASE_URL" in err
    assert value not in err or value == "not a url"  # never a URL, which may hold a password
    assert fingerprint(sandbox)[0] == 1


# --- PostgreSQL: by server identity and database ---------------------------------------------


@pytest.fixture
def tickets_databases(postgres_server: PostgresServer) -> Iterator[tuple[str, str]]:
    """(live, sandbox): two databases of one server, each with the tickets table and one row."""
    names = [postgres_server.fresh_database(), postgres_server.fresh_database()]
    for name in names:
        engine = sa.create_engine(postgres_server.url(name))
        with engine.begin() as conn:
            conn.execute(sa.text(TICKETS_DDL.format(auto="GENERATED ALWAYS AS IDENTITY")))
            conn.execute(sa.text("INSERT INTO tickets (customer_id) VALUES ('c-1')"))
        engine.dispose()
    try:
        yield names[0], names[1]
    finally:
        for name in names:
            postgres_server.discard_database(name)


def pg_rows(url: str) -> int:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            count: int = conn.execute(sa.text("SELECT count(*) FROM tickets")).scalar_one()
    finally:
        engine.dispose()
    return count


def test_calibration_refuses_the_live_postgresql_database_under_another_spelling(
    sql_bundle: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    postgres_server: PostgresServer,
    tickets_databases: tuple[str, str],
) -> None:
    """The live database named over TCP by a read-only role; the "sandbox" names it through
    the server's unix socket as the superuser, so no two parts of the URLs agree but the
    database name: the servers' own identity says they are one."""
    live_db, sandbox_db = tickets_databases
    import psycopg

    admin_url = f"postgresql://{SUPERUSER}@127.0.0.1:{postgres_server.port}/postgres"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute("DROP ROLE IF EXISTS crm_reader")
        admin.execute("CREATE ROLE crm_reader LOGIN")
    live_url = f"postgresql://crm_reader@127.0.0.1:{postgres_server.port}/{live_db}"
    monkeypatch.setenv("SOR_DATABASE_URL", live_url)
    socket_url = (
        f"postgresql://{SUPERUSER}@/{live_db}?host={postgres_server.root}"
        f"&port={postgres_server.port}"
    )
    for spelling in (
        socket_url,
        f"postgresql+psycopg://{SUPERUSER}@localhost:{postgres_server.port}/{live_db}",
    ):
        code, _, err = run(capsys, "calibrate", str(sql_bundle), "--sandbox", spelling)
        assert code == 2
        assert err.count("\n") == 1
        assert LIVE_REFUSAL in err
        assert "$SOR_DATABASE_URL points at it" in err
    assert pg_rows(postgres_server.url(live_db)) == 1

    # another database of the same server is a sandbox: accepted, and left as it was
    sandbox_url = (
        f"postgresql://{SUPERUSER}@/{sandbox_db}?host={postgres_server.root}"
        f"&port={postgres_server.port}"
    )
    code, _, err = run(
        capsys, "calibrate", str(sql_bundle), "--sandbox", sandbox_url, "--trials", "6"
    )
    assert code == 0, err
    assert pg_rows(postgres_server.url(sandbox_db)) == 1
    assert pg_rows(postgres_server.url(live_db)) == 1


def test_calibration_refuses_when_the_live_postgresql_server_cannot_be_reached(
    sql_bundle: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    postgres_server: PostgresServer,
    tickets_databases: tuple[str, str],
) -> None:
    """A live database that does not answer cannot be compared: refused, naming the variable
    (never its URL); the unsafe flag proceeds."""
    _live_db, sandbox_db = tickets_databases
    monkeypatch.setenv(
        "SOR_DATABASE_URL",
        f"postgresql://reader:s3cret@127.0.0.1:{postgres_server.port}/no_such_database",
    )
    sandbox_url = postgres_server.url(sandbox_db)
    code, _, err = run(capsys, "calibrate", str(sql_bundle), "--sandbox", sandbox_url)
    assert code == 2
    assert "the database $SOR_DATABASE_URL names cannot be reached from here" in err
    assert "s3cret" not in err
    assert pg_rows(sandbox_url) == 1
    code, _, err = run(
        capsys,
        "calibrate",
        str(sql_bundle),
        "--sandbox",
        sandbox_url,
        "--trials",
        "6",
        UNSAFE_UNKNOWN_FLAG,
    )
    assert code == 0, err
    assert "UNSAFE" in err


# --- REST: by resolved base URL --------------------------------------------------------------


@pytest.fixture
def rest_bundle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A rest bundle: the live API's base URL in $SOR_API_URL."""
    directory = tmp_path / "helpdesk-api"
    assert run(capsys, "contract", "init", str(directory), "--recipe", "rest")[0] == 0
    assert load_bundle(directory).recipe["base_url_env"] == "SOR_API_URL"
    return directory


@pytest.mark.parametrize(
    ("live_url", "sandbox"),
    [
        ("http://127.0.0.1:8080", "http://localhost:8080/"),
        ("http://LOCALHOST:8080/api/v1/", "http://127.0.0.1:8080//api/./v2/../v1"),
        ("http://localhost:80/api", "http://[::1]/api"),
        ("https://127.0.0.1/api", "https://localhost:443/%61pi"),
        ("http://0.0.0.0:8080", "http://127.0.0.2:8080"),
    ],
)
def test_calibration_refuses_the_live_api_spelled_differently(
    live_url: str,
    sandbox: str,
    rest_bundle: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SOR_API_URL", live_url)
    store = sqlite_sor(tmp_path / "store.sqlite")
    before = fingerprint(store)
    code, _, err = run(
        capsys, "calibrate", str(rest_bundle), "--sandbox", sandbox, "--sandbox-store", str(store)
    )
    assert code == 2
    assert err.count("\n") == 1
    assert LIVE_REFUSAL in err
    assert "$SOR_API_URL points at it; use a sandbox deployment" in err
    assert fingerprint(store) == before


def test_another_api_base_url_is_a_sandbox(rest_bundle: Path) -> None:
    """Another port, or another path on the same server (a second deployment behind one proxy):
    not the live API."""
    bundle = load_bundle(rest_bundle)
    env = {"SOR_API_URL": "http://localhost:8080/live"}
    assert refuse_live_target(bundle, "http://127.0.0.1:8081/live", env) is None
    assert refuse_live_target(bundle, "http://127.0.0.1:8080/sandbox", env) is None


def test_a_live_api_that_is_unset_or_does_not_resolve_is_unknown(
    rest_bundle: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = str(sqlite_sor(tmp_path / "store.sqlite"))
    argv = ["calibrate", str(rest_bundle), "--sandbox", "http://127.0.0.1:8080/api"]
    monkeypatch.delenv("SOR_API_URL", raising=False)
    code, _, err = run(capsys, *argv, "--sandbox-store", store)
    assert code == 2
    assert "refused before any write: $SOR_API_URL is not set here" in err
    # a host this machine cannot resolve might be the sandbox's address elsewhere
    monkeypatch.setenv("SOR_API_URL", "http://tickets.example.invalid:8080/api")
    code, _, err = run(capsys, *argv, "--sandbox-store", store)
    assert code == 2
    assert "host 'tickets.example.invalid' does not resolve here" in err
    assert "($SOR_API_URL)" in err
    assert UNSAFE_UNKNOWN_FLAG in err
    bundle = load_bundle(rest_bundle)
    note = refuse_live_target(
        bundle,
        "http://127.0.0.1:8080/api",
        {"SOR_API_URL": "http://x.invalid:8080/api"},
        allow_unknown=True,
    )
    assert note is not None
    assert note.startswith(f"UNSAFE ({UNSAFE_UNKNOWN_FLAG})")
