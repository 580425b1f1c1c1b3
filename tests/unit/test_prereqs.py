"""``make doctor`` and the one-line prerequisite checks (tools/prereqs.py; issue 28).

Run through make with PATH stripped to a directory of our choosing, so the tools this machine
has or lacks do not decide the result: an empty directory lacks grpcurl and Chromium; one with
stand-in executables of those names (fakes for presence only, never run) has them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAKE = shutil.which("make")


def make(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert MAKE is not None
    return subprocess.run(
        [MAKE, "--no-print-directory", "-s", "-C", str(REPO), *args, f"PYTHON={sys.executable}"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        # Not the calling make's MAKEFLAGS/MAKELEVEL (`make test` runs this).
        env={**{k: v for k, v in os.environ.items() if k[:4] != "MAKE"}, "PATH": str(path)},
    )


def fake_tools(directory: Path, *names: str) -> Path:
    """Executables named ``names`` that only exist (a presence check never runs them)."""
    directory.mkdir()
    for name in names:
        tool = directory / name
        tool.write_text("#!/bin/sh\nexit 0\n")
        tool.chmod(0o755)
    return directory


def lines_about(stdout: str, prefix: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith(prefix)]


def test_doctor_names_grpcurl_and_chromium_when_path_lacks_them(tmp_path: Path) -> None:
    done = make(fake_tools(tmp_path / "bin"), "doctor")
    assert done.returncode != 0
    (grpcurl,) = lines_about(done.stdout, "grpcurl: ")
    assert "not found" in grpcurl
    assert "github.com/fullstorydev/grpcurl" in grpcurl
    (chromium,) = lines_about(done.stdout, "chromium: ")
    assert "chromium and chromedriver not found" in chromium
    assert "apt-get install chromium chromium-driver" in chromium


def test_doctor_is_quiet_about_what_path_has(tmp_path: Path) -> None:
    done = make(fake_tools(tmp_path / "bin", "grpcurl", "chromium", "chromedriver"), "doctor")
    assert not lines_about(done.stdout, "grpcurl: ")
    assert not lines_about(done.stdout, "chromium: ")
    if done.returncode == 0:
        assert done.stdout.startswith("every prerequisite is here")


def test_one_check_is_one_line_and_its_exit_status(tmp_path: Path) -> None:
    empty = fake_tools(tmp_path / "bin")
    done = subprocess.run(
        [sys.executable, str(REPO / "tools" / "prereqs.py"), "grpcurl"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PATH": str(empty)},
    )
    assert done.returncode == 1
    assert len(done.stdout.splitlines()) == 1
    found = subprocess.run(
        [sys.executable, str(REPO / "tools" / "prereqs.py"), "grpcurl"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PATH": str(fake_tools(tmp_path / "has", "grpcurl"))},
    )
    assert (found.returncode, found.stdout) == (0, "")


def test_setup_integrations_stops_in_one_line_when_the_disk_is_short(tmp_path: Path) -> None:
    venv = tmp_path / "venv-integrations"
    done = make(
        fake_tools(tmp_path / "bin"),
        "setup-integrations",
        f"IVENV={venv}",
        "INTEGRATIONS_MIN_FREE_GB=1000000000",
    )
    assert done.returncode != 0
    (line,) = lines_about(done.stdout, "disk: ")
    assert "GB free" in line
    assert "make setup-integrations" in line
    assert "1000000000 GB" in line
    assert not venv.exists()  # stopped before pip could fill the disk
