"""What every command line shows a person: ``--version`` from the package metadata, help with
no reST markup that names each option's environment variable and default; ``--log-format json``
writes one JSON object per line."""

from __future__ import annotations

import argparse
import io
import json
import logging
import re
from collections.abc import Callable, Iterator
from importlib import metadata

import pytest

from rewardseal_control.cli.parser import build_parser as control_parser
from rewardseal_kit.cli import build_parser as kit_parser
from rewardseal_mockmed.cli import build_parser as mockmed_parser
from rewardseal_server.cli_help import plain_text
from rewardseal_server.logs import configure_logging, resolve_logging
from rewardseal_worker.cli import build_parser as worker_parser

PARSERS: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "rewardseal-worker": worker_parser,
    "rewardseal-control": control_parser,
    "rewardseal-mockmed": mockmed_parser,
    "rewardseal-kit": kit_parser,
}


def every_parser(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from every_parser(sub)


@pytest.mark.parametrize("prog", sorted(PARSERS))
def test_version_comes_from_the_package_metadata(
    prog: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        PARSERS[prog]().parse_args(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"{prog} ({prog} {metadata.version(prog)})"


@pytest.mark.parametrize("prog", sorted(PARSERS))
def test_help_has_no_markup(prog: str) -> None:
    for parser in every_parser(PARSERS[prog]()):
        text = parser.format_help()
        assert "`" not in text, f"{parser.prog}: {text}"
        assert ":func:" not in text


ENV_SAMPLES = {
    "rewardseal-worker": {
        "--metrics-port": "REWARDSEAL_WORKER_METRICS_PORT",
        "--data-dir": "REWARDSEAL_WORKER_DATA_DIR",
        "--db-url": "REWARDSEAL_WORKER_DB_URL",
        "--host": "REWARDSEAL_WORKER_HOST",
        "--port": "REWARDSEAL_WORKER_PORT",
        "--log-level": "REWARDSEAL_WORKER_LOG_LEVEL",
        "--log-format": "REWARDSEAL_WORKER_LOG_FORMAT",
        "--processes": "REWARDSEAL_WORKER_PROCESSES",
    },
    "rewardseal-control": {
        "--metrics-port": "REWARDSEAL_CONTROL_METRICS_PORT",
        "--data-dir": "REWARDSEAL_CONTROL_DATA_DIR",
        "--db-url": "REWARDSEAL_CONTROL_DB_URL",
        "--revocation-ttl": "REWARDSEAL_CONTROL_REVOCATION_TTL",
        "--log-format": "REWARDSEAL_CONTROL_LOG_FORMAT",
    },
    "rewardseal-mockmed": {
        "--log-level": "MOCKMED_LOG_LEVEL",
        "--db-url": "MOCKMED_DB_URL",
    },
}


def option_help(parser: argparse.ArgumentParser, flag: str) -> str:
    """The help of ``flag`` as printed: its line and the indented lines that continue it."""
    lines = parser.format_help().splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"  {flag}\b", line))
    taken = [lines[start]]
    for line in lines[start + 1 :]:
        if not line.startswith("        "):
            break
        taken.append(line)
    return " ".join(" ".join(taken).split())


@pytest.mark.parametrize("prog", sorted(ENV_SAMPLES))
def test_help_names_the_environment_variable_of_each_option(prog: str) -> None:
    serve = next(p for p in every_parser(PARSERS[prog]()) if p.prog.endswith(" serve"))
    for flag, variable in ENV_SAMPLES[prog].items():
        assert variable in option_help(serve, flag), (flag, option_help(serve, flag))


def test_help_names_defaults() -> None:
    control = control_parser()
    issue = next(p for p in every_parser(control) if p.prog.endswith("certificates issue"))
    assert "default: synthetic" in option_help(issue, "--scope")
    listing = next(p for p in every_parser(control) if p.prog.endswith("contracts list"))
    assert "default: 30.0" in option_help(listing, "--timeout")


def test_plain_text_removes_restructured_text_markup() -> None:
    assert plain_text("``serve`` runs :func:`start_worker`, see `docs`") == (
        "serve runs start_worker, see docs"
    )


def test_json_log_lines_parse_as_json() -> None:
    stream = io.StringIO()
    handler = configure_logging("debug", "json", process="process 1", stream=stream)
    try:
        logging.getLogger("rewardseal_worker.test").info("scored %d episodes", 3)
        logging.getLogger("uvicorn.error").warning('quote " and newline\nin a message')
        try:
            raise ValueError("boom")
        except ValueError:
            logging.getLogger("rewardseal_control.test").exception("failed")
        logging.getLogger("quiet").debug("debug shows at debug")
    finally:
        logging.getLogger().removeHandler(handler)
    lines = stream.getvalue().splitlines()
    documents = [json.loads(line) for line in lines]
    assert len(lines) == 4
    assert documents[0]["message"] == "scored 3 episodes"
    assert documents[0]["level"] == "info"
    assert documents[0]["logger"] == "rewardseal_worker.test"
    assert documents[0]["process"] == "process 1"
    assert documents[1]["message"] == 'quote " and newline\nin a message'
    assert documents[2]["error"] == "ValueError"
    assert "boom" in documents[2]["traceback"]
    assert all(d["time"].endswith("+00:00") for d in documents)


def test_log_level_filters_and_text_is_one_line_per_event() -> None:
    stream = io.StringIO()
    handler = configure_logging("warning", "text", stream=stream)
    try:
        logging.getLogger("a").info("hidden")
        logging.getLogger("a").warning("shown")
    finally:
        logging.getLogger().removeHandler(handler)
    (line,) = stream.getvalue().splitlines()
    assert line.endswith(" WARNING a shown")


def test_logging_settings_come_from_flags_then_the_environment() -> None:
    env = {"REWARDSEAL_WORKER_LOG_LEVEL": "DEBUG", "REWARDSEAL_WORKER_LOG_FORMAT": "json"}
    assert resolve_logging(None, None, env, "REWARDSEAL_WORKER_") == ("debug", "json")
    assert resolve_logging("error", "text", env, "REWARDSEAL_WORKER_") == ("error", "text")
    assert resolve_logging(None, None, {}, "MOCKMED_", default_level="warning") == (
        "warning",
        "text",
    )
    with pytest.raises(ValueError, match="REWARDSEAL_WORKER_LOG_FORMAT must be one of text, json"):
        resolve_logging(None, None, {"REWARDSEAL_WORKER_LOG_FORMAT": "xml"}, "REWARDSEAL_WORKER_")
