"""Is this sandbox the live system of record? Decided once, before calibration's first write.

Calibration writes trial rows into its sandbox, so a sandbox that is the live SoR under another
spelling would put synthetic records where an agent's episodes are judged (R-CAL-5). What is
compared is what would be opened, never how it is spelled:

SQLite
    the file, by ``(st_dev, st_ino)``: a plain, relative, ``..`` or ``~`` path, a
    ``sqlite[+driver]://`` URL, a ``file:`` URI (its ``?mode=...`` ignored), a symlink and a hard
    link of the live file all name one inode. A file that does not exist yet is compared by its
    resolved path (its directory's symlinks resolved).
PostgreSQL
    the server and the database, asked of both over read-only sessions: the cluster's
    ``system_identifier`` (where the role may read ``pg_control_system()``; a streaming replica
    shares it, and a write to its primary reaches it) or the postmaster's start time, port and
    the database's oid, with ``current_database()``. Two URLs spelling one server differently
    (``localhost``/``127.0.0.1``, a default port) are one.
REST and FHIR
    the base URL resolved: the host's addresses (every address of this machine counted as one),
    the port with the scheme's default, and the path normalized (dot segments, repeated and
    trailing slashes, percent escapes).

When the live SoR cannot be determined (its variable is unset here, holds no usable URL, or
names a server that cannot be reached or resolved), calibration is refused in one line naming
the variable, unless the operator passes :data:`UNSAFE_UNKNOWN_FLAG`. A sandbox that is the live
SoR is refused whatever the flags.
"""

from __future__ import annotations

import ipaddress
import os
import posixpath
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import unquote, urlsplit

import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.pool import NullPool

from rewardseal.core.errors import ValidationError
from rewardseal_worker.bundle import ContractBundle
from rewardseal_worker.oracles.base import (
    KIND_FHIR,
    KIND_JSON_FILE,
    KIND_REST,
    KIND_SCREEN_DUMP,
    KIND_SQL,
    resolve_relative,
)

__all__ = [
    "UNSAFE_UNKNOWN_FLAG",
    "psycopg_url",
    "refuse_live_target",
    "same_file",
    "sandbox_path",
    "sandbox_sqlite_file",
]

UNSAFE_UNKNOWN_FLAG: Final = "--unsafe-unknown-live-sor"
"""The calibrate flag that proceeds when the live SoR cannot be determined (never when it is the
sandbox)."""
PROBE_TIMEOUT_SECONDS: Final = 5
"""How long a read-only identity probe of a PostgreSQL server may take to connect, and to
answer."""

_LIVE: Final = "refused: the sandbox is the bundle's own read target (the live system of record)"
_DEFAULT_PORTS: Final = {"postgresql": 5432, "http": 80, "https": 443}
_LOOPBACK_NAMES: Final = frozenset({"localhost", "127.0.0.1", "::1", ""})
_THIS_HOST: Final = "this-host"


class _Unknown(Exception):
    """The live SoR's identity could not be determined: why, and what the operator can do."""

    def __init__(self, why: str, fix: str = "") -> None:
        super().__init__(why)
        self.why = why
        self.fix = fix

    def refusal(self) -> str:
        """The one line calibrate stops with."""
        return (
            f"refused before any write: {self.why}, so the sandbox cannot be compared with the "
            f"live system of record; {self.fix} (or pass {UNSAFE_UNKNOWN_FLAG} to calibrate "
            "without that check)"
        )

    def warning(self) -> str:
        """The line said when the operator chose to proceed anyway."""
        return (
            f"UNSAFE ({UNSAFE_UNKNOWN_FLAG}): {self.why}; the sandbox was NOT compared with "
            "the live system of record"
        )


# --- files ---------------------------------------------------------------------------------------


def same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` are one file: one inode when both exist (hard links, symlinks,
    any spelling), else one resolved path (a file about to be created where the other is)."""
    try:
        first, second = os.stat(a), os.stat(b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)
    return (first.st_dev, first.st_ino) == (second.st_dev, second.st_ino)


def _file_uri_path(uri: str) -> Path:
    """The file a ``file:`` URI names (its query, e.g. ``?mode=ro``, selects no other file)."""
    parts = urlsplit(uri)
    if parts.netloc not in ("", "localhost"):
        raise ValidationError("a file: URI of the sandbox names another host; give a local file")
    if not parts.path:
        raise ValidationError("the sandbox file: URI names no file")
    return Path(unquote(parts.path))


def sandbox_path(sandbox: str) -> Path:
    """A sandbox given as a plain path, absolute (``~`` expanded: the operator means home)."""
    return Path(os.path.abspath(Path(sandbox).expanduser()))


def sandbox_sqlite_file(sandbox: str) -> Path | None:
    """The SQLite file a sandbox spelling opens, absolute; None when it names another database.

    A plain path (``~`` expanded: the operator means their home), a ``file:`` URI, or a
    ``sqlite[+driver]://`` URL whose database is a path or (``?uri=true``) a ``file:`` URI.

    Raises:
        ValidationError: not a valid URL, an in-memory database, or a file: URI of another host.
    """
    if sandbox.startswith("file:"):
        path = _file_uri_path(sandbox)
    elif "://" not in sandbox:
        return sandbox_path(sandbox)
    else:
        url = _parse_database_url(sandbox, "the sandbox is not a valid database URL")
        if url.get_backend_name() != "sqlite":
            return None
        database = url.database or ""
        if database in ("", ":memory:") or "mode=memory" in database:
            raise ValidationError("the sandbox must be a SQLite file, not an in-memory database")
        path = _file_uri_path(database) if database.startswith("file:") else Path(database)
    return Path(os.path.abspath(path))


def _parse_database_url(raw: str, message: str) -> sa.engine.URL:
    try:
        return make_url(raw)
    except (ArgumentError, ValueError):
        # Never SQLAlchemy's message: it quotes the URL, which may hold a password.
        raise ValidationError(message) from None


# --- PostgreSQL ----------------------------------------------------------------------------------


def psycopg_url(url: str) -> str:
    """``postgresql://`` as the installed driver (psycopg 3), like the readers connect."""
    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


@dataclass(frozen=True)
class _PostgresIdentity:
    database: str
    system_identifier: str | None
    server: tuple[str, str, str]
    """(postmaster start time, port, database oid): one running server's database."""

    def same_as(self, other: _PostgresIdentity) -> bool:
        if self.database != other.database:
            return False
        if self.system_identifier and self.system_identifier == other.system_identifier:
            return True  # one cluster, or a replica of it
        return self.server == other.server


_IDENTITY_SQL: Final = sa.text(
    # The start time as epoch seconds: its text form would follow each session's TimeZone.
    "SELECT current_database(), d.oid::text, "
    "extract(epoch FROM pg_postmaster_start_time())::text, "
    "current_setting('port') FROM pg_database d WHERE d.datname = current_database()"
)
_SYSTEM_IDENTIFIER_SQL: Final = sa.text("SELECT system_identifier::text FROM pg_control_system()")


def _postgres_identity(url: str) -> _PostgresIdentity:
    """Ask the server behind ``url`` who it is, over one read-only session.

    Raises:
        _Unknown: it cannot be reached (or the driver is missing).
    """
    try:
        engine = sa.create_engine(
            psycopg_url(url),
            poolclass=NullPool,
            connect_args={
                "options": "-c default_transaction_read_only=on "
                f"-c statement_timeout={PROBE_TIMEOUT_SECONDS * 1000}",
                "connect_timeout": PROBE_TIMEOUT_SECONDS,
            },
        )
    except (ImportError, ArgumentError, ValueError) as exc:
        raise _Unknown(type(exc).__name__) from None
    try:
        with engine.connect() as conn:
            database, oid, started, port = conn.execute(_IDENTITY_SQL).one()
            system_identifier: str | None
            try:
                with conn.begin_nested():
                    system_identifier = conn.execute(_SYSTEM_IDENTIFIER_SQL).scalar_one()
            except SQLAlchemyError:
                system_identifier = None  # a role without pg_control_system(): the fallback
    except (SQLAlchemyError, OSError) as exc:
        raise _Unknown(type(exc).__name__) from None
    finally:
        engine.dispose()
    return _PostgresIdentity(str(database), system_identifier, (str(started), str(port), oid))


def _loopback(name: str | None) -> str:
    host = (name or "").lower().strip("[]")
    return "loopback" if host in _LOOPBACK_NAMES else host


def _spelled_database(url: sa.engine.URL) -> tuple[str, ...]:
    """A PostgreSQL URL's (host, port, database) as written, loopback names taken as one."""
    socket_host = url.query.get("host")
    host = url.host or (socket_host if isinstance(socket_host, str) else "")
    return (_loopback(host), str(url.port or _DEFAULT_PORTS["postgresql"]), url.database or "")


# --- HTTP ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _HttpTarget:
    host: str
    port: int
    path: str

    def addresses(self) -> frozenset[str]:
        """The host's addresses, every address of this machine as one.

        Raises:
            _Unknown: the host does not resolve here.
        """
        try:
            found = socket.getaddrinfo(self.host or "localhost", self.port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            why = f"host {self.host!r} does not resolve here ({type(exc).__name__})"
            raise _Unknown(why) from None
        return frozenset(_address_class(str(info[4][0])) for info in found)


def _address_class(address: str) -> str:
    """An address, or "this-host" for one of this machine's (loopback, unspecified, or one it
    can bind: a server on 0.0.0.0 answers at every one of them)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback or ip.is_unspecified:
        return _THIS_HOST
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((address, 0))
    except OSError:
        return str(ip)
    return _THIS_HOST


def _http_target(raw: str, what: str) -> _HttpTarget:
    parts = urlsplit(raw.strip())
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise ValidationError(f"{what} is not an http(s) URL")
    try:
        port = parts.port or _DEFAULT_PORTS[scheme]
    except ValueError:
        raise ValidationError(f"{what} is not a valid URL") from None
    # Dot segments, repeated and trailing slashes and percent escapes name the same resource.
    path = posixpath.normpath("/" + re.sub("/+", "/", unquote(parts.path)))
    return _HttpTarget((parts.hostname or "").lower(), port, path.rstrip("/"))


# --- the decision --------------------------------------------------------------------------------


def refuse_live_target(
    bundle: ContractBundle,
    sandbox: str,
    environ: Mapping[str, str] | None = None,
    *,
    allow_unknown: bool = False,
) -> str | None:
    """Refuse a sandbox that is the system of record the bundle reads, before any write.

    Args:
        bundle: the bundle whose recipe names the live SoR.
        sandbox: ``--sandbox`` as given.
        environ: where the recipe's variables are read (default ``os.environ``).
        allow_unknown: proceed when the live SoR cannot be determined
            (:data:`UNSAFE_UNKNOWN_FLAG`); a sandbox that is the live SoR is refused anyway.

    Returns:
        None when the sandbox is known not to be the live SoR; a warning for the operator when
        it could not be compared and ``allow_unknown`` let calibration proceed.

    Raises:
        ValidationError: one line: what matched (never a URL's password), or why the live SoR
            is unknown and which variable to set.
    """
    env = os.environ if environ is None else environ
    recipe = bundle.recipe
    kind = recipe.get("kind")
    try:
        if kind == KIND_SQL:
            _refuse_live_database(bundle, sandbox, env)
        elif kind in (KIND_REST, KIND_FHIR):
            _refuse_live_api(recipe["base_url_env"], sandbox, env)
        elif kind in (KIND_JSON_FILE, KIND_SCREEN_DUMP):
            live_file = resolve_relative(recipe["path"], bundle.path, "path")
            directory = sandbox_path(sandbox)
            if same_file(live_file, directory / live_file.name) or same_file(live_file, directory):
                raise ValidationError(f"{_LIVE}: {recipe['path']}; use another directory")
    except _Unknown as exc:
        if not allow_unknown:
            raise ValidationError(exc.refusal()) from None
        return exc.warning()
    return None


def _live_value(name: str, env: Mapping[str, str], what: str) -> str:
    live = env.get(name, "").strip()
    if not live:
        raise _Unknown(f"${name} is not set here", f"set ${name} to the live SoR's {what}")
    return live


def _refuse_live_database(bundle: ContractBundle, sandbox: str, env: Mapping[str, str]) -> None:
    database = bundle.recipe["database"]
    sandbox_file = sandbox_sqlite_file(sandbox)
    if "sqlite_path" in database:
        live_file = resolve_relative(database["sqlite_path"], bundle.path, "database.sqlite_path")
        if sandbox_file is not None and same_file(live_file, sandbox_file):
            raise ValidationError(f"{_LIVE}: {database['sqlite_path']}; use a copy")
        return
    name = database["url_env"]
    raw = _live_value(name, env, "database URL")
    set_right = f"set ${name} to the live SoR's database URL"
    try:
        live = make_url(raw)
    except (ArgumentError, ValueError):
        raise _Unknown(f"${name} does not hold a valid database URL", set_right) from None
    matched = f"{_LIVE}: ${name} points at it; use a copy"
    backend = live.get_backend_name()
    if backend == "sqlite":
        # As the sql reader opens it: the URL's database as a path, relative to here.
        if sandbox_file is not None and same_file(Path(live.database or ""), sandbox_file):
            raise ValidationError(matched)
        return
    if backend != "postgresql":
        raise _Unknown(f"${name} names backend {backend!r}", set_right)
    if sandbox_file is not None:
        return  # a SQLite sandbox is no PostgreSQL database
    sandbox_url = _parse_database_url(sandbox, "the sandbox is not a valid database URL")
    if sandbox_url.get_backend_name() != "postgresql":
        return
    if _spelled_database(live) == _spelled_database(sandbox_url):
        raise ValidationError(matched)  # refused even where the server cannot be reached
    try:
        sandbox_identity = _postgres_identity(sandbox)
    except _Unknown as exc:
        raise ValidationError(f"the sandbox database cannot be opened ({exc})") from None
    try:
        live_identity = _postgres_identity(raw)
    except _Unknown as exc:
        raise _Unknown(
            f"the database ${name} names cannot be reached from here ({exc})",
            f"run calibrate where it can be reached, or set ${name} to a URL that reaches it",
        ) from None
    if live_identity.same_as(sandbox_identity):
        raise ValidationError(matched)


def _refuse_live_api(name: str, sandbox: str, env: Mapping[str, str]) -> None:
    raw = _live_value(name, env, "base URL")
    try:
        live = _http_target(raw, f"${name}")
    except ValidationError as exc:
        raise _Unknown(exc.message, f"set ${name} to the live SoR's base URL") from None
    mine = _http_target(sandbox, "the sandbox")
    matched = f"{_LIVE}: ${name} points at it; use a sandbox deployment"
    if (live.port, live.path) != (mine.port, mine.path):
        return
    if _loopback(live.host) == _loopback(mine.host):
        raise ValidationError(matched)
    try:
        sandbox_addresses = mine.addresses()
    except _Unknown as exc:
        raise ValidationError(f"the sandbox cannot be reached: {exc}") from None
    try:
        live_addresses = live.addresses()
    except _Unknown as exc:
        raise _Unknown(
            f"the live SoR's {exc} (${name})",
            f"run calibrate where it resolves, or set ${name} to an address that does",
        ) from None
    if live_addresses & sandbox_addresses:
        raise ValidationError(matched)
