"""Starting bundles for ``rewardseal-worker contract init``: one per readable recipe kind.

A starting bundle is a complete, consistent bundle (it passes ``contract check`` as written)
about an invented ticketing system: a ``tickets`` collection, one identity key ``customer_id``,
one required effect (exactly one new open ticket for the customer) and one forbidden effect (a
ticket of the customer closed). The author replaces the names and values with their own
system's and runs ``contract seal`` to rebind the digests. JSON has no comments, and the
documents are bound by digest (a comment inside one would change the contract), so the
explanations live in the ``README.md`` written beside them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from rewardseal.core.digest import digest_json
from rewardseal.v1.contract_pb2 import (
    CertificatePolicy,
    OracleSpec,
    RewardComponent,
    RewardContract,
    ScoringPolicy,
    TaskParameter,
)
from rewardseal.v1.enums_pb2 import OracleChannel
from rewardseal_worker.calibration.sandbox_corpus import (
    SANDBOX_CORPUS_DIGEST,
    SANDBOX_PARAMETERIZED_CORPUS_DIGEST,
)
from rewardseal_worker.oracles.base import KIND_FHIR, KIND_JSON_FILE, KIND_REST, KIND_SQL

__all__ = ["INIT_KINDS", "starting_bundle"]

IDENTITY_KEY: Final = "customer_id"
COLLECTION: Final = "tickets"
TICKET_FIELDS: Final = ("customer_id", "subject", "body", "status")

_RECIPES: Final[Mapping[str, Mapping[str, Any]]] = {
    KIND_SQL: {
        "kind": "sql",
        "database": {"url_env": "SOR_DATABASE_URL"},
        "table": COLLECTION,
        "id_column": "id",
        "identity_fields": {IDENTITY_KEY: "customer_id"},
        "timeout_seconds": 2.0,
    },
    KIND_REST: {
        "kind": "rest",
        "base_url_env": "SOR_API_URL",
        "token_env": "SOR_API_TOKEN",
        "path": "/api/tickets",
        "collection": COLLECTION,
        "identity_params": {IDENTITY_KEY: "customer_id"},
        "timeout_seconds": 2.0,
    },
    KIND_FHIR: {
        "kind": "fhir",
        "base_url_env": "SOR_FHIR_URL",
        "token_env": "SOR_FHIR_TOKEN",
        "resource": "Encounter",
        "path": "/fhir",
        "identity_params": {"patient_id": "patient"},
        "timeout_seconds": 2.0,
    },
    KIND_JSON_FILE: {
        "kind": "json_file",
        "path": "sor.json",
        "collection": COLLECTION,
        "identity_fields": {IDENTITY_KEY: "customer_id"},
        "timeout_seconds": 2.0,
    },
}
_CHANNELS: Final[Mapping[str, int]] = {
    KIND_SQL: OracleChannel.ORACLE_CHANNEL_DB,
    KIND_REST: OracleChannel.ORACLE_CHANNEL_API,
    KIND_FHIR: OracleChannel.ORACLE_CHANNEL_API,
    KIND_JSON_FILE: OracleChannel.ORACLE_CHANNEL_FILE,
}
INIT_KINDS: Final[tuple[str, ...]] = tuple(_RECIPES)
"""The recipe kinds ``contract init --recipe`` writes a starting bundle for."""


def _effects(kind: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The starting required and forbidden effects documents for ``kind``."""
    if kind == KIND_FHIR:
        # The fhir reader maps Encounter resources to the "encounters" collection with the
        # fields patient_id, type, note, status, priority, created_at (oracles/http.py).
        key, collection = "patient_id", "encounters"
        expect: dict[str, Any] = {"type": "Triage", "status": "open"}
        fields = ["patient_id", "type", "note", "status"]
        forbidden_select: dict[str, Any] = {key: {"identity": key}, "priority": "stat"}
    else:
        key, collection = IDENTITY_KEY, COLLECTION
        expect = {"status": "open"}
        fields = list(TICKET_FIELDS)
        forbidden_select = {key: {"identity": key}, "status": "closed"}
    required = {
        "effects": [
            {
                "name": "ticket_created" if kind != KIND_FHIR else "triage_encounter_created",
                "collection": collection,
                "select": {key: {"identity": key}},
                "expect": expect,
                "required_fields": fields,
                "new_records": 1,
                "allowed_fields": [*fields, "created_at"],
            }
        ]
    }
    forbidden = {
        "effects": [
            {
                "name": "ticket_closed" if kind != KIND_FHIR else "stat_priority_set",
                "collection": collection,
                "select": forbidden_select,
            }
        ]
    }
    return required, forbidden


def contract_stem(name: str) -> str:
    """A contract id stem from a directory name: lower case, ``[a-z0-9.-]``, 1 to 64 characters
    (the ids built on it stay within R-MSG-10's 8 to 128)."""
    stem = re.sub(r"[^a-z0-9.-]+", "-", name.lower())[:64].strip(".-")
    return stem or "contract"


def starting_bundle(
    kind: str, name: str, *, parameters: Sequence[TaskParameter] = ()
) -> tuple[RewardContract, dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The starting contract, required effects, forbidden effects and recipe for ``kind``.

    ``name`` (the bundle directory's name) becomes the stem of the contract, task and
    environment ids. ``parameters`` are declared as written (R-MSG-11) and then the policy pins
    the parameterized sandbox corpus, whose trials draw their values from the declaration
    (R-CAL-6); the effects do not refer to them until the author edits ``expect``.

    Raises:
        KeyError: ``kind`` is not one of :data:`INIT_KINDS`.
    """
    recipe = dict(_RECIPES[kind])
    required, forbidden = _effects(kind)
    stem = contract_stem(name)
    identity_key = next(iter(recipe.get("identity_fields") or recipe["identity_params"]))
    contract = RewardContract(
        contract_id=f"{stem}.contract",
        contract_version="1",
        task_id=f"{stem}.task.default",
        task_digest=digest_json({"task": "describe the task the policy is asked to do"}),
        environment_id=f"{stem}.environment",
        environment_digest=digest_json({"environment": stem, "version": 1}),
        required_effects_digest=digest_json(required),
        forbidden_effects_digest=digest_json(forbidden),
        oracle=OracleSpec(
            channel=_CHANNELS[kind],  # type: ignore[arg-type]
            identity_keys=[identity_key],
            oracle_recipe_digest=digest_json(recipe),
        ),
        components=[RewardComponent(name=required["effects"][0]["name"], weight=1.0)],
        scoring_policy=ScoringPolicy(verified_reward=1.0, wrong_effect_reward=-1.0),
        certificate_policy=CertificatePolicy(
            max_epsilon=0.05,
            max_delta=0.05,
            threshold=0.5,
            calibration_corpus_digest=(
                SANDBOX_PARAMETERIZED_CORPUS_DIGEST if parameters else SANDBOX_CORPUS_DIGEST
            ),
            max_expiry_policy_updates=1000,
        ),
        task_parameters=parameters,
    )
    return contract, required, forbidden, recipe
