"""Calibration of a contract with task parameters (R-CAL-6): each trial's values drawn from the
declaration with a generator of the run's seed, reproducible from it; the checker configuration
and the corpus digest say how they were drawn; a sandbox run writes the bound trials into a
sandbox copy of MockMed and reads them back."""

from __future__ import annotations

import json
import random
import re
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from rewardseal.core.calibration import summary_from_json
from rewardseal.core.digest import digest_json
from rewardseal.core.errors import ValidationError
from rewardseal.core.judging import ParamRef
from rewardseal.core.task_parameters import (
    DECLARATION_DRAWING,
    ROWS_DRAWING,
    bound_values,
    draw_values,
    to_wire,
)
from rewardseal.v1.contract_pb2 import TaskParameter
from rewardseal.v1.enums_pb2 import TaskParameterType
from rewardseal_mockmed import contract as mockmed
from rewardseal_mockmed.seeding import create_database
from rewardseal_worker.bundle import load_bundle, write_bundle
from rewardseal_worker.calibration import calibrate, checker_configuration, runner
from rewardseal_worker.calibration.fault_classes import setup_for, with_drawn_parameters
from rewardseal_worker.calibration.sandbox_corpus import (
    SANDBOX_CORPUS_DIGEST,
    SANDBOX_PARAMETERIZED_CORPUS_DIGEST,
    sandbox_corpus,
    sandbox_corpus_digest,
)
from rewardseal_worker.cli import main

SEED = 20261204


def write_params_bundle(directory: Path, *, corpus: str | None = None) -> Path:
    contract = mockmed.mockmed_parameterized_contract()
    if corpus is not None:
        contract.certificate_policy.calibration_corpus_digest = corpus
    write_bundle(
        directory,
        contract=contract,
        required_doc=mockmed.PARAMETERIZED_REQUIRED_EFFECTS,
        forbidden_doc=mockmed.FORBIDDEN_EFFECTS,
        recipe_doc=mockmed.TIER2_RECIPE,
    )
    return directory


@pytest.fixture(scope="module")
def params_bundle(tmp_path_factory: pytest.TempPathFactory):
    return load_bundle(write_params_bundle(tmp_path_factory.mktemp("cal") / "params"))


def test_a_run_is_reproducible_from_its_seed_and_another_seed_draws_other_values(params_bundle):
    first = calibrate(params_bundle, seed=SEED, trials=60)
    again = calibrate(params_bundle, seed=SEED, trials=60)
    other = calibrate(params_bundle, seed=SEED + 1, trials=60)
    assert first.summary == again.summary
    assert first.transcript_digest == again.transcript_digest
    assert other.transcript_digest != first.transcript_digest
    assert first.summary.false_accepts == 0
    assert [c.name for c in first.summary.fault_classes] == [
        "extra_record",
        "duplicate_record",
        "missing_record",
        "wrong_field",
        "wrong_subject",
        "forbidden_present",
    ]


def test_each_trial_is_judged_with_values_drawn_for_it(params_bundle):
    setup = setup_for(params_bundle, None)
    drawn = [
        with_drawn_parameters(setup, runner.trial_rng(SEED, f"task_parameters/gold/{i}", i))
        for i in range(40)
    ]
    kinds = {spec.required[0].expect["type"] for spec in drawn}
    notes = {spec.required[0].expect["note"] for spec in drawn}
    assert kinds <= set(mockmed.ENCOUNTER_TYPES)
    assert len(kinds) > 1
    assert len(notes) == 40  # drawn per trial, not once per run
    assert setup.required[0].expect["type"] == ParamRef("encounter_type")  # the run's setup


def test_drawn_values_always_satisfy_the_declaration():
    contract = mockmed.mockmed_contract()
    contract.task_parameters.extend(
        [
            TaskParameter(
                name="sku", type=TaskParameterType.TASK_PARAMETER_TYPE_STRING, max_length=3
            ),
            TaskParameter(
                name="qty",
                type=TaskParameterType.TASK_PARAMETER_TYPE_INTEGER,
                minimum=1,
                maximum=99,
            ),
            TaskParameter(
                name="price", type=TaskParameterType.TASK_PARAMETER_TYPE_NUMBER, maximum=-2.5
            ),
            TaskParameter(name="rush", type=TaskParameterType.TASK_PARAMETER_TYPE_BOOLEAN),
        ]
    )
    rng = random.Random(SEED)
    seen_rush = set()
    for _ in range(300):
        values = draw_values(contract.task_parameters, rng)
        assert bound_values(contract, to_wire(values)) == values
        seen_rush.add(values["rush"])
    assert seen_rush == {True, False}
    # Name order, whatever the contract's order: the same generator state, the same values.
    reordered = list(reversed(contract.task_parameters))
    assert draw_values(reordered, random.Random(1)) == draw_values(
        contract.task_parameters, random.Random(1)
    )


def test_the_corpus_names_how_values_are_drawn_and_the_checker_does_not(params_bundle, tmp_path):
    fixed = tmp_path / "fixed"
    write_bundle(
        fixed,
        contract=mockmed.mockmed_contract(),
        required_doc=mockmed.REQUIRED_EFFECTS,
        forbidden_doc=mockmed.FORBIDDEN_EFFECTS,
        recipe_doc=mockmed.TIER2_RECIPE,
    )
    # The checker configuration says what decides a verdict, the same shape for both.
    assert set(checker_configuration(params_bundle)) == set(
        checker_configuration(load_bundle(fixed))
    )
    # The corpus says how the values were drawn: the MockMed one, and the sandbox's.
    assert mockmed.PARAMETERIZED_CORPUS["task_parameters"] == DECLARATION_DRAWING
    assert digest_json(mockmed.PARAMETERIZED_CORPUS) == mockmed.PARAMETERIZED_CORPUS_DIGEST
    contract = params_bundle.contract
    rows = [TRIAGE_ROW, CONSULT_ROW]
    assert sandbox_corpus_digest(contract) == SANDBOX_PARAMETERIZED_CORPUS_DIGEST
    assert sandbox_corpus(contract, rows)["task_parameters"] == {
        "drawing": ROWS_DRAWING,
        "rows_digest": digest_json(rows),
    }
    assert sandbox_corpus_digest(contract, rows) != sandbox_corpus_digest(contract, rows[:1])
    assert sandbox_corpus_digest(load_bundle(fixed).contract) == SANDBOX_CORPUS_DIGEST


TRIAGE_ROW = {"encounter_type": "Triage", "note": "Row one note."}
CONSULT_ROW = {"encounter_type": "Consult", "note": "Row two note."}


def test_task_rows_are_drawn_per_trial_and_reproducible(params_bundle):
    rows = [TRIAGE_ROW, CONSULT_ROW]
    first = calibrate(params_bundle, seed=SEED, trials=30, task_rows=rows)
    again = calibrate(params_bundle, seed=SEED, trials=30, task_rows=rows)
    assert first.transcript_digest == again.transcript_digest
    assert first.summary.false_accepts == 0
    declared = calibrate(params_bundle, seed=SEED, trials=30)
    assert declared.transcript_digest != first.transcript_digest
    setup = replace(setup_for(params_bundle, None), parameter_rows=tuple(rows))
    notes = {
        with_drawn_parameters(setup, random.Random(n)).required[0].expect["note"] for n in range(20)
    }
    assert notes == {TRIAGE_ROW["note"], CONSULT_ROW["note"]}


@pytest.mark.parametrize(
    ("rows", "words"),
    [
        ([TRIAGE_ROW, {"note": "x"}], "task row 2: task parameter encounter_type is missing"),
        ([{**TRIAGE_ROW, "qty": 1}], "task row 1: task parameter qty is not a parameter"),
        ([["Triage"]], "task row 1 is not a JSON object"),
        ([], "no task rows"),
    ],
)
def test_bad_task_rows_are_refused_naming_the_row(params_bundle, rows, words):
    with pytest.raises(ValidationError, match=re.escape(words)):
        calibrate(params_bundle, seed=SEED, trials=6, task_rows=rows)


def test_a_sandbox_run_writes_the_bound_trials_into_a_mockmed_copy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    data = tmp_path / "data"
    live = data / "mockmed" / "mockmed.sqlite"
    create_database(live, background_rows=5, seed=1)
    sandbox = tmp_path / "sandbox.sqlite"
    create_database(sandbox, background_rows=5, seed=2)
    wrong = write_params_bundle(data / "contracts" / "wrong", corpus=SANDBOX_CORPUS_DIGEST)
    assert main(["calibrate", str(wrong), "--sandbox", str(sandbox), "--trials", "12"]) == 2
    err = capsys.readouterr().err
    assert "task parameters drawn from the declaration (R-CAL-6)" in err
    assert SANDBOX_PARAMETERIZED_CORPUS_DIGEST in err

    directory = write_params_bundle(
        data / "contracts" / "params", corpus=SANDBOX_PARAMETERIZED_CORPUS_DIGEST
    )
    argv = ["calibrate", str(directory), "--sandbox", str(sandbox), "--trials", "24"]
    assert main([*argv, "--seed", "7"]) == 0, capsys.readouterr().err
    summary = summary_from_json(load_bundle(directory).calibration or {})
    assert (summary.trials, summary.false_accepts, summary.generator_seed) == (24, 0, 7)
    assert summary.calibration_corpus_digest == SANDBOX_PARAMETERIZED_CORPUS_DIGEST
    with sqlite3.connect(sandbox) as conn, sqlite3.connect(live) as live_conn:
        count = "SELECT count(*) FROM encounters"
        assert conn.execute(count).fetchone()[0] == 5  # every trial's rows deleted again
        assert live_conn.execute(count).fetchone()[0] == 5  # the live SoR never touched

    # --task-rows: the contract must pin the corpus of those very rows; calibrate names it.
    rows_file = tmp_path / "rows.jsonl"
    rows_file.write_text(json.dumps(TRIAGE_ROW) + "\n\n" + json.dumps(CONSULT_ROW) + "\n")
    with_rows = [*argv, "--task-rows", str(rows_file), "--seed", "7"]
    assert main(with_rows) == 2
    err = capsys.readouterr().err
    pinned = sandbox_corpus_digest(load_bundle(directory).contract, [TRIAGE_ROW, CONSULT_ROW])
    assert f"drawn from these task rows (R-CAL-6) {pinned}" in err
    rows_dir = write_params_bundle(data / "contracts" / "rows", corpus=pinned)
    assert (
        main(
            [
                "calibrate",
                str(rows_dir),
                "--sandbox",
                str(sandbox),
                "--trials",
                "24",
                "--task-rows",
                str(rows_file),
                "--seed",
                "7",
            ]
        )
        == 0
    ), capsys.readouterr().err
    summary = summary_from_json(load_bundle(rows_dir).calibration or {})
    assert summary.calibration_corpus_digest == pinned
    assert summary.false_accepts == 0
    rows_file.write_text(json.dumps({"note": "no type"}) + "\n")
    assert (
        main(["calibrate", str(rows_dir), "--sandbox", str(sandbox), "--task-rows", str(rows_file)])
        == 2
    )
    err = capsys.readouterr().err
    assert "task row 1: task parameter encounter_type is missing" in err
    assert "no type" not in err
