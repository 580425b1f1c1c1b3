"""Control settings (flags > environment > defaults, 0600 token files) and start-up key rules."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from support.control_store import list_audit

from rewardseal.core.errors import ValidationError
from rewardseal.core.signing import SigningKey
from rewardseal.v1.enums_pb2 import IssuerKeyRole
from rewardseal_control.app import ensure_organization_key, ensure_worker_enrollment
from rewardseal_control.settings import (
    ADMIN_TOKEN_ENV,
    CONSOLE_TRUSTED_PROXIES_ENV,
    DEFAULT_PORT,
    DEFAULT_REVOCATION_TTL,
    HTTP_PORT_ENV,
    TOKEN_ENV,
    WORKER_ENROLLMENT_ACCEPTS_ENV,
    WORKER_ENROLLMENT_ENV,
    parse_duration,
    resolve_settings,
)
from rewardseal_control.store import ControlStore


def test_defaults_make_0600_token_files_once(tmp_path: Path) -> None:
    settings = resolve_settings(data_dir=tmp_path, env={})
    assert settings.port == DEFAULT_PORT
    assert settings.db_url == f"sqlite:///{tmp_path.resolve() / 'control.sqlite'}"
    assert settings.revocation_ttl == DEFAULT_REVOCATION_TTL
    assert settings.admin_token != settings.token
    for name in ("admin_token", "token"):
        assert (os.stat(tmp_path / name).st_mode & 0o777) == 0o600
    again = resolve_settings(data_dir=tmp_path, env={})
    assert (again.admin_token, again.token) == (settings.admin_token, settings.token)
    assert settings.admin_token not in repr(settings)
    assert settings.token not in repr(settings)
    assert settings.key_path == tmp_path.resolve() / "keys" / "organization.ed25519"


def test_flags_win_over_environment(tmp_path: Path) -> None:
    env = {
        ADMIN_TOKEN_ENV: "admin-" + "x" * 20,
        TOKEN_ENV: "client-" + "y" * 20,
        "REWARDSEAL_CONTROL_PORT": "9999",
        "REWARDSEAL_CONTROL_DB_URL": "sqlite:////tmp/from-env.sqlite",
        "REWARDSEAL_CONTROL_REVOCATION_TTL": "2h",
    }
    from_env = resolve_settings(data_dir=tmp_path, env=env)
    assert (from_env.port, from_env.db_url) == (9999, "sqlite:////tmp/from-env.sqlite")
    assert from_env.revocation_ttl == timedelta(hours=2)
    assert from_env.admin_token == env[ADMIN_TOKEN_ENV]
    assert from_env.admin_token_source == f"${ADMIN_TOKEN_ENV}"
    assert not (tmp_path / "admin_token").exists()
    flagged = resolve_settings(
        data_dir=tmp_path,
        port=0,
        db_url="sqlite:////tmp/flag.sqlite",
        revocation_ttl=timedelta(minutes=5),
        env=env,
    )
    assert (flagged.port, flagged.db_url) == (0, "sqlite:////tmp/flag.sqlite")
    assert flagged.revocation_ttl == timedelta(minutes=5)


@pytest.mark.parametrize(
    "env",
    [
        {ADMIN_TOKEN_ENV: "short"},
        {ADMIN_TOKEN_ENV: "same-token-" + "z" * 20, TOKEN_ENV: "same-token-" + "z" * 20},
        {"REWARDSEAL_CONTROL_PORT": "70000"},
        {"REWARDSEAL_CONTROL_REVOCATION_TTL": "-5m"},
    ],
    ids=["short-token", "equal-tokens", "port", "ttl"],
)
def test_bad_settings_are_refused(tmp_path: Path, env: dict[str, str]) -> None:
    with pytest.raises(ValidationError):
        resolve_settings(data_dir=tmp_path, env=env)


def test_a_token_file_others_can_read_is_refused(tmp_path: Path) -> None:
    resolve_settings(data_dir=tmp_path, env={})
    os.chmod(tmp_path / "admin_token", 0o644)
    with pytest.raises(ValidationError, match="chmod 600"):
        resolve_settings(data_dir=tmp_path, env={})


@pytest.mark.parametrize(
    ("text", "expected"),
    [("90s", 90), ("15m", 900), ("24h", 86400), ("7d", 604800), ("30", 30)],
)
def test_parse_duration(text: str, expected: int) -> None:
    assert parse_duration(text) == timedelta(seconds=expected)


def test_parse_duration_refuses_nonsense() -> None:
    for text in ("", "soon", "0s", "-1h"):
        with pytest.raises(ValidationError):
            parse_duration(text)


def test_organization_key_registered_once_and_a_retired_key_stays_retired(tmp_path: Path) -> None:
    key = SigningKey.generate()
    with ControlStore(f"sqlite:///{tmp_path / 'control.sqlite'}") as store:
        first = ensure_organization_key(store, key)
        assert first.role == IssuerKeyRole.ISSUER_KEY_ROLE_ORGANIZATION
        assert not first.retired
        assert ensure_organization_key(store, key) == first
        store.keys.retire_issuer_key(key.key_id, "admin", "rotated out")
        # A restart must not bring a retired key back into service.
        assert ensure_organization_key(store, key).retired
        organization = IssuerKeyRole.ISSUER_KEY_ROLE_ORGANIZATION
        assert [k.key_id for k in store.keys.list_issuer_keys(organization).items] == [key.key_id]


BOOTSTRAP = "compose-enrollment-" + "e" * 24


@pytest.mark.parametrize(
    ("value", "expected"), [("1", True), ("true", True), (" YES ", True), ("0", False), ("", False)]
)
def test_the_bootstrap_enrollment_accepts_the_bundle_certificate_only_when_told(
    tmp_path: Path, value: str, expected: bool
) -> None:
    env = {WORKER_ENROLLMENT_ENV: BOOTSTRAP, WORKER_ENROLLMENT_ACCEPTS_ENV: value}
    settings = resolve_settings(data_dir=tmp_path / "data", env=env)
    assert settings.worker_enrollment_accepts_bundle_certificate is expected
    assert not resolve_settings(
        data_dir=tmp_path / "data", env={WORKER_ENROLLMENT_ENV: BOOTSTRAP}
    ).worker_enrollment_accepts_bundle_certificate
    with ControlStore(f"sqlite:///{tmp_path / 'control.sqlite'}") as store:
        ensure_worker_enrollment(store, BOOTSTRAP, accept_bundle_certificate=expected)
        [entry] = [e for e in list_audit(store).items if e.action == "enrollment.create"]
        assert entry.details["accepts_bundle_certificate"] is expected


@pytest.mark.parametrize(
    ("env", "message"),
    [
        # A typo is refused, never read as either answer, before anything is made.
        (
            {WORKER_ENROLLMENT_ENV: BOOTSTRAP, WORKER_ENROLLMENT_ACCEPTS_ENV: "ture"},
            f"{WORKER_ENROLLMENT_ACCEPTS_ENV} must be 1 or 0",
        ),
        # It says what the bootstrap credential accepts: alone it would silently do nothing.
        ({WORKER_ENROLLMENT_ACCEPTS_ENV: "1"}, f"{WORKER_ENROLLMENT_ENV} is not"),
    ],
)
def test_a_bad_bootstrap_acceptance_setting_is_refused_before_any_work(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        resolve_settings(data_dir=tmp_path / "data", env=env)
    assert not (tmp_path / "data").exists()


def test_console_trusted_proxies_come_from_the_flags_or_the_environment(tmp_path: Path) -> None:
    env = {CONSOLE_TRUSTED_PROXIES_ENV: "127.0.0.1, 10.0.0.0/8,::1", HTTP_PORT_ENV: "0"}
    assert resolve_settings(data_dir=tmp_path, env={}).console_trusted_proxies == ()
    from_env = resolve_settings(data_dir=tmp_path, env=env).console_trusted_proxies
    assert [str(network) for network in from_env] == ["127.0.0.1/32", "10.0.0.0/8", "::1/128"]
    flagged = resolve_settings(data_dir=tmp_path, env=env, console_trusted_proxies=["10.1.2.3"])
    assert [str(network) for network in flagged.console_trusted_proxies] == ["10.1.2.3/32"]


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("proxy.example", "'proxy.example' is not an IP address or network"),
        ("10.0.0.1/8", "'10.0.0.1/8' is not an IP address or network"),
        ("10.0.0.0/33", "is not an IP address or network"),
        ("0.0.0.0/0", "would trust every client's X-Forwarded-For"),
        ("::/0", "would trust every client's X-Forwarded-For"),
    ],
)
def test_a_bad_console_trusted_proxy_is_refused_at_start(
    tmp_path: Path, entry: str, message: str
) -> None:
    with pytest.raises(ValidationError, match=message) as flag:
        resolve_settings(data_dir=tmp_path, env={}, http_port=0, console_trusted_proxies=[entry])
    assert str(flag.value).startswith("--console-trusted-proxy: ")
    env = {CONSOLE_TRUSTED_PROXIES_ENV: f"127.0.0.1,{entry}", HTTP_PORT_ENV: "0"}
    with pytest.raises(ValidationError, match=message) as variable:
        resolve_settings(data_dir=tmp_path, env=env)
    assert str(variable.value).startswith(f"{CONSOLE_TRUSTED_PROXIES_ENV}: ")


def test_a_console_trusted_proxy_without_the_console_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="applies to the console only"):
        resolve_settings(data_dir=tmp_path, env={}, console_trusted_proxies=["127.0.0.1"])


def test_serve_refuses_a_bad_trusted_proxy_in_one_line(tmp_path: Path) -> None:
    """The real command: refused before anything is served, one line on stderr, exit 2."""
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("rewardseal-control")),
            "serve",
            "--data-dir",
            str(tmp_path / "data"),
            "--port",
            "0",
            "--http-port",
            "0",
            "--console-trusted-proxy",
            "10.0.0.1/8",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith("REWARDSEAL_CONTROL_")},
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "rewardseal-control: --console-trusted-proxy: '10.0.0.1/8' is not an IP address or "
        "network (e.g. 127.0.0.1, 10.0.0.0/24, ::1)"
    ]
    assert done.stdout == ""
    assert not (tmp_path / "data").exists(), "refused before the data dir was made"
