"""Settings plumbing shared by the rewardseal services (the worker and the control plane).

Each service keeps its own names (environment prefix, file names, default port); the rules live
here once:

* the data directory: ``$<PREFIX>DATA_DIR``, else ``~/.rewardseal/<service>``
  (:func:`default_data_dir`);
* the listen port: the flag, else the environment, else the default, within 0..65535
  (:func:`resolve_port`);
* bearer tokens: an environment variable, else a file in the data directory that only its owner
  may read, made 0600 on first start (:func:`load_token`, :func:`load_or_create_token`,
  :func:`read_token_file`). A token file that group or others may read is refused, never used.
* the server's TLS: ``--tls-cert``, ``--tls-key`` and ``--tls-client-ca``, each else
  ``$<PREFIX>TLS_CERT``, ``TLS_KEY``, ``TLS_CLIENT_CA``; none of them: plaintext
  (:func:`resolve_server_tls`).

Standard library only (:mod:`rewardseal.rpc.tls` is imported only when TLS is configured):
trainers importing :mod:`rewardseal` pay nothing for it.
"""

from __future__ import annotations

import os
import secrets
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final

from rewardseal.core.errors import ValidationError
from rewardseal.core.private_dir import PRIVATE_DIR_MODE, make_private_dir

if TYPE_CHECKING:
    from rewardseal_server.tls import ServerTls

__all__ = [
    "MIN_TOKEN_LENGTH",
    "PRIVATE_DIR_MODE",
    "default_data_dir",
    "env_flag",
    "env_int",
    "load_or_create_token",
    "load_token",
    "make_private_dir",
    "read_token_file",
    "resolve_optional_port",
    "resolve_port",
    "resolve_server_tls",
]

MIN_TOKEN_LENGTH: Final = 16
"""Shortest bearer token accepted, from a variable or a file."""


def default_data_dir(env: Mapping[str, str], *, env_name: str, service: str) -> Path:
    """``$env_name`` or ``~/.rewardseal/<service>``."""
    configured = env.get(env_name)
    return Path(configured) if configured else Path.home() / ".rewardseal" / service


def resolve_port(port: int | None, env: Mapping[str, str], *, env_name: str, default: int) -> int:
    """``port``, else ``$env_name``, else ``default``.

    Raises:
        ValidationError: the port is outside 0..65535 (0 picks a free port), or ``$env_name``
            is not a whole number in that range.
    """
    if port is None:
        return env_int(env, env_name, default, minimum=0, maximum=65535)
    if not 0 <= port <= 65535:
        raise ValidationError(f"port {port} is out of range (0..65535; 0 picks a free port)")
    return port


def env_int(
    env: Mapping[str, str],
    name: str,
    default: int,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int:
    """``$name`` as a whole number within ``minimum..maximum`` (either end optional), else
    ``default`` when it is unset or empty.

    Raises:
        ValidationError: one line naming the variable, what it holds (cut short) and what it
            must hold, so a typo in a deployment's environment is fixed from the message alone.
    """
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    bounds = _bounds_text(minimum, maximum)
    try:
        value = int(raw.strip())
    except ValueError:
        value = None
    if (
        value is None
        or (minimum is not None and value < minimum)
        or (maximum is not None and value > maximum)
    ):
        raise ValidationError(
            f"{name} must be a whole number{bounds}, got {raw[:20]!r}: set it to one, or unset "
            "it for the default"
        )
    return value


_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off"})


def env_flag(env: Mapping[str, str], name: str, *, default: bool = False) -> bool:
    """``$name`` as a yes/no setting (``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/
    ``off``, any case), else ``default`` when it is unset or empty.

    Raises:
        ValidationError: one line naming the variable and what it may hold (a typo such as
            ``ture`` is refused, never read as either answer).
    """
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValidationError(
        f"{name} must be 1 or 0 (or true/false, yes/no, on/off), got {raw[:20]!r}: set it to "
        "one, or unset it for the default"
    )


def _bounds_text(minimum: int | None, maximum: int | None) -> str:
    if minimum is not None and maximum is not None:
        return f" from {minimum} to {maximum}"
    if minimum is not None:
        return f" of at least {minimum}"
    return "" if maximum is None else f" of at most {maximum}"


def resolve_optional_port(port: int | None, env: Mapping[str, str], *, env_name: str) -> int | None:
    """``port``, else ``$env_name``, else None: for a listener that is off unless asked for
    (``--metrics-port``, ``--http-port``); 0 picks a free port.

    Raises:
        ValidationError: as :func:`resolve_port`.
    """
    if port is None and not (env.get(env_name) or "").strip():
        return None
    return resolve_port(port, env, env_name=env_name, default=0)


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


def load_or_create_token(path: Path) -> str:
    """The token in ``path`` (see :func:`read_token_file`); made there, 0600, if it is absent.

    A new token is 32 random bytes, URL-safe base64, written with a trailing newline. The
    directory is created if need be. When another process creates the file at the same moment,
    its token is read and returned.
    """
    try:
        return read_token_file(path)
    except FileNotFoundError:
        pass
    make_private_dir(path.parent)
    token = secrets.token_urlsafe(32)
    # Written whole under a private name (0600, O_EXCL, from the first byte), then linked into
    # place: a concurrent reader never sees a half-written file, and link() never replaces a
    # file, nor writes through a planted symlink, that is already there.
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(token + "\n")
        try:
            os.link(temporary, path)
        except FileExistsError:
            # Another starter made it between our read and our link: use theirs.
            return read_token_file(path)
    finally:
        os.unlink(temporary)
    return token


def load_token(env: Mapping[str, str], *, env_name: str, path: Path) -> tuple[str, str]:
    """A bearer token and where it came from: ``$env_name``, else the file ``path``.

    The source is ``"$<env_name>"`` or the file's path, never the token itself.

    Raises:
        ValidationError: the variable's token is shorter than :data:`MIN_TOKEN_LENGTH`, or the
            file is unusable (see :func:`read_token_file`).
    """
    configured = env.get(env_name)
    if configured:
        if len(configured) < MIN_TOKEN_LENGTH:
            raise ValidationError(f"{env_name} must have at least {MIN_TOKEN_LENGTH} characters")
        return configured, f"${env_name}"
    return load_or_create_token(path), str(path)


def resolve_server_tls(
    cert: Path | None,
    key: Path | None,
    client_ca: Path | None,
    env: Mapping[str, str],
    *,
    env_prefix: str,
) -> ServerTls | None:
    """A server's TLS settings, or None (plaintext) when no certificate and no key is set.

    Each file comes from its flag (``cert``, ``key``, ``client_ca``), else from
    ``$<env_prefix>TLS_CERT``, ``TLS_KEY`` or ``TLS_CLIENT_CA``. With a client CA, clients must
    present a certificate it issued (mutual TLS). The files are read now, once.

    Raises:
        ValidationError: a certificate without its key or the reverse, a client CA without a
            certificate, or a file that cannot be read or is not PEM.
    """
    cert = cert or _env_path(env, f"{env_prefix}TLS_CERT")
    key = key or _env_path(env, f"{env_prefix}TLS_KEY")
    client_ca = client_ca or _env_path(env, f"{env_prefix}TLS_CLIENT_CA")
    if cert is None and key is None:
        if client_ca is not None:
            raise ValidationError(
                f"--tls-client-ca ({env_prefix}TLS_CLIENT_CA) needs --tls-cert and --tls-key"
            )
        return None
    if cert is None or key is None:
        given, missing = ("--tls-cert", "KEY") if key is None else ("--tls-key", "CERT")
        flag = f"--tls-{missing.lower()}"
        raise ValidationError(f"{given} needs {flag} ({env_prefix}TLS_{missing}) as well")
    from rewardseal_server.tls import ServerTls

    return ServerTls.from_files(cert, key, client_ca)


def _env_path(env: Mapping[str, str], name: str) -> Path | None:
    value = env.get(name)
    return Path(value) if value else None
