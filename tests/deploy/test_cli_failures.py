"""Every start-up failure of worker, control plane and MockMed: one line on stderr naming the
cause and the fix, no traceback, no credential, exit status 2 (usage, settings) or 1 (runtime).

One case per service runs the real console script as a subprocess, all three at once (a start
costs seconds on a loaded machine): they prove the process-level promise, stderr being exactly
one line. The others call each service's ``main()`` in this process with ``capfd``, which
captures file descriptor 2 itself, so a line gRPC's C core or a logger wrote there would show.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rewardseal.core.errors import Unavailable, ValidationError
from rewardseal_control.cli import main as control_main
from rewardseal_mockmed.cli import main as mockmed_main
from rewardseal_server.cli_failures import (
    EXIT_RUNTIME,
    EXIT_USAGE,
    TRACEBACK_ENV,
    database_cause,
    describe,
    mask_credentials,
    run_cli,
)
from rewardseal_server.sqlstore import StoreEngine
from rewardseal_worker.cli import main as worker_main

BIN = Path(sys.executable).parent
SECRET = "s3cret-pw"
ABSENT_ADDRESS = "192.0.2.55"
"""TEST-NET-1 (RFC 5737): never an address of this host."""
MOCKMED_TOKEN = "mockmed-token-" + "m" * 24
PREFIXES = ("REWARDSEAL_", "MOCKMED_")


def closed_port() -> int:
    """A loopback port nothing listens on (connecting is refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def refusing_url(port: int) -> str:
    return f"postgresql://rewardseal:{SECRET}@127.0.0.1:{port}/nowhere"


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any service variable, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIXES)}
    return {**env, **extra}


@pytest.fixture(autouse=True)
def no_service_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(PREFIXES):
            monkeypatch.delenv(name)


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory: pytest.TempPathFactory, seeded_template: Path) -> Path:
    """A worker data dir with the seeded bundles (so the worker gets as far as the failure)."""
    target = tmp_path_factory.mktemp("cli-failures") / "worker"
    shutil.copytree(seeded_template, target)
    return target


def assert_one_line(stderr: str, *expected: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    assert SECRET not in stderr
    for part in expected:
        assert part in lines[0], lines[0]
    return lines[0]


# ---------------------------------------------------------------------- the real scripts


@dataclass(frozen=True)
class Case:
    """A command line that must fail, and what its one line must say."""

    argv: list[str]
    env: dict[str, str]
    status: int
    expected: tuple[str, ...]


def subprocess_cases(data_dir: Path, tmp: Path) -> dict[str, Case]:
    refused = closed_port()
    mockmed_env = {"MOCKMED_TOKEN": MOCKMED_TOKEN}
    return {
        "worker database refuses": Case(
            ["rewardseal-worker", "serve", "--data-dir", str(data_dir), "--port", "0",
             "--db-url", refusing_url(refused)],
            {},
            EXIT_RUNTIME,
            ("worker store unavailable", f"connection refused at 127.0.0.1:{refused}",
             "$REWARDSEAL_WORKER_DB_URL"),
        ),
        "control host absent": Case(
            ["rewardseal-control", "serve", "--data-dir", str(tmp / "control"),
             "--host", ABSENT_ADDRESS, "--port", "0"],
            {},
            EXIT_USAGE,
            (f"cannot listen on {ABSENT_ADDRESS}:0", "not an address of this host", "--host"),
        ),
        "mockmed url malformed": Case(
            ["rewardseal-mockmed", "serve", "--port", "0", "--db-url", "not-a-url"],
            mockmed_env,
            EXIT_USAGE,
            ("malformed MockMed database URL", "sqlite:///", "postgresql://"),
        ),
    }  # fmt: skip


@pytest.fixture(scope="module")
def script_results(
    bundle_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[Case, subprocess.CompletedProcess[str]]]:
    """Every subprocess case, started together and run to its end."""
    tmp = tmp_path_factory.mktemp("cli-scripts")
    cases = subprocess_cases(bundle_dir, tmp)
    running = {
        name: subprocess.Popen(
            [str(BIN / case.argv[0]), *case.argv[1:]],
            env=clean_env(**case.env),
            cwd=tmp,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, case in cases.items()
    }
    results = {}
    try:
        for name, proc in running.items():
            out, err = proc.communicate(timeout=120)
            results[name] = (
                cases[name],
                subprocess.CompletedProcess(proc.args, proc.returncode, out, err),
            )
    finally:
        for proc in running.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return results


@pytest.mark.parametrize(
    "name",
    [
        "worker database refuses",
        "control host absent",
        "mockmed url malformed",
    ],
)
def test_the_script_fails_in_one_line(
    script_results: dict[str, tuple[Case, subprocess.CompletedProcess[str]]], name: str
) -> None:
    case, done = script_results[name]
    assert done.returncode == case.status, done.stderr
    line = assert_one_line(done.stderr, *case.expected)
    assert line.startswith(f"{case.argv[0]}: ")


# ---------------------------------------------------------------------- every case, in-process

Main = Callable[[list[str]], int]


def run_main(capfd: pytest.CaptureFixture[str], main: Main, argv: list[str]) -> tuple[int, str]:
    code = main(argv)
    return code, capfd.readouterr().err


SERVICES: dict[str, tuple[Main, str, str]] = {
    # main, the port variable, the database URL variable
    "worker": (worker_main, "REWARDSEAL_WORKER_PORT", "REWARDSEAL_WORKER_DB_URL"),
    "control": (control_main, "REWARDSEAL_CONTROL_PORT", "REWARDSEAL_CONTROL_DB_URL"),
    "mockmed": (mockmed_main, "MOCKMED_PORT", "MOCKMED_DB_URL"),
}


def serve_argv(service: str, bundle_dir: Path, tmp_path: Path) -> list[str]:
    if service == "worker":
        work = tmp_path / "worker"
        if not work.exists():
            shutil.copytree(bundle_dir, work)
        return ["serve", "--data-dir", str(work)]
    if service == "control":
        return ["serve", "--data-dir", str(tmp_path / "control")]
    return ["serve", "--db-url", f"sqlite:///{tmp_path / 'mockmed.db'}"]


@pytest.fixture
def mockmed_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOCKMED_TOKEN", MOCKMED_TOKEN)


@pytest.mark.usefixtures("mockmed_token")
@pytest.mark.parametrize("service", sorted(SERVICES))
@pytest.mark.parametrize("value", ["abc", "70000", "-1"])
def test_a_port_variable_that_is_no_port(
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    bundle_dir: Path,
    tmp_path: Path,
    service: str,
    value: str,
) -> None:
    main, port_env, _ = SERVICES[service]
    monkeypatch.setenv(port_env, value)
    code, err = run_main(capfd, main, serve_argv(service, bundle_dir, tmp_path))
    assert code == EXIT_USAGE
    assert_one_line(err, f"{port_env} must be a whole number from 0 to 65535", repr(value))


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("REWARDSEAL_WORKER_CALIBRATION_TRIALS", "many", "must be a whole number of at least 1"),
        ("REWARDSEAL_WORKER_MAX_POLICY_UPDATE_JUMP", "-3", "must be a whole number of at least 0"),
        ("REWARDSEAL_WORKER_MAX_POLICY_LAG", "1.5", "must be a whole number from 0 to"),
        ("REWARDSEAL_WORKER_EPISODE_TTL_SECONDS", "soon", "must be a number"),
        ("REWARDSEAL_WORKER_PROCESSES", "two", "must be a whole number"),
        ("REWARDSEAL_WORKER_INLINE_BATCH", "-1", "must be a whole number from 0 to 1024"),
    ],
)
def test_the_worker_numeric_variables(
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    bundle_dir: Path,
    tmp_path: Path,
    name: str,
    value: str,
    expected: str,
) -> None:
    monkeypatch.setenv(name, value)
    code, err = run_main(capfd, worker_main, serve_argv("worker", bundle_dir, tmp_path))
    assert code == EXIT_USAGE
    assert_one_line(err, f"rewardseal-worker: {name} {expected}")


@pytest.mark.parametrize("value", ["-1", "1.5", "two"])
def test_a_policy_lag_flag_that_is_no_whole_number(
    capfd: pytest.CaptureFixture[str], bundle_dir: Path, tmp_path: Path, value: str
) -> None:
    """``--max-policy-lag`` is read by the settings, not argparse: one line naming the flag."""
    argv = [*serve_argv("worker", bundle_dir, tmp_path), "--max-policy-lag", value]
    code, err = run_main(capfd, worker_main, argv)
    assert code == EXIT_USAGE
    assert_one_line(
        err, "rewardseal-worker: --max-policy-lag must be a whole number from 0 to", repr(value)
    )


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        (["--metrics-port", "65534"], {}, "--metrics-port 65534 with 4 server processes"),
        ([], {"REWARDSEAL_WORKER_METRICS_PORT": "65533"}, "REWARDSEAL_WORKER_METRICS_PORT 65533"),
    ],
    ids=["flag", "variable"],
)
def test_a_metrics_port_range_past_65535_is_refused(
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    argv: list[str],
    env: dict[str, str],
    expected: str,
) -> None:
    """Process i of ``--processes N`` serves metrics on P + i: P + N - 1 must be a port."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    data_dir = tmp_path / "never-made"
    serve = ["serve", "--data-dir", str(data_dir), "--port", "0", "--processes", "4", *argv]
    code, err = run_main(capfd, worker_main, serve)
    assert code == EXIT_USAGE
    assert_one_line(err, f"rewardseal-worker: {expected}", "past 65535", "at most 65532")
    assert not data_dir.exists(), "refused, yet it made the data dir"


def test_a_metrics_port_range_that_ends_at_65535_is_accepted(tmp_path: Path) -> None:
    from rewardseal_worker.settings import resolve_settings

    env = {"REWARDSEAL_WORKER_TOKEN": "t" * 24}
    settings = resolve_settings(data_dir=tmp_path / "w", processes=4, metrics_port=65532, env=env)
    assert settings.metrics_port == 65532
    # 0 (a free port for each process) has no range to check.
    assert resolve_settings(data_dir=tmp_path / "w", processes=64, metrics_port=0, env=env)
    assert resolve_settings(data_dir=tmp_path / "w", processes=1, metrics_port=65535, env=env)


@pytest.mark.usefixtures("mockmed_token")
@pytest.mark.parametrize("service", sorted(SERVICES))
def test_a_host_address_this_host_lacks(
    capfd: pytest.CaptureFixture[str], bundle_dir: Path, tmp_path: Path, service: str
) -> None:
    main, _, _ = SERVICES[service]
    argv = [*serve_argv(service, bundle_dir, tmp_path), "--host", ABSENT_ADDRESS, "--port", "0"]
    code, err = run_main(capfd, main, argv)
    assert code == EXIT_USAGE
    assert_one_line(
        err,
        f"cannot listen on {ABSENT_ADDRESS}:0: cannot assign requested address",
        "pass --host 127.0.0.1",
    )


@pytest.mark.usefixtures("mockmed_token")
@pytest.mark.parametrize("service", sorted(SERVICES))
def test_a_database_that_refuses_connections(
    capfd: pytest.CaptureFixture[str], bundle_dir: Path, tmp_path: Path, service: str
) -> None:
    main, _, db_env = SERVICES[service]
    port = closed_port()
    argv = [*serve_argv(service, bundle_dir, tmp_path), "--port", "0"]
    argv += ["--db-url", refusing_url(port)]
    code, err = run_main(capfd, main, argv)
    assert code == EXIT_RUNTIME
    assert_one_line(err, f"connection refused at 127.0.0.1:{port}", f"${db_env}")


@pytest.mark.usefixtures("mockmed_token")
@pytest.mark.parametrize("service", sorted(SERVICES))
@pytest.mark.parametrize("url", ["not-a-url", f"mysql://root:{SECRET}@db/x"])
def test_a_database_url_that_is_no_store_url(
    capfd: pytest.CaptureFixture[str], bundle_dir: Path, tmp_path: Path, service: str, url: str
) -> None:
    main, _, _ = SERVICES[service]
    argv = [*serve_argv(service, bundle_dir, tmp_path), "--port", "0", "--db-url", url]
    code, err = run_main(capfd, main, argv)
    assert code == EXIT_USAGE
    assert_one_line(err, "sqlite:///path/to/file.db", "postgresql://USER:PASSWORD@HOST:5432/DBNAME")


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port another program listens on."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        yield int(other.getsockname()[1])


@pytest.mark.usefixtures("mockmed_token")
@pytest.mark.parametrize(
    ("service", "flag"),
    [
        ("worker", "--port"),
        ("worker", "--http-port"),
        ("worker", "--metrics-port"),
        ("control", "--port"),
        ("control", "--http-port"),
        ("control", "--metrics-port"),
        ("mockmed", "--port"),
    ],
)
def test_a_taken_port_names_its_own_flag(
    capfd: pytest.CaptureFixture[str],
    bundle_dir: Path,
    tmp_path: Path,
    taken_port: int,
    service: str,
    flag: str,
) -> None:
    """R-W-11: the fix names the option that chose the port (a taken --http-port used to say
    "choose another --port")."""
    main, _, _ = SERVICES[service]
    others = [] if flag == "--port" else ["--port", "0"]
    argv = [*serve_argv(service, bundle_dir, tmp_path), *others, flag, str(taken_port)]
    code, err = run_main(capfd, main, argv)
    assert code == EXIT_USAGE
    line = assert_one_line(
        err, f"cannot listen on 127.0.0.1:{taken_port}: the port is in use by another process"
    )
    assert line.endswith(f"(stop that process, or choose another {flag})"), line


def test_bad_db_url_fails_before_seeding(capfd: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Every setting is checked before any work (R-W-14): ``--seed-mockmed`` with a malformed
    store URL used to seed MockMed (four progress lines, a calibration) and only then refuse."""
    data_dir = tmp_path / "fresh"
    argv = ["serve", "--seed-mockmed", "--data-dir", str(data_dir), "--port", "0"]
    code, err = run_main(capfd, worker_main, [*argv, "--db-url", "not-a-url"])
    assert code == EXIT_USAGE
    assert_one_line(err, "malformed worker store URL", "sqlite:///path/to/file.db")
    assert not data_dir.exists(), sorted(p.name for p in data_dir.rglob("*"))


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        (["--tls-cert", "{tmp}/missing.pem", "--tls-key", "{tmp}/missing.key"], {}, "missing"),
        (["--trust-org-key", "not-a-key"], {}, "not-a-key"),
        ([], {"REWARDSEAL_WORKER_EPISODE_TTL_SECONDS": "soon"}, "must be a number"),
        ([], {"REWARDSEAL_WORKER_CONTROL": "127.0.0.1:1"}, "REWARDSEAL_WORKER_CONTROL_TOKEN"),
    ],
)
def test_a_bad_setting_writes_nothing_in_the_data_dir(
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    argv: list[str],
    env: dict[str, str],
    expected: str,
) -> None:
    """Neither the data dir, nor its token, nor the worker key are made for a start that a
    setting refuses."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    data_dir = tmp_path / "fresh"
    given = [part.format(tmp=tmp_path) for part in argv]
    code, err = run_main(
        capfd, worker_main, ["serve", "--data-dir", str(data_dir), "--port", "0", *given]
    )
    assert code == EXIT_USAGE
    assert_one_line(err, expected)
    assert not data_dir.exists(), sorted(p.name for p in data_dir.rglob("*"))


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--db-url", "not-a-url"], "malformed control store URL"),
        (["--revocation-ttl", "0s"], "must be positive"),
    ],
)
def test_a_bad_control_setting_writes_nothing_in_the_data_dir(
    capfd: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], expected: str
) -> None:
    """Control too checks every setting before it makes its data dir, tokens or organization
    key (R-W-14's rule on control's side): a malformed store URL used to leave all three."""
    data_dir = tmp_path / "fresh"
    code, err = run_main(
        capfd, control_main, ["serve", "--data-dir", str(data_dir), "--port", "0", *argv]
    )
    assert code == EXIT_USAGE
    assert_one_line(err, expected)
    assert not data_dir.exists(), sorted(p.name for p in data_dir.rglob("*"))


def test_an_admin_command_whose_control_plane_does_not_answer(
    capfd: pytest.CaptureFixture[str],
) -> None:
    target = f"127.0.0.1:{closed_port()}"
    argv = ["keys", "list", "--target", target, "--token", "t" * 24, "--timeout", "5"]
    code, err = run_main(capfd, control_main, argv)
    assert code == EXIT_RUNTIME
    assert_one_line(
        err,
        f"rewardseal-control: cannot reach the control plane at {target}: ",
        "Connection refused",
        "--target HOST:PORT or $REWARDSEAL_CONTROL_TARGET",
    )


def test_a_worker_data_dir_without_a_bundle(
    capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, err = run_main(capfd, worker_main, ["serve", "--data-dir", str(tmp_path / "fresh")])
    assert code == EXIT_USAGE
    assert_one_line(
        err, f"no contract bundle at {tmp_path / 'fresh'}", "--contract", "--seed-mockmed"
    )
    assert not (tmp_path / "fresh" / "keys").exists(), "no key is made for a start refused"


# ---------------------------------------------------------------------- the rules themselves


def test_passwords_are_masked_in_any_url() -> None:
    text = f"postgresql+psycopg://rewardseal:{SECRET}@postgres:5432/x and http://a:b@c/"
    assert mask_credentials(text) == (
        "postgresql+psycopg://rewardseal:***@postgres:5432/x and http://a:***@c/"
    )
    # The placeholder of an expected form is no secret.
    assert (
        mask_credentials("postgresql://USER:PASSWORD@HOST/DB")
        == "postgresql://USER:PASSWORD@HOST/DB"
    )


def test_the_cause_of_a_refused_connection_is_kept_and_the_password_is_not() -> None:
    port = closed_port()
    engine = StoreEngine(refusing_url(port), what="test store")
    with pytest.raises(Unavailable) as caught:
        engine.ping()
    assert database_cause(caught.value) == f"connection refused at 127.0.0.1:{port}"
    failure = describe(caught.value, db_env="X_DB_URL")
    assert failure.status == EXIT_RUNTIME
    assert failure.message.startswith(
        f"test store unavailable: connection refused at 127.0.0.1:{port}"
    )
    assert SECRET not in failure.message


def test_an_unexpected_error_is_one_line_and_the_traceback_is_opt_in(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken() -> int:
        raise KeyError(f"postgresql://u:{SECRET}@h/d")

    assert run_cli("prog", broken, err=sys.stderr) == EXIT_RUNTIME
    err = capfd.readouterr().err
    line = assert_one_line(err, "prog: unexpected error (KeyError", f"{TRACEBACK_ENV}=1")
    assert "u:***@h" in line
    monkeypatch.setenv(TRACEBACK_ENV, "1")
    assert run_cli("prog", broken, err=sys.stderr) == EXIT_RUNTIME
    assert "Traceback" in capfd.readouterr().err


def test_settings_errors_are_usage_and_interrupts_are_quiet(
    capfd: pytest.CaptureFixture[str],
) -> None:
    def refuse() -> int:
        raise ValidationError("bad setting")

    def interrupted() -> int:
        raise KeyboardInterrupt

    assert run_cli("prog", refuse, err=sys.stderr) == EXIT_USAGE
    assert capfd.readouterr().err == "prog: bad setting\n"
    assert run_cli("prog", interrupted, err=sys.stderr) == 130
    assert capfd.readouterr().err == ""
