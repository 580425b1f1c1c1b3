"""Calibration of a bundle with update effects (R-CAL-3): a ticket created and another closed.

The generic fault classes play on update effects too (nothing changed, a change credited
elsewhere, one record too many changed, a wrong or extra changed field, another subject's record
changed, a record the contract forbids touching touched or deleted); a sound judge refuses them
all, and a judge blind to what changed leaks.
"""

from __future__ import annotations

import dataclasses

import pytest

from rewardseal.core.digest import digest_json
from rewardseal.core.judging import judge_episode
from rewardseal.v1.contract_pb2 import OracleSpec
from rewardseal.v1.enums_pb2 import OracleChannel
from rewardseal_mockmed.contract import mockmed_contract
from rewardseal_worker.bundle import load_bundle, write_bundle
from rewardseal_worker.calibration import (
    GENERIC_FAULT_CLASSES,
    calibrate,
    fault_classes,
    fault_classes_for,
    trials,
)

SEED = 20261201
KEYS = ("customer_id", "queue_id")
SELECT = {key: {"identity": key} for key in KEYS}
FIELDS = ["customer_id", "queue_id", "subject", "priority", "status"]
REQUIRED = {
    "effects": [
        {
            "name": "ticket_created",
            "collection": "tickets",
            "select": SELECT,
            "expect": {"status": "open", "priority": "high"},
            "required_fields": FIELDS,
            "new_records": 1,
            "allowed_fields": [*FIELDS, "created_at", "updated_at"],
        },
        {
            "name": "previous_ticket_closed",
            "collection": "tickets",
            "change": "update",
            "select": SELECT,
            "before": {"status": "open"},
            "expect": {"status": "closed", "resolution": "superseded"},
            "changed_records": 1,
            "allowed_fields": ["status", "resolution", "updated_at"],
        },
    ]
}
FORBIDDEN = {
    "effects": [
        {
            "name": "closed_ticket_touched",
            "collection": "tickets",
            "change": "update",
            "select": SELECT,
            "before": {"status": "closed"},
        }
    ]
}
RECIPE = {
    "kind": "sql",
    "database": {"url_env": "TICKETS_DB_URL"},
    "table": "tickets",
    "id_column": "id",
    "identity_fields": {key: key for key in KEYS},
}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    contract = mockmed_contract(tier=2)
    contract.contract_id = "tickets.close-and-file.tier2"
    contract.required_effects_digest = digest_json(REQUIRED)
    contract.forbidden_effects_digest = digest_json(FORBIDDEN)
    contract.oracle.CopyFrom(
        OracleSpec(
            channel=OracleChannel.ORACLE_CHANNEL_DB,
            identity_keys=list(KEYS),
            oracle_recipe_digest=digest_json(RECIPE),
        )
    )
    directory = tmp_path_factory.mktemp("updates") / "tickets"
    write_bundle(
        directory,
        contract=contract,
        required_doc=REQUIRED,
        forbidden_doc=FORBIDDEN,
        recipe_doc=RECIPE,
    )
    return load_bundle(directory)


def test_every_generic_class_applies_to_create_and_update_effects(bundle):
    assert fault_classes_for(bundle) == GENERIC_FAULT_CLASSES


def test_a_sound_judge_refuses_every_fault_and_pays_every_gold_trial(bundle):
    result = calibrate(bundle, seed=SEED, trials=300)
    assert result.summary.false_accepts == 0, result.false_accept_trials
    assert result.summary.gold_refused == 0
    assert result.summary.trials == 300


def test_update_faults_are_played(bundle):
    """Each fault class hits the update effects in some trials, with the variants made for them."""
    setup = fault_classes.setup_for(bundle, None)
    seen = set()
    for fault in GENERIC_FAULT_CLASSES:
        for index in range(40):
            _, variant = trials.build_generic(setup, trials.trial_rng(SEED, fault, index), fault)
            seen.add((fault, variant))
    assert {
        ("missing_record", "nothing_changed"),
        ("missing_record", "change_credited_elsewhere"),
        ("duplicate_record", "changed_one_more"),
        ("extra_record", "changed_another"),
        ("wrong_field", "extra_field"),
        ("wrong_field", "changed_value"),
        ("forbidden_present", "touched_record"),
        ("forbidden_present", "deleted_record"),
    } <= seen


def test_a_judge_blind_to_the_changed_fields_leaks(bundle, monkeypatch):
    def broken(required, forbidden, *args, **kwargs):
        weak = [
            dataclasses.replace(spec, allowed_fields=None) if spec.updates else spec
            for spec in required
        ]
        return judge_episode(weak, forbidden, *args, **kwargs)

    monkeypatch.setattr(trials, "judge_episode", broken)
    result = calibrate(bundle, seed=SEED, trials=300)
    variants = {(leak.fault_class, leak.variant) for leak in result.false_accept_trials}
    assert ("wrong_field", "extra_field") in variants


def test_a_judge_that_ignores_the_change_count_leaks(bundle, monkeypatch):
    def broken(required, forbidden, *args, **kwargs):
        weak = [dataclasses.replace(spec, changed_records=None) for spec in required]
        return judge_episode(weak, forbidden, *args, **kwargs)

    monkeypatch.setattr(trials, "judge_episode", broken)
    result = calibrate(bundle, seed=SEED, trials=300)
    leaking = {c.name for c in result.summary.fault_classes if c.false_accepts}
    assert {"duplicate_record", "extra_record"} & leaking


# --- the same trials written into a sandbox copy (rewardseal-worker calibrate --sandbox) ---

TICKETS_DDL = (
    "CREATE TABLE tickets (id TEXT PRIMARY KEY, customer_id TEXT NOT NULL, queue_id TEXT NOT "
    "NULL, subject TEXT, body TEXT, priority TEXT, status TEXT, resolution TEXT, channel TEXT, "
    "created_at TEXT, updated_at TEXT)"
)


def _live_elsewhere(tmp_path):
    """The live SoR the recipe names, another file than the sandbox (calibration refuses to
    run where it cannot tell, R-CAL-5)."""
    return {"TICKETS_DB_URL": f"sqlite:///{tmp_path / 'live.sqlite'}"}


def _trial_with(setup, fault, variant):
    for index in range(200):
        trial, played = trials.build_generic(setup, trials.trial_rng(SEED, fault, index), fault)
        if played == variant:
            return trial
    raise AssertionError(f"no {fault}/{variant} trial in 200 draws")


@pytest.mark.parametrize(
    ("fault", "variant"),
    [
        ("forbidden_present", "deleted_record"),
        ("missing_record", "change_credited_elsewhere"),
        ("forbidden_present", "touched_record"),
    ],
)
def test_a_sandbox_judges_update_faults_as_the_engine_does(bundle, tmp_path, fault, variant):
    """A record the trial deleted is deleted in the sandbox too, and a change credited
    elsewhere is credited there under the sandbox's own record id: neither fault pays."""
    import sqlite3

    from rewardseal.v1.enums_pb2 import RewardOutcome
    from rewardseal_worker.calibration.sandbox import open_sandbox

    sandbox = tmp_path / "sandbox.sqlite"
    with sqlite3.connect(sandbox) as conn:
        conn.execute(TICKETS_DDL)
    setup = fault_classes.setup_for(bundle, None)
    judge = open_sandbox(bundle, str(sandbox), environ=_live_elsewhere(tmp_path))
    try:
        trial = _trial_with(setup, fault, variant)
        in_memory = trials.judge_trial(setup, trials.trial_rng(SEED, "read", 0), trial)
        written = judge(setup, trials.trial_rng(SEED, "read", 0), trial)
        gold = judge(setup, None, _trial_with(setup, "gold", "correct_effect"))
    finally:
        judge.close()
    assert written.decision.outcome == in_memory.outcome != RewardOutcome.REWARD_OUTCOME_VERIFIED
    assert not written.benign  # a structural fault is no field the sandbox could normalize
    assert gold.decision.outcome == RewardOutcome.REWARD_OUTCOME_VERIFIED
    with sqlite3.connect(sandbox) as conn:
        assert conn.execute("SELECT count(*) FROM tickets").fetchone() == (0,)


def test_every_trial_fits_a_sandbox_of_the_columns_the_contract_names(bundle, tmp_path):
    """Extra and touched fields are columns the contract names elsewhere, not invented ones, so
    a sandbox copy of the SoR holds every draw (none is redrawn) and each fault is measured."""
    import sqlite3

    from rewardseal_worker.calibration.runner import TrialNotWritable
    from rewardseal_worker.calibration.sandbox import open_sandbox

    sandbox = tmp_path / "sandbox.sqlite"
    with sqlite3.connect(sandbox) as conn:
        conn.execute(TICKETS_DDL)
    setup = fault_classes.setup_for(bundle, None)
    judge = open_sandbox(bundle, str(sandbox), environ=_live_elsewhere(tmp_path))
    refused = []
    try:
        for fault in GENERIC_FAULT_CLASSES:
            for index in range(12):
                trial, variant = trials.build_generic(
                    setup, trials.trial_rng(SEED, fault, index), fault
                )
                try:
                    judge(setup, trials.trial_rng(SEED, "read", index), trial)
                except TrialNotWritable as exc:
                    refused.append((fault, variant, str(exc)))
    finally:
        judge.close()
    assert refused == []
