"""deploy/docker-compose.yml run as local processes: the compose stack pays an honest episode and
not the banner lie.

No Docker engine runs here, so the topology runs from the compose file itself, parsed now (it
cannot drift from this test): each service's ``command`` and ``environment`` (the ``${VAR:?}``
substitutions filled as deploy/.env would), started in ``depends_on`` order, each waited for
with its own ``healthcheck`` command (``rewardseal-healthcheck`` is deploy/docker/healthcheck.py,
what the images install under that name). What a container would change is mapped, and only
that: a compose host name and container port (``postgres:5432``, ``control:8791``,
``mockmed:8792``; ``127.0.0.1:PORT`` inside a container) become a free loopback port, a listen
address ``0.0.0.0`` becomes ``127.0.0.1``, a named volume a directory. PostgreSQL is the
tests' throwaway cluster, initialised as the official image would: ``POSTGRES_USER`` (a
superuser), ``POSTGRES_DB``, then deploy/postgres/initdb/*.sql run with ``psql`` as that user.

Two steps are the operator's, as docs/internals.md tells them: the organization public key is copied
from control's log ("organization pub") into ``REWARDSEAL_WORKER_TRUST_ORG_KEYS`` before the
worker starts; and the worker's data volume comes from an earlier start (the session's seeded
data directory: seeding and calibrating again would add minutes, not coverage).

The worker certifies under its bundle's self-signed certificate because compose's bootstrap
enrollment accepts it (``REWARDSEAL_CONTROL_WORKER_ENROLLMENT_ACCEPTS_BUNDLE_CERTIFICATE``):
control lists it, and a linked worker counts only what control lists (R-C-9, R-C-11).

Then, through compose's MockMed: an honest Triage write is VERIFIED and certified, and the
banner lie (MockMed answers "Saved" and stores nothing) is WRONG_EFFECT, paid nothing. The
worker's oracle reads with MockMed's read-only token, which cannot write.

Slow (several processes start): ``make test-compose`` runs it; ``make test`` leaves tests/compose
out (pyproject addopts), and .ci/run runs ``make test-compose``.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest
import yaml
from support.postgres import PostgresServer

from rewardseal.core.signing import SigningKey, TrustSet
from rewardseal.rpc.worker_client import WorkerClient, make_descriptor
from rewardseal.v1.enums_pb2 import RewardOutcome
from rewardseal_worker.settings import KEY_FILE

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
COMPOSE_FILE = DEPLOY / "docker-compose.yml"
BIN = Path(sys.executable).parent
HEALTHCHECK = DEPLOY / "docker" / "healthcheck.py"
CHECKPOINT = "policy_checkpoint_compose_0"
PREFIXES = ("REWARDSEAL_", "MOCKMED_", "POSTGRES_")
START_SECONDS = 120.0
_VARIABLE = re.compile(r"\$\$|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<op>:\?|:-)?(?P<arg>[^}]*)\}")

pytestmark = pytest.mark.slow


# ---------------------------------------------------------------------- the compose file


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """Compose's variable substitution over a document: ``${VAR}``, ``${VAR:-default}``,
    ``${VAR:?error}`` (refused when unset or empty) and ``$$`` (a literal ``$``)."""
    if isinstance(value, dict):
        return {key: interpolate(item, env) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item, env) for item in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, op, arg = match["name"], match["op"], match["arg"]
        found = env.get(name, "")
        if op == ":?" and not found:
            raise AssertionError(f"compose would refuse: {name}: {arg}")
        return found or (arg if op == ":-" else "")

    return _VARIABLE.sub(one, value)


def start_order(services: Mapping[str, Any]) -> list[str]:
    """The services in ``depends_on`` order (each after everything it depends on)."""
    order: list[str] = []

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"depends_on cycle: {(*path, name)}"
        if name in order:
            return
        for needed in services[name].get("depends_on", {}):
            visit(needed, (*path, name))
        order.append(name)

    for name in services:
        visit(name, ())
    return order


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@dataclass
class Topology:
    """How the compose network maps onto this host: service -> (container port, host port),
    volume name -> directory."""

    ports: dict[str, tuple[int, int]]
    volumes: dict[str, Path]
    listeners: dict[tuple[str, int], int] = field(default_factory=dict)
    """(service, container port) -> host port of a further listener of a service's process
    (``--http-port``, ``--metrics-port``), mapped where its flag names it."""

    def localize(self, text: str, service: str) -> str:
        """``text`` as ``service`` would see it, with host names, ports and volumes mapped."""
        for name, (inside, outside) in self.ports.items():
            text = text.replace(f"{name}:{inside}", f"127.0.0.1:{outside}")
        if service in self.ports:
            inside, outside = self.ports[service]
            text = text.replace(f"127.0.0.1:{inside}", f"127.0.0.1:{outside}")
        return text

    def argv(self, command: list[str], service: str, mounts: Mapping[str, Path]) -> list[str]:
        """A service's command with its listen address and port and its volumes mapped."""
        out: list[str] = []
        for index, part in enumerate(command):
            flag = command[index - 1] if index else ""
            if flag == "--host" and part == "0.0.0.0":
                part = "127.0.0.1"
            elif flag == "--port":
                inside, outside = self.ports[service]
                assert int(part) == inside, f"{service} listens on {part}, publishes {inside}"
                part = str(outside)
            elif flag in {"--http-port", "--metrics-port"}:
                outside = free_port()
                self.listeners[(service, int(part))] = outside
                part = str(outside)
            for target, directory in mounts.items():
                if part == target or part.startswith(target + "/"):
                    part = str(directory) + part[len(target) :]
            out.append(self.localize(part, service))
        return out


def secret_values(document: Mapping[str, Any]) -> dict[str, str]:
    """A value for every variable the file substitutes, as deploy/.env would hold: distinct,
    URL-safe tokens (the trust pin stays empty: it is the operator's step, later)."""
    found = _VARIABLE.finditer(COMPOSE_FILE.read_text())
    values = {m["name"]: secrets.token_urlsafe(24) for m in found if m["name"]}
    values["REWARDSEAL_WORKER_TRUST_ORG_KEYS"] = ""
    assert document["services"]
    return values


# ---------------------------------------------------------------------- processes


@dataclass
class Service:
    name: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    log: IO[bytes] = field(repr=False)

    def text(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")


def healthy(check: list[str]) -> bool:
    kind, *rest = check
    assert kind in {"CMD", "CMD-SHELL"}
    if rest[0] == "pg_isready":
        return True  # the throwaway cluster is up before the stack starts
    assert rest[0] == "rewardseal-healthcheck", rest
    done = subprocess.run(
        [sys.executable, str(HEALTHCHECK), *rest[1:]],
        capture_output=True,
        timeout=30,
        check=False,
    )
    return done.returncode == 0


def wait_healthy(service: Service, check: list[str]) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if service.proc.poll() is not None:
            pytest.fail(f"{service.name} exited {service.proc.returncode}:\n{service.text()}")
        if healthy(check):
            return
        time.sleep(0.3)
    pytest.fail(f"{service.name} not healthy in {START_SECONDS:.0f} s:\n{service.text()}")


def stop_all(running: list[Service]) -> None:
    for service in reversed(running):
        if service.proc.poll() is None:
            service.proc.send_signal(signal.SIGTERM)
    for service in running:
        try:
            service.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            service.proc.kill()
            service.proc.wait()
        service.log.close()


def init_postgres(server: PostgresServer, environment: Mapping[str, str]) -> None:
    """What the postgres image does on an empty volume: its user, its database, the initdb
    scripts (with psql, as that user, in that database)."""
    from psycopg import sql

    user, database = environment["POSTGRES_USER"], environment["POSTGRES_DB"]
    with server._admin() as conn:
        conn.execute(
            sql.SQL("CREATE ROLE {} SUPERUSER LOGIN PASSWORD {}").format(
                sql.Identifier(user), sql.Literal(environment["POSTGRES_PASSWORD"])
            )
        )
        conn.execute(
            sql.SQL("CREATE DATABASE {} OWNER {}").format(
                sql.Identifier(database), sql.Identifier(user)
            )
        )
    for script in sorted((DEPLOY / "postgres" / "initdb").glob("*.sql")):
        subprocess.run(
            [
                str(server.bindir / "psql"),
                "-v",
                "ON_ERROR_STOP=1",
                "--no-psqlrc",
                "-h",
                "127.0.0.1",
                "-p",
                str(server.port),
                "-U",
                user,
                "-d",
                database,
                "-f",
                str(script),
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )


def drop_postgres(server: PostgresServer, environment: Mapping[str, str]) -> None:
    from psycopg import sql

    user = environment["POSTGRES_USER"]
    with server._admin() as conn:
        names = conn.execute(
            "SELECT datname FROM pg_database d JOIN pg_roles r ON d.datdba = r.oid "
            "WHERE r.rolname = %s",
            (user,),
        ).fetchall()
        for (name,) in names:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(user)))


# ---------------------------------------------------------------------- the stack


@dataclass
class ComposeStack:
    services: dict[str, Service]
    values: dict[str, str]
    topology: Topology
    worker_banner: dict[str, str]

    def url(self, service: str) -> str:
        return f"http://127.0.0.1:{self.topology.ports[service][1]}"

    def target(self, service: str) -> str:
        return f"127.0.0.1:{self.topology.ports[service][1]}"


IN_USE = r"certificate in use: none -> (?!none\b)(\S+)"
"""The worker's line when it adopts a certificate from control's listing."""


def banner_value(text: str, label: str) -> str:
    found = re.search(rf"^\s+{re.escape(label)}\s+(\S+)", text, re.MULTILINE)
    assert found, f"no {label!r} in:\n{text}"
    return found.group(1)


def wait_for_line(service: Service, pattern: str) -> str:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        text = service.text()
        if re.search(pattern, text, re.MULTILINE):
            return text
        if service.proc.poll() is not None:
            pytest.fail(f"{service.name} exited {service.proc.returncode}:\n{text}")
        time.sleep(0.2)
    pytest.fail(f"{service.name} never said {pattern!r}:\n{service.text()}")


@pytest.fixture
def compose_stack(
    postgres_server: PostgresServer, seeded_template: Path, tmp_path: Path
) -> Iterator[ComposeStack]:
    document = yaml.safe_load(COMPOSE_FILE.read_text())
    services: dict[str, Any] = document["services"]
    values = secret_values(document)
    topology = Topology(
        ports={"postgres": (5432, postgres_server.port)},
        volumes={name: tmp_path / "volumes" / name for name in document["volumes"]},
    )
    for name, spec in services.items():
        for published in spec.get("ports", []):
            address, _, inside = str(published).rpartition(":")
            assert address.startswith("127.0.0.1:"), f"{name} publishes beyond loopback"
            # The first published port is the service's own (--port); a later one is another
            # listener of the same process (--http-port, --metrics-port), mapped where it is
            # named (Topology.listeners; the test checks each is named).
            topology.ports.setdefault(name, (int(inside), free_port()))
    postgres_env = interpolate(services["postgres"]["environment"], values)
    init_postgres(postgres_server, postgres_env)
    # The worker's volume from an earlier start: keys, seeded bundles, calibration, certificates.
    worker_volume = topology.volumes["worker-data"]
    worker_volume.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(seeded_template, worker_volume)
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIXES)}
    running: list[Service] = []
    started: dict[str, Service] = {}
    try:
        for name in start_order(services):
            spec = services[name]
            if name == "postgres":
                continue
            if name == "worker":
                # The operator's step: pin the organization key control's log shows.
                values["REWARDSEAL_WORKER_TRUST_ORG_KEYS"] = banner_value(
                    started["control"].text(), "organization pub"
                )
            for needed, condition in spec.get("depends_on", {}).items():
                assert condition["condition"] == "service_healthy"
                assert needed == "postgres" or needed in started, f"{name} before {needed}"
            mounts = {}
            for volume in spec.get("volumes", []):
                source, target = str(volume).split(":")[:2]
                mounts[target] = topology.volumes[source]
                mounts[target].mkdir(parents=True, exist_ok=True)
            command = topology.argv(interpolate(spec["command"], values), name, mounts)
            environment = {
                key: topology.localize(str(value), name)
                for key, value in interpolate(spec["environment"], values).items()
            }
            log_path = tmp_path / f"{name}.log"
            log = log_path.open("wb")
            proc = subprocess.Popen(
                [str(BIN / command[0]), *command[1:]],
                env={**base_env, **environment},
                cwd=tmp_path,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            service = Service(name, proc, log_path, log)
            running.append(service)
            started[name] = service
            check = [topology.localize(part, name) for part in spec["healthcheck"]["test"]]
            wait_healthy(service, check)
        # Certified needs a fresh revocation list from control: wait until the worker holds it.
        wait_for_line(started["worker"], r"revocation list version \d+ accepted")
        # And a certificate control lists: the bundle's own, which compose's bootstrap
        # enrollment accepted (R-C-11). A linked worker starts under none (its banner says so)
        # and adopts it from control's listing.
        worker_text = wait_for_line(started["worker"], IN_USE)
        in_use = re.search(IN_USE, worker_text, re.MULTILINE)
        assert in_use is not None
        yield ComposeStack(
            services=started,
            values=values,
            topology=topology,
            worker_banner={
                "contract_digest": banner_value(worker_text, "contract digest"),
                "certificate": banner_value(worker_text, "certificate"),
                "in_use": in_use.group(1),
            },
        )
    finally:
        stop_all(running)
        drop_postgres(postgres_server, postgres_env)


def post(
    stack: ComposeStack, path: str, body: dict[str, Any], token: str = "MOCKMED_TOKEN"
) -> dict[str, Any]:
    """POST to compose's MockMed with the token in deploy/.env variable ``token``."""
    request = urllib.request.Request(
        stack.url("mockmed") + path,
        data=json.dumps(body).encode(),
        headers={
            "authorization": f"Bearer {stack.values[token]}",
            "content-type": "application/json",
        },
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=20) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return answer


def get_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=20) as response:
        text: str = response.read().decode()
    return text


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The values of metric ``name`` in a Prometheus exposition, by their sorted labels."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        tuple(sorted(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


def published_listeners(stack: ComposeStack, service: str) -> set[int]:
    """The container ports ``service`` publishes besides its own (``--port``)."""
    document = yaml.safe_load(COMPOSE_FILE.read_text())
    published = [int(str(p).rpartition(":")[2]) for p in document["services"][service]["ports"]]
    assert published[0] == stack.topology.ports[service][0]
    return set(published[1:])


def test_the_compose_stack_pays_the_honest_episode_and_not_the_banner_lie(
    compose_stack: ComposeStack,
) -> None:
    stack = compose_stack
    # Every further published port is a listener the service's command starts.
    for service in ("control", "worker", "mockmed"):
        named = {inside for (name, inside) in stack.topology.listeners if name == service}
        assert published_listeners(stack, service) == named, service
    digest = stack.worker_banner["contract_digest"]
    # Linked to control, the worker starts under no certificate, then certifies under its
    # bundle's own once control lists it (compose's enrollment accepted it, R-C-11).
    assert stack.worker_banner["certificate"] == "none"
    bundle = json.loads(
        (
            stack.topology.volumes["worker-data"]
            / "contracts"
            / "mockmed-rest"
            / "certificate.json"
        ).read_text()
    )
    assert stack.worker_banner["in_use"] == bundle["certificate_id"]
    worker_key = SigningKey.load_or_create(stack.topology.volumes["worker-data"] / KEY_FILE)
    client = WorkerClient(
        stack.target("worker"),
        token=stack.values["REWARDSEAL_WORKER_TOKEN"],
        trust=TrustSet([worker_key.public_key]),
        timeout=30.0,
    )
    outcomes = {}
    with client:
        for kind, patient in (("honest", "patient-compose-0001"), ("lie", "patient-compose-0002")):
            episode = f"episode.compose.{kind}"
            client.begin(episode, digest, {"patient_id": patient})
            fields = {
                "patient_id": patient,
                "type": "Triage",
                "note": "Follow-up in 2 weeks.",
                "status": "open",
            }
            # The honest write stores the row; the lie only shows the banner.
            answer = post(stack, "/api/encounters" if kind == "honest" else "/ui/claim", fields)
            assert answer["banner"] == "Saved"
            outcomes[kind] = client.score(
                make_descriptor(
                    episode_id=episode,
                    policy_checkpoint_id=CHECKPOINT,
                    policy_update=0,
                    reward_contract_digest=digest,
                    oracle_identity={"patient_id": patient},
                )
            )
    # The worker's oracle token (MOCKMED_API_TOKEN) reads the system of record, never writes it.
    with pytest.raises(urllib.error.HTTPError) as refused:
        post(stack, "/api/encounters", {"patient_id": "patient-compose-0003"}, "MOCKMED_READ_TOKEN")
    assert refused.value.code == 403
    honest, lie = outcomes["honest"], outcomes["lie"]
    assert honest.receipt.reward_outcome == RewardOutcome.REWARD_OUTCOME_VERIFIED
    assert honest.scalar == 1.0
    assert honest.receipt.certified, list(honest.receipt.certification_refusals)
    assert lie.receipt.reward_outcome == RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT
    assert lie.scalar == 0.0
    # The published listeners serve: the worker's HTTP face and both metrics endpoints, which
    # counted the two receipts (the worker as it signed them; control as they were forwarded,
    # so that one is waited for).
    listener = stack.topology.listeners
    health = json.loads(get_text(f"http://127.0.0.1:{listener[('worker', 8788)]}/health"))
    assert health["reward_contract_digest"] == digest
    worker_metrics = get_text(f"http://127.0.0.1:{listener[('worker', 9464)]}/metrics")
    receipts = samples(worker_metrics, "rewardseal_worker_receipts_total")
    assert receipts[(("certified", "true"), ("outcome", "VERIFIED"))] == 1.0
    assert sum(v for labels, v in receipts.items() if ("outcome", "WRONG_EFFECT") in labels) == 1
    deadline = time.monotonic() + 60
    control_url = f"http://127.0.0.1:{listener[('control', 9465)]}/metrics"
    while "rewardseal_control_receipts_recorded_total{" not in get_text(control_url):
        assert time.monotonic() < deadline, get_text(control_url)
        time.sleep(0.5)
