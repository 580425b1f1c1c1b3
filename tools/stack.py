"""``make up`` / ``make status`` / ``make down``: the local stack as background processes.

    python tools/stack.py up [--run-dir DIR]       start control, the seeded worker, MockMed
    python tools/stack.py status [--run-dir DIR]   which are running and healthy (exit 1 if not all;
                                                   --not-up-ok: exit 0 when none is up)
    python tools/stack.py down [--run-dir DIR]     stop them (SIGTERM, then SIGKILL after 20 s)

``up`` starts, in order and each on a free loopback port (``--port 0`` and ``--ready-file``, so
no port is guessed): ``rewardseal-control serve`` (SQLite), ``rewardseal-worker serve
--seed-mockmed --control ... --trust-org-key ...`` (pins control's organization public key from
control's banner, registers its contract and its own key with control's *worker* credential,
admitted by a one-time enrollment credential ``up`` makes with the admin credential) and
``rewardseal-mockmed serve`` over the worker's seeded MockMed database, so a write made through
MockMed's REST API is what the worker's sql oracle reads. These are the console scripts and
subcommands the Docker images run (deploy/docker-compose.yml; tests/deploy checks both).

Everything lives in the run directory (default ``.run/``, git-ignored, mode 0700): one pid file
per service, ``logs/``, ``data/`` (keys, databases, seeded files and ``tokens.json``: kept across
``down``/``up``; delete the directory to start afresh) and ``stack.json`` (0600): ports, targets,
tokens, the contract digest and the worker's public key, for scripts. ``up`` prints how to call
the services. Services inherit no ``REWARDSEAL_*`` or ``MOCKMED_*`` variable from the caller's
environment, so a shell set up for another deployment cannot point the stack at it.

Why one file of about 780 lines: this is a script run by path (``python tools/stack.py``, and
``tools/demo.py`` imports it as ``stack``), and ``tests/deploy`` loads it by path too, so a
sibling module would need a ``sys.path`` change in every caller. What it shares with other code
(spawning a service, waiting for its ready file, the stop timeouts) lives in
:mod:`rewardseal_server.localstack`; what stays here is the stack's own: its order of start, pid
files, health checks, state file and the usage text it prints.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from rewardseal.core.errors import Unavailable
from rewardseal_server import localstack
from rewardseal_server.sqlstore import sqlite_url

if TYPE_CHECKING:
    from rewardseal.rpc.tls import ClientTls

REPO: Final = Path(__file__).resolve().parent.parent
DEFAULT_RUN_DIR: Final = REPO / ".run"
BIN: Final = localstack.BIN
"""Where the console scripts are: the virtual environment ``make up`` runs this file with."""
HOST: Final = localstack.HOST

CONTROL: Final = "control"
WORKER: Final = "worker"
MOCKMED: Final = "mockmed"
ORDER: Final = (CONTROL, WORKER, MOCKMED)
ENTRY_POINTS: Final[Mapping[str, tuple[str, str]]] = {
    CONTROL: ("rewardseal-control", "serve"),
    WORKER: ("rewardseal-worker", "serve"),
    MOCKMED: ("rewardseal-mockmed", "serve"),
}
"""Console script and subcommand of each service: the same ones the Docker images run."""
OPTIONAL: Final = frozenset({MOCKMED})
"""Services ``up`` skips (with a note) when their console script is not installed."""

START_TIMEOUT_SECONDS: Final[Mapping[str, float]] = {CONTROL: 60.0, WORKER: 300.0, MOCKMED: 60.0}
STOP_TIMEOUT_SECONDS: Final = localstack.STOP_TIMEOUT_SECONDS
POLL_SECONDS: Final = localstack.POLL_SECONDS
WORKER_CERTIFICATE_POLL_SECONDS: Final = "2"
"""How often the stack's worker reads control's certificates (the default is 30 s): the
certificate ``up`` issues is in use within seconds."""
CERTIFICATE_WAIT_SECONDS: Final = 60.0
TOKEN_NAMES: Final = (
    "control_admin",
    "control",
    "control_worker",
    "worker",
    "mockmed",
    "mockmed_admin",
)
CHECKPOINT: Final = "policy_checkpoint_mockmed_0"


class StackError(Exception):
    """Something the person running the stack must fix or look at (exit status 1)."""


# ---------------------------------------------------------------------- layout and commands


@dataclass(frozen=True)
class Layout:
    """Where a stack keeps its files."""

    run_dir: Path

    @property
    def state_file(self) -> Path:
        return self.run_dir / "stack.json"

    @property
    def tokens_file(self) -> Path:
        return self.run_dir / "data" / "tokens.json"

    def data(self, service: str) -> Path:
        return self.run_dir / "data" / service

    def pid_file(self, service: str) -> Path:
        return self.run_dir / f"{service}.pid"

    def ready_file(self, service: str) -> Path:
        return self.run_dir / f"{service}.ready.json"

    def log_file(self, service: str) -> Path:
        return self.run_dir / "logs" / f"{service}.log"

    @property
    def mockmed_database(self) -> Path:
        """The MockMed SQLite database ``--seed-mockmed`` writes: the SoR the worker reads."""
        return self.data(WORKER) / "mockmed" / "mockmed.sqlite"


def _entry(service: str) -> list[str]:
    script, subcommand = ENTRY_POINTS[service]
    return [str(BIN / script), subcommand]


def control_command(layout: Layout, extra: Sequence[str] = ()) -> list[str]:
    """``rewardseal-control serve`` on a free loopback port, SQLite in its data directory.

    ``extra``: more arguments (``--tls-cert``, ``--tls-key``, ``--tls-client-ca``: the stack
    itself stays plaintext on loopback).
    """
    return [
        *_entry(CONTROL),
        "--host",
        HOST,
        "--port",
        "0",
        "--data-dir",
        str(layout.data(CONTROL)),
        "--reflection",
        "--ready-file",
        str(layout.ready_file(CONTROL)),
        *extra,
    ]


def worker_command(
    layout: Layout,
    control_target: str | None,
    *,
    organization_key: str | None = None,
    seed: bool = True,
    data_dir: Path | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """``rewardseal-worker serve --seed-mockmed``, joined to the control plane.

    ``control_target`` None: a worker on its own; otherwise ``organization_key`` (control's
    ``organization_public_key``, hex, from its banner) is pinned with ``--trust-org-key``, the
    only key whose certificates and revocation lists the worker accepts; ``seed`` False: no
    ``--seed-mockmed``;
    ``data_dir``: another directory than the layout's; ``extra``: more arguments
    (``--contract``, ``--db-url``, ``--tls-cert``/``--tls-key``/``--tls-client-ca``).
    """
    return [
        *_entry(WORKER),
        *(["--seed-mockmed"] if seed else []),
        "--host",
        HOST,
        "--port",
        "0",
        "--data-dir",
        str(data_dir if data_dir is not None else layout.data(WORKER)),
        *_control_flags(control_target, organization_key),
        "--reflection",
        "--ready-file",
        str(layout.ready_file(WORKER)),
        *extra,
    ]


def _control_flags(control_target: str | None, organization_key: str | None) -> list[str]:
    """``--control`` and ``--trust-org-key`` (the worker refuses the first without the second).

    Raises:
        ValueError: a control target without the organization key to pin.
    """
    if control_target is None:
        return []
    if not organization_key:
        raise ValueError("a worker joined to control needs control's organization key to pin")
    return ["--control", control_target, "--trust-org-key", organization_key]


def mockmed_command(layout: Layout, screen_file: Path | None = None) -> list[str]:
    """``rewardseal-mockmed serve`` over the worker's seeded MockMed database.

    With ``screen_file`` MockMed also writes its screen dump there (what a tier-0 bundle reads).
    """
    screen = ["--screen-file", str(screen_file)] if screen_file is not None else []
    return [
        *_entry(MOCKMED),
        "--db-url",
        sqlite_url(layout.mockmed_database),
        *screen,
        "--host",
        HOST,
        "--port",
        "0",
        "--ready-file",
        str(layout.ready_file(MOCKMED)),
    ]


def service_env(service: str, tokens: Mapping[str, str]) -> dict[str, str]:
    """The variables ``service`` gets on top of the (filtered) caller's environment."""
    if service == CONTROL:
        return {
            "REWARDSEAL_CONTROL_ADMIN_TOKEN": tokens["control_admin"],
            "REWARDSEAL_CONTROL_TOKEN": tokens["control"],
            "REWARDSEAL_CONTROL_WORKER_TOKEN": tokens["control_worker"],
        }
    if service == WORKER:
        # Control's worker credential registers the worker's own key (no operator step); the
        # admin credential never leaves control's side.
        return {
            "REWARDSEAL_WORKER_TOKEN": tokens["worker"],
            "REWARDSEAL_WORKER_CONTROL_TOKEN": tokens["control_worker"],
            "REWARDSEAL_WORKER_CERTIFICATE_POLL_SECONDS": WORKER_CERTIFICATE_POLL_SECONDS,
        }
    if service == MOCKMED:
        return {"MOCKMED_TOKEN": tokens["mockmed"], "MOCKMED_ADMIN_TOKEN": tokens["mockmed_admin"]}
    raise ValueError(f"unknown service {service!r}")


def certify_worker(
    control_target: str, worker: Mapping[str, Any], tokens: Mapping[str, str]
) -> str | None:
    """The organization certificate the stack's linked worker scores under; its id.

    A worker joined to control certifies only under certificates control lists for its
    contract, never under its bundle's self-signed one (docs/spec.md R-C-9), so the stack does
    the operator's one admin step itself: on the first ``up`` it registers the worker's contract
    and issues a SYNTHETIC certificate from the seeded calibration (control's admin credential,
    which stays on this side). On a later ``up`` what control lists is kept: a certificate the
    operator revoked is not replaced behind their back (None: every listed one is revoked, and
    receipts stay uncertified until the operator issues another). Then it waits until the
    worker scores under one of them (``worker``: the worker's banner).

    Raises:
        StackError: the worker does not adopt a certificate in time.
    """
    from rewardseal.core.bundle_files import read_sealed_contract
    from rewardseal.core.calibration import read_calibration
    from rewardseal.core.signing import TrustSet
    from rewardseal.rpc.control_client import ControlClient, issue_certificate_request
    from rewardseal.rpc.worker_client import WorkerClient

    digest = str(worker["contract_digest"])
    bundle = Path(str(worker["contract_dir"]))
    with ControlClient(control_target, token=tokens["control_admin"]) as control:
        listed = [c.certificate_id for c in control.certificates(reward_contract_digest=digest)]
        usable = {i for i in listed if not control.get_certificate(i).revoked}
        if not listed:
            # Read as `rewardseal-control contracts register` reads it (R-C-14).
            control.register_contract(read_sealed_contract(bundle).contract, digest)
            answer = control.issue_certificate(
                issue_certificate_request(
                    digest,
                    read_calibration(bundle / "calibration.json"),
                    reason="local stack: the seeded worker's first certificate",
                )
            )
            usable = {answer.certificate.certificate_id}
    if not usable:
        return None
    trust = TrustSet([bytes.fromhex(str(worker["public_key"]))])
    deadline = time.monotonic() + CERTIFICATE_WAIT_SECONDS
    with WorkerClient(f"{HOST}:{worker['port']}", token=tokens["worker"], trust=trust) as client:
        while (in_use := client.health().certificate_id) not in usable:
            if time.monotonic() > deadline:
                raise StackError(
                    f"the worker did not adopt any of {sorted(usable)} within "
                    f"{CERTIFICATE_WAIT_SECONDS:.0f}s (see {worker.get('log', 'its log')})"
                )
            time.sleep(POLL_SECONDS)
    return in_use


def seeded_contract_digest() -> str:
    """The digest of the contract the seeded worker serves (the tier-2 sql MockMed bundle)."""
    from rewardseal.core.contract import contract_digest
    from rewardseal_mockmed.contract import mockmed_contract

    return contract_digest(mockmed_contract())


def worker_env(control_target: str, tokens: Mapping[str, str]) -> dict[str, str]:
    """The linked worker's variables, with a one-time enrollment credential the stack makes
    with control's admin credential (docs/spec.md R-C-11): the worker's key is admitted for
    the seeded contract the moment it registers, with no operator step, and the admin
    credential itself never reaches the worker."""
    return {
        **service_env(WORKER, tokens),
        **localstack.enroll_worker(
            control_target, tokens["control_admin"], [seeded_contract_digest()]
        ),
    }


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (0600) atomically."""
    temporary = path.with_name(f".{path.name}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    temporary.replace(path)


def make_tokens(layout: Layout) -> dict[str, str]:
    """The stack's bearer tokens: made once, kept in ``data/tokens.json`` (0600)."""
    path = layout.tokens_file
    if path.exists():
        stored = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(stored, dict) and all(isinstance(stored.get(n), str) for n in TOKEN_NAMES):
            return {name: str(stored[name]) for name in TOKEN_NAMES}
    tokens = {name: secrets.token_urlsafe(32) for name in TOKEN_NAMES}
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_private(path, json.dumps(tokens, indent=2) + "\n")
    return tokens


# ---------------------------------------------------------------------- processes


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def _command_line(pid: int) -> list[str]:
    """The arguments of ``pid``, or [] when there is no such (live) process."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        if Path("/proc/self").exists():
            return []
        # No procfs (macOS): ask ps (split on spaces: good enough for the first two words).
        found = subprocess.run(
            ["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True, check=False
        )
        return found.stdout.split()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    # "pid (comm) state ...": the state follows the last ")".
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


def running_pid(layout: Layout, service: str) -> int | None:
    """The pid in ``service``'s pid file if that process is alive and runs ``service``.

    The command line is checked so a pid the system has since given to another program is
    never signalled.
    """
    pid = read_pid(layout.pid_file(service))
    if pid is None or pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return None
    if _is_zombie(pid):
        return None
    # The console script runs as "python /path/to/rewardseal-worker serve ...".
    script = ENTRY_POINTS[service][0]
    return pid if script in {Path(arg).name for arg in _command_line(pid)[:2]} else None


def stop_service(layout: Layout, service: str) -> str:
    """Stop ``service`` if it runs; say what happened."""
    pid = running_pid(layout, service)
    layout.ready_file(service).unlink(missing_ok=True)
    if pid is None:
        layout.pid_file(service).unlink(missing_ok=True)
        return "not running"
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    while running_pid(layout, service) == pid:
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            _wait_gone(layout, service, pid)
            layout.pid_file(service).unlink(missing_ok=True)
            return f"killed (pid {pid}, no exit {STOP_TIMEOUT_SECONDS:.0f} s after SIGTERM)"
        time.sleep(POLL_SECONDS)
    layout.pid_file(service).unlink(missing_ok=True)
    return f"stopped (pid {pid})"


def _wait_gone(layout: Layout, service: str, pid: int) -> None:
    deadline = time.monotonic() + 5.0
    while running_pid(layout, service) == pid and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)


def start_service(
    layout: Layout, service: str, command: Sequence[str], env: Mapping[str, str]
) -> dict[str, Any]:
    """Start ``service`` in its own session (it outlives this script); return its banner."""
    ready = layout.ready_file(service)
    ready.unlink(missing_ok=True)
    log_path = layout.log_file(service)
    process = localstack.spawn(
        command, env, cwd=layout.run_dir, log_file=log_path, own_session=True
    )
    layout.pid_file(service).write_text(f"{process.pid}\n")
    try:
        return localstack.wait_ready(
            process, service, ready, log_path, START_TIMEOUT_SECONDS[service]
        )
    except Unavailable as exc:
        raise StackError(exc.message) from exc


# ---------------------------------------------------------------------- health


def grpc_healthy(target: str, timeout: float = 3.0, tls: ClientTls | None = None) -> bool:
    """True when ``target`` answers grpc.health.v1 Check with SERVING (no token needed);
    dialled over TLS when ``tls`` is given (a server serving TLS refuses plaintext)."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from rewardseal.rpc.tls import blocking_channel as dial

    with dial(target, tls) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            answer = stub.Check(health_pb2.HealthCheckRequest(), timeout=timeout)
        except grpc.RpcError:
            return False
    return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)


def http_healthy(url: str, timeout: float = 3.0) -> bool:
    """True when ``url`` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status) == 200
    except (OSError, ValueError):
        return False


def service_healthy(service: str, entry: Mapping[str, Any]) -> bool:
    """Health of one service described by its ``stack.json`` entry."""
    if service == MOCKMED:
        return http_healthy(f"{entry['url']}/healthz")
    return grpc_healthy(str(entry["target"]))


# ---------------------------------------------------------------------- commands


def _running(layout: Layout) -> dict[str, int]:
    found = {}
    for service in ORDER:
        pid = running_pid(layout, service)
        if pid is not None:
            found[service] = pid
    return found


def _available(service: str) -> bool:
    return (BIN / ENTRY_POINTS[service][0]).is_file()


def read_state(layout: Layout) -> dict[str, Any] | None:
    """The stack's ``stack.json``, or None when it is not up."""
    try:
        state = json.loads(layout.state_file.read_text())
    except (FileNotFoundError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def up(layout: Layout, out: Callable[[str], None] = print) -> int:
    """Start the stack unless it runs; print how to call it."""
    running = _running(layout)
    state = read_state(layout)
    if running:
        expected = set(state["services"]) if state else set()
        if state is not None and set(running) == expected:
            out("the stack is already up\n")
            out(usage(state))
            return 0
        raise StackError(
            f"part of a stack runs in {layout.run_dir} ({', '.join(sorted(running))}); "
            "run `make down` first"
        )
    for service in ORDER:
        if service not in OPTIONAL and not _available(service):
            raise StackError(
                f"{BIN / ENTRY_POINTS[service][0]} is missing: run `make up` (it sets up .venv)"
            )
    layout.run_dir.mkdir(parents=True, exist_ok=True)
    layout.run_dir.chmod(0o700)
    tokens = make_tokens(layout)
    services: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    try:
        out(f"starting control ({ENTRY_POINTS[CONTROL][0]}) ...")
        # The operator console too (docs/console.md), on a free loopback port of its own.
        console = control_command(layout, ("--http-port", "0"))
        banner = start_service(layout, CONTROL, console, service_env(CONTROL, tokens))
        services[CONTROL] = {
            "pid": read_pid(layout.pid_file(CONTROL)),
            "port": banner["port"],
            "target": f"{HOST}:{banner['port']}",
            "organization_key_id": banner.get("organization_key_id"),
            "organization_public_key": banner["organization_public_key"],
            "console_url": banner.get("console_url"),
            "data_dir": str(layout.data(CONTROL)),
            "log": str(layout.log_file(CONTROL)),
        }
        out("starting the worker (seeds MockMed and calibrates on its first start) ...")
        command = worker_command(
            layout,
            services[CONTROL]["target"],
            organization_key=services[CONTROL]["organization_public_key"],
            extra=("--http-port", "0"),  # the HTTP/JSON face too (docs/http.md)
        )
        env = worker_env(services[CONTROL]["target"], tokens)
        banner = start_service(layout, WORKER, command, env)
        services[WORKER] = {
            "pid": read_pid(layout.pid_file(WORKER)),
            "port": banner["port"],
            "target": f"{HOST}:{banner['port']}",
            "contract_digest": banner["contract_digest"],
            "oracle_tier": banner.get("oracle_tier"),
            "key_id": banner["key_id"],
            "public_key": banner["public_key"],
            "certificate_id": None,
            "http_url": f"http://{HOST}:{banner['http_port']}" if banner.get("http_port") else None,
            "data_dir": str(layout.data(WORKER)),
            "log": str(layout.log_file(WORKER)),
        }
        out("issuing the worker's certificate at control ...")
        services[WORKER]["certificate_id"] = certify_worker(
            services[CONTROL]["target"],
            {**banner, "log": services[WORKER]["log"]},
            tokens,
        )
        if _available(MOCKMED):
            out("starting MockMed ...")
            banner = start_service(
                layout, MOCKMED, mockmed_command(layout), service_env(MOCKMED, tokens)
            )
            services[MOCKMED] = {
                "pid": read_pid(layout.pid_file(MOCKMED)),
                "port": banner["port"],
                "url": f"http://{HOST}:{banner['port']}",
                "db_url": sqlite_url(layout.mockmed_database),
                "log": str(layout.log_file(MOCKMED)),
            }
        else:
            notes.append(
                f"MockMed is not installed ({BIN / ENTRY_POINTS[MOCKMED][0]} is missing): "
                "started control and the worker only"
            )
    except BaseException:
        for service in reversed(ORDER):
            stop_service(layout, service)
        raise
    state = {
        "run_dir": str(layout.run_dir),
        "services": services,
        "tokens": tokens,
        "notes": notes,
    }
    _write_private(layout.state_file, json.dumps(state, indent=2, sort_keys=True) + "\n")
    out("")
    out(usage(state))
    return 0


def down(layout: Layout, out: Callable[[str], None] = print) -> int:
    """Stop every service of the stack (MockMed, the worker, control); keep their data."""
    for service in reversed(ORDER):
        out(f"{service:8} {stop_service(layout, service)}")
    layout.state_file.unlink(missing_ok=True)
    if layout.data(WORKER).exists():
        out(f"data kept in {layout.run_dir / 'data'} (remove {layout.run_dir} to start afresh)")
    return 0


def status(layout: Layout, out: Callable[[str], None] = print, *, not_up_status: int = 1) -> int:
    """One line per service: running?, healthy?; exit status 0 only when all are.

    ``not_up_status``: the exit status when no stack is up (``make status`` passes 0: nothing
    up is an answer, not a failure, and make would add its own error line to a 1).
    """
    state = read_state(layout)
    if state is None:
        out(f"the stack is not up ({layout.state_file} is missing); run `make up`")
        return not_up_status
    healthy = True
    for service in ORDER:
        entry = state["services"].get(service)
        if entry is None:
            out(f"{service:8} not started (not installed)")
            continue
        pid = running_pid(layout, service)
        if pid is None:
            out(f"{service:8} NOT RUNNING (see {entry['log']})")
            healthy = False
            continue
        ok = service_healthy(service, entry)
        healthy = healthy and ok
        where = entry.get("target") or entry.get("url")
        out(f"{service:8} pid {pid:<8} {where:24} {'healthy' if ok else 'NOT HEALTHY'}")
    return 0 if healthy else 1


# ---------------------------------------------------------------------- how to call it


def usage(state: Mapping[str, Any]) -> str:
    """How to call the running stack: grpcurl, the control CLI, curl and the Python client."""
    services = state["services"]
    tokens = state["tokens"]
    control = services[CONTROL]
    worker = services[WORKER]
    mockmed = services.get(MOCKMED)
    digest = worker["contract_digest"]
    wt = worker["target"]
    ct = control["target"]
    patient = "patient-stack-0001"
    episode = "episode.stack.0001"
    begin = json.dumps(
        {
            "episode_id": episode,
            "reward_contract_digest": digest,
            "oracle_identity": {"patient_id": patient},
        }
    )
    score = json.dumps(
        {
            "descriptor": {
                "episode_id": episode,
                "policy_checkpoint_id": CHECKPOINT,
                "policy_update": 0,
                "reward_contract_digest": digest,
                "oracle_identity": {"patient_id": patient},
            }
        }
    )
    write = json.dumps(
        {"patient_id": patient, "type": "Triage", "note": "Follow-up in 2 weeks.", "status": "open"}
    )
    auth_w = f'-H "authorization: Bearer {tokens["worker"]}"'
    auth_c = f'-H "authorization: Bearer {tokens["control"]}"'
    lines = [
        f"rewardseal stack up (state: {state['run_dir']}/stack.json, logs: "
        f"{state['run_dir']}/logs/; stop it with `make down`)",
        "",
        f"  control  {ct:28} pid {control['pid']}",
        f"  worker   {wt:28} pid {worker['pid']}  tier {worker.get('oracle_tier')}",
        f"           contract {digest}",
        f"           key      {worker['key_id']}",
    ]
    if mockmed is not None:
        lines.append(f"  mockmed  {mockmed['url']:28} pid {mockmed['pid']}")
    if control.get("console_url"):
        lines.append(
            f"  console  {control['console_url']:28} sign in with tokens.control_admin "
            f"(or, read only, tokens.control) of {state['run_dir']}/stack.json"
        )
    lines += [f"  note: {note}" for note in state.get("notes", [])]
    lines += [
        "",
        "gRPC (grpcurl; health needs no token, reflection is on):",
        f"  grpcurl -plaintext {wt} grpc.health.v1.Health/Check",
        f"  grpcurl -plaintext {auth_w} {wt} list rewardseal.v1.RewardWorkerService",
        f"  grpcurl -plaintext {auth_w} -d '{begin}' \\",
        f"    {wt} rewardseal.v1.RewardWorkerService/BeginEpisode",
    ]
    if mockmed is not None:
        lines += [
            "  # the policy acts on the system of record (MockMed's REST API):",
            f"  curl -s -w '\\n' -X POST {mockmed['url']}/api/encounters \\",
            f'    -H "authorization: Bearer {tokens["mockmed"]}" \\',
            f"    -H 'content-type: application/json' -d '{write}'",
        ]
    lines += [
        f"  grpcurl -plaintext {auth_w} -d '{score}' \\",
        f"    {wt} rewardseal.v1.RewardWorkerService/ScoreEpisode",
        f"  grpcurl -plaintext {auth_c} {ct} rewardseal.v1.ControlPlaneService/ListContracts",
        "",
    ]
    if worker.get("http_url"):
        lines += ["HTTP/JSON (docs/http.md; the same worker, an episode of its own):"]
        lines += http_example(worker, tokens, mockmed)
        lines += [""]
    lines += [
        "control CLI:",
        f"  REWARDSEAL_CONTROL_TOKEN={tokens['control']} \\",
        f"    .venv/bin/rewardseal-control receipts summary --target {ct}",
        "",
        "Python (.venv/bin/python):",
        "  from rewardseal.rpc.worker_client import WorkerClient, make_descriptor",
        "  from rewardseal.core.signing import TrustSet",
        f'  WORKER_PUBLIC_KEY = bytes.fromhex("{worker["public_key"]}")',
        f'  DIGEST = "{digest}"',
        f'  with WorkerClient("{wt}", token="{tokens["worker"]}",',
        "                    trust=TrustSet([WORKER_PUBLIC_KEY])) as worker:",
        f'      worker.begin("{episode}", DIGEST, {{"patient_id": "{patient}"}})',
        "      # ... the policy acts on the system of record ...",
        "      got = worker.score(make_descriptor(",
        f'          episode_id="{episode}", policy_checkpoint_id="{CHECKPOINT}",',
        "          policy_update=0, reward_contract_digest=DIGEST,",
        f'          oracle_identity={{"patient_id": "{patient}"}}))',
        "      got.scalar  # None when unscored: drop the sample, never pay it 0",
    ]
    return "\n".join(lines)


def http_example(
    worker: Mapping[str, Any], tokens: Mapping[str, str], mockmed: Mapping[str, Any] | None
) -> list[str]:
    """One episode over the worker's HTTP face, in the order that pays: begin (the baseline
    read), act on MockMed, score. An episode scored without a begin is unscored
    (``reconciliation_required``: the judge cannot tell a new record from an old one)."""
    digest = worker["contract_digest"]
    url = worker["http_url"]
    patient = "patient-stack-0002"
    episode = "episode.stack.0002"
    begin = json.dumps(
        {
            "episode_id": episode,
            "reward_contract_digest": digest,
            "oracle_identity": {"patient_id": patient},
        }
    )
    rewards = json.dumps(
        {
            "episode_id": episode,
            "policy_checkpoint_id": CHECKPOINT,
            "policy_update": 0,
            "reward_contract_digest": digest,
        }
    )
    auth = f'-H "authorization: Bearer {tokens["worker"]}"'
    # -w '\n': each answer on a line of its own, as a person reads it (and a script parses it).
    post = f"curl -s -w '\\n' {auth} -H 'content-type: application/json'"
    lines = [
        f"  curl -s {url}/health -w '\\n'",
        "  # 1. begin: the worker reads the patient's record before the policy acts",
        f"  {post} \\",
        f"    -d '{begin}' {url}/v1/episodes",
    ]
    if mockmed is not None:
        write = json.dumps(
            {
                "patient_id": patient,
                "type": "Triage",
                "note": "Follow-up in 2 weeks.",
                "status": "open",
            }
        )
        lines += [
            "  # 2. the policy acts on the system of record (MockMed's REST API)",
            f"  curl -s -w '\\n' -X POST {mockmed['url']}/api/encounters \\",
            f'    -H "authorization: Bearer {tokens["mockmed"]}" \\',
            f"    -H 'content-type: application/json' -d '{write}'",
        ]
    lines += [
        '  # 3. score: reward_outcome "verified", scalar_reward 1.0 (never begun, it would be',
        "  #    reconciliation_required and unscored: the judge cannot tell new records from old)",
        f"  {post} \\",
        f"    -d '{rewards}' {url}/v1/rewards",
    ]
    return lines


# ---------------------------------------------------------------------- entry point


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    parser = argparse.ArgumentParser(prog="tools/stack.py", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("up", "down", "status"))
    parser.add_argument(
        "--run-dir", type=Path, default=DEFAULT_RUN_DIR, help="default: .run/ in the repository"
    )
    parser.add_argument(
        "--not-up-ok",
        action="store_true",
        help="status: exit 0 (not 1) when no stack is up (what `make status` runs)",
    )
    args = parser.parse_args(argv)
    layout = Layout(args.run_dir.expanduser().resolve())
    commands: Mapping[str, Callable[[Layout], int]] = {
        "up": up,
        "down": down,
        "status": lambda layout: status(layout, not_up_status=0 if args.not_up_ok else 1),
    }
    try:
        return commands[args.command](layout)
    except StackError as exc:
        print(f"stack: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
