"""Typed control-plane settings: command-line flags win over environment variables over defaults.

Three bearer tokens guard the service: the *admin* token (issue, revoke, keys), the *client*
token that trainers present, and the *worker* token a reward worker presents (register its
contract and its own WORKER key, forward receipts, read certificates, keys and revocations;
never issue, revoke or trust an organization key). Each comes from its environment variable or,
when that is unset, from a 0600 file in the data directory that is made on first start. The
organization signing key lives in the data directory as well (0600, created on first start,
R-SIG-1).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from rewardseal.core.errors import ValidationError
from rewardseal_control.console.peers import Network, parse_trusted_proxies
from rewardseal_control.db import STORE_NAME
from rewardseal_server import service_settings
from rewardseal_server.sqlstore import normalize_url, sqlite_url
from rewardseal_server.tls import ServerTls

ENV_PREFIX = "REWARDSEAL_CONTROL_"
ADMIN_TOKEN_ENV = f"{ENV_PREFIX}ADMIN_TOKEN"
TOKEN_ENV = f"{ENV_PREFIX}TOKEN"
WORKER_TOKEN_ENV = f"{ENV_PREFIX}WORKER_TOKEN"
WORKER_ENROLLMENT_ENV = f"{ENV_PREFIX}WORKER_ENROLLMENT_TOKEN"
"""A one-time worker enrollment credential the operator chose (compose's deploy/.env): stored
as an "any contract" enrollment on start unless stored before (docs/spec.md R-C-11)."""
WORKER_ENROLLMENT_ACCEPTS_ENV = f"{ENV_PREFIX}WORKER_ENROLLMENT_ACCEPTS_BUNDLE_CERTIFICATE"
"""``1``: the bootstrap enrollment (:data:`WORKER_ENROLLMENT_ENV`) also accepts the bundle
certificate the enrolled key registers with, so control lists it (R-C-11). Read when the
credential is armed (its first start); only with :data:`WORKER_ENROLLMENT_ENV`."""
HTTP_PORT_ENV = f"{ENV_PREFIX}HTTP_PORT"
"""The operator console's port (``serve --http-port``); unset: no console."""
CONSOLE_TRUSTED_PROXIES_ENV = f"{ENV_PREFIX}CONSOLE_TRUSTED_PROXIES"
"""Comma-separated proxies whose X-Forwarded-For the console reads (``--console-trusted-proxy``)."""
CONSOLE_TRUSTED_PROXY_FLAG = "--console-trusted-proxy"
DEFAULT_PORT = 8791
DEFAULT_HOST = "127.0.0.1"
ADMIN_TOKEN_FILE = "admin_token"
TOKEN_FILE = "token"
WORKER_TOKEN_FILE = "worker_token"
KEY_FILE = Path("keys") / "organization.ed25519"
DB_FILE = "control.sqlite"
DEFAULT_REVOCATION_TTL = timedelta(hours=24)
ORGANIZATION_KEY_NAME = "control plane organization key"
"""Display name under which the service registers its own organization key."""


@dataclass(frozen=True)
class ControlSettings:
    """Everything the control-plane process needs to start."""

    data_dir: Path
    db_url: str
    host: str
    port: int
    admin_token: str = field(repr=False)
    token: str = field(repr=False)
    worker_token: str = field(repr=False)
    revocation_ttl: timedelta = DEFAULT_REVOCATION_TTL
    reflection: bool = False
    http_port: int | None = None
    """The operator console's HTTP port (0: a free one); None (the default) serves no console."""
    console_trusted_proxies: tuple[Network, ...] = ()
    """Proxies whose ``X-Forwarded-For`` the console reads, on their connections only; empty
    (the default): the socket peer is the client."""
    admin_token_source: str = ""
    """Where the admin token came from (a variable name or a file path; never the token)."""
    token_source: str = ""
    """Where the client token came from."""
    worker_token_source: str = ""
    """Where the worker token came from."""

    tls: ServerTls | None = field(default=None, repr=False)
    """The server's TLS (mutual TLS when it names a client CA); None serves plaintext."""
    metrics_port: int | None = None
    """Serve Prometheus ``/metrics`` here (``--metrics-port``, 0: a free port); None: off."""
    worker_enrollment: str | None = field(default=None, repr=False)
    """``$REWARDSEAL_CONTROL_WORKER_ENROLLMENT_TOKEN``: see :data:`WORKER_ENROLLMENT_ENV`."""
    worker_enrollment_accepts_bundle_certificate: bool = False
    """``$REWARDSEAL_CONTROL_WORKER_ENROLLMENT_ACCEPTS_BUNDLE_CERTIFICATE``: see
    :data:`WORKER_ENROLLMENT_ACCEPTS_ENV`."""

    @property
    def key_path(self) -> Path:
        """Where the organization's Ed25519 private key lives (created 0600 on first start)."""
        return self.data_dir / KEY_FILE


def default_data_dir(env: Mapping[str, str]) -> Path:
    """``$REWARDSEAL_CONTROL_DATA_DIR`` or ``~/.rewardseal/control``."""
    return service_settings.default_data_dir(
        env, env_name=f"{ENV_PREFIX}DATA_DIR", service="control"
    )


def load_token(
    data_dir: Path, env: Mapping[str, str], *, env_name: str, file_name: str
) -> tuple[str, str]:
    """A bearer token and where it came from: ``$env_name``, else the 0600 file
    ``data_dir/file_name`` (made on first start)."""
    return service_settings.load_token(env, env_name=env_name, path=data_dir / file_name)


def parse_duration(text: str) -> timedelta:
    """``"90s"``, ``"15m"``, ``"24h"``, ``"7d"`` or plain seconds, as a positive timedelta."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    value = text.strip().lower()
    scale = 1
    if value and value[-1] in units:
        scale = units[value[-1]]
        value = value[:-1]
    try:
        seconds = float(value) * scale
    except ValueError:
        raise ValidationError(f"{text!r} is not a duration such as 90s, 15m, 24h or 7d") from None
    if not seconds > 0:
        raise ValidationError(f"duration {text!r} must be positive")
    return timedelta(seconds=seconds)


def resolve_settings(
    *,
    data_dir: Path | None = None,
    db_url: str | None = None,
    host: str | None = None,
    port: int | None = None,
    revocation_ttl: timedelta | None = None,
    reflection: bool = False,
    http_port: int | None = None,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    tls_client_ca: Path | None = None,
    metrics_port: int | None = None,
    console_trusted_proxies: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> ControlSettings:
    """Merge flags (arguments), environment and defaults into one settings object.

    Raises:
        ValidationError: on a port out of range, a bad duration, a short or unreadable token,
            unusable TLS settings (a certificate without its key, an unreadable file), or
            two equal tokens among admin, client and worker (the roles would be
            indistinguishable), or a console trusted proxy that is not an address or network
            (or is set without the console), or a bootstrap enrollment setting that is not
            1/0, or set without the bootstrap credential.
    """
    env = os.environ if env is None else env
    # Checked before anything is made: a bad setting leaves no trace behind.
    enrollment = env.get(WORKER_ENROLLMENT_ENV) or None
    accepts = service_settings.env_flag(env, WORKER_ENROLLMENT_ACCEPTS_ENV)
    if accepts and enrollment is None:
        raise ValidationError(
            f"{WORKER_ENROLLMENT_ACCEPTS_ENV} is set but {WORKER_ENROLLMENT_ENV} is not: it says "
            "what the bootstrap enrollment credential accepts; set both, or unset it"
        )
    console_port = service_settings.resolve_optional_port(http_port, env, env_name=HTTP_PORT_ENV)
    proxies = _console_trusted_proxies(console_trusted_proxies, env, console=console_port)
    data = (data_dir or default_data_dir(env)).expanduser().resolve()
    resolved_port = service_settings.resolve_port(
        port, env, env_name=f"{ENV_PREFIX}PORT", default=DEFAULT_PORT
    )
    url = db_url or env.get(f"{ENV_PREFIX}DB_URL") or sqlite_url(data / DB_FILE)
    normalize_url(url, what=STORE_NAME)  # a malformed URL, before the data dir is made
    ttl = revocation_ttl
    if ttl is None:
        configured_ttl = env.get(f"{ENV_PREFIX}REVOCATION_TTL")
        ttl = parse_duration(configured_ttl) if configured_ttl else DEFAULT_REVOCATION_TTL
    if ttl <= timedelta(0):
        raise ValidationError("the revocation list lifetime must be positive")
    # Made here, 0700, once every setting above passed, before the tokens, the key or the
    # database land in it.
    service_settings.make_private_dir(data)
    admin_token, admin_source = load_token(
        data, env, env_name=ADMIN_TOKEN_ENV, file_name=ADMIN_TOKEN_FILE
    )
    token, token_source = load_token(data, env, env_name=TOKEN_ENV, file_name=TOKEN_FILE)
    worker_token, worker_source = load_token(
        data, env, env_name=WORKER_TOKEN_ENV, file_name=WORKER_TOKEN_FILE
    )
    _check_distinct({"admin": admin_token, "client": token, "worker": worker_token})
    return ControlSettings(
        data_dir=data,
        db_url=url,
        host=host or env.get(f"{ENV_PREFIX}HOST", DEFAULT_HOST),
        port=resolved_port,
        admin_token=admin_token,
        token=token,
        worker_token=worker_token,
        revocation_ttl=ttl,
        reflection=reflection,
        http_port=console_port,
        console_trusted_proxies=proxies,
        tls=service_settings.resolve_server_tls(
            tls_cert, tls_key, tls_client_ca, env, env_prefix=ENV_PREFIX
        ),
        admin_token_source=admin_source,
        token_source=token_source,
        worker_token_source=worker_source,
        metrics_port=service_settings.resolve_optional_port(
            metrics_port, env, env_name=f"{ENV_PREFIX}METRICS_PORT"
        ),
        worker_enrollment=enrollment,
        worker_enrollment_accepts_bundle_certificate=accepts,
    )


def _console_trusted_proxies(
    flags: Sequence[str] | None, env: Mapping[str, str], *, console: int | None
) -> tuple[Network, ...]:
    """The flags' proxies, else the variable's (comma-separated), validated before any work."""
    if flags:
        source, entries = CONSOLE_TRUSTED_PROXY_FLAG, list(flags)
    else:
        source = CONSOLE_TRUSTED_PROXIES_ENV
        entries = (env.get(CONSOLE_TRUSTED_PROXIES_ENV) or "").split(",")
    proxies = parse_trusted_proxies(entries, source=source)
    if proxies and console is None:
        raise ValidationError(
            f"{source} applies to the console only: serve it too (--http-port or ${HTTP_PORT_ENV})"
        )
    return proxies


def _check_distinct(tokens: Mapping[str, str]) -> None:
    """Refuse two roles sharing one token: the server could not tell them apart."""
    names = sorted(tokens)
    for index, first in enumerate(names):
        for second in names[index + 1 :]:
            if secrets.compare_digest(tokens[first], tokens[second]):
                raise ValidationError(f"the {first} token and the {second} token must differ")
