"""Logging set-up shared by the rewardseal services: ``--log-level`` and ``--log-format``.

Every service (worker, control plane, MockMed) takes the same two options, each falling back to
an environment variable of its own prefix (``REWARDSEAL_WORKER_LOG_LEVEL``, ...):

* ``--log-level``: ``debug``, ``info`` (default), ``warning`` or ``error``;
* ``--log-format``: ``text`` (one line per event, for people) or ``json`` (one JSON object per
  line, for a log pipeline: ``time``, ``level``, ``logger``, ``message``, and ``process`` when a
  service runs several processes, ``error`` with the exception type when one is logged).

Log lines carry what the code logged, never a record's contents or a token (docs/spec.md).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Final, TextIO

__all__ = [
    "LEVELS",
    "FORMATS",
    "JsonFormatter",
    "add_logging_options",
    "configure_logging",
    "logging_env",
    "resolve_logging",
]

LEVELS: Final = ("debug", "info", "warning", "error")
FORMATS: Final = ("text", "json")


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def __init__(self, process: str = "") -> None:
        super().__init__()
        self._process = process

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if self._process:
            document["process"] = self._process
        if record.exc_info and record.exc_info[0] is not None:
            document["error"] = record.exc_info[0].__name__
            document["traceback"] = self.formatException(record.exc_info)
        return json.dumps(document, ensure_ascii=False)


def logging_env(env_prefix: str) -> dict[str, str]:
    """The two options' environment variables, by option destination (for the help)."""
    return {"log_level": f"{env_prefix}LOG_LEVEL", "log_format": f"{env_prefix}LOG_FORMAT"}


def add_logging_options(
    parser: argparse.ArgumentParser, env_prefix: str, *, default_level: str = "info"
) -> None:
    """Add ``--log-level`` and ``--log-format`` (defaults come from :func:`resolve_logging`)."""
    names = logging_env(env_prefix)
    parser.add_argument(
        "--log-level",
        type=str.lower,
        choices=LEVELS,
        help=f"least severe level logged (default {default_level}; or ${names['log_level']})",
    )
    parser.add_argument(
        "--log-format",
        type=str.lower,
        choices=FORMATS,
        help="text: a line per event for people; json: a JSON object per line "
        f"(default text; or ${names['log_format']})",
    )


def resolve_logging(
    level: str | None,
    log_format: str | None,
    env: Mapping[str, str],
    env_prefix: str,
    *,
    default_level: str = "info",
) -> tuple[str, str]:
    """``(level, format)``: the flags, else the environment, else ``default_level`` and
    ``text``.

    Raises:
        ValueError: a variable names no level or format (the message names the variable).
    """
    names = logging_env(env_prefix)
    resolved_level = (level or env.get(names["log_level"]) or default_level).lower()
    resolved_format = (log_format or env.get(names["log_format"]) or "text").lower()
    if resolved_level not in LEVELS:
        raise ValueError(f"{names['log_level']} must be one of {', '.join(LEVELS)}")
    if resolved_format not in FORMATS:
        raise ValueError(f"{names['log_format']} must be one of {', '.join(FORMATS)}")
    return resolved_level, resolved_format


def configure_logging(
    level: str = "info",
    log_format: str = "text",
    *,
    process: str = "",
    stream: TextIO | None = None,
) -> logging.Handler:
    """Send the root logger's records at ``level`` and above to ``stream`` (stderr) as
    ``log_format``; replaces handlers set before (a second call reconfigures). ``process``
    names the process among several (``serve --processes N``). Returns the handler."""
    handler = logging.StreamHandler(stream or sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter(process))
    else:
        who = f"[{process}] " if process else ""
        handler.setFormatter(
            logging.Formatter(f"%(asctime)s %(levelname)s {who}%(name)s %(message)s")
        )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    return handler
