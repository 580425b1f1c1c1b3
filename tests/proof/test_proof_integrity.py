"""``rewardseal-kit proof --integrity``: a drifting policy audited per boundary by control.

The console script runs for real: it starts the control plane, MockMed and three workers (the
tier-2 ``sql`` worker, a ``rest``-channel worker with its own key, a second ``sql`` worker on the
first one's recipe) as child processes, plays three boundaries of 104 episodes whose share of
banner lies grows (0%, 25%, 50%), and has control audit each case boundary by boundary (append,
seal, audit, wait; each bundle verified against the organization key pinned from control's
banner):

* (a) the screen reward audited by the sql worker: boundary 0 passes, boundary 1 fails with
  asymmetric acceptance among its reasons and the run pauses; boundary 2 is not trained;
* (b) the sql worker audited by the rest worker: every boundary passes;
* (c) the second sql worker as sentinel: refused as a gate, ``primary_sentinel_correlated``.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from rewardseal.core.errors import ValidationError
from rewardseal_kit.extradup import CONTROL
from rewardseal_kit.proof.integrity_plot import write_integrity_png
from rewardseal_kit.proof.integrity_report import (
    ASYMMETRIC,
    CORRELATED,
    check_integrity,
    render_integrity_markdown,
)
from rewardseal_kit.proof.integrity_run import (
    DRIFT,
    DRIFT_FAMILY,
    CaseRun,
    boundary_families,
)

CLI = Path(sys.executable).parent / "rewardseal-kit"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SERVICES = ("control", "mockmed", "sql", "rest", "sql_replica")

pytestmark = pytest.mark.slow


def _cli(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CLI), "proof", "--integrity", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def proof(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("integrity-proof")
    paths = {name: out / f"integrity.{name}" for name in ("json", "md", "png")}
    done = _cli(
        "--json",
        str(paths["json"]),
        "--markdown",
        str(paths["md"]),
        "--png",
        str(paths["png"]),
        "--run-dir",
        str(out / "run"),
    )
    return {
        "done": done,
        "paths": paths,
        "run_dir": out / "run",
        "doc": json.loads(paths["json"].read_text()) if paths["json"].exists() else None,
    }


def _cases(doc: dict[str, Any]) -> dict[str, CaseRun]:
    return {name: CaseRun.from_json(case) for name, case in doc["cases"].items()}


def test_the_cli_exits_0_and_every_check_holds(proof: dict[str, Any]) -> None:
    done = proof["done"]
    assert done.returncode == 0, done.stderr[-4000:]
    wrote = ", ".join(str(proof["paths"][name]) for name in ("json", "md", "png"))
    assert f"proof: PASS; wrote {wrote}" in done.stdout
    assert proof["doc"]["checks"] == {"passed": True, "problems": []}
    assert proof["doc"]["drift"] == list(DRIFT)
    assert proof["doc"]["meta"]["records_per_boundary"] >= 100


def test_case_a_fails_on_asymmetric_acceptance_and_pauses_the_run(proof: dict[str, Any]) -> None:
    case = proof["doc"]["cases"]["a"]
    assert (case["optimizer"], case["sentinel"]) == ("screen_t0", "sql")
    assert case["gating_eligible"]
    assert case["binding_blockers"] == []
    first, second = case["boundaries"]  # boundary 2 was never audited
    assert (first["outcome"], first["action"]) == ("pass", "continue")
    assert first["optimizer_accepted"] == first["sentinel_accepted"] == first["rows"]
    assert (second["outcome"], second["action"]) == ("fail", "pause")
    assert ASYMMETRIC in second["reasons"]
    # The screen pays every banner lie; the sql worker refuses each one.
    lies = round(DRIFT[1] * second["rows"])
    assert second["optimizer_accepted"] == second["rows"]
    assert second["sentinel_accepted"] == second["rows"] - lies
    assert second["optimizer_only_rate"] == pytest.approx(lies / second["rows"])
    assert case["paused_at"] == 1
    assert case["not_trained"] == [2]
    for boundary in case["boundaries"]:
        assert boundary["bundle_verified"]
        assert boundary["audit_id"]
        assert boundary["bundle_id"].startswith("sha256:")


def test_case_b_independent_rest_sentinel_passes_every_boundary(proof: dict[str, Any]) -> None:
    case = proof["doc"]["cases"]["b"]
    assert (case["optimizer"], case["sentinel"]) == ("sql", "rest")
    assert case["gating_eligible"]
    assert [b["outcome"] for b in case["boundaries"]] == ["pass"] * len(DRIFT)
    assert [b["boundary"] for b in case["boundaries"]] == list(range(len(DRIFT)))
    assert case["paused_at"] is None
    assert case["not_trained"] == []
    for boundary in case["boundaries"]:
        assert boundary["optimizer_accepted"] == boundary["sentinel_accepted"]
        assert boundary["optimizer_only_rate"] == 0.0
        assert boundary["reasons"] == []
    # The drift is visible to both certified readers: fewer acceptances as the lies grow.
    accepted = [b["sentinel_accepted"] for b in case["boundaries"]]
    assert accepted == sorted(accepted, reverse=True)
    assert accepted[0] > accepted[-1]
    # Three distinct audits, three distinct signed bundles.
    assert len({b["bundle_id"] for b in case["boundaries"]}) == len(DRIFT)


def test_case_c_correlated_sentinel_is_refused_as_a_gate(proof: dict[str, Any]) -> None:
    case = proof["doc"]["cases"]["c"]
    assert (case["optimizer"], case["sentinel"]) == ("sql", "sql_replica")
    assert not case["gating_eligible"]
    assert CORRELATED in case["binding_blockers"]
    assert f"{CORRELATED}:shared_implementation_fingerprint" in case["binding_blockers"]
    assert "shared_contract_digest" in case["correlation_reasons"]
    assert case["boundaries"] == []


def test_markdown_and_png_say_the_same(proof: dict[str, Any]) -> None:
    markdown = proof["paths"]["md"].read_text()
    assert "| 1 | 25% | 104 | 100% | 75% | 0/0 | 25% | fail | pause |" in markdown
    assert "| 2 | 50% | - | - | - | - | - | not trained | - | paused at 1 |" in markdown
    assert "Refused as a gate" in markdown
    assert "every check holds" in markdown
    assert proof["paths"]["png"].read_bytes().startswith(PNG_MAGIC)


def test_every_service_is_stopped_afterwards(proof: dict[str, Any]) -> None:
    for name in SERVICES:
        banner = json.loads((proof["run_dir"] / f"{name}.ready.json").read_text())
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", banner["port"]), timeout=5).close()


def test_the_checks_fail_when_a_case_goes_wrong(proof: dict[str, Any]) -> None:
    cases = _cases(proof["doc"])
    assert check_integrity(cases, len(DRIFT)) == []
    # (a) a failure for another reason, and no pause.
    a = cases["a"]
    failed = replace(a.boundaries[1], reasons=("reward_gap_above_maximum",), action="continue")
    broken = {**cases, "a": replace(a, boundaries=[a.boundaries[0], failed], paused_at=None)}
    problems = check_integrity(broken, len(DRIFT))
    assert f"a: boundary 1 failed without {ASYMMETRIC}" in problems
    assert "a: the run did not pause at boundary 1" in problems
    # (a) no audit failed at all.
    passed = replace(a.boundaries[1], outcome="pass", action="continue", reasons=())
    quiet = {**cases, "a": replace(a, boundaries=[a.boundaries[0], passed], paused_at=None)}
    assert any("no audit failed" in p for p in check_integrity(quiet, len(DRIFT)))
    # (b) one boundary warned.
    b = cases["b"]
    warned = replace(b.boundaries[2], outcome="warn")
    bad_b = {**cases, "b": replace(b, boundaries=[*b.boundaries[:2], warned])}
    assert "b: boundary 2 decided warn ()" in check_integrity(bad_b, len(DRIFT))
    # (c) a correlated sentinel let through as a gate.
    c = cases["c"]
    gated = {**cases, "c": replace(c, gating_eligible=True, binding_blockers=())}
    problems = check_integrity(gated, len(DRIFT))
    assert "c: a sentinel on the optimizer's own recipe was accepted as a gate" in problems
    assert f"c: the binding's blockers lack {CORRELATED}" in problems
    # A bundle that does not match its audit.
    unverified = replace(b.boundaries[0], bundle_verified=False)
    bad_bundle = {**cases, "b": replace(b, boundaries=[unverified, *b.boundaries[1:]])}
    assert "b: boundary 0's bundle does not match its audit" in check_integrity(
        bad_bundle, len(DRIFT)
    )


def test_too_few_records_or_given_services_are_refused(tmp_path: Path) -> None:
    json_path = tmp_path / "i.json"
    done = _cli("--json", str(json_path), "--markdown", str(tmp_path / "i.md"), "--records", "99")
    assert done.returncode == 2
    assert "at least 100" in done.stderr
    done = _cli("--json", str(json_path), "--markdown", "x", "--worker-target", "127.0.0.1:1")
    assert done.returncode == 2
    assert "starts its own services" in done.stderr
    assert not json_path.exists()


def test_boundary_families_spread_the_drift() -> None:
    for share, records in ((0.0, 104), (0.25, 104), (0.5, 101), (1.0, 7)):
        families = boundary_families(share, records)
        assert len(families) == records
        assert families.count(DRIFT_FAMILY) == round(share * records)
        assert set(families) <= {CONTROL, DRIFT_FAMILY}
    # Spread through the boundary, not bunched at one end.
    quarter = boundary_families(0.25, 104)
    assert quarter[:52].count(DRIFT_FAMILY) == quarter[52:].count(DRIFT_FAMILY) == 13
    for share, records in ((-0.1, 10), (1.5, 10), (0.5, 0)):
        with pytest.raises(ValidationError, match="share in"):
            boundary_families(share, records)


def test_unscored_rows_are_reported_apart_never_as_refusals(
    proof: dict[str, Any], tmp_path: Path
) -> None:
    cases = _cases(proof["doc"])
    b = cases["b"]
    # 10 of boundary 0's rows left without a sentinel verdict (an outage, say).
    outage = replace(b.boundaries[0], sentinel_unscored=10, sentinel_accepted=94)
    cases["b"] = replace(b, boundaries=[outage, *b.boundaries[1:]])
    markdown = render_integrity_markdown(cases, DRIFT, [], {"records_per_boundary": 104})
    # Acceptance over the 94 scored rows (100%), the 10 unscored counted apart.
    assert "| 0 | 0% | 104 | 100% | 100% | 0/10 | 0% | pass | continue | - |" in markdown
    png = tmp_path / "unscored.png"
    write_integrity_png(cases, DRIFT, png)
    assert png.read_bytes().startswith(PNG_MAGIC)
