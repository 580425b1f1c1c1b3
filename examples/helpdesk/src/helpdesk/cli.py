"""``python -m helpdesk`` (also ``rewardseal-helpdesk``): run and prepare the helpdesk example.

``serve --db-url URL [--host H] [--port P] [--ready-file F] [--token-file F] [--seed-customers N]``
    Serve the API (port 0: a free port). The token comes from ``$HELPDESK_TOKEN``, else
    ``--token-file`` (0600, made with a fresh token when missing). Once serving, the banner is
    printed and, with ``--ready-file``, written there as JSON (never the token). SIGINT or
    SIGTERM stops it; the exit status is then 0.
``init-db --db-url URL [--seed-customers N]``
    Create the schema and seed an empty database, then exit (a sandbox copy starts this way).
``grant-reader --db-url URL --role NAME [--password-env VAR]``
    Make NAME a PostgreSQL login that may only read ``tickets`` (the sql bundle's reader).
``tasks --db-url URL [--limit N]``
    Print seeded tasks as JSON lines (customer, queue, open and closed ticket, other queue).
``bundles --out DIR``
    Write the sql and rest contract bundles to DIR/sql and DIR/rest.

Exit status: 0 done, 1 the service or database failed, 2 a usage or settings error (a port in
use included: one line names it).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from helpdesk.bundles import write_bundles
from helpdesk.server import HelpdeskServer
from helpdesk.store import DEFAULT_SEED, TicketStore
from rewardseal.core.errors import RewardSealError, Unavailable, ValidationError
from rewardseal_server.service_settings import load_token
from rewardseal_server.serving import write_ready_file

PROG = "helpdesk"
TOKEN_ENV = "HELPDESK_TOKEN"
EXIT_FAILED = 1
EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = argparse.ArgumentParser(
        prog=PROG, description="A synthetic ticketing service: rewardseal's second worked example."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser("serve", help="serve the REST API")
    init = commands.add_parser("init-db", help="create the schema and seed an empty database")
    for command in (serve, init):
        command.add_argument("--db-url", required=True, help="SQLite or PostgreSQL URL")
        command.add_argument(
            "--seed-customers", type=int, default=20, metavar="N", help="customers to seed (20)"
        )
        command.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed of the data")
    serve.add_argument("--host", default="127.0.0.1", help="listen address (127.0.0.1)")
    serve.add_argument("--port", type=int, default=8793, help="listen port (8793; 0: free)")
    serve.add_argument("--token-file", type=Path, help=f"token file when ${TOKEN_ENV} is unset")
    serve.add_argument("--ready-file", type=Path, help="write the banner as JSON here once serving")
    serve.add_argument("--log-level", default="warning", help="uvicorn log level (warning)")
    grant = commands.add_parser("grant-reader", help="a PostgreSQL role that may only read")
    grant.add_argument("--db-url", required=True, help="PostgreSQL URL of an owner of the tables")
    grant.add_argument("--role", default="helpdesk_reader", help="role name (helpdesk_reader)")
    grant.add_argument("--password-env", help="variable holding the role's password, if any")
    tasks = commands.add_parser("tasks", help="print seeded tasks as JSON lines")
    tasks.add_argument("--db-url", required=True, help="SQLite or PostgreSQL URL")
    tasks.add_argument("--limit", type=int, default=20, help="at most this many (20)")
    bundles = commands.add_parser("bundles", help="write the sql and rest contract bundles")
    bundles.add_argument("--out", type=Path, required=True, help="directory for sql/ and rest/")
    return parser


def _token(token_file: Path | None) -> tuple[str, str]:
    """The API token and where it came from: ``$HELPDESK_TOKEN``, else the token file."""
    if token_file is None and not os.environ.get(TOKEN_ENV):
        raise ValidationError(f"no token: set ${TOKEN_ENV} or pass --token-file")
    # With the variable set the file is neither read nor made (load_token prefers it).
    path = (token_file or Path(os.devnull)).expanduser().resolve()
    return load_token(os.environ, env_name=TOKEN_ENV, path=path)


async def _serve(args: argparse.Namespace, out: TextIO) -> int:
    token, source = _token(args.token_file)

    def announce(server: HelpdeskServer) -> None:
        banner = server.banner(source)
        print(f"{PROG} serving on {banner['url']} ({banner['db_url']}); synthetic data", file=out)
        if args.ready_file:
            write_ready_file(args.ready_file, banner)

    server = HelpdeskServer(
        args.db_url,
        token=token,
        host=args.host,
        port=args.port,
        seed_customers=args.seed_customers,
        seed=args.seed,
        log_level=args.log_level,
        configure_logging=True,
        on_started=announce,
    )
    await server.serve()
    return 0 if server.http.started else EXIT_FAILED


def _run(args: argparse.Namespace, out: TextIO) -> int:
    if args.command == "serve":
        return asyncio.run(_serve(args, out))
    if args.command == "bundles":
        for directory in write_bundles(args.out):
            print(directory, file=out)
        return 0
    store = TicketStore(args.db_url)
    try:
        if args.command == "init-db":
            store.create_schema()
            added = store.seed_if_empty(args.seed_customers, args.seed)
            print(f"schema ready; {added} customers seeded", file=out)
        elif args.command == "grant-reader":
            password = os.environ.get(args.password_env) if args.password_env else None
            if args.password_env and not password:
                raise ValidationError(f"${args.password_env} is not set")
            store.grant_reader(args.role, password)
            print(f"role {args.role} may read tickets", file=out)
        else:
            for task in store.tasks(args.limit):
                print(json.dumps(dataclasses.asdict(task), sort_keys=True), file=out)
    finally:
        store.close()
    return 0


def main(
    argv: Sequence[str] | None = None, *, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    """Entry point; ``stdout``/``stderr`` default to the process's."""
    out, err = stdout or sys.stdout, stderr or sys.stderr
    args = build_parser().parse_args(argv)
    try:
        return _run(args, out)
    except Unavailable as exc:
        print(f"{PROG}: {exc.message}", file=err)
        return EXIT_FAILED
    except RewardSealError as exc:
        print(f"{PROG}: {exc.message}", file=err)
        return EXIT_USAGE
    except OSError as exc:
        print(f"{PROG}: {exc}", file=err)
        return EXIT_FAILED
