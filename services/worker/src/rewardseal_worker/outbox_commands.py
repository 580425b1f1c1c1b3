"""``rewardseal-worker outbox dead-letter list|retry``: the receipts control refused for good.

A receipt control refuses permanently (R-C-12, :mod:`rewardseal_worker.record_refusals`) leaves
the outbox for the dead letter of the worker store. ``list`` shows each (receipt, episode,
reason, control's message, when); ``retry RECEIPT_ID ...`` or ``retry --all`` puts them back
into the outbox, due at once: a running worker joined to control forwards them at its next
pass, a stopped one when it starts. Both work on the store ``serve`` uses (``--data-dir``,
``--db-url`` or ``$REWARDSEAL_WORKER_DB_URL``), also while the worker runs.

Exit status as for every worker command (:mod:`rewardseal_server.cli_failures`): 0 done, 2 a
usage error or a refusal (an id not in the dead letter: nothing is moved; no store where one
was named), 1 a database that cannot be reached.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from rewardseal.core.clock import utc_now
from rewardseal.core.errors import Code, ValidationError
from rewardseal_server.sqlstore import backend_of, normalize_url
from rewardseal_worker.settings import default_data_dir, store_url
from rewardseal_worker.store import DeadLetter, WorkerStore
from rewardseal_worker.store.core import STORE_NAME
from rewardseal_worker.store_commands import PROG, run_store_command

__all__ = ["add_outbox_commands", "run_outbox_command"]
_CODE_NAMES = {int(code): code.name for code in Code}


def add_outbox_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``outbox dead-letter list|retry`` to the worker's subcommands."""
    outbox = commands.add_parser("outbox", help="the receipts waiting for, or refused by, control")
    families = outbox.add_subparsers(dest="outbox_family", required=True, metavar="FAMILY")
    dead = families.add_parser(
        "dead-letter", help="receipts control refused permanently (kept, no longer sent)"
    )
    actions = dead.add_subparsers(dest="dead_letter_action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="each receipt, its episode, reason and message")
    retry = actions.add_parser("retry", help="put receipts back into the outbox to be sent again")
    retry.add_argument("receipt_ids", nargs="*", metavar="RECEIPT_ID", help="receipts to retry")
    retry.add_argument("--all", action="store_true", help="retry every receipt in the dead letter")
    for action in (listing, retry):
        # The variables they fall back to are named by the help formatter (style_help).
        action.add_argument("--data-dir", type=Path, help="the worker's data dir, as for serve")
        action.add_argument(
            "--db-url", help="the worker store URL (default: the SQLite file in the data dir)"
        )
        action.add_argument("--json", action="store_true", help="print JSON for scripts")


def run_outbox_command(
    args: argparse.Namespace,
    out: TextIO | None = None,
    err: TextIO | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """Run ``outbox dead-letter <action>``; the exit status (0, 2 or 1, as the module says)."""
    return run_store_command(lambda stdout, environ: _run(args, stdout, environ), out, err, env)


def _run(args: argparse.Namespace, out: TextIO, env: Mapping[str, str]) -> int:
    if args.dead_letter_action == "retry" and bool(args.receipt_ids) == bool(args.all):
        raise ValidationError("retry needs RECEIPT_ID ... or --all (one of them)")
    store = _open_store(args.data_dir, args.db_url, env)
    try:
        if args.dead_letter_action == "list":
            _print_list(store.dead_letter_entries(), out, as_json=args.json)
            return 0
        moved = store.dead_letter_retry(None if args.all else args.receipt_ids, now=utc_now())
    finally:
        store.close()
    if args.json:
        print(json.dumps({"retried": moved}, indent=2), file=out)
    else:
        print(
            f"moved {len(moved)} receipt(s) back to the outbox; the worker sends them again "
            "at its next pass",
            file=out,
        )
        for receipt_id in moved:
            print(f"  {receipt_id}", file=out)
    return 0


def _open_store(data_dir: Path | None, db_url: str | None, env: Mapping[str, str]) -> WorkerStore:
    """The worker store ``serve`` would use; a SQLite file that does not exist is refused (a
    wrong --data-dir must not list an empty store it just made)."""
    data = (data_dir or default_data_dir(env)).expanduser().resolve()
    url = store_url(data, db_url, env)
    parsed = normalize_url(url, what=STORE_NAME)
    if backend_of(parsed) == "sqlite" and not Path(parsed.database or "").is_file():
        raise ValidationError(
            f"no worker store at {parsed.database}: pass the worker's --data-dir or --db-url"
        )
    return WorkerStore(url, migrate=False)  # as serve opens it (R-W-17)


def _as_json(entry: DeadLetter) -> dict[str, Any]:
    return {
        "receipt_id": entry.receipt_id,
        "episode_id": entry.episode_id,
        "contract_digest": entry.contract_digest,
        "code": _CODE_NAMES.get(entry.code, str(entry.code)),
        "reason": entry.reason,
        "message": entry.message,
        "attempts": entry.attempts,
        "refused_at": entry.refused_at.isoformat(),
    }


def _print_list(entries: list[DeadLetter], out: TextIO, *, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"dead_letter": [_as_json(e) for e in entries]}, indent=2), file=out)
        return
    if not entries:
        print("the dead letter is empty", file=out)
        return
    for entry in entries:
        print(
            f"{entry.receipt_id}  episode {entry.episode_id}  {entry.reason}  "
            f"refused {entry.refused_at.isoformat(timespec='seconds')}  "
            f"after {entry.attempts} attempt(s)",
            file=out,
        )
        print(f"    {entry.message}", file=out)
    print(
        f"{len(entries)} receipt(s) in the dead letter; retry with `{PROG} outbox dead-letter "
        "retry RECEIPT_ID ...` or `--all` once the cause is fixed",
        file=out,
    )
