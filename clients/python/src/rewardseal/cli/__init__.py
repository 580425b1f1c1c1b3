"""``rewardseal``: the client-side command line (what a trainer's machine has installed).

    rewardseal receipt show   [FILE | - | --base64 TEXT] [--index N] [--json]
    rewardseal receipt verify [FILE | - | --base64 TEXT] (--key KEY | --ready-file PATH) ...
    rewardseal receipt dsse   [FILE | - | --base64 TEXT] [--index N]
    rewardseal attest verify  FILE --org-key KEY [--checkpoint DIR] [--receipts FILE] ...
    rewardseal attest prove   FILE --org-key KEY --receipts FILE --receipt-id ID

Each subcommand lives in its own module; this one only parses and dispatches.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rewardseal.cli import attest as attest_command
from rewardseal.cli import dsse as dsse_command
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
    dsse = actions.add_parser(
        "dsse", help="print a receipt, certificate or revocation list as DSSE v1 JSON"
    )
    dsse_command.add_arguments(dsse)
    attest = commands.add_parser("attest", help="check a checkpoint's reward attestation")
    attest_actions = attest.add_subparsers(dest="action", required=True)
    attest_verify = attest_actions.add_parser(
        "verify", help="verify an attestation against the organization key and the checkpoint"
    )
    attest_command.add_arguments(attest_verify, prove=False)
    attest_prove = attest_actions.add_parser(
        "prove", help="print the proof that one receipt is among the attested ones"
    )
    attest_command.add_arguments(attest_prove, prove=True)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; the exit status (argparse's usage errors exit 2 themselves)."""
    args = _parser().parse_args(argv)
    if args.command == "attest":
        return attest_command.run(args)
    if args.action == "dsse":
        return dsse_command.run(args)
    return receipt_command.run(args, verify=args.action == "verify")


if __name__ == "__main__":
    sys.exit(main())
