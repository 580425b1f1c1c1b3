"""One line per failure for the service command lines (worker, control plane, MockMed).

A service that cannot start says so in one line on stderr, ``PROG: what failed: why (fix)``, and
exits with :data:`EXIT_USAGE` (2) for a usage or settings error the operator fixes in the command
line or the environment, or :data:`EXIT_RUNTIME` (1) when something it depends on failed at run
time (a database that refuses connections). No traceback: an unexpected error is named by its
class and message, and ``REWARDSEAL_TRACEBACK=1`` prints the traceback as well, for a bug report.

Credentials never reach the line: the password of any URL in it is masked
(:func:`mask_credentials`), and a database's refusal is reduced to its cause and address
(``connection refused at 127.0.0.1:5999``), which a driver message states without the password.
"""

from __future__ import annotations

import os
import re
import sqlite3
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TextIO

from rewardseal.core.errors import RewardSealError, Unavailable

__all__ = [
    "EXIT_RUNTIME",
    "EXIT_USAGE",
    "TRACEBACK_ENV",
    "Failure",
    "database_cause",
    "describe",
    "mask_credentials",
    "run_cli",
]

EXIT_RUNTIME: Final = 1
"""Something the service depends on failed while it ran or started (a database, a file)."""
EXIT_USAGE: Final = 2
"""A usage or settings error: the command line, the environment or a file it names."""
EXIT_INTERRUPTED: Final = 130
"""Ctrl-C before the service was serving (the shell's convention: 128 + SIGINT)."""
TRACEBACK_ENV: Final = "REWARDSEAL_TRACEBACK"
"""Set to 1 to print the traceback of a failure as well (for a bug report)."""

# The placeholder PASSWORD (as in "postgresql://USER:PASSWORD@HOST/DB", the expected form a
# message shows) is left alone; any other password is masked.
_URL_PASSWORD = re.compile(
    r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:)(?!PASSWORD@)[^\s@/]*@"
)
# libpq's words for a failed connection: `connection to server at "HOST" (ADDR), port P failed:
# WHY` (TCP) or `connection to server on socket "PATH" failed: WHY` (a unix socket).
_PG_TCP = re.compile(
    r'connection to server at "(?P<host>[^"]*)"(?: \([^)]*\))?, port (?P<port>\d+) failed: '
    r"(?P<why>[^\n]*)"
)
_PG_SOCKET = re.compile(r'connection to server on socket "(?P<path>[^"]*)" failed: (?P<why>[^\n]*)')


@dataclass(frozen=True)
class Failure:
    """What a command line prints after its name, and the exit status it returns."""

    message: str
    status: int


def mask_credentials(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@`` URL replaced by ``***``."""
    return _URL_PASSWORD.sub(r"\g<head>***@", text)


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and its causes (``raise ... from``) and contexts, each once, outermost first."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0].strip() if text.strip() else ""


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def database_cause(exc: BaseException) -> str | None:
    """Why a database could not be used, from the driver error under ``exc``, or None.

    Only the connection failure's own words and address are kept (``connection refused at
    127.0.0.1:5999``, ``password authentication failed for user "rewardseal"``): what the
    services' stores deliberately drop from RPC errors (a statement's text, its parameters)
    never appears here, since only connection-time failures are matched.
    """
    for link in _chain(exc):
        module = type(link).__module__
        text = str(link)
        if module.startswith("psycopg"):
            found = _PG_TCP.search(text)
            if found:
                why = _lower_first(found["why"].strip())
                return f"{why} at {found['host']}:{found['port']}"
            found = _PG_SOCKET.search(text)
            if found:
                return f"{_lower_first(found['why'].strip())} at socket {found['path']}"
            if "connection" in text.lower() or "authentication" in text.lower():
                return mask_credentials(_first_line(text))
        if isinstance(link, sqlite3.OperationalError) and "unable to open" in text:
            return f"SQLite {text}"
    return None


def describe(exc: BaseException, *, db_flag: str = "--db-url", db_env: str = "") -> Failure:
    """The one line (without the program name) and exit status for ``exc``.

    ``db_flag``/``db_env`` name where the service takes its database URL, for the fix that a
    database failure suggests.
    """
    if isinstance(exc, Unavailable):
        message = exc.message
        cause = database_cause(exc)
        if cause is not None:
            where = f"{db_flag} (or ${db_env})" if db_env else db_flag
            message = (
                f"{message.split(' (', 1)[0]}: {cause} (start the database, or point {where} at "
                "one that accepts connections)"
            )
        return Failure(mask_credentials(message), EXIT_RUNTIME)
    if isinstance(exc, RewardSealError):
        return Failure(mask_credentials(_first_line(exc.message)), EXIT_USAGE)
    if isinstance(exc, OSError):
        what = exc.strerror or _first_line(str(exc)) or type(exc).__name__
        where = f": {exc.filename}" if exc.filename else ""
        return Failure(mask_credentials(f"{_lower_first(what)}{where}"), EXIT_RUNTIME)
    detail = _first_line(str(exc))
    named = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
    return Failure(
        mask_credentials(
            f"unexpected error ({named}); rerun with {TRACEBACK_ENV}=1 for the traceback and "
            "report it"
        ),
        EXIT_RUNTIME,
    )


def run_cli(
    prog: str,
    body: Callable[[], int],
    *,
    err: TextIO,
    db_flag: str = "--db-url",
    db_env: str = "",
) -> int:
    """Run ``body`` (a command) and turn any failure into one line on ``err`` and an exit status.

    ``SystemExit`` (argparse, an explicit exit) passes through; Ctrl-C returns
    :data:`EXIT_INTERRUPTED` quietly.
    """
    try:
        return body()
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as exc:
        if os.environ.get(TRACEBACK_ENV) == "1":
            traceback.print_exc(file=err)
        failure = describe(exc, db_flag=db_flag, db_env=db_env)
        print(f"{prog}: {failure.message}", file=err, flush=True)
        return failure.status
