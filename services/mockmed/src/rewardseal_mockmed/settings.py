"""MockMed settings: command-line flags win over environment variables over defaults.

Two bearer tokens: the *client* token guards the write, read, FHIR and screen APIs; the *admin*
token guards the fault switch. An optional third, the *read* token (``MOCKMED_READ_TOKEN``), may
only read (the read, FHIR and screen APIs): what a reward worker's oracle is given, so the
reader of the system of record cannot write to it. Each comes from its variable (``MOCKMED_TOKEN``,
``MOCKMED_ADMIN_TOKEN``) or, when that is unset, from a 0600 file (made with a fresh token on
first start when missing). Without an admin token the fault switch is off. Tokens are never
printed or logged; only where they came from is.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from rewardseal.core.errors import ValidationError
from rewardseal_mockmed.store import DEFAULT_SEED, MAX_SEED_ROWS
from rewardseal_server.service_settings import (
    MIN_TOKEN_LENGTH,
    load_or_create_token,
    read_token_file,
    resolve_port,
)

__all__ = [
    "ADMIN_TOKEN_ENV",
    "DB_URL_ENV",
    "DEFAULT_DB_URL",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "MIN_TOKEN_LENGTH",
    "TOKEN_ENV",
    "READ_TOKEN_ENV",
    "MockMedSettings",
    "load_token",
    "read_token_file",
    "resolve_settings",
]

TOKEN_ENV: Final = "MOCKMED_TOKEN"
ADMIN_TOKEN_ENV: Final = "MOCKMED_ADMIN_TOKEN"
READ_TOKEN_ENV: Final = "MOCKMED_READ_TOKEN"
"""The read-only token's variable (unset: no read-only token)."""
DB_URL_ENV: Final = "MOCKMED_DB_URL"
DEFAULT_DB_URL: Final = "sqlite:///mockmed.sqlite"
"""SQLite in the working directory (WAL)."""
DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8792


@dataclass(frozen=True)
class MockMedSettings:
    """Everything a MockMed process needs to start."""

    db_url: str
    token: str = field(repr=False)
    admin_token: str | None = field(default=None, repr=False)
    read_token: str | None = field(default=None, repr=False)
    """May only read (``$MOCKMED_READ_TOKEN``); None: no read-only token."""
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    screen_file: Path | None = None
    seed_rows: int = 0
    seed: int = DEFAULT_SEED
    token_source: str = ""
    """Where the client token came from (a variable name or a file path; never the token)."""
    admin_token_source: str = ""
    """Where the admin token came from, or empty when the fault switch is off."""
    read_token_source: str = ""
    """Where the read-only token came from, or empty when there is none."""

    def __post_init__(self) -> None:
        """Check ports, row counts and tokens.

        Raises:
            ValidationError: on a bad port or row count, a short token, or equal tokens.
        """
        if not 0 <= self.port <= 65535:
            raise ValidationError(f"port {self.port} is out of range")
        if not 0 <= self.seed_rows <= MAX_SEED_ROWS:
            raise ValidationError(f"--seed-rows must be in 0..{MAX_SEED_ROWS}")
        tokens = {
            "client token": self.token,
            "admin token": self.admin_token,
            "read token": self.read_token,
        }
        for name, token in tokens.items():
            if token is not None and len(token) < MIN_TOKEN_LENGTH:
                raise ValidationError(
                    f"the {name} must have at least {MIN_TOKEN_LENGTH} characters"
                )
        given = [(name, token) for name, token in tokens.items() if token is not None]
        for index, (first, one) in enumerate(given):
            for second, other in given[index + 1 :]:
                if secrets.compare_digest(one, other):
                    raise ValidationError(f"the {first} and the {second} must differ")


def load_token(env: Mapping[str, str], env_name: str, path: Path | None) -> tuple[str | None, str]:
    """A token and where it came from: ``$env_name``, else the file ``path`` (made 0600 with a
    fresh token when missing), else ``(None, "")``."""
    configured = env.get(env_name)
    if configured:
        return configured, f"${env_name}"
    if path is None:
        return None, ""
    path = path.expanduser().resolve()
    return load_or_create_token(path), str(path)


def resolve_settings(
    *,
    db_url: str | None = None,
    host: str | None = None,
    port: int | None = None,
    token_file: Path | None = None,
    admin_token_file: Path | None = None,
    screen_file: Path | None = None,
    seed_rows: int = 0,
    seed: int = DEFAULT_SEED,
    env: Mapping[str, str] | None = None,
) -> MockMedSettings:
    """Merge flags (arguments), environment and defaults into one settings object.

    Raises:
        ValidationError: no client token (neither ``$MOCKMED_TOKEN`` nor a token file), an
            unreadable or short token, equal tokens, or a bad port or row count.
    """
    env = os.environ if env is None else env
    token, token_source = load_token(env, TOKEN_ENV, token_file)
    if token is None:
        raise ValidationError(f"no client token: set ${TOKEN_ENV} or pass --token-file")
    admin_token, admin_source = load_token(env, ADMIN_TOKEN_ENV, admin_token_file)
    read_token, read_source = load_token(env, READ_TOKEN_ENV, None)
    return MockMedSettings(
        db_url=db_url or env.get(DB_URL_ENV) or DEFAULT_DB_URL,
        token=token,
        admin_token=admin_token,
        read_token=read_token,
        host=host or env.get("MOCKMED_HOST") or DEFAULT_HOST,
        port=resolve_port(port, env, env_name="MOCKMED_PORT", default=DEFAULT_PORT),
        screen_file=screen_file.expanduser().resolve() if screen_file else None,
        seed_rows=seed_rows,
        seed=seed,
        token_source=token_source,
        admin_token_source=admin_source,
        read_token_source=read_source,
    )
