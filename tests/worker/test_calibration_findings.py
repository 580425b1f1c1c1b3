"""Calibration and the judge speak one fault vocabulary (R-CAL-3, R-MM-3).

Every faulty calibration trial, generic class or ExtraDup family, draws at least one of the
judge findings that :data:`rewardseal.core.judging.EXPECTED_FAULTS` names for its class: the judge
refuses it for the fault that was made, not by accident.
"""

from __future__ import annotations

import pytest

from rewardseal.core.judging import (
    EXPECTED_FAULTS,
    Fault,
    Verdict,
    judge_forbidden,
    new_records,
    required_findings,
)
from rewardseal_kit.mockmed import (
    FORBIDDEN_EFFECTS,
    REQUIRED_EFFECTS,
    TIER2_RECIPE,
    mockmed_contract,
)
from rewardseal_worker import calibration
from rewardseal_worker.bundle import load_bundle, write_bundle
from rewardseal_worker.calibration import family_trials, fault_classes, trials
from rewardseal_worker.seed import MOCKMED_FAULT_FAMILIES

TRIALS_PER_CLASS = 40


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    directory = tmp_path_factory.mktemp("cal") / "contracts" / "mockmed"
    write_bundle(
        directory,
        contract=mockmed_contract(tier=2),
        required_doc=REQUIRED_EFFECTS,
        forbidden_doc=FORBIDDEN_EFFECTS,
        recipe_doc=TIER2_RECIPE,
    )
    return fault_classes.setup_for(load_bundle(directory), MOCKMED_FAULT_FAMILIES)


def trial_faults(setup, trial) -> set[Fault]:
    """Every finding the judge makes on a trial's baseline and current reads."""
    found: set[Fault] = set()
    for effect in setup.required:
        fresh = new_records(effect, trial.identity, trial.baseline, trial.after, trial.credited)
        found |= {finding.fault for finding in required_findings(effect, fresh)}
    for effect in setup.forbidden:
        verdict = judge_forbidden(
            effect, trial.identity, trial.baseline, trial.after, trial.credited
        )
        if verdict.verdict is Verdict.CONFIRMED:
            found.add(Fault.FORBIDDEN_PRESENT)
    return found


def test_every_fault_trial_draws_a_finding_that_names_its_class(setup) -> None:
    assert setup.fault_classes
    for kind in setup.fault_classes:
        expected = EXPECTED_FAULTS[kind.removeprefix(calibration.EXTRADUP_PREFIX)]
        for index in range(TRIALS_PER_CLASS):
            rng = trials.trial_rng(1, kind, index)
            if kind.startswith(calibration.EXTRADUP_PREFIX):
                family = kind.removeprefix(calibration.EXTRADUP_PREFIX)
                trial, variant = family_trials.build_family_trial(setup, rng, family)
            else:
                trial, variant = trials.build_generic(setup, rng, kind)
            found = trial_faults(setup, trial)
            assert found & expected, (kind, variant, index, found)


def test_gold_trials_draw_no_finding(setup) -> None:
    for index in range(TRIALS_PER_CLASS):
        trial, _ = trials.build_generic(setup, trials.trial_rng(1, "gold", index), "gold")
        assert trial_faults(setup, trial) == set()
