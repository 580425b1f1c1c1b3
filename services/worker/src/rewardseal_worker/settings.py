"""Typed worker settings: command-line flags win over environment variables over defaults."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from rewardseal.core.certificates import MAX_POLICY_UPDATE
from rewardseal.core.errors import ValidationError
from rewardseal.rpc.tls import ClientTls
from rewardseal_server import service_settings
from rewardseal_server.sqlstore import normalize_url, sqlite_url
from rewardseal_server.tls import ServerTls
from rewardseal_worker.ledger_refusals import MAX_POLICY_LAG_ENV
from rewardseal_worker.org_keys import parse_org_keys
from rewardseal_worker.store.core import STORE_NAME

ENV_PREFIX = "REWARDSEAL_WORKER_"
DEFAULT_PORT = 8790
TOKEN_FILE = "token"
KEY_FILE = Path("keys") / "worker.ed25519"
DEFAULT_BUNDLE = Path("contracts") / "mockmed"
DB_FILE = "worker.sqlite"
DEFAULT_MAX_POLICY_UPDATE_JUMP = 10_000
"""How far above a contract's highest policy update one call may score (R-W-7's other side).

Without a bound, one descriptor at 2^53-1 raises the ledger so far that every later episode is
policy_update_regressed and the certificate reads EXPIRED: a one-call denial of service."""
DEFAULT_MAX_POLICY_LAG = 2
"""How far below a contract's highest policy update an episode may still be scored (R-W-7).

Async trainers score episodes of step k after those of step k+1: verl V1's colocate_async and
separate_async run one step behind, prime-rl's default ``max_async_level`` is 2. 2 lets both
run as configured out of the box; what it costs is bounded and stated in docs/spec.md R-W-7
(an expired certificate can be reached back into by at most this many updates). 0 is the
strict rule: never below the highest."""
MAX_PROCESSES = 64
"""The most server processes ``serve --processes`` starts (a typo must not fork thousands)."""
DEFAULT_CERTIFICATE_POLL_SECONDS = 30.0
"""How often a worker joined to control re-reads control's certificates (revocations are pushed
and act at once; a new certificate is picked up within this interval)."""
ENV_BY_OPTION = {
    dest: f"{ENV_PREFIX}{name}"
    for dest, name in {
        "data_dir": "DATA_DIR",
        "contract": "CONTRACT",
        "host": "HOST",
        "port": "PORT",
        "db_url": "DB_URL",
        "calibration_trials": "CALIBRATION_TRIALS",
        "control": "CONTROL",
        "tls_cert": "TLS_CERT",
        "tls_key": "TLS_KEY",
        "tls_client_ca": "TLS_CLIENT_CA",
        "trust_org_key": "TRUST_ORG_KEYS",
        "control_tls_ca": "CONTROL_TLS_CA",
        "control_tls_cert": "CONTROL_TLS_CERT",
        "control_tls_key": "CONTROL_TLS_KEY",
        "control_tls_server_name": "CONTROL_TLS_SERVER_NAME",
        "processes": "PROCESSES",
        "max_policy_lag": "MAX_POLICY_LAG",
        "metrics_port": "METRICS_PORT",
        "log_level": "LOG_LEVEL",
        "log_format": "LOG_FORMAT",
    }.items()
}
"""The environment variable each ``serve`` option falls back to (named in ``--help``)."""
ENROLLMENT_ENV = f"{ENV_PREFIX}CONTROL_ENROLLMENT_TOKEN"
"""Where the worker reads a one-time enrollment credential from control's admin (R-C-11)."""
ADMIN_TOKEN_REFUSED = (
    f"{ENV_PREFIX}CONTROL_ADMIN_TOKEN is set: a worker must not hold the control plane's admin "
    "credential (it could issue and revoke certificates). Unset it and give the worker "
    f"control's worker credential (REWARDSEAL_CONTROL_WORKER_TOKEN) as {ENV_PREFIX}CONTROL_TOKEN"
)


@dataclass(frozen=True)
class WorkerSettings:
    """Everything the worker process needs to start."""

    data_dir: Path
    contract_dir: Path
    host: str
    port: int
    db_url: str
    token: str
    seed_mockmed: bool = False
    calibration_trials: int = 300
    reflection: bool = False
    episode_ttl_seconds: float = 3600.0
    max_policy_update_jump: int = DEFAULT_MAX_POLICY_UPDATE_JUMP
    """How far above the contract's highest policy update one call may score
    (``$REWARDSEAL_WORKER_MAX_POLICY_UPDATE_JUMP``); further is ``policy_update_jump``."""
    max_policy_lag: int = DEFAULT_MAX_POLICY_LAG
    """How far below the contract's highest policy update an episode may still be scored
    (``--max-policy-lag``, ``$REWARDSEAL_WORKER_MAX_POLICY_LAG``); further is
    ``policy_update_regressed``. 0: never below the highest."""
    inline_batch: int | None = None
    """The largest batch run on the event loop (``$REWARDSEAL_WORKER_INLINE_BATCH``; 0: every
    batch in a worker thread); unset: the engine's choice by store and oracle (engine.Scorer)."""
    health_interval_seconds: float = 5.0
    """How often the store and the system of record are probed to keep grpc.health.v1 and
    ``GET /health`` truthful (see health_watch, R-W-16)."""
    control_target: str | None = None
    """host:port of the control plane; None runs the worker on its own."""
    control_token: str | None = field(default=None, repr=False)
    """Control's *worker* credential: registers the contract and this worker's key, forwards
    receipts, reads certificates and revocations (never the admin credential)."""
    control_enrollment: str | None = field(default=None, repr=False)
    """A one-time enrollment credential from control's admin
    (``$REWARDSEAL_WORKER_CONTROL_ENROLLMENT_TOKEN``): presented at registration, it admits this
    worker's key for the contracts it names (R-C-11). Unset: an admin approves the key."""
    trust_org_keys: tuple[bytes, ...] = ()
    """The pinned organization public keys: the only signers of certificates and revocation
    lists this worker accepts from control."""
    control_tls: ClientTls | None = field(default=None, repr=False)
    """TLS (mutual TLS with a client certificate) for the link to control; None: plaintext."""
    certificate_poll_seconds: float = DEFAULT_CERTIFICATE_POLL_SECONDS
    tls: ServerTls | None = field(default=None, repr=False)
    """The server's TLS (mutual TLS when it names a client CA); None serves plaintext."""
    processes: int = 1
    """Server processes sharing the port and the store (``--processes``, see
    :mod:`rewardseal_worker.supervisor`); 1 serves from this process alone."""
    metrics_port: int | None = None
    """Serve Prometheus ``/metrics`` here (``--metrics-port``, 0: a free port); None: off. With
    ``--processes N`` process ``i`` serves on ``metrics_port + i`` (each has its own counters)."""
    http_port: int | None = None
    """Also serve the HTTP/JSON face on this port (``--http-port``, docs/http.md; 0 picks a
    free one); None, the default, serves gRPC only."""

    @property
    def key_path(self) -> Path:
        """Where the worker's Ed25519 private key lives (created 0600 on first start)."""
        return self.data_dir / KEY_FILE


def default_data_dir(env: Mapping[str, str]) -> Path:
    """``$REWARDSEAL_WORKER_DATA_DIR`` or ``~/.rewardseal/worker``."""
    return service_settings.default_data_dir(
        env, env_name=f"{ENV_PREFIX}DATA_DIR", service="worker"
    )


def store_url(data_dir: Path, db_url: str | None, env: Mapping[str, str]) -> str:
    """The worker store's URL: ``db_url`` (``--db-url``), else ``$REWARDSEAL_WORKER_DB_URL``,
    else the SQLite file in ``data_dir``."""
    return db_url or env.get(f"{ENV_PREFIX}DB_URL") or sqlite_url(data_dir / DB_FILE)


def load_token(data_dir: Path, env: Mapping[str, str]) -> str:
    """The bearer token: ``$REWARDSEAL_WORKER_TOKEN``, else the 0600 token file (made once)."""
    token, _ = service_settings.load_token(
        env, env_name=f"{ENV_PREFIX}TOKEN", path=data_dir / TOKEN_FILE
    )
    return token


def resolve_settings(
    *,
    data_dir: Path | None = None,
    contract_dir: Path | None = None,
    host: str | None = None,
    port: int | None = None,
    db_url: str | None = None,
    seed_mockmed: bool = False,
    calibration_trials: int | None = None,
    reflection: bool = False,
    control_target: str | None = None,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    tls_client_ca: Path | None = None,
    trust_org_keys: Sequence[str] = (),
    control_tls_ca: Path | None = None,
    control_tls_cert: Path | None = None,
    control_tls_key: Path | None = None,
    control_tls_server_name: str | None = None,
    processes: int | None = None,
    metrics_port: int | None = None,
    http_port: int | None = None,
    max_policy_lag: int | str | None = None,
    env: Mapping[str, str] | None = None,
) -> WorkerSettings:
    """Merge flags (arguments), environment and defaults into one settings object.

    Every setting is checked before anything is written (R-W-14): only once all are valid is
    the data dir made (0700) and the token read or made in it, and a caller starts seeding,
    keys and stores only after this returns.

    Raises:
        ValidationError: a bad port or number (``processes`` outside 1..:data:`MAX_PROCESSES`,
            ``max_policy_lag`` not a whole number of at least 0),
            ``--control`` without its token or without a
            pinned organization key, the control admin token in the environment, an unusable
            pinned key, or unusable TLS settings (a certificate without its key, an unreadable
            or non-PEM file).
    """
    env = os.environ if env is None else env
    # First: a bad count (or metrics port) is refused before the data dir or the token is made.
    process_count = _process_count(processes, env)
    resolved_metrics_port = _metrics_port(metrics_port, process_count, env)
    lag = _max_policy_lag(max_policy_lag, env)
    data = (data_dir or default_data_dir(env)).expanduser().resolve()
    contract = contract_dir or _env_path(env, "CONTRACT") or data / DEFAULT_BUNDLE
    resolved_port = service_settings.resolve_port(
        port, env, env_name=f"{ENV_PREFIX}PORT", default=DEFAULT_PORT
    )
    url = store_url(data, db_url, env)
    normalize_url(url, what=STORE_NAME)  # a malformed URL, before seeding writes anything
    trials = calibration_trials or service_settings.env_int(
        env, f"{ENV_PREFIX}CALIBRATION_TRIALS", 300, minimum=1
    )
    control = control_target or env.get(f"{ENV_PREFIX}CONTROL") or None
    if env.get(f"{ENV_PREFIX}CONTROL_ADMIN_TOKEN"):
        raise ValidationError(ADMIN_TOKEN_REFUSED)
    control_token = env.get(f"{ENV_PREFIX}CONTROL_TOKEN") or None
    if control and not control_token:
        raise ValidationError(
            f"--control needs control's worker credential in {ENV_PREFIX}CONTROL_TOKEN"
        )
    pinned = parse_org_keys(trust_org_keys or env.get(f"{ENV_PREFIX}TRUST_ORG_KEYS", "").split(","))
    if control and not pinned:
        raise ValidationError(
            "--control needs the organization's public key pinned with --trust-org-key HEX_OR_FILE "
            f"(or {ENV_PREFIX}TRUST_ORG_KEYS): the worker never takes control's word for whom "
            "to trust (control's banner shows organization_public_key)"
        )
    settings = WorkerSettings(
        data_dir=data,
        contract_dir=contract.expanduser().resolve(),
        host=host or env.get(f"{ENV_PREFIX}HOST", "127.0.0.1"),
        port=resolved_port,
        db_url=url,
        token="",  # read or made below, once every other setting is known to be good
        seed_mockmed=seed_mockmed,
        calibration_trials=trials,
        reflection=reflection,
        episode_ttl_seconds=_positive(env, "EPISODE_TTL_SECONDS", 3600.0),
        max_policy_update_jump=service_settings.env_int(
            env, f"{ENV_PREFIX}MAX_POLICY_UPDATE_JUMP", DEFAULT_MAX_POLICY_UPDATE_JUMP, minimum=0
        ),
        max_policy_lag=lag,
        inline_batch=_inline_batch(env),
        health_interval_seconds=_positive(env, "HEALTH_INTERVAL_SECONDS", 5.0),
        control_target=control,
        control_token=control_token,
        control_enrollment=env.get(ENROLLMENT_ENV) or None,
        trust_org_keys=pinned,
        control_tls=_control_tls(
            control_tls_ca, control_tls_cert, control_tls_key, control_tls_server_name, env
        ),
        certificate_poll_seconds=_positive(
            env, "CERTIFICATE_POLL_SECONDS", DEFAULT_CERTIFICATE_POLL_SECONDS
        ),
        tls=service_settings.resolve_server_tls(
            tls_cert, tls_key, tls_client_ca, env, env_prefix=ENV_PREFIX
        ),
        processes=process_count,
        metrics_port=resolved_metrics_port,
        http_port=service_settings.resolve_optional_port(
            http_port, env, env_name=f"{ENV_PREFIX}HTTP_PORT"
        ),
    )
    # Made here, 0700, before the token, the key or the database land in it.
    service_settings.make_private_dir(data)
    return replace(settings, token=load_token(data, env))


def _inline_batch(env: Mapping[str, str]) -> int | None:
    """``$REWARDSEAL_WORKER_INLINE_BATCH`` (0..1024), or None when unset or empty."""
    name = f"{ENV_PREFIX}INLINE_BATCH"
    if not env.get(name, "").strip():
        return None
    return service_settings.env_int(env, name, 0, minimum=0, maximum=1024)


def _max_policy_lag(flag: int | str | None, env: Mapping[str, str]) -> int:
    """``--max-policy-lag``, else ``$REWARDSEAL_WORKER_MAX_POLICY_LAG``, else
    :data:`DEFAULT_MAX_POLICY_LAG`: a whole number from 0 to 2^53-1 (an update's range).

    The flag is taken as text and read here, so a bad one is refused in one line naming it
    (argparse's ``type=int`` would print its usage as well)."""
    if flag is None:
        return service_settings.env_int(
            env, MAX_POLICY_LAG_ENV, DEFAULT_MAX_POLICY_LAG, minimum=0, maximum=MAX_POLICY_UPDATE
        )
    try:
        value = flag if isinstance(flag, int) and not isinstance(flag, bool) else int(str(flag))
    except ValueError:
        value = None
    if value is None or not 0 <= value <= MAX_POLICY_UPDATE:
        raise ValidationError(
            f"--max-policy-lag must be a whole number from 0 to {MAX_POLICY_UPDATE}, got "
            f"{str(flag)[:20]!r} (how many policy updates below the contract's highest an "
            "episode may still be scored)"
        )
    return value


def _process_count(flag: int | None, env: Mapping[str, str]) -> int:
    """``--processes``, else ``$REWARDSEAL_WORKER_PROCESSES``, else 1; within 1..MAX_PROCESSES."""
    name = "--processes"
    value: int | str | None = flag
    if value is None:
        name = f"{ENV_PREFIX}PROCESSES"
        value = env.get(name) or None
        if value is None:
            return 1
    try:
        count = int(value)
    except ValueError:
        raise ValidationError(f"{name} must be a whole number, got {str(value)[:20]!r}") from None
    if not 1 <= count <= MAX_PROCESSES:
        raise ValidationError(f"{name} must be from 1 to {MAX_PROCESSES}, got {count}")
    return count


def _metrics_port(flag: int | None, processes: int, env: Mapping[str, str]) -> int | None:
    """``--metrics-port``, else ``$REWARDSEAL_WORKER_METRICS_PORT``, else None (off).

    Process ``i`` of ``--processes N`` serves on ``port + i``, so the last, ``port + N - 1``,
    must be a port too: refused here, in one line, rather than by the last child at start-up.
    0 (a free port for each process) is never refused.

    Raises:
        ValidationError: as :func:`service_settings.resolve_port`, or the range runs past 65535.
    """
    name = "--metrics-port" if flag is not None else f"{ENV_PREFIX}METRICS_PORT"
    port = service_settings.resolve_optional_port(flag, env, env_name=f"{ENV_PREFIX}METRICS_PORT")
    if port and port + processes - 1 > 65535:
        raise ValidationError(
            f"{name} {port} with {processes} server processes needs ports {port}.."
            f"{port + processes - 1} (process i serves on port + i), past 65535: "
            f"use a metrics port of at most {65536 - processes}"
        )
    return port


def _control_tls(
    ca: Path | None,
    cert: Path | None,
    key: Path | None,
    server_name: str | None,
    env: Mapping[str, str],
) -> ClientTls | None:
    """TLS for the link to control from ``--control-tls-*``, else
    ``$REWARDSEAL_WORKER_CONTROL_TLS_{CA,CERT,KEY,SERVER_NAME}``; None (plaintext) when none is
    set. The files are read now, once.

    Raises:
        ValidationError: a certificate without its key or the reverse, or an unreadable or
            non-PEM file.
    """
    ca = ca or _env_path(env, "CONTROL_TLS_CA")
    cert = cert or _env_path(env, "CONTROL_TLS_CERT")
    key = key or _env_path(env, "CONTROL_TLS_KEY")
    server_name = server_name or env.get(f"{ENV_PREFIX}CONTROL_TLS_SERVER_NAME") or None
    if ca is None and cert is None and key is None and server_name is None:
        return None
    if (cert is None) != (key is None):
        raise ValidationError("--control-tls-cert and --control-tls-key go together")
    return ClientTls.from_files(ca=ca, cert=cert, key=key, server_name=server_name)


def _positive(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(f"{ENV_PREFIX}{name}")
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValidationError(f"{ENV_PREFIX}{name} must be a number, got {raw!r}") from None
    if not value > 0 or value == float("inf"):
        raise ValidationError(f"{ENV_PREFIX}{name} must be a positive number, got {raw!r}")
    return value


def _env_path(env: Mapping[str, str], name: str) -> Path | None:
    value = env.get(f"{ENV_PREFIX}{name}")
    return Path(value) if value else None
