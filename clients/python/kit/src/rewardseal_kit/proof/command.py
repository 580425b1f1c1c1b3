"""``rewardseal-kit proof``: its options and what it does (the heavy imports happen in :func:`run`).

    rewardseal-kit proof --json out.json --markdown out.md [--png out.png] [--trials 3]
                     [--run-dir DIR] [--worker-target HOST:PORT --worker-public-key HEX
                      --contract-digest sha256:... --mockmed-url URL]

By default MockMed and the seeded rest worker are started as child processes in a temporary
directory (``--run-dir`` keeps them in DIR instead) and stopped on exit, also on errors and
SIGTERM. With ``--worker-target`` the proof uses services that already run; their tokens come
from the environment, never the command line: ``REWARDSEAL_WORKER_TOKEN``, ``MOCKMED_TOKEN`` and
``MOCKMED_ADMIN_TOKEN`` (the variables the services themselves read).

Exit status: 0 when every check holds, 1 when a check fails (the reports are still written and
name it), 2 when the proof could not run.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from rewardseal_kit.proof.report import Row
    from rewardseal_kit.proof.run import Services

__all__ = [
    "EXIT_CHECK_FAILED",
    "EXIT_NOT_RUN",
    "EXIT_OK",
    "HELP",
    "add_arguments",
    "run",
    "write_reports",
]

EXIT_OK: Final = 0
EXIT_CHECK_FAILED: Final = 1
EXIT_NOT_RUN: Final = 2
HELP: Final = (
    "score every ExtraDup family and an oracle outage with a screen and a certified reward"
)


class Stopped(Exception):
    """SIGTERM arrived: unwind so every started process is stopped."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``proof`` subcommand's options."""
    parser.add_argument("--json", type=Path, required=True, help="write the JSON report here")
    parser.add_argument("--markdown", type=Path, required=True, help="write the Markdown here")
    parser.add_argument("--png", type=Path, help="write the grouped-bar chart here (matplotlib)")
    parser.add_argument("--trials", type=int, default=3, help="trials per condition (min 3)")
    parser.add_argument(
        "--run-dir", type=Path, help="start the services in this new directory and keep it"
    )
    running = parser.add_argument_group("already-running services (tokens from the environment)")
    running.add_argument("--worker-target", help="HOST:PORT of a tier-2 worker on the rest bundle")
    running.add_argument("--worker-public-key", help="the worker's Ed25519 public key, hex")
    running.add_argument("--contract-digest", help="the contract digest the worker serves")
    running.add_argument("--mockmed-url", help="MockMed's base URL")


def _given_services(args: argparse.Namespace) -> Services:
    from rewardseal.errors import ValidationError
    from rewardseal_kit.proof.run import Services

    needed = ("worker_public_key", "contract_digest", "mockmed_url")
    missing = [f"--{name.replace('_', '-')}" for name in needed if not getattr(args, name)]
    env_names = ("REWARDSEAL_WORKER_TOKEN", "MOCKMED_TOKEN", "MOCKMED_ADMIN_TOKEN")
    missing += [f"${name}" for name in env_names if not os.environ.get(name)]
    if missing:
        raise ValidationError(f"--worker-target also needs {', '.join(missing)}")
    try:
        key = bytes.fromhex(args.worker_public_key)
    except ValueError as exc:
        raise ValidationError("--worker-public-key must be hex") from exc
    return Services(
        worker_target=args.worker_target,
        worker_token=os.environ[env_names[0]],
        worker_public_key=key,
        contract_digest=args.contract_digest,
        mockmed_url=args.mockmed_url.rstrip("/"),
        mockmed_token=os.environ[env_names[1]],
        mockmed_admin_token=os.environ[env_names[2]],
    )


@contextmanager
def _services(args: argparse.Namespace) -> Iterator[Services]:
    from rewardseal_kit.proof.run import local_services

    if args.worker_target:
        yield _given_services(args)
    elif args.run_dir is not None:
        run_dir = args.run_dir.expanduser().resolve()
        run_dir.mkdir(parents=True, mode=0o700)
        with local_services(run_dir) as services:
            yield services
    else:
        with (
            tempfile.TemporaryDirectory(prefix="rewardseal-proof-") as tmp,
            local_services(Path(tmp)) as services,
        ):
            yield services


def write_reports(
    document: Mapping[str, Any],
    markdown: str,
    rows: Sequence[Row],
    *,
    json_path: Path,
    markdown_path: Path,
    png_path: Path | None,
) -> None:
    """Write the JSON report, the Markdown report and (with ``png_path``) the chart."""
    from rewardseal_kit.proof.plot import write_png

    for path in (json_path, markdown_path, png_path):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    markdown_path.write_text(markdown, encoding="utf-8")
    if png_path is not None:
        write_png(rows, png_path)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise Stopped


def run(args: argparse.Namespace) -> int:
    """Run the proof as ``args`` say, write the reports; the exit status."""
    import time

    import grpc
    import httpx

    from rewardseal.errors import RewardSealError
    from rewardseal_kit.proof.report import check_report, render_markdown, report_json, summarize
    from rewardseal_kit.proof.run import MIN_TRIALS, run_trials

    if args.trials < MIN_TRIALS:
        print(f"proof: --trials must be at least {MIN_TRIALS}", file=sys.stderr)
        return EXIT_NOT_RUN
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    started = time.monotonic()
    try:
        with _services(args) as services:
            ready = time.monotonic()
            results = run_trials(services, args.trials)
        finished = time.monotonic()
    except RewardSealError as exc:
        print(f"proof: {exc.message}", file=sys.stderr)
        return EXIT_NOT_RUN
    except (grpc.RpcError, httpx.HTTPError, OSError) as exc:
        print(f"proof failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_NOT_RUN
    except (KeyboardInterrupt, Stopped):
        print("proof interrupted; every process it started was stopped", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    rows = summarize(results)
    problems = check_report(rows, results)
    meta = {
        "trials_per_condition": args.trials,
        "services": "given" if args.worker_target else "local",
        "contract_digest": services.contract_digest,
        "start_seconds": round(ready - started, 3),
        "trials_seconds": round(finished - ready, 3),
    }
    document = report_json(rows, results, problems, meta)
    try:
        write_reports(
            document,
            render_markdown(rows, problems, meta),
            rows,
            json_path=args.json,
            markdown_path=args.markdown,
            png_path=args.png,
        )
    except RewardSealError as exc:
        print(f"proof: {exc.message}", file=sys.stderr)
        return EXIT_NOT_RUN
    for problem in problems:
        print(f"FAIL {problem}", file=sys.stderr)
    verdict = "PASS" if not problems else f"FAIL ({len(problems)} checks)"
    print(f"proof: {verdict}; {len(results)} trial results; reports in {args.json}")
    return EXIT_OK if not problems else EXIT_CHECK_FAILED
