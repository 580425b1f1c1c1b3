"""``rewardseal``: the client-side command line (what a trainer's machine has installed).

    rewardseal receipt show   [FILE | - | --base64 TEXT] [--index N] [--json]
    rewardseal receipt verify [FILE | - | --base64 TEXT] (--key KEY | --ready-file PATH) ...

Each subcommand lives in its own module; this one only parses and dispatches.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rewardseal.cli import receipt as receipt_command

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rewardseal", description="rewardseal's client-side tools"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    receipt = commands.add_parser("receipt", help="read a receipt envelope and say what it states")
    actions = receipt.add_subparsers(dest="action", required=True)
    show = actions.add_parser("show", help="decode an envelope (the signature is not checked)")
    receipt_command.add_arguments(show, verify=False)
    verify = actions.add_parser("verify", help="verify an envelope against the worker's key")
    receipt_command.add_arguments(verify, verify=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; the exit status (argparse's usage errors exit 2 themselves)."""
    args = _parser().parse_args(argv)
    return receipt_command.run(args, verify=args.action == "verify")


if __name__ == "__main__":
    sys.exit(main())
