"""``rewardseal-mockmed``: run the synthetic EMR system of record.

``rewardseal-mockmed serve --db-url URL --host 127.0.0.1 --port 0 --ready-file F --seed-rows N``

The client token comes from ``$MOCKMED_TOKEN``, else ``--token-file`` (a 0600 file, made with a
fresh token when missing); the admin token (fault switch) from ``$MOCKMED_ADMIN_TOKEN``, else
``--admin-token-file``; without one the fault switch is off. Once serving, the banner is printed
and, with ``--ready-file``, written there as JSON (port included; never a token). SIGINT or
SIGTERM stops the server after its requests finish; the exit status is then 0.

Exit status: 0 after a clean stop, 1 when the server failed, 2 on a usage or settings error
(a port in use by another process included: one line names it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from rewardseal_mockmed.settings import (
    ADMIN_TOKEN_ENV,
    DB_URL_ENV,
    DEFAULT_DB_URL,
    DEFAULT_HOST,
    DEFAULT_PORT,
    TOKEN_ENV,
    resolve_settings,
)
from rewardseal_mockmed.store import DEFAULT_SEED
from rewardseal_server.cli_failures import EXIT_USAGE, run_cli
from rewardseal_server.cli_help import add_version, style_help
from rewardseal_server.logs import (
    add_logging_options,
    configure_logging,
    logging_env,
    resolve_logging,
)
from rewardseal_server.serving import write_ready_file

PROG = "rewardseal-mockmed"
ENV_PREFIX = "MOCKMED_"
"""MockMed's variables' prefix (MOCKMED_TOKEN, MOCKMED_LOG_LEVEL, ...)."""
DEFAULT_LOG_LEVEL = "warning"
"""Quiet by default: MockMed is a test double beside the services that matter."""
EXIT_FAILED = 1


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="MockMed: a synthetic EMR system of record (no real patient data).",
    )
    add_version(parser, "rewardseal-mockmed")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser("serve", help="serve the REST, FHIR and screen-dump APIs")
    serve.add_argument(
        "--db-url", help=f"SQLite or PostgreSQL URL (default ${DB_URL_ENV} or {DEFAULT_DB_URL})"
    )
    serve.add_argument("--host", help=f"listen address (default {DEFAULT_HOST})")
    serve.add_argument("--port", type=int, help=f"listen port (default {DEFAULT_PORT}; 0: free)")
    serve.add_argument(
        "--token-file", type=Path, help=f"client token file, 0600 (when ${TOKEN_ENV} is unset)"
    )
    serve.add_argument(
        "--admin-token-file",
        type=Path,
        help=f"admin token file for the fault switch (when ${ADMIN_TOKEN_ENV} is unset)",
    )
    serve.add_argument(
        "--screen-file", type=Path, help="also write the screen dump to this file after each change"
    )
    serve.add_argument(
        "--seed-rows",
        type=int,
        default=0,
        metavar="N",
        help="synthetic background rows to add when the table is empty (default 0)",
    )
    serve.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed of those rows")
    serve.add_argument(
        "--ready-file", type=Path, help="write the banner as JSON here once serving (for scripts)"
    )
    add_logging_options(serve, ENV_PREFIX, default_level=DEFAULT_LOG_LEVEL)
    serve.add_argument("--access-log", action="store_true", help="log every request")
    style_help(parser, logging_env(ENV_PREFIX))
    return parser


def banner_text(banner: Mapping[str, Any]) -> str:
    """The banner for people (the JSON form goes to ``--ready-file``)."""
    return "\n".join(
        [
            f"{PROG} serving on {banner['url']} (port {banner['port']})",
            f"  database        {banner['db_url']} ({banner['seeded_rows']} rows seeded now)",
            f"  client token    {banner['token_source']}",
            f"  fault switch    {banner['admin_token_source'] or 'off (no admin token)'}",
            f"  read token      {banner['read_token_source'] or '-'}",
            f"  screen file     {banner['screen_file'] or '-'}",
            "  synthetic data only: no real patient data",
        ]
    )


async def _serve(args: argparse.Namespace, out: TextIO) -> int:
    from rewardseal_mockmed.server import MockMedServer

    settings = resolve_settings(
        db_url=args.db_url,
        host=args.host,
        port=args.port,
        token_file=args.token_file,
        admin_token_file=args.admin_token_file,
        screen_file=args.screen_file,
        seed_rows=args.seed_rows,
        seed=args.seed,
    )

    def announce(server: MockMedServer) -> None:
        banner = server.banner()
        print(banner_text(banner), file=out, flush=True)
        if args.ready_file:
            # Keys sorted, as this file has always been written (the banner is flat).
            write_ready_file(args.ready_file, dict(sorted(banner.items())))

    server = MockMedServer(
        settings,
        log_level=args.log_level,
        access_log=args.access_log,
        on_started=announce,
    )
    await server.serve()
    return 0 if server.started else EXIT_FAILED


def main(
    argv: Sequence[str] | None = None, *, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    """Entry point of ``rewardseal-mockmed``; ``stdout``/``stderr`` default to the process's."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    args = build_parser().parse_args(argv)
    try:
        args.log_level, log_format = resolve_logging(
            args.log_level, args.log_format, os.environ, ENV_PREFIX, default_level=DEFAULT_LOG_LEVEL
        )
    except ValueError as exc:
        print(f"{PROG}: {exc}", file=err)
        return EXIT_USAGE
    # uvicorn's loggers propagate to this one handler (MockMedServer leaves logging alone).
    configure_logging(args.log_level, log_format, stream=err)
    # One line per failure, exit 2 (settings) or 1 (runtime): rewardseal_server.cli_failures.
    return run_cli(PROG, lambda: asyncio.run(_serve(args, out)), err=err, db_env=DB_URL_ENV)


if __name__ == "__main__":
    raise SystemExit(main())
