"""``rewardseal-worker migrate``: bring the worker store to a revision and exit (R-W-17).

``serve`` does not migrate: it refuses a store whose schema is not at this build's newest
revision, in one line naming this command (a fresh database it creates at that revision). Run
this once per store before starting an upgraded fleet (the replicas and the ``--processes N``
children share the store). The store is ``serve``'s (``--data-dir``, ``--db-url`` or
``$REWARDSEAL_WORKER_DB_URL``); ``--revision`` picks a revision other than the newest. A store
made before the worker had migrations is adopted (``rewardseal_worker.store.migrating``).

Options and wording as ``rewardseal-control migrate``'s. Exit status as for every worker
command (:mod:`rewardseal_server.cli_failures`): 0 done, 2 a usage error, 1 a database that
cannot be reached or a schema this build cannot migrate.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from rewardseal_server.service_settings import make_private_dir
from rewardseal_worker.settings import ENV_PREFIX, default_data_dir, store_url
from rewardseal_worker.store.core import STORE_NAME
from rewardseal_worker.store.migrating import MIGRATIONS
from rewardseal_worker.store_commands import run_store_command

__all__ = ["add_migrate_command", "run_migrate_command"]


def add_migrate_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``migrate`` to the worker's subcommands."""
    migrate = commands.add_parser("migrate", help="apply the database migrations and exit")
    # The variables they fall back to are named by the help formatter (style_help).
    migrate.add_argument("--data-dir", type=Path, help="keys, token and the default database")
    migrate.add_argument("--db-url", help="receipt store URL (default SQLite in the data dir)")
    migrate.add_argument("--revision", default="head", help="target revision (default head)")


def run_migrate_command(
    args: argparse.Namespace,
    out: TextIO | None = None,
    err: TextIO | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """Run ``migrate``; the exit status (0, 2 or 1, as the module says)."""
    return run_store_command(lambda stdout, environ: _migrate(args, stdout, environ), out, err, env)


def _migrate(args: argparse.Namespace, out: TextIO, env: Mapping[str, str]) -> int:
    data_dir = (args.data_dir or default_data_dir(env)).expanduser().resolve()
    if not (args.db_url or env.get(f"{ENV_PREFIX}DB_URL")):
        make_private_dir(data_dir)
    url = store_url(data_dir, args.db_url, env)
    MIGRATIONS.upgrade(url, args.revision)
    print(f"{STORE_NAME} at revision {MIGRATIONS.current(url)}", file=out)
    return 0
