"""Typed worker settings: command-line flags win over environment variables over defaults."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rewardseal import service_settings
from rewardseal.errors import ValidationError
from rewardseal.tls import ServerTls

ENV_PREFIX = "REWARDSEAL_WORKER_"
DEFAULT_PORT = 8790
TOKEN_FILE = "token"
KEY_FILE = Path("keys") / "worker.ed25519"
DEFAULT_BUNDLE = Path("contracts") / "mockmed"


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
    health_interval_seconds: float = 5.0
    """How often the store is probed to keep grpc.health.v1 truthful (see health_watch)."""
    control_target: str | None = None
    """host:port of the control plane; None runs the worker on its own."""
    control_token: str | None = None
    control_admin_token: str | None = None
    """Lets the worker register its own key with control; without it an operator does."""
    tls: ServerTls | None = field(default=None, repr=False)
    """The server's TLS (mutual TLS when it names a client CA); None serves plaintext."""

    @property
    def key_path(self) -> Path:
        """Where the worker's Ed25519 private key lives (created 0600 on first start)."""
        return self.data_dir / KEY_FILE


def default_data_dir(env: Mapping[str, str]) -> Path:
    """``$REWARDSEAL_WORKER_DATA_DIR`` or ``~/.rewardseal/worker``."""
    return service_settings.default_data_dir(
        env, env_name=f"{ENV_PREFIX}DATA_DIR", service="worker"
    )


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
    env: Mapping[str, str] | None = None,
) -> WorkerSettings:
    """Merge flags (arguments), environment and defaults into one settings object.

    Raises:
        ValidationError: a bad port or number, ``--control`` without its token, or unusable TLS
            settings (a certificate without its key, an unreadable or non-PEM file).
    """
    env = os.environ if env is None else env
    data = (data_dir or default_data_dir(env)).expanduser().resolve()
    contract = contract_dir or _env_path(env, "CONTRACT") or data / DEFAULT_BUNDLE
    resolved_port = service_settings.resolve_port(
        port, env, env_name=f"{ENV_PREFIX}PORT", default=DEFAULT_PORT
    )
    url = db_url or env.get(f"{ENV_PREFIX}DB_URL") or f"sqlite:///{data / 'worker.sqlite'}"
    trials = calibration_trials or int(env.get(f"{ENV_PREFIX}CALIBRATION_TRIALS", 300))
    control = control_target or env.get(f"{ENV_PREFIX}CONTROL") or None
    control_token = env.get(f"{ENV_PREFIX}CONTROL_TOKEN") or None
    if control and not control_token:
        raise ValidationError(
            f"--control needs the control plane's token in {ENV_PREFIX}CONTROL_TOKEN"
        )
    return WorkerSettings(
        data_dir=data,
        contract_dir=contract.expanduser().resolve(),
        host=host or env.get(f"{ENV_PREFIX}HOST", "127.0.0.1"),
        port=resolved_port,
        db_url=url,
        token=load_token(data, env),
        seed_mockmed=seed_mockmed,
        calibration_trials=trials,
        reflection=reflection,
        episode_ttl_seconds=float(env.get(f"{ENV_PREFIX}EPISODE_TTL_SECONDS", 3600.0)),
        health_interval_seconds=_positive(env, "HEALTH_INTERVAL_SECONDS", 5.0),
        control_target=control,
        control_token=control_token,
        control_admin_token=env.get(f"{ENV_PREFIX}CONTROL_ADMIN_TOKEN") or None,
        tls=service_settings.resolve_server_tls(
            tls_cert, tls_key, tls_client_ca, env, env_prefix=ENV_PREFIX
        ),
    )


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
