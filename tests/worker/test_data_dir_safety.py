"""Data directories under attack (issue 10): odd paths, concurrent seeders, file modes.

* A data dir whose path holds ``?``, ``%``, ``#``, spaces or non-ASCII keeps its database
  inside it: the default URL is built by ``rewardseal_server.sqlstore.sqlite_url``, never an
  f-string (``?`` used to start a query and put the database in the parent directory).
* Two ``--seed-mockmed`` starts on one empty data dir both succeed and agree (seeding holds an
  exclusive lock in the data dir; the second used to die on "certificate.json ... different
  content").
* Stores, keys and tokens are 0600 and data and key directories 0700, whatever the umask.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url
from support.mockmed_episodes import descriptor
from worker.conftest import start_stack, stop_stack

from rewardseal_control.app import start_control
from rewardseal_control.settings import resolve_settings as resolve_control_settings
from rewardseal_server.sqlstore import sqlite_url
from rewardseal_worker.settings import resolve_settings as resolve_worker_settings

ODD_NAMES = [
    pytest.param("data?mode=memory&x=1", id="question-mark"),
    pytest.param("data%3Fx%2Fy%41", id="percent"),
    pytest.param("data#fragment", id="hash"),
    pytest.param("data with spaces", id="spaces"),
    pytest.param("dätä-ünïcødé-数据", id="non-ascii"),
]

SECRET_FILE_MODE = 0o600
PRIVATE_DIR_MODE = 0o700


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """Run with umask 022 (files 0644 by default), so the modes asserted are the code's."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


# --- odd paths -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ODD_NAMES)
def test_sqlite_url_keeps_any_path_literal(tmp_path: Path, name: str) -> None:
    path = tmp_path / name / "worker.sqlite"
    url = sqlite_url(path)
    parsed = make_url(url)
    assert parsed.database == str(path)
    assert not parsed.query
    # Passed on as a string (a flag, an environment variable) it still names the same file.
    assert make_url(make_url(url).render_as_string(hide_password=False)).database == str(path)


@pytest.mark.parametrize("name", ODD_NAMES)
async def test_worker_keeps_its_database_inside_an_odd_data_dir(
    seeded_template: Path, tmp_path: Path, name: str
) -> None:
    outer = tmp_path / "outer"
    data_dir = outer / name
    shutil.copytree(seeded_template, data_dir)
    before = sorted(outer.iterdir())
    stack = await start_stack(data_dir)
    try:
        database = data_dir / "worker.sqlite"
        assert stack.app.store.engine.url.database == str(database)
        identity = {"patient_id": "patient-odd-0001"}
        await stack.client.score(
            descriptor(stack.digest, "episode.odd.0001", oracle_identity=identity)
        )
        assert database.is_file()
        assert stack.app.store.receipt_by_episode("episode.odd.0001") is not None
    finally:
        await stop_stack(stack)
    assert sorted(outer.iterdir()) == before, "nothing may be created beside the data dir"
    # The default URL survives the environment: the same file again.
    settings = resolve_worker_settings(
        data_dir=data_dir, env={"REWARDSEAL_WORKER_DB_URL": stack.app.settings.db_url}
    )
    assert make_url(settings.db_url).database == str(database)


@pytest.mark.parametrize("name", ODD_NAMES)
async def test_control_keeps_its_database_inside_an_odd_data_dir(tmp_path: Path, name: str) -> None:
    outer = tmp_path / "outer"
    outer.mkdir()
    data_dir = outer / name
    app = await start_control(resolve_control_settings(data_dir=data_dir, port=0, env={}))
    try:
        assert (data_dir / "control.sqlite").is_file()
    finally:
        await app.stop()
    assert sorted(outer.iterdir()) == [data_dir]


# --- concurrent seeders ----------------------------------------------------------------------

SEEDER = """
import json, sys
from pathlib import Path
from rewardseal.core.contract import certificate_digest
from rewardseal.core.signing import SigningKey
from rewardseal_worker.seed import seed_mockmed
from rewardseal_worker.settings import KEY_FILE
data_dir = Path(sys.argv[1])
key = SigningKey.load_or_create(data_dir / KEY_FILE)
result = seed_mockmed(data_dir, key=key, trials=300)
print(json.dumps({
    "contract": result.contract_digest,
    "rest": result.rest_contract_digest,
    "tier0": result.tier0_contract_digest,
    "certificate": certificate_digest(result.certificate),
    "key": key.key_id,
}))
"""


def test_concurrent_seeders_on_one_empty_dir_both_succeed_and_agree(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    seeders = [
        subprocess.Popen(
            [sys.executable, "-c", SEEDER, str(data_dir)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    answers = []
    for seeder in seeders:
        out, err = seeder.communicate(timeout=300)
        assert seeder.returncode == 0, err[-2000:]
        answers.append(json.loads(out))
    assert all(answer == answers[0] for answer in answers)
    certificate = json.loads(
        (data_dir / "contracts" / "mockmed" / "certificate.json").read_text(encoding="utf-8")
    )
    assert certificate


# --- file modes ------------------------------------------------------------------------------


async def test_worker_files_are_private_after_a_seeded_start(
    tmp_path: Path, loose_umask: None
) -> None:
    from rewardseal_worker.app import start_worker

    data_dir = tmp_path / "fresh" / "worker"
    settings = resolve_worker_settings(data_dir=data_dir, port=0, seed_mockmed=True, env={})
    app = await start_worker(settings)
    try:
        # A write, so that SQLite has made its -wal and -shm files.
        app.store.ping()
        files = [
            data_dir / "worker.sqlite",
            data_dir / "token",
            data_dir / "keys" / "worker.ed25519",
            data_dir / "mockmed" / "mockmed.sqlite",
        ]
        files += [
            path
            for path in data_dir.rglob("*.sqlite-*")
            if path.name.endswith(("-wal", "-shm", "-journal"))
        ]
        assert any(path.name.endswith("-wal") for path in files)
        for path in files:
            assert mode(path) == SECRET_FILE_MODE, path
        for directory in (data_dir, data_dir.parent, data_dir / "keys", data_dir / "mockmed"):
            assert mode(directory) == PRIVATE_DIR_MODE, directory
    finally:
        await app.stop()


async def test_control_files_are_private_after_a_start(tmp_path: Path, loose_umask: None) -> None:
    data_dir = tmp_path / "fresh" / "control"
    app = await start_control(resolve_control_settings(data_dir=data_dir, port=0, env={}))
    try:
        for path in [data_dir / "control.sqlite", *data_dir.glob("control.sqlite-*")]:
            assert mode(path) == SECRET_FILE_MODE, path
        for path in data_dir.glob("*token"):
            assert mode(path) == SECRET_FILE_MODE, path
        assert mode(data_dir / "keys" / "organization.ed25519") == SECRET_FILE_MODE
        for directory in (data_dir, data_dir / "keys"):
            assert mode(directory) == PRIVATE_DIR_MODE, directory
    finally:
        await app.stop()


def test_an_existing_data_dir_keeps_its_mode(tmp_path: Path) -> None:
    """An operator's directory (a mount point, a volume) is not changed under them."""
    data_dir = tmp_path / "mounted"
    data_dir.mkdir()
    data_dir.chmod(0o750)
    resolve_worker_settings(data_dir=data_dir, env={})
    assert mode(data_dir) == 0o750
    assert mode(data_dir / "token") == SECRET_FILE_MODE
