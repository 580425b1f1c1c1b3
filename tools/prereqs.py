"""``make doctor``: what this machine lacks for each make target, one line per missing thing.

    python3 tools/prereqs.py                 every check (exit 1 if something is missing)
    python3 tools/prereqs.py grpcurl|chromium|disk|postgres|python   one check

Runs on the machine's own ``python3`` before any virtual environment exists, so it imports
only the standard library and parses on older Pythons too (it must be able to say "Python 3.11
is needed"). Nothing is installed: each line names what is missing, which target needs it and
how to get it. ``make up`` and ``make test-browser`` run their one check and go on (the examples
that need grpcurl, or the browser test's skip, say the rest); ``make setup-integrations`` stops
when the disk is short, before pip fills it.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
INTEGRATIONS_GB = 3.0
"""Free space ``make setup-integrations`` wants: its venv measured 2.2 GB, plus pip's unpacking."""
GB = 1024**3


def check_python() -> str | None:
    if sys.version_info[:2] != (3, 11):
        found = ".".join(str(part) for part in sys.version_info[:3])
        return (
            f"python: Python 3.11 is needed (this is {found}); install python3.11 and "
            "run make with PYTHON=python3.11"
        )
    return None


def check_grpcurl() -> str | None:
    if shutil.which("grpcurl") is None:
        return (
            "grpcurl: not found on PATH (optional: only `make up`'s gRPC examples use it; "
            "get it from https://github.com/fullstorydev/grpcurl/releases, or use the curl "
            "and Python examples)"
        )
    return None


def check_chromium() -> str | None:
    missing = [
        name
        for name, candidates in (
            ("chromium", ("chromium", "chromium-browser")),
            ("chromedriver", ("chromedriver",)),
        )
        if not any(shutil.which(candidate) for candidate in candidates)
    ]
    if missing:
        return (
            f"chromium: {' and '.join(missing)} not found on PATH (`make test-browser` needs "
            "them: `apt-get install chromium chromium-driver` as root; without them the "
            "browser test skips)"
        )
    return None


def check_postgres() -> str | None:
    bindir = os.environ.get("REWARDSEAL_PG_BINDIR")
    places = [bindir] if bindir else []
    found = shutil.which("pg_ctl")
    if found:
        places.append(str(Path(found).parent))
    places.extend(sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True))
    if not any(
        Path(place, "initdb").is_file() and Path(place, "pg_ctl").is_file() for place in places
    ):
        return (
            "postgres: PostgreSQL server binaries (initdb, pg_ctl) not found (`make test` skips "
            "its PostgreSQL cases without them: `apt-get install postgresql`, or set "
            "REWARDSEAL_PG_BINDIR)"
        )
    return None


def check_disk(min_free_gb: float = INTEGRATIONS_GB, where: Path = REPO) -> str | None:
    free = shutil.disk_usage(where).free / GB
    if free < min_free_gb:
        return (
            f"disk: {free:.1f} GB free in {where}; `make setup-integrations` needs about "
            f"{min_free_gb:.0f} GB for .venv-integrations (free some space first)"
        )
    return None


CHECKS = {
    "python": check_python,
    "postgres": check_postgres,
    "grpcurl": check_grpcurl,
    "chromium": check_chromium,
    "disk": check_disk,
}


def main(argv: list[str] | None = None) -> int:
    """Print one line per missing prerequisite; exit 1 if any is missing."""
    parser = argparse.ArgumentParser(prog="tools/prereqs.py", description=__doc__.split("\n")[0])
    parser.add_argument("checks", nargs="*", metavar="CHECK", help=", ".join(CHECKS))
    parser.add_argument(
        "--min-free-gb", type=float, default=INTEGRATIONS_GB, help="the disk check's threshold"
    )
    args = parser.parse_args(argv)
    unknown = sorted(set(args.checks) - set(CHECKS))
    if unknown:
        parser.error(f"unknown check {', '.join(unknown)} (choose from {', '.join(CHECKS)})")
    names = args.checks or list(CHECKS)
    problems = []
    for name in names:
        problem = check_disk(args.min_free_gb) if name == "disk" else CHECKS[name]()
        if problem is not None:
            problems.append(problem)
            print(problem)
    if not args.checks and not problems:
        print("every prerequisite is here: Python 3.11, PostgreSQL, grpcurl, Chromium, disk")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
