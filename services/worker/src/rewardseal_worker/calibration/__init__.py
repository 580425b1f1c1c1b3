"""Calibration: measure how often a contract's judge accepts a faulty effect (R-CAL-1..3).

Calibration runs where the corpus lives, inside the worker (R-CAL-2). It generates synthetic
episodes from a seeded generator, judges each one with
:func:`~rewardseal.core.judging.judge_episode` exactly as the scoring engine does (same effect
specs, same identity, a baseline read and a current read, runtime signal COMPLETED), and counts a
*false accept* whenever a faulty episode comes out VERIFIED. The output is a
:class:`CalibrationSummary` (counts, never the corpus) and epsilon, the exact one-sided
Clopper-Pearson upper bound on the false-accept rate.

Fault classes (R-CAL-3) are derived from the contract's own effect documents:

``missing_record``
    a required effect has fewer new records than it needs: nothing written, one short, an
    existing record updated instead of a new one created, or the only new record already
    credited to another receipt (R-W-3);
``duplicate_record``
    an exact copy of the correct record posted again (effects with an exact count);
``extra_record``
    one more matching record with other content, or of another kind (effects with an exact
    count);
``wrong_field``
    an expected field with another value, another JSON type, or missing; or a field outside
    ``allowed_fields``;
``wrong_subject``
    the correct record written for another subject: a fresh one, a near miss of the identity
    value, or a subject that already has records;
``forbidden_present``
    a forbidden effect present, merged into the correct record or as a record of its own.

A class that a contract cannot express (no exact count, no expected field, no forbidden effect)
is left out. A caller that passes :class:`FaultFamilies` for the bundle's task (the seeded
MockMed bundles do, R-MM-3, with MockMed's ExtraDup families) adds the task's scripted hacking
families (``extradup.dup`` ... ``extradup.wrong_record``): each family is replayed by the caller's
:class:`FamilyReplay` on a store that already holds background records, and the store's
before/after records become the baseline and current reads. Their write comes from the task's
published effect document that the families carry, not from the bundle, so a bundle that weakens
the task's effects shows up as false accepts. Calibration knows no task and no family by name:
which task gets which families, from which document, played how, is the caller's data.

Trials are split round-robin over the fault classes. Each trial draws from its own generator,
seeded from the run's seed, its kind and its index, so a run is reproducible per seed.

The package, by what each part does:

* :mod:`.families`: the data a caller passes (:class:`FaultFamilies`, :class:`FamilyReplay`);
* :mod:`.fault_classes`: the classes a bundle can express, derived once per run;
* :mod:`.trials` and :mod:`.family_trials`: one synthetic trial, and how it is read and judged;
  :mod:`.synthetic_values`: the values they are made of;
* :mod:`.runner`: :func:`calibrate`, the run and its summary; only effective faults count
  (R-CAL-7: a sandbox draw stored as the correct record is *benign*, one the sandbox refused is
  *rejected*, both counted apart);
* :mod:`.sandbox`, :mod:`.fhir_sandbox`, :mod:`.live_sor`, :mod:`.sandbox_corpus`: calibration
  written into a sandbox copy of the SoR (a FHIR server through its interactions, R-CAL-8),
  never the live one;
* :mod:`.checker`: the checker configuration digest a summary and a certificate carry;
* :mod:`.certificate`: :func:`self_signed_certificate`;
* :mod:`.progress`: :func:`text_progress`.

``calibration.json`` is read and written by the core (:func:`summary_from_json`,
:func:`summary_to_json`, re-exported here).
"""

from __future__ import annotations

from rewardseal.core.calibration import EPSILON_KEY, summary_from_json, summary_to_json
from rewardseal.core.faults import GENERIC_FAULT_CLASSES
from rewardseal.v1.certificate_pb2 import CalibrationSummary
from rewardseal_worker.calibration.certificate import self_signed_certificate
from rewardseal_worker.calibration.checker import (
    JUDGE_VERSION,
    checker_configuration,
    checker_configuration_digest,
)
from rewardseal_worker.calibration.families import (
    EXTRADUP_PREFIX,
    FamilyReplay,
    FamilyStore,
    FamilyWrite,
    FaultFamilies,
)
from rewardseal_worker.calibration.fault_classes import fault_classes_for
from rewardseal_worker.calibration.progress import ProgressCallback, text_progress
from rewardseal_worker.calibration.runner import (
    DEFAULT_TRIALS,
    GOLD_REFUSED_MESSAGE,
    CalibrationResult,
    FalseAccept,
    calibrate,
    default_gold_trials,
)

__all__ = [
    "DEFAULT_TRIALS",
    "EPSILON_KEY",
    "EXTRADUP_PREFIX",
    "GENERIC_FAULT_CLASSES",
    "GOLD_REFUSED_MESSAGE",
    "JUDGE_VERSION",
    "CalibrationResult",
    "CalibrationSummary",
    "FalseAccept",
    "FamilyReplay",
    "FamilyStore",
    "FamilyWrite",
    "FaultFamilies",
    "ProgressCallback",
    "calibrate",
    "checker_configuration",
    "checker_configuration_digest",
    "default_gold_trials",
    "fault_classes_for",
    "self_signed_certificate",
    "summary_from_json",
    "summary_to_json",
    "text_progress",
]
