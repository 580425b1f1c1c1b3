"""What both proofs share: exit statuses, the run directory, a SIGTERM-safe run, the reports.

``rewardseal-kit proof`` (:mod:`rewardseal_kit.proof.command`) and ``rewardseal-kit proof
--integrity`` (:mod:`rewardseal_kit.proof.integrity.command`) start services the same way
(:func:`run_directory`), run them so that SIGTERM and errors stop every started process
(:func:`guarded`), and end the same way: the JSON, the Markdown and the optional chart written
(:func:`conclude`), every failed check and a verdict line printed (:func:`verdict`). Both import
this module, neither imports the other's command module except the ``--integrity`` dispatch.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, Final, TypeVar

__all__ = [
    "EXIT_CHECK_FAILED",
    "EXIT_NOT_RUN",
    "EXIT_OK",
    "Stopped",
    "conclude",
    "guarded",
    "on_sigterm",
    "run_directory",
    "verdict",
    "write_reports",
    "written",
]

_T = TypeVar("_T")

EXIT_OK: Final = 0
EXIT_CHECK_FAILED: Final = 1
EXIT_NOT_RUN: Final = 2


class Stopped(Exception):
    """SIGTERM arrived: unwind so every started process is stopped."""


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


def on_sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM handler: raise :class:`Stopped` so every ``with`` block unwinds."""
    raise Stopped


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


def write_reports(
    document: Mapping[str, Any],
    markdown: str,
    *,
    json_path: Path,
    markdown_path: Path,
    png_path: Path | None,
    draw: Callable[[Path], None],
) -> None:
    """Write the JSON report, the Markdown report and (with ``png_path``) the chart ``draw``
    draws there (it imports matplotlib only then), making their directories."""
    for path in (json_path, markdown_path, png_path):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    markdown_path.write_text(markdown, encoding="utf-8")
    if png_path is not None:
        draw(png_path)


def conclude(
    args: argparse.Namespace,
    document: Mapping[str, Any],
    markdown: str,
    problems: Sequence[str],
    *,
    draw: Callable[[Path], None],
    done: str = "",
) -> int:
    """Write the reports ``args`` name (``--json``, ``--markdown``, ``--png``), print the
    verdict (``done`` leads its ``wrote ...`` part); the exit status.

    A report that cannot be written (matplotlib missing for ``--png``) prints why and returns
    :data:`EXIT_NOT_RUN`.
    """
    from rewardseal.core.errors import RewardSealError

    try:
        write_reports(
            document,
            markdown,
            json_path=args.json,
            markdown_path=args.markdown,
            png_path=args.png,
            draw=draw,
        )
    except RewardSealError as exc:
        print(f"proof: {exc.message}", file=sys.stderr)
        return EXIT_NOT_RUN
    return verdict(problems, f"{done}wrote {written(args)}")


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
