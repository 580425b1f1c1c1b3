"""``rewardseal-kit proof``: its options and what it does (the heavy imports happen in :func:`run`).

    rewardseal-kit proof --json out.json --markdown out.md [--png out.png] [--trials 3]
                     [--run-dir DIR] [--worker-target HOST:PORT --worker-public-key HEX
                      --contract-digest sha256:... --mockmed-url URL]
    rewardseal-kit proof --integrity --json out.json --markdown out.md [--png out.png]
                     [--records 104] [--run-dir DIR]

``--integrity`` runs the integrity proof instead (:mod:`rewardseal_kit.proof.integrity_command`):
always on services it starts itself (control, MockMed, three workers).

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
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Final, TypeVar

if TYPE_CHECKING:
    from rewardseal_kit.proof.report import Row
    from rewardseal_kit.proof.rewards import TrialResult
    from rewardseal_kit.proof.run import Services

__all__ = [
    "EXIT_CHECK_FAILED",
    "EXIT_NOT_RUN",
    "EXIT_OK",
    "HELP",
    "Stopped",
    "add_arguments",
    "guarded",
    "on_sigterm",
    "run",
    "run_directory",
    "verdict",
    "write_reports",
    "written",
]

_T = TypeVar("_T")

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
        "--integrity",
        action="store_true",
        help="the integrity proof: a drifting policy audited per boundary by control",
    )
    parser.add_argument(
        "--records",
        type=int,
        default=None,
        help="--integrity: records per boundary (default 104, above the evidence rule's 100)",
    )
    parser.add_argument(
        "--run-dir", type=Path, help="start the services in this new directory and keep it"
    )
    running = parser.add_argument_group("already-running services (tokens from the environment)")
    running.add_argument("--worker-target", help="HOST:PORT of a tier-2 worker on the rest bundle")
    running.add_argument("--worker-public-key", help="the worker's Ed25519 public key, hex")
    running.add_argument("--contract-digest", help="the contract digest the worker serves")
    running.add_argument("--mockmed-url", help="MockMed's base URL")


def _given_services(args: argparse.Namespace) -> Services:
    from rewardseal.core.errors import ValidationError
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
    else:
        with run_directory(args.run_dir) as run_dir, local_services(run_dir) as services:
            yield services


@contextmanager
def run_directory(run_dir: Path | None) -> Iterator[Path]:
    """Where started services keep their files: ``run_dir`` (created new, 0700, and kept), or
    a temporary directory removed on exit."""
    if run_dir is not None:
        run_dir = run_dir.expanduser().resolve()
        run_dir.mkdir(parents=True, mode=0o700)
        yield run_dir
    else:
        with tempfile.TemporaryDirectory(prefix="rewardseal-proof-") as tmp:
            yield Path(tmp)


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


def on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM handler: raise :class:`Stopped` so every ``with`` block unwinds."""
    raise Stopped


def run(args: argparse.Namespace) -> int:
    """Run the proof as ``args`` say, write the reports; the exit status."""
    import time

    from rewardseal.core.errors import RewardSealError
    from rewardseal_kit.proof.report import check_report, render_markdown, report_json, summarize
    from rewardseal_kit.proof.run import MIN_TRIALS, run_trials

    if args.integrity:
        from rewardseal_kit.proof.integrity_command import run_integrity

        return run_integrity(args)
    if args.records is not None:
        print("proof: --records only goes with --integrity", file=sys.stderr)
        return EXIT_NOT_RUN
    if args.trials < MIN_TRIALS:
        print(f"proof: --trials must be at least {MIN_TRIALS}", file=sys.stderr)
        return EXIT_NOT_RUN
    started = time.monotonic()

    def trials() -> tuple[Services, float, list[TrialResult]]:
        with _services(args) as services:
            ready = time.monotonic()
            return services, ready, run_trials(services, args.trials)

    done, status = guarded(trials)
    if done is None:
        return status
    services, ready, results = done
    finished = time.monotonic()
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
    return verdict(problems, f"{len(results)} trial results; wrote {written(args)}")


def guarded(work: Callable[[], _T]) -> tuple[_T | None, int]:
    """Run ``work`` (start services, play, stop them) so that SIGTERM unwinds it.

    Returns its value and :data:`EXIT_OK`, or None and the exit status once the reason it could
    not run is printed: :data:`EXIT_NOT_RUN` for a refusal or a failed service or call, 130 for
    an interruption (every process it started is stopped by then).
    """
    import grpc
    import httpx

    from rewardseal.core.errors import RewardSealError

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        return work(), EXIT_OK
    except RewardSealError as exc:
        print(f"proof: {exc.message}", file=sys.stderr)
        return None, EXIT_NOT_RUN
    except (grpc.RpcError, httpx.HTTPError, OSError) as exc:
        print(f"proof failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None, EXIT_NOT_RUN
    except (KeyboardInterrupt, Stopped):
        print("proof interrupted; every process it started was stopped", file=sys.stderr)
        return None, 130
    finally:
        signal.signal(signal.SIGTERM, previous)


def written(args: argparse.Namespace) -> str:
    """The files a proof run wrote, each named (``--json``, ``--markdown``, ``--png``)."""
    paths = [args.json, args.markdown, args.png]
    return ", ".join(str(path) for path in paths if path is not None)


def verdict(problems: Sequence[str], where: str) -> int:
    """Print every failed check and the verdict line; the exit status."""
    for problem in problems:
        print(f"FAIL {problem}", file=sys.stderr)
    said = "PASS" if not problems else f"FAIL ({len(problems)} checks)"
    print(f"proof: {said}; {where}")
    return EXIT_OK if not problems else EXIT_CHECK_FAILED
