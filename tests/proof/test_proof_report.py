"""``rewardseal-kit proof``: the screen reward pays every hack, the certified reward only the gold.

The console script runs for real: it starts MockMed and the seeded rest worker as child
processes on free loopback ports (and the seeded parameterized worker with a MockMed over the
SQLite system of record it reads), plays three trials of every condition through MockMed, scores
each with the tier-0 screen reward and the tier-2 worker (real gRPC, receipts verified against
the worker's key), writes JSON, Markdown and PNG, and stops both services.
"""

from __future__ import annotations

import copy
import json
import socket
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from rewardseal.core.judging import EXPECTED_FAULTS
from rewardseal_kit.proof.conditions import (
    CONDITIONS,
    OUTAGE,
    PARAMS_CONDITIONS,
    PARAMS_OTHER_ROW,
    PARAMS_ROW,
)
from rewardseal_kit.proof.report import check_report, summarize
from rewardseal_kit.proof.rewards import CERTIFIED_T2, SCREEN_T0, TrialResult
from rewardseal_mockmed.extradup import FAMILIES, HACKING_FAMILIES

TRIALS = 3
CLI = Path(sys.executable).parent / "rewardseal-kit"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def proof(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("proof")
    paths = {name: out / f"proof.{name}" for name in ("json", "md", "png")}
    done = subprocess.run(
        [
            str(CLI),
            "proof",
            "--json",
            str(paths["json"]),
            "--markdown",
            str(paths["md"]),
            "--png",
            str(paths["png"]),
            "--trials",
            str(TRIALS),
            "--run-dir",
            str(out / "run"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    return {
        "done": done,
        "paths": paths,
        "run_dir": out / "run",
        "doc": json.loads(paths["json"].read_text()) if paths["json"].exists() else None,
    }


def row(doc: dict[str, Any], condition: str, reward: str) -> dict[str, Any]:
    (found,) = [r for r in doc["table"] if (r["condition"], r["reward"]) == (condition, reward)]
    return found


def trials_of(doc: dict[str, Any], condition: str, reward: str) -> list[dict[str, Any]]:
    return [t for t in doc["trials"] if (t["condition"], t["reward"]) == (condition, reward)]


def test_the_cli_exits_0_and_every_check_passes(proof: dict[str, Any]) -> None:
    done = proof["done"]
    assert done.returncode == 0, done.stderr
    wrote = ", ".join(str(proof["paths"][name]) for name in ("json", "md", "png"))
    assert wrote in done.stdout.splitlines()[-1]
    assert "PASS" in done.stdout
    assert proof["doc"]["checks"] == {"passed": True, "problems": []}


def test_the_screen_reward_pays_every_hack_the_outage_and_both_rows(proof: dict[str, Any]) -> None:
    doc = proof["doc"]
    for condition in (*HACKING_FAMILIES, OUTAGE, *PARAMS_CONDITIONS):
        line = row(doc, condition, SCREEN_T0)
        assert (line["tier"], line["trials"], line["paid"]) == (0, TRIALS, TRIALS), condition
        paid_for_nothing = 0 if condition == PARAMS_ROW else TRIALS
        assert line["silent_incorrect_success"] == paid_for_nothing
        assert (line["certified"], line["scope"]) == (0, "development_only")
        for trial in trials_of(doc, condition, SCREEN_T0):
            assert trial["receipt_id"] is None  # a banner signs nothing
            assert (trial["outcome"], trial["scalar"]) == ("VERIFIED", 1.0)


def test_the_certified_reward_pays_only_the_control(proof: dict[str, Any]) -> None:
    doc = proof["doc"]
    control = row(doc, "control", CERTIFIED_T2)
    assert (control["tier"], control["paid"], control["over_refusal"]) == (2, TRIALS, 0)
    assert (control["certified"], control["scope"]) == (TRIALS, "synthetic")
    for trial in trials_of(doc, "control", CERTIFIED_T2):
        assert (trial["outcome"], trial["scalar"], trial["certified"]) == ("VERIFIED", 1.0, True)
    for family in HACKING_FAMILIES:
        line = row(doc, family, CERTIFIED_T2)
        assert (line["paid"], line["silent_incorrect_success"], line["unscored"]) == (0, 0, 0)
        for trial in trials_of(doc, family, CERTIFIED_T2):
            assert trial["outcome"] == "WRONG_EFFECT", family
            assert trial["scalar"] == 0.0  # the seeded contract's wrong_effect_reward


def test_the_parameterized_contract_pays_its_row_and_refuses_another_rows_write(
    proof: dict[str, Any],
) -> None:
    """The same Triage write: begun with the row it does it is certified and paid; begun with
    another row's parameters (a Consult) it is WRONG_EFFECT naming the encounter's ``type``,
    while the screen pays both."""
    doc = proof["doc"]
    honest = row(doc, PARAMS_ROW, CERTIFIED_T2)
    assert (honest["gold"], honest["tier"], honest["paid"], honest["over_refusal"]) == (
        "pay",
        2,
        TRIALS,
        0,
    )
    assert (honest["certified"], honest["scope"], honest["findings"]) == (TRIALS, "synthetic", [])
    for trial in trials_of(doc, PARAMS_ROW, CERTIFIED_T2):
        assert (trial["outcome"], trial["scalar"], trial["certified"]) == ("VERIFIED", 1.0, True)
    other = row(doc, PARAMS_OTHER_ROW, CERTIFIED_T2)
    assert (other["gold"], other["paid"], other["silent_incorrect_success"]) == ("refuse", 0, 0)
    assert other["outcomes"] == ["WRONG_EFFECT"]
    assert other["findings"] == ["encounter_created:wrong_field(type)"]
    for trial in trials_of(doc, PARAMS_OTHER_ROW, CERTIFIED_T2):
        assert (trial["outcome"], trial["scalar"]) == ("WRONG_EFFECT", 0.0)
    screen = row(doc, PARAMS_OTHER_ROW, SCREEN_T0)
    assert (screen["paid"], screen["silent_incorrect_success"]) == (TRIALS, TRIALS)
    markdown = proof["paths"]["md"].read_text()
    assert f"| {PARAMS_OTHER_ROW} | 0 (refuse) | certified_t2 |" in markdown
    assert "`encounter_created:wrong_field(type)`" in markdown


def test_the_table_names_each_familys_findings(proof: dict[str, Any]) -> None:
    """R-MSG-12: the certified reward's receipts say which fault each hacking family made."""
    doc = proof["doc"]
    assert row(doc, "control", CERTIFIED_T2)["findings"] == []
    for family in HACKING_FAMILIES:
        words = row(doc, family, CERTIFIED_T2)["findings"]
        codes = {word.split(":")[1].split("(")[0] for word in words}
        assert codes & {fault.value for fault in EXPECTED_FAULTS[family]}, (family, words)
        assert row(doc, family, SCREEN_T0)["findings"] == []  # a banner names nothing
    assert row(doc, OUTAGE, CERTIFIED_T2)["findings"] == ["-:read_failed"]
    markdown = proof["paths"]["md"].read_text()
    assert "`triage_encounter_created:duplicate_record`" in markdown


def test_the_outage_is_unscored_never_zero(proof: dict[str, Any]) -> None:
    doc = proof["doc"]
    line = row(doc, OUTAGE, CERTIFIED_T2)
    assert line["gold"] == "unscored"
    assert (line["paid"], line["unscored"], line["silent_incorrect_success"]) == (0, TRIALS, 0)
    assert line["outcomes"] == ["FAILED_PLATFORM"]
    trials = trials_of(doc, OUTAGE, CERTIFIED_T2)
    assert len(trials) == TRIALS
    for trial in trials:
        assert trial["scalar"] is None
        assert trial["receipt_id"]  # a signed receipt that says "no score"
    # The raw JSON text carries null, not 0.0, for those scalars.
    text = proof["paths"]["json"].read_text()
    assert text.count('"scalar": null') == TRIALS


def test_every_trial_is_its_own_episode_with_a_receipt(proof: dict[str, Any]) -> None:
    doc = proof["doc"]
    assert len(doc["trials"]) == len(CONDITIONS) * TRIALS * 2
    episodes = Counter(t["episode_id"] for t in doc["trials"])
    assert len(episodes) == len(CONDITIONS) * TRIALS
    assert set(episodes.values()) == {2}  # the same episode, scored both ways
    receipts = [t["receipt_id"] for t in doc["trials"] if t["reward"] == CERTIFIED_T2]
    assert len(set(receipts)) == len(CONDITIONS) * TRIALS
    assert all(receipts)
    assert {t["condition"] for t in doc["trials"]} == {*FAMILIES, OUTAGE, *PARAMS_CONDITIONS}


def test_json_markdown_and_png_agree(proof: dict[str, Any]) -> None:
    doc = proof["doc"]
    results = [TrialResult(**t) for t in doc["trials"]]
    assert [r.to_json() for r in summarize(results)] == doc["table"]
    markdown = proof["paths"]["md"].read_text()
    assert "Why a screen PASS is not proof" in markdown
    for line in doc["table"]:
        cells = (line["condition"], line["reward"], f"{line['paid']}/{line['trials']}")
        assert any(all(f" {c} " in md for c in cells) for md in markdown.splitlines()), cells
    png = proof["paths"]["png"].read_bytes()
    assert png.startswith(PNG_MAGIC)
    assert len(png) > 10_000


def test_every_service_is_stopped_afterwards(proof: dict[str, Any]) -> None:
    for name in ("mockmed", "worker", "mockmed-params", "worker-params"):
        banner = json.loads((proof["run_dir"] / f"{name}.ready.json").read_text())
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", banner["port"]), timeout=5).close()


def test_a_reward_that_pays_a_hack_or_scores_the_outage_fails_the_checks(
    proof: dict[str, Any],
) -> None:
    results = [TrialResult(**t) for t in proof["doc"]["trials"]]
    assert check_report(summarize(results), results) == []
    broken = copy.copy(results)
    for index, result in enumerate(broken):
        if result.reward != CERTIFIED_T2:
            continue
        if result.condition == "dup":
            broken[index] = replace(result, outcome="VERIFIED", scalar=1.0)
        elif result.condition == OUTAGE:
            broken[index] = replace(result, outcome="WRONG_EFFECT", scalar=0.0)
        elif result.condition == PARAMS_OTHER_ROW:
            broken[index] = replace(result, outcome="VERIFIED", scalar=1.0, findings=())
    problems = check_report(summarize(broken), broken)
    assert any(p.startswith(f"{PARAMS_OTHER_ROW}/certified_t2: the certified") for p in problems)
    assert any("no wrong_field finding naming 'type'" in p for p in problems)
    assert any(p.startswith("dup/certified_t2") for p in problems)
    assert any(p.startswith(f"{OUTAGE}/certified_t2") for p in problems)
    assert any("the outage got scalar 0.0" in p for p in problems)


def test_fewer_than_three_trials_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(CLI), "proof", "--json", str(tmp_path / "a.json"), "--markdown", "x", "--trials", "2"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "at least 3" in done.stderr
    assert not (tmp_path / "a.json").exists()
