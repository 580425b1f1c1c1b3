"""Independence (R-I-2) and binding resolution (R-I-9): a correlated primary sentinel is stored
and audited for inspection, but the binding cannot gate."""

from __future__ import annotations

from typing import Any

import pytest
from support.integrity_builders import CONTRACT_A, CONTRACT_B, WORKER_1, WORKER_2, spec

from rewardseal.core.errors import BindingRefused
from rewardseal.core.integrity import (
    BUILTIN_PROFILES,
    BUILTIN_PROTOCOLS,
    Fingerprints,
    RewardSource,
    correlation_reasons,
    parse_reward_system,
    require_gating_binding,
    resolve_binding,
)

PROTOCOL = BUILTIN_PROTOCOLS["balanced_256"]
PROFILE = BUILTIN_PROFILES["human_aligned_integrity"]


def worker(contract: str, key: str, recipe: str) -> RewardSource:
    return RewardSource(
        "contract",
        Fingerprints(implementation=f"recipe:{recipe}"),
        contract_digest=contract,
        worker_key_id=key,
    )


SCREEN = RewardSource("external", Fingerprints(implementation="screen-reward-v1"))
SQL_WORKER = worker(CONTRACT_A, WORKER_1, "sql")
REST_WORKER = worker(CONTRACT_B, WORKER_2, "rest")


def test_a_screen_reward_audited_by_a_sql_worker_is_independent() -> None:
    assert correlation_reasons(SCREEN, SQL_WORKER) == []


def test_a_sql_worker_audited_by_a_rest_worker_is_independent() -> None:
    assert correlation_reasons(SQL_WORKER, REST_WORKER) == []


def test_a_second_worker_with_the_same_recipe_over_the_same_database_is_correlated() -> None:
    second = worker(CONTRACT_A, WORKER_2, "sql")
    assert correlation_reasons(SQL_WORKER, second) == [
        "shared_contract_digest",
        "shared_implementation_fingerprint",
    ]


def test_every_correlation_reason() -> None:
    assert correlation_reasons(SQL_WORKER, SQL_WORKER) == [
        "shared_contract_digest",
        "shared_implementation_fingerprint",
        "shared_revision",
        "shared_worker_key",
    ]
    same_model = RewardSource("external", Fingerprints(implementation="b", artifact="llama-8b"))
    other = RewardSource("external", Fingerprints(implementation="a", artifact="llama-8b"))
    assert correlation_reasons(other, same_model) == ["shared_artifact_fingerprint"]
    bare = RewardSource("contract", contract_digest=CONTRACT_B, worker_key_id=WORKER_2)
    assert correlation_reasons(SCREEN, bare) == ["auditor_unfingerprinted"]
    assert correlation_reasons(bare, SCREEN) == ["optimizer_unfingerprinted"]


def correlated_spec() -> dict[str, Any]:
    doc = spec()
    doc["auditors"][0] = {
        "role": "primary_sentinel",
        "kind": "external",
        "fingerprints": {"implementation": "screen-reward-v1"},
        "label": "the optimizer's own code, deployed again",
    }
    return doc


def test_a_correlated_sentinel_is_stored_but_blocks_gating() -> None:
    system = parse_reward_system(correlated_spec())  # valid: it can be stored
    resolution = resolve_binding(system, PROTOCOL, PROFILE)
    gating, blockers = resolution
    assert gating is False
    assert blockers == (
        "primary_sentinel_correlated",
        "primary_sentinel_correlated:shared_implementation_fingerprint",
    )
    assert resolution.to_json() == {"gating_eligible": False, "blockers": list(blockers)}
    with pytest.raises(BindingRefused) as caught:
        require_gating_binding(system, PROTOCOL, PROFILE)
    assert caught.value.code.name == "FAILED_PRECONDITION"
    assert "primary_sentinel_correlated" in caught.value.metadata["blockers"]


def test_an_independent_binding_gates() -> None:
    system = parse_reward_system(spec())
    assert resolve_binding(system, PROTOCOL, PROFILE) == (True, ())
    require_gating_binding(system, PROTOCOL, PROFILE)


def test_a_binding_needs_all_three_revisions() -> None:
    system = parse_reward_system(spec())
    assert resolve_binding(system, None, PROFILE) == (False, ("protocol_missing",))
    assert resolve_binding(None, None, None).blockers == (
        "profile_missing",
        "protocol_missing",
        "system_missing",
    )


def test_a_report_only_profile_cannot_gate() -> None:
    system = parse_reward_system(spec())
    exploratory = BUILTIN_PROFILES["exploratory"]
    assert resolve_binding(system, PROTOCOL, exploratory) == (False, ("profile_report_only",))


def test_a_correlated_diagnostic_auditor_does_not_block() -> None:
    doc = spec(
        diagnostics=[{"kind": "external", "fingerprints": {"implementation": "screen-reward-v1"}}]
    )
    assert resolve_binding(parse_reward_system(doc), PROTOCOL, PROFILE).gating_eligible
