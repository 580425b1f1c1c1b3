"""What a newcomer copies, run as they would run it: ``make up``'s printed HTTP example and
docs/http.md's three seeded episodes played by hand, with bash and curl against a real local
stack (tools/stack.py: control, the seeded worker and MockMed as processes); and ``make status``
with nothing up (issue 28, "the first hour").

The stack's run directory is ``.run`` under a temporary directory that is also the commands'
working directory, so docs/http.md's block reads ``.run/stack.json`` exactly as written.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
STACK = REPO / "tools" / "stack.py"
HTTP_DOC = REPO / "docs" / "http.md"
HAND_HEADING = "### The three seeded episodes, by hand"

pytestmark = pytest.mark.slow


def run_stack(command: str, run_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(STACK), command, "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        check=False,
        timeout=400,
    )


def bash(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``script`` as a user pastes it into bash (``-e``: a failing command fails the test)."""
    assert shutil.which("curl"), "curl is needed to run the documented examples"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REWARDSEAL_", "MOCKMED_"))}
    return subprocess.run(
        ["bash", "-e", "-c", script],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=env,
    )


def json_answers(stdout: str) -> list[dict[str, Any]]:
    """Every line of ``stdout`` that is a JSON object (curl's answers, one per line)."""
    found = []
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            found.append(json.loads(line))
    return found


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """A stack up in ``<tmp>/.run``; (the working directory, what ``up`` printed)."""
    home = tmp_path_factory.mktemp("first-hour")
    run_dir = home / ".run"
    started = run_stack("up", run_dir)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        yield home, started.stdout
    finally:
        assert run_stack("down", run_dir).returncode == 0


def printed_http_example(printed: str, title: str = "HTTP/JSON") -> list[str]:
    """The lines of ``up``'s block under ``title``, unindented (comments kept, as a user copies)."""
    lines = printed.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    block = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        block.append(line.removeprefix("  "))
    return block


def test_make_up_prints_an_http_example_that_begins_scores_and_is_paid(
    stack: tuple[Path, str],
) -> None:
    home, printed = stack
    block = printed_http_example(printed)
    text = "\n".join(block)
    begin, act, score = (
        text.index(route) for route in ("/v1/episodes", "/api/encounters", "/v1/rewards")
    )
    assert begin < act < score, text
    done = bash(text, home)
    assert done.returncode == 0, done.stdout + done.stderr
    health, begun, written, scored = json_answers(done.stdout)
    assert health["reward_contract_digest"].startswith("sha256:")
    assert begun["baseline_recorded"] is True
    assert written["banner"] == "Saved"
    assert scored["receipt"]["reward_outcome"] == "verified", scored
    assert scored["receipt"]["scalar_reward"] == 1.0
    assert scored["rewardseal"]["certified"] is True


@pytest.mark.skipif(shutil.which("grpcurl") is None, reason="grpcurl is not installed")
def test_make_up_prints_grpc_examples_that_run(stack: tuple[Path, str]) -> None:
    home, printed = stack
    text = "\n".join(printed_http_example(printed, "gRPC (grpcurl"))
    assert text.index("BeginEpisode") < text.index("/api/encounters") < text.index("ScoreEpisode")
    done = bash(text, home)
    assert done.returncode == 0, done.stdout + done.stderr


def hand_block() -> str:
    """docs/http.md's fenced block under :data:`HAND_HEADING`."""
    text = HTTP_DOC.read_text(encoding="utf-8")
    after = text[text.index(HAND_HEADING) :]
    found = re.search(r"```sh\n(.*?)```", after, re.DOTALL)
    assert found, f"no sh block under {HAND_HEADING!r} in docs/http.md"
    return found.group(1)


def test_the_three_seeded_episodes_by_hand_pay_only_the_honest_write(
    stack: tuple[Path, str],
) -> None:
    home, _ = stack
    script = hand_block()
    done = bash(script, home)
    assert done.returncode == 0, done.stdout + done.stderr
    receipts = [answer for answer in json_answers(done.stdout) if "receipt" in answer]
    outcomes = [
        (
            answer["receipt"]["episode_id"].rsplit(".", 1)[-1],
            answer["receipt"]["reward_outcome"],
            answer["receipt"]["scalar_reward"],
            sorted({finding["code"] for finding in answer["rewardseal"]["findings"]}),
        )
        for answer in receipts
    ]
    assert outcomes == [
        ("honest", "verified", 1.0, []),
        ("lie", "wrong_effect", 0.0, ["missing_record"]),
        ("dup", "wrong_effect", 0.0, ["duplicate_record"]),
    ], done.stdout
    assert all(answer["rewardseal"]["certified"] for answer in receipts)
    begins = [answer for answer in json_answers(done.stdout) if "baseline_recorded" in answer]
    assert [answer["baseline_recorded"] for answer in begins] == [True, True, True]
    # $RUN makes fresh episode ids: the block runs again on the same stack.
    again = bash(script, home)
    assert again.returncode == 0, again.stderr
    assert len([a for a in json_answers(again.stdout) if "receipt" in a]) == 3


def make(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(REPO), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("MAKE")},
    )


@pytest.mark.parametrize("venv", ["present", "missing"])
def test_make_status_with_nothing_up_says_so_without_a_make_error(
    tmp_path: Path, venv: str
) -> None:
    overrides = [f"RUN_DIR={tmp_path / 'never-up'}"]
    if venv == "missing":
        overrides.append(f"VENV={tmp_path / 'no-venv'}")
    done = make("status", *overrides)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "the stack is not up" in done.stdout
    assert "***" not in done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stdout.strip().splitlines()) == 1
