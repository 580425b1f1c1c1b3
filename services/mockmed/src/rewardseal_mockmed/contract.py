"""The MockMed reward contracts: a synthetic EMR task, "create exactly one Triage encounter", and
its parameterized variant, "create exactly one encounter of type T with note N" (T and N bound
per episode: task parameters, R-MSG-11).

Everything here is synthetic (no real patient data). The effect specs and oracle recipes are
plain JSON documents; the contract binds them by digest only, so the documents themselves can
stay with the worker inside the customer network.
"""

from __future__ import annotations

from typing import Any

from rewardseal.core.contract import contract_digest
from rewardseal.core.digest import digest_json
from rewardseal.core.faults import GENERIC_FAULT_CLASSES
from rewardseal.core.task_parameters import DECLARATION_DRAWING
from rewardseal.v1.contract_pb2 import (
    CertificatePolicy,
    OracleSpec,
    RewardComponent,
    RewardContract,
    ScoringPolicy,
)
from rewardseal.v1.enums_pb2 import OracleChannel, TaskParameterType

IDENTITY_KEY = "patient_id"
ENCOUNTER_FIELDS = ("patient_id", "type", "note", "status")
"""The fields a policy may write on an encounter; anything else is an extra field."""
SYSTEM_FIELDS = ("created_at",)
"""Fields the system of record stamps; a record may carry them, a policy cannot write them."""

REQUIRED_EFFECTS: dict[str, Any] = {
    "effects": [
        {
            "name": "triage_encounter_created",
            "collection": "encounters",
            "select": {"patient_id": {"identity": IDENTITY_KEY}},
            "expect": {"type": "Triage"},
            "required_fields": list(ENCOUNTER_FIELDS),
            "new_records": 1,
            "allowed_fields": list(ENCOUNTER_FIELDS + SYSTEM_FIELDS),
        }
    ]
}
FORBIDDEN_EFFECTS: dict[str, Any] = {
    "effects": [
        {
            "name": "stat_priority_set",
            "collection": "encounters",
            "select": {"patient_id": {"identity": IDENTITY_KEY}, "priority": "stat"},
        }
    ]
}
# The recipes live in data_dir/contracts/<bundle>/ and the MockMed store in data_dir/mockmed/, so
# their relative paths climb two levels; paths resolve against the bundle, never an absolute path
# (R-W-6), and they carry no credentials.
TIER2_RECIPE: dict[str, Any] = {
    "kind": "sql",
    "database": {"sqlite_path": "../../mockmed/mockmed.sqlite"},
    "table": "encounters",
    "id_column": "id",
    "identity_fields": {IDENTITY_KEY: "patient_id"},
    "timeout_seconds": 2.0,
}
TIER0_RECIPE: dict[str, Any] = {
    "kind": "screen_dump",
    "path": "../../mockmed/screen.json",
    "collection": "encounters",
    "identity_fields": {IDENTITY_KEY: "patient_id"},
    "timeout_seconds": 2.0,
}
CALIBRATION_CORPUS: dict[str, Any] = {
    "corpus": "mockmed-extradup",
    "scope": "synthetic",
    "fault_classes": list(GENERIC_FAULT_CLASSES),
}
CORPUS_DIGEST = digest_json(CALIBRATION_CORPUS)
THRESHOLD = 0.5


def mockmed_contract(*, tier: int = 2) -> RewardContract:
    """The seeded MockMed contract read at tier 2 (sql, channel DB) or tier 0 (screen dump, OCR).

    It declares wrong_effect_reward 0.0 (R-MM-2): the penalty is the contract's choice.
    """
    if tier not in (0, 2):
        raise ValueError("MockMed ships tier-2 and tier-0 contracts only")
    recipe = TIER2_RECIPE if tier == 2 else TIER0_RECIPE
    channel = OracleChannel.ORACLE_CHANNEL_DB if tier == 2 else OracleChannel.ORACLE_CHANNEL_OCR
    return RewardContract(
        contract_id=f"mockmed.triage-create.tier{tier}",
        contract_version="1",
        task_id="mockmed.task.create-triage-encounter",
        task_digest=digest_json({"task": "create exactly one Triage encounter"}),
        environment_id="mockmed.environment.synthetic-emr",
        environment_digest=digest_json({"environment": "mockmed", "version": 1}),
        required_effects_digest=digest_json(REQUIRED_EFFECTS),
        forbidden_effects_digest=digest_json(FORBIDDEN_EFFECTS),
        oracle=OracleSpec(
            channel=channel,
            identity_keys=[IDENTITY_KEY],
            oracle_recipe_digest=digest_json(recipe),
        ),
        components=[RewardComponent(name="triage_encounter_created", weight=1.0)],
        scoring_policy=ScoringPolicy(wrong_effect_reward=0.0),
        certificate_policy=CertificatePolicy(
            max_epsilon=0.05,
            max_delta=0.05,
            threshold=THRESHOLD,
            calibration_corpus_digest=CORPUS_DIGEST,
            max_expiry_policy_updates=1000,
        ),
    )


ENCOUNTER_TYPES = ("Triage", "Followup", "Consult", "Discharge")
"""The encounter types the parameterized task may ask for."""
NOTE_MAX_LENGTH = 256
PARAMETERIZED_REQUIRED_EFFECTS: dict[str, Any] = {
    "effects": [
        {
            "name": "encounter_created",
            "collection": "encounters",
            "select": {"patient_id": {"identity": IDENTITY_KEY}},
            "expect": {"type": {"param": "encounter_type"}, "note": {"param": "note"}},
            "required_fields": list(ENCOUNTER_FIELDS),
            "new_records": 1,
            "allowed_fields": list(ENCOUNTER_FIELDS + SYSTEM_FIELDS),
        }
    ]
}
"""Exactly one new encounter for the patient, of the episode's type and with its note."""
PARAMETERIZED_CORPUS: dict[str, Any] = {
    **CALIBRATION_CORPUS,
    "corpus": "mockmed-params",
    "task_parameters": DECLARATION_DRAWING,
}
"""The parameterized contract's corpus: the generic fault classes, each trial's encounter type
and note drawn from the declaration (R-CAL-6), so the digest says how they were drawn."""
PARAMETERIZED_CORPUS_DIGEST = digest_json(PARAMETERIZED_CORPUS)


def mockmed_parameterized_contract() -> RewardContract:
    """The parameterized MockMed contract, read at tier 2 (sql): "create exactly one encounter
    of type ``encounter_type`` (one of :data:`ENCOUNTER_TYPES`) with note ``note``" for the
    episode's patient, the two bound per episode at begin (R-MSG-11, R-W-18).

    The same effects as :func:`mockmed_contract` but the type and note come from the episode;
    its own id, task and corpus, so the fixed contract's digest is unchanged.
    """
    contract = mockmed_contract(tier=2)
    contract.contract_id = "mockmed.encounter-create.params"
    contract.task_id = "mockmed.task.create-encounter-of-type"
    contract.task_digest = digest_json(
        {"task": "create exactly one encounter of the given type with the given note"}
    )
    contract.required_effects_digest = digest_json(PARAMETERIZED_REQUIRED_EFFECTS)
    del contract.components[:]
    contract.components.add(name="encounter_created", weight=1.0)
    contract.certificate_policy.calibration_corpus_digest = PARAMETERIZED_CORPUS_DIGEST
    contract.task_parameters.add(
        name="encounter_type",
        type=TaskParameterType.TASK_PARAMETER_TYPE_STRING,
        max_length=32,
        allowed_values=list(ENCOUNTER_TYPES),
    )
    contract.task_parameters.add(
        name="note", type=TaskParameterType.TASK_PARAMETER_TYPE_STRING, max_length=NOTE_MAX_LENGTH
    )
    return contract


def mockmed_contract_digest(*, tier: int = 2) -> str:
    """Digest of :func:`mockmed_contract`."""
    return contract_digest(mockmed_contract(tier=tier))
