"""Typed control-plane settings: command-line flags win over environment variables over defaults.

Two bearer tokens guard the service: the *admin* token (issue, revoke, keys) and the *client*
token that workers and trainers present. Each comes from its environment variable or, when that
is unset, from a 0600 file in the data directory that is made on first start. The organization
signing key lives in the data directory as well (0600, created on first start, R-SIG-1).
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from rewardseal.errors import ValidationError

ENV_PREFIX = "REWARDSEAL_CONTROL_"
ADMIN_TOKEN_ENV = f"{ENV_PREFIX}ADMIN_TOKEN"
TOKEN_ENV = f"{ENV_PREFIX}TOKEN"
DEFAULT_PORT = 8791
DEFAULT_HOST = "127.0.0.1"
ADMIN_TOKEN_FILE = "admin_token"
TOKEN_FILE = "token"
KEY_FILE = Path("keys") / "organization.ed25519"
DB_FILE = "control.sqlite"
DEFAULT_REVOCATION_TTL = timedelta(hours=24)
MIN_TOKEN_LENGTH = 16
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
    revocation_ttl: timedelta = DEFAULT_REVOCATION_TTL
    reflection: bool = False
    admin_token_source: str = ""
    """Where the admin token came from (a variable name or a file path; never the token)."""
    token_source: str = ""
    """Where the client token came from."""

    @property
    def key_path(self) -> Path:
        """Where the organization's Ed25519 private key lives (created 0600 on first start)."""
        return self.data_dir / KEY_FILE


def default_data_dir(env: Mapping[str, str]) -> Path:
    """``$REWARDSEAL_CONTROL_DATA_DIR`` or ``~/.rewardseal/control``."""
    configured = env.get(f"{ENV_PREFIX}DATA_DIR")
    return Path(configured) if configured else Path.home() / ".rewardseal" / "control"


def read_token_file(path: Path) -> str:
    """The token in ``path``; refuses a file that group or others may read.

    Raises:
        ValidationError: if the file is readable by others or holds no usable token.
        FileNotFoundError: if there is no such file.
    """
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise ValidationError(f"{path} must not be readable by group or others (chmod 600)")
    token = path.read_text().strip()
    if len(token) < MIN_TOKEN_LENGTH:
        raise ValidationError(f"{path} holds no usable token")
    return token


def load_token(
    data_dir: Path, env: Mapping[str, str], *, env_name: str, file_name: str
) -> tuple[str, str]:
    """A bearer token and where it came from: ``$env_name``, else the 0600 file
    ``data_dir/file_name`` (made on first start)."""
    configured = env.get(env_name)
    if configured:
        if len(configured) < MIN_TOKEN_LENGTH:
            raise ValidationError(f"{env_name} must have at least {MIN_TOKEN_LENGTH} characters")
        return configured, f"${env_name}"
    path = data_dir / file_name
    try:
        return read_token_file(path), str(path)
    except FileNotFoundError:
        pass
    data_dir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    try:
        # O_EXCL with 0600 from the first byte: never write through a planted file or symlink.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        # Another starter made it between our read and create: use theirs.
        return read_token_file(path), str(path)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    return token, str(path)


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
    env: Mapping[str, str] | None = None,
) -> ControlSettings:
    """Merge flags (arguments), environment and defaults into one settings object.

    Raises:
        ValidationError: on a port out of range, a bad duration, a short or unreadable token, or
            an admin token equal to the client token (the roles would be indistinguishable).
    """
    env = os.environ if env is None else env
    data = (data_dir or default_data_dir(env)).expanduser().resolve()
    resolved_port = port if port is not None else int(env.get(f"{ENV_PREFIX}PORT", DEFAULT_PORT))
    if not 0 <= resolved_port <= 65535:
        raise ValidationError(f"port {resolved_port} is out of range")
    url = db_url or env.get(f"{ENV_PREFIX}DB_URL") or f"sqlite:///{data / DB_FILE}"
    ttl = revocation_ttl
    if ttl is None:
        configured_ttl = env.get(f"{ENV_PREFIX}REVOCATION_TTL")
        ttl = parse_duration(configured_ttl) if configured_ttl else DEFAULT_REVOCATION_TTL
    if ttl <= timedelta(0):
        raise ValidationError("the revocation list lifetime must be positive")
    admin_token, admin_source = load_token(
        data, env, env_name=ADMIN_TOKEN_ENV, file_name=ADMIN_TOKEN_FILE
    )
    token, token_source = load_token(data, env, env_name=TOKEN_ENV, file_name=TOKEN_FILE)
    if secrets.compare_digest(admin_token, token):
        raise ValidationError("the admin token and the client token must differ")
    return ControlSettings(
        data_dir=data,
        db_url=url,
        host=host or env.get(f"{ENV_PREFIX}HOST", DEFAULT_HOST),
        port=resolved_port,
        admin_token=admin_token,
        token=token,
        revocation_ttl=ttl,
        reflection=reflection,
        admin_token_source=admin_source,
        token_source=token_source,
    )
