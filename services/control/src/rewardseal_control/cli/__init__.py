"""``rewardseal-control``: run the control plane (``serve``, ``migrate``) and administer it.

Admin commands talk to a running control plane over gRPC (``--target host:port``). They print
tables for people and, with ``--json``, one JSON document for scripts. The bearer token comes
from ``--token``, else ``$REWARDSEAL_CONTROL_ADMIN_TOKEN``, else ``$REWARDSEAL_CONTROL_TOKEN``,
else the token files in ``--data-dir`` (admin first); it is never printed. Over TLS they pin the
control plane's CA with ``--tls-ca`` (and ``--tls-server-name`` when its certificate names
another host than ``--target``), and for mutual TLS present ``--tls-cert`` and ``--tls-key``;
each flag else ``$REWARDSEAL_CONTROL_CLIENT_TLS_CA``, ``_CERT``, ``_KEY``, ``_SERVER_NAME``.
With none of them the channel is plaintext. ``serve --tls-cert --tls-key [--tls-client-ca]``
serves TLS (mutual TLS with a client CA).

``integrity …`` administers reward integrity (docs/integrity.md): reward systems, protocols,
profiles, bindings, signal shards, sentinel audits and their reviews.

Exit status: 0 on success, 1 when the control plane refused the request (or could not be
reached; also a reward-system spec with blockers, a binding that cannot gate and an audit bundle
that does not verify), 2 on a usage or local error (a missing or malformed file, no token, bad
settings).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from typing import TextIO

from rewardseal.core.errors import RewardSealError, Unavailable
from rewardseal_control.cli.admin import client_tls, run_admin, target
from rewardseal_control.cli.common import (
    CLIENT_TLS_ENV,
    EXIT_REFUSED,
    EXIT_USAGE,
    PROG,
    TARGET_ENV,
    Refused,
    UsageError,
)
from rewardseal_control.cli.integrity import run_integrity
from rewardseal_control.cli.parser import build_parser
from rewardseal_control.cli.serve import migrate, serve
from rewardseal_control.settings import ENV_PREFIX
from rewardseal_server.cli_failures import run_cli
from rewardseal_server.logs import configure_logging, resolve_logging

DB_URL_ENV = f"{ENV_PREFIX}DB_URL"

__all__ = [
    "CLIENT_TLS_ENV",
    "EXIT_REFUSED",
    "EXIT_USAGE",
    "PROG",
    "Refused",
    "UsageError",
    "build_parser",
    "client_tls",
    "main",
]


def main(
    argv: Sequence[str] | None = None, *, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    """Entry point of ``rewardseal-control``; ``stdout``/``stderr`` default to the process's."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    args = build_parser().parse_args(argv)
    # Anything not caught below: one line, exit 2 or 1 (rewardseal_server.cli_failures).
    return run_cli(PROG, lambda: _run(args, out, err), err=err, db_env=DB_URL_ENV)


def _run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        if args.command == "serve":
            try:
                configure_logging(
                    *resolve_logging(args.log_level, args.log_format, os.environ, ENV_PREFIX)
                )
            except ValueError as exc:
                raise UsageError(str(exc)) from None
            return asyncio.run(serve(args, out))
        if args.command == "migrate":
            return migrate(args, out)
        if args.command == "integrity":
            return run_integrity(args, out)
        return run_admin(args, out)
    except Refused as refused:
        if refused.error.reason == Unavailable.reason and hasattr(args, "target"):
            # Not a refusal: nobody answered. Say where it dialled and what to check.
            print(
                f"{PROG}: cannot reach the control plane at {target(args)}: "
                f"{refused.error.message} (check that it runs there, --target HOST:PORT or "
                f"${TARGET_ENV}, and --tls-ca when it serves TLS)",
                file=err,
            )
            return EXIT_REFUSED
        print(f"{PROG}: refused: {refused.error.message} ({refused.error.reason})", file=err)
        return EXIT_REFUSED
    except UsageError as exc:
        print(f"{PROG}: {exc}", file=err)
        return EXIT_USAGE
    except Unavailable:
        raise  # a database that refuses connections: exit 1, with its cause, in run_cli
    except RewardSealError as exc:
        # Local: bad settings, a file that is not a calibration summary, a database URL.
        print(f"{PROG}: {exc.message}", file=err)
        return EXIT_USAGE
