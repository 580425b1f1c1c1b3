"""What every rewardseal command line shares: ``--version`` and help for people.

:func:`style_help` gives a parser and all its subcommands one help formatter that

* prints plain text: reST markup from docstrings (double backticks, ``:func:`` roles) is
  removed, so ``--help`` never shows it;
* names each option's default, when it has one and its help does not already say it;
* names the environment variable an option falls back to (``[env: NAME]``), from the map the
  command line passes (option destination -> variable), unless its help already names it.

:func:`add_version` adds ``--version``, read from the installed distribution's metadata.

Standard library only: a trainer importing :mod:`rewardseal` pays nothing for it.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping
from importlib import metadata

__all__ = ["add_version", "plain_text", "style_help", "version_of"]

_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")
_LITERAL = re.compile(r"``([^`]*)``")
_SINGLE = re.compile(r"`([^`]*)`")
_VARIABLE = re.compile(r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b")
"""An environment variable's name (a help that names one already is left as it is)."""


def plain_text(text: str) -> str:
    """``text`` without reST markup: ``:func:`x``` -> ``x``, double and single backticks
    dropped around their contents."""
    return _SINGLE.sub(r"\1", _LITERAL.sub(r"\1", _ROLE.sub(r"\1", text)))


def version_of(distribution: str) -> str:
    """The installed version of ``distribution``, or ``unknown`` when it is not installed."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "unknown"


def add_version(parser: argparse.ArgumentParser, distribution: str) -> None:
    """``--version``: print ``prog distribution version`` and exit 0."""
    parser.add_argument(
        "--version",
        action="version",
        version=f"%(prog)s ({distribution} {version_of(distribution)})",
        help="print the version and exit",
    )


def _with_extras(action: argparse.Action, env: Mapping[str, str]) -> str:
    """``action``'s help as plain text, with its default and environment variable added where
    it does not say them already."""
    text = plain_text(action.help or "")
    extras: list[str] = []
    default = action.default
    # Identity, not equality: a default of 0 is worth naming, False (a flag) and "" are not.
    nothing = default is None or default is False or default is argparse.SUPPRESS
    if not nothing and default not in ("", []) and action.nargs != 0 and "default" not in text:
        extras.append("default: %(default)s")
    variable = env.get(action.dest)
    if variable and not _VARIABLE.search(text):
        extras.append(f"env: {variable}")
    if extras:
        text = f"{text} [{'; '.join(extras)}]" if text else f"[{'; '.join(extras)}]"
    return text


def _formatter(env: Mapping[str, str]) -> type[argparse.HelpFormatter]:
    class PlainHelpFormatter(argparse.RawDescriptionHelpFormatter):
        """Plain text, defaults and environment variables (see the module docstring)."""

        def _format_text(self, text: str) -> str:
            return super()._format_text(plain_text(text))

        def _get_help_string(self, action: argparse.Action) -> str | None:
            if action.help is argparse.SUPPRESS or not action.option_strings:
                return action.help if action.help is None else plain_text(action.help)
            return _with_extras(action, env)

    return PlainHelpFormatter


def style_help(parser: argparse.ArgumentParser, env: Mapping[str, str] | None = None) -> None:
    """Give ``parser`` and every subcommand under it the plain help formatter; ``env`` maps an
    option's destination (``data_dir``) to the environment variable it falls back to."""
    variables = env or {}
    formatter = _formatter(variables)
    pending = [parser]
    while pending:
        current = pending.pop()
        current.formatter_class = formatter
        current.description = plain_text(current.description) if current.description else None
        for action in current._actions:
            if action.help is None and action.option_strings:
                # argparse prints no help line at all for an option without help: give it one
                # when there is a default or a variable to name.
                action.help = _with_extras(action, variables) or None
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    choice.help = plain_text(choice.help) if choice.help else choice.help
                pending.extend(action.choices.values())
