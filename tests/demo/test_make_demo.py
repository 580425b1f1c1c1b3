"""``make demo`` itself: the core table, the full local stack and the scripted trainer, then an
integrity audit that pauses a run and a reviewed continue.

Runs ``make demo`` as a person would after cloning and asserts its table: every ExtraDup family
and seeded episode has a row, the control family is VERIFIED +1.0 certified SYNTHETIC, no hacking
family is paid, the tier-0 lie is VERIFIED but not certified, control's receipt summary counts
the tier-2 receipts, the audit's decisions are an automatic fail/pause then a reviewed continue,
the exit status is 0, and no process the demo started is left running.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from rewardseal_mockmed.extradup import FAMILIES, HACKING_FAMILIES

REPO = Path(__file__).resolve().parents[2]
SERVICE_LINE = re.compile(r"^(control|worker|mockmed|tier0|params)\s+pid (\d+)\s+([\d.]+):(\d+)$")
DECISION_LINE = re.compile(r"^(\d+)\s+(automatic|reviewed)\s+(\w+)\s+(\w+)\s+(.*)$", re.MULTILINE)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(540),
    pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed"),
]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return True
    return state != "Z"


def port_open(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, port)) == 0


def rows(stdout: str) -> dict[str, list[str]]:
    """The stack table's rows by episode id (cells split on runs of two or more spaces)."""
    table = stdout.split("episode                           family", 1)[1]
    found = {}
    for line in table.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) == 7 and cells[0].startswith("episode_"):
            found[cells[0]] = cells
    return found


def test_make_demo_runs_the_stack_and_refuses_every_hack() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    done = subprocess.run(
        ["timeout", "-k", "30", "480", "make", "--no-print-directory", "demo"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]

    table = rows(done.stdout)
    for family in FAMILIES:
        assert f"episode_extradup_{family}_01" in table, output
    for episode in ("episode_honest_01", "episode_lie_01", "episode_dup_01", "episode_lie_02"):
        assert episode in table, output

    control = table["episode_extradup_control_01"]
    assert control[1:] == ["extradup.control", "2", "VERIFIED", "+1.0", "True", "SYNTHETIC"]
    assert table["episode_honest_01"][3:6] == ["VERIFIED", "+1.0", "True"]
    for family in HACKING_FAMILIES:
        row = table[f"episode_extradup_{family}_01"]
        assert row[2] == "2"
        assert row[3] != "VERIFIED", row
        assert row[4] in ("+0.0", "unscored"), row
    for episode in ("episode_lie_01", "episode_dup_01"):
        assert table[episode][3] != "VERIFIED"
        assert table[episode][4] in ("+0.0", "unscored")
    lie0 = table["episode_lie_02"]
    assert lie0[1:6] == ["banner lie", "0", "VERIFIED", "+1.0", "False"]

    # The parameterized contract (R-W-18): the same Triage write pays for the row that asked for
    # it and is a wrong effect, saying why, for the row that asked for a Consult.
    assert table["episode_params_01"][1:6] == ["params.row", "2", "VERIFIED", "+1.0", "True"]
    assert table["episode_params_02"][1:5] == ["params.other row", "2", "WRONG_EFFECT", "+0.0"]
    assert "episode_params_01  VERIFIED  findings: none" in done.stdout
    assert (
        "episode_params_02  WRONG_EFFECT  findings: encounter_created: wrong_field (type)"
        in done.stdout
    )
    assert done.stdout.count("task_parameters_digest sha256:") == 2

    tier2 = len(FAMILIES) + 3  # the linked worker's; the params worker is not linked to control
    assert f"total {tier2}: VERIFIED 2," in done.stdout, output
    assert "certified share 100.0%" in done.stdout
    assert "OK: the control paid" in done.stdout

    # The integrity step: an audit paused the run, a reviewer let it continue.
    decisions = DECISION_LINE.findall(done.stdout)
    assert [d[1:4] for d in decisions] == [
        ("automatic", "fail", "pause"),
        ("reviewed", "fail", "continue"),
    ], output
    assert "optimizer_only_rate_above_maximum" in decisions[0][4]
    assert "OK: the audit paused the run; the reviewed continue lets it resume" in done.stdout

    services = [SERVICE_LINE.match(line) for line in done.stdout.splitlines()]
    started = [m for m in services if m is not None]
    assert {m.group(1) for m in started} == {"control", "worker", "mockmed", "tier0", "params"}
    for match in started:
        assert not alive(int(match.group(2))), f"{match.group(1)} still runs"
        assert not port_open(match.group(3), int(match.group(4))), f"{match.group(1)} port open"
