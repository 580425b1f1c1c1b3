"""Settings shared by the services: data directory, port and 0600 bearer-token files."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from rewardseal.core.errors import ValidationError
from rewardseal_server.service_settings import (
    MIN_TOKEN_LENGTH,
    default_data_dir,
    env_flag,
    load_or_create_token,
    load_token,
    read_token_file,
    resolve_port,
)


def test_data_dir_comes_from_the_variable_else_home(tmp_path: Path) -> None:
    env = {"X_DATA_DIR": str(tmp_path)}
    assert default_data_dir(env, env_name="X_DATA_DIR", service="svc") == tmp_path
    assert default_data_dir({}, env_name="X_DATA_DIR", service="svc") == (
        Path.home() / ".rewardseal" / "svc"
    )
    assert default_data_dir({"X_DATA_DIR": ""}, env_name="X_DATA_DIR", service="svc") == (
        Path.home() / ".rewardseal" / "svc"
    )


def test_port_flag_beats_variable_beats_default() -> None:
    env = {"X_PORT": "9000"}
    assert resolve_port(0, env, env_name="X_PORT", default=1) == 0
    assert resolve_port(None, env, env_name="X_PORT", default=1) == 9000
    assert resolve_port(None, {}, env_name="X_PORT", default=1) == 1


@pytest.mark.parametrize("port", [-1, 65536])
def test_a_port_out_of_range_is_refused(port: int) -> None:
    with pytest.raises(ValidationError, match=f"port {port} is out of range"):
        resolve_port(port, {}, env_name="X_PORT", default=1)


def test_a_token_file_is_made_0600_once(tmp_path: Path) -> None:
    path = tmp_path / "deeper" / "token"
    token = load_or_create_token(path)
    assert len(token) >= MIN_TOKEN_LENGTH
    assert (os.stat(path).st_mode & 0o777) == 0o600
    assert path.read_text() == token + "\n"
    assert load_or_create_token(path) == token
    assert read_token_file(path) == token


def _race(path: Path, starters: int) -> list[str]:
    """``starters`` threads calling :func:`load_or_create_token` on ``path`` at one moment."""
    start = threading.Barrier(starters)
    tokens: list[str] = []

    def starter() -> None:
        start.wait()
        tokens.append(load_or_create_token(path))

    threads = [threading.Thread(target=starter) for _ in range(starters)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return tokens


def test_concurrent_starters_agree_on_one_token(tmp_path: Path) -> None:
    for round_ in range(20):
        path = tmp_path / f"token-{round_}"
        tokens = _race(path, 8)
        assert len(tokens) == 8
        assert set(tokens) == {path.read_text().strip()}
    # No temporary file is left behind.
    assert {p.name for p in tmp_path.iterdir()} == {f"token-{n}" for n in range(20)}


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644])
def test_a_token_file_others_can_read_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "token"
    path.write_text("t" * 32 + "\n")
    path.chmod(mode)
    with pytest.raises(ValidationError, match="must not be readable by group or others"):
        load_or_create_token(path)
    assert path.read_text() == "t" * 32 + "\n"


def test_a_short_token_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("short\n")
    path.chmod(0o600)
    with pytest.raises(ValidationError, match="holds no usable token"):
        read_token_file(path)


def test_a_missing_token_file_is_not_found_when_only_read(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_token_file(tmp_path / "token")


def test_the_variable_beats_the_file_and_names_its_source(tmp_path: Path) -> None:
    path = tmp_path / "token"
    env = {"X_TOKEN": "v" * MIN_TOKEN_LENGTH}
    assert load_token(env, env_name="X_TOKEN", path=path) == ("v" * MIN_TOKEN_LENGTH, "$X_TOKEN")
    assert not path.exists()
    token, source = load_token({}, env_name="X_TOKEN", path=path)
    assert source == str(path)
    assert token == read_token_file(path)


def test_a_short_variable_token_is_refused(tmp_path: Path) -> None:
    env = {"X_TOKEN": "v" * (MIN_TOKEN_LENGTH - 1)}
    with pytest.raises(ValidationError, match=f"X_TOKEN must have at least {MIN_TOKEN_LENGTH}"):
        load_token(env, env_name="X_TOKEN", path=tmp_path / "token")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("1", True), ("TRUE", True), (" yes ", True), ("on", True), ("0", False), ("off", False)],
)
def test_a_yes_no_setting_reads_the_usual_spellings(raw: str, expected: bool) -> None:
    assert env_flag({"X_FLAG": raw}, "X_FLAG") is expected


def test_a_yes_no_setting_unset_is_the_default_and_a_typo_is_refused() -> None:
    assert env_flag({}, "X_FLAG") is False
    assert env_flag({"X_FLAG": " "}, "X_FLAG", default=True) is True
    for typo in ("ture", "2", "y e s"):
        with pytest.raises(ValidationError, match="X_FLAG must be 1 or 0"):
            env_flag({"X_FLAG": typo}, "X_FLAG")
