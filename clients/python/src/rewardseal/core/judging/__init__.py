"""The judge: does a system-of-record read show a contract's effects, and what is the outcome?

One judge, pure functions over plain records, no I/O. The worker's scoring engine and its
calibration judge episodes with it, and the ExtraDup families (:mod:`rewardseal_mockmed.extradup`)
and the verifiers environment that pays through the kit judge their in-memory store with it.

- :mod:`~rewardseal.core.judging.effects`: effect specifications and their JSON documents
  (R-MSG-1).
- :mod:`~rewardseal.core.judging.findings`: the one fault vocabulary (:class:`Fault`,
  :class:`Finding`).
- :mod:`~rewardseal.core.judging.verdicts`: the three-valued verdict on one effect.
- :mod:`~rewardseal.core.judging.outcome`: the R-W-4 outcome rules and the evidence document.
- :mod:`~rewardseal.core.judging.snapshots`: one effect judged from before/after snapshots of a
  whole collection (the ExtraDup kit's read).
"""

from __future__ import annotations

from rewardseal.core.judging.effects import (
    CHANGE_CREATE,
    CHANGE_UPDATE,
    EFFECT_NAME_PATTERN,
    IDENTIFIER_PATTERN,
    RECORD_ID_FIELD,
    EffectSpec,
    IdentityRef,
    ParamRef,
    bind_parameters,
    identity_equals,
    parse_effects,
    same_value,
)
from rewardseal.core.judging.findings import EXPECTED_FAULTS, Fault, Finding
from rewardseal.core.judging.outcome import EVIDENCE_SCHEMA, Decision, decide, judge_episode
from rewardseal.core.judging.snapshots import SnapshotJudgement, judge_snapshots
from rewardseal.core.judging.verdicts import (
    EffectVerdict,
    Record,
    Verdict,
    change_findings,
    change_token,
    changed_fields,
    changed_records,
    judge_forbidden,
    judge_required,
    new_records,
    required_findings,
)

__all__ = [
    "CHANGE_CREATE",
    "CHANGE_UPDATE",
    "EFFECT_NAME_PATTERN",
    "EVIDENCE_SCHEMA",
    "EXPECTED_FAULTS",
    "IDENTIFIER_PATTERN",
    "RECORD_ID_FIELD",
    "Decision",
    "EffectSpec",
    "EffectVerdict",
    "Fault",
    "Finding",
    "IdentityRef",
    "ParamRef",
    "Record",
    "SnapshotJudgement",
    "Verdict",
    "change_findings",
    "change_token",
    "changed_fields",
    "changed_records",
    "bind_parameters",
    "decide",
    "identity_equals",
    "judge_episode",
    "judge_forbidden",
    "judge_required",
    "judge_snapshots",
    "new_records",
    "parse_effects",
    "required_findings",
    "same_value",
]
