"""``rewardseal-kit``: the command line of the synthetic world (the kit's tools).

    rewardseal-kit <command> [options]

Each command is one entry of :data:`COMMANDS`: a name, a one-line help, a function that adds its
options to its subparser, and the dotted path of the function that runs it (imported only when
that command runs, so ``rewardseal-kit --help`` stays fast and needs no optional dependency). A new
kit tool adds one entry.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, cast

from rewardseal_kit.proof import command as proof_command
from rewardseal_kit.proof.learning import command as learning_command
from rewardseal_server.cli_help import add_version, style_help

__all__ = ["COMMANDS", "Command", "build_parser", "main"]


@dataclass(frozen=True)
class Command:
    """One ``rewardseal-kit`` subcommand."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    runner: str
    """``"module:function"``; the function takes the parsed arguments, returns the exit status."""


COMMANDS: Final[tuple[Command, ...]] = (
    Command(
        name="proof",
        help=proof_command.HELP,
        add_arguments=proof_command.add_arguments,
        runner="rewardseal_kit.proof.command:run",
    ),
    Command(
        name="proof-learning",
        help=learning_command.HELP,
        add_arguments=learning_command.add_arguments,
        runner="rewardseal_kit.proof.learning.command:run",
    ),
)


def build_parser() -> argparse.ArgumentParser:
    """The parser with one subparser per entry of :data:`COMMANDS`."""
    parser = argparse.ArgumentParser(prog="rewardseal-kit", description=__doc__.split("\n")[0])
    add_version(parser, "rewardseal-kit")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="command")
    for command in COMMANDS:
        sub = subparsers.add_parser(command.name, help=command.help, description=command.help)
        command.add_arguments(sub)
        sub.set_defaults(runner=command.runner)
    style_help(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``rewardseal-kit`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    module_name, _, function_name = str(args.runner).partition(":")
    runner = cast(
        Callable[[argparse.Namespace], int],
        getattr(importlib.import_module(module_name), function_name),
    )
    return runner(args)


if __name__ == "__main__":
    raise SystemExit(main())
