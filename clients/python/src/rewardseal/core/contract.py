"""Reward contracts: oracle tiers, scoring defaults, normalization and the contract digest.

R-MSG-1/2, R-DIG-1/2. Normalization makes the digest independent of how an author wrote the
contract: scoring defaults are filled in explicitly, identity keys, components and task
parameters are sorted by name. Two authors who mean the same contract therefore get the same digest.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from types import MappingProxyType
from typing import Literal

from rewardseal.core.digest import digest_json
from rewardseal.core.errors import ValidationError
from rewardseal.core.task_parameters import normalized_declarations
from rewardseal.v1.certificate_pb2 import RewardCertificate
from rewardseal.v1.contract_pb2 import RewardContract, ScoringPolicy
from rewardseal.v1.enums_pb2 import OracleChannel, RewardOutcome

TIER_BY_CHANNEL: Mapping[int, int] = MappingProxyType(
    {
        OracleChannel.ORACLE_CHANNEL_VISUAL: 0,
        OracleChannel.ORACLE_CHANNEL_OCR: 0,
        OracleChannel.ORACLE_CHANNEL_SECOND_SESSION: 1,
        OracleChannel.ORACLE_CHANNEL_API: 2,
        OracleChannel.ORACLE_CHANNEL_DB: 2,
        OracleChannel.ORACLE_CHANNEL_FILE: 2,
        OracleChannel.ORACLE_CHANNEL_ACK: 2,
        OracleChannel.ORACLE_CHANNEL_COUNTERPARTY: 3,
    }
)
"""Oracle channel -> tier (docs/spec.md §1)."""

CERTIFIABLE_TIER = 2
"""The lowest tier whose reads can be certified (R-SCORE-3)."""

ScoringField = Literal[
    "verified_reward",
    "halted_before_effect_reward",
    "refused_reward",
    "rejected_policy_reward",
    "wrong_effect_reward",
]

SCORING_DEFAULTS: Mapping[ScoringField, float] = MappingProxyType(
    {
        "verified_reward": 1.0,
        "halted_before_effect_reward": 0.0,
        "refused_reward": 0.0,
        "rejected_policy_reward": 0.0,
        "wrong_effect_reward": -1.0,
    }
)
"""R-MSG-2 defaults for every ScoringPolicy field left unset."""

SCALAR_FIELD_BY_OUTCOME: Mapping[int, ScoringField] = MappingProxyType(
    {
        RewardOutcome.REWARD_OUTCOME_VERIFIED: "verified_reward",
        RewardOutcome.REWARD_OUTCOME_HALTED_BEFORE_EFFECT: "halted_before_effect_reward",
        RewardOutcome.REWARD_OUTCOME_REFUSED: "refused_reward",
        RewardOutcome.REWARD_OUTCOME_REJECTED_POLICY: "rejected_policy_reward",
        RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT: "wrong_effect_reward",
    }
)
"""The scored outcomes and the ScoringPolicy field that gives each its scalar."""

UNSCORED_OUTCOMES: frozenset[int] = frozenset(
    {
        RewardOutcome.REWARD_OUTCOME_RECONCILIATION_REQUIRED,
        RewardOutcome.REWARD_OUTCOME_FAILED_PLATFORM,
    }
)
"""Outcomes that never carry a scalar, whatever a contract says (R-MSG-2, R-SCORE-2)."""


def tier_for_channel(channel: int) -> int:
    """The oracle tier a channel reads at; raises for UNSPECIFIED or unknown channels."""
    try:
        return TIER_BY_CHANNEL[channel]
    except KeyError:
        raise ValidationError(f"oracle channel {channel} has no tier") from None


def contract_tier(contract: RewardContract) -> int:
    """The tier of the contract's oracle."""
    return tier_for_channel(contract.oracle.channel)


def effective_scoring(policy: ScoringPolicy) -> dict[ScoringField, float]:
    """Every scoring field with R-MSG-2 defaults filled in for the unset ones."""
    return {
        name: getattr(policy, name) if policy.HasField(name) else default
        for name, default in SCORING_DEFAULTS.items()
    }


def normalize_contract(contract: RewardContract) -> RewardContract:
    """A copy with scoring defaults made explicit and keys and components sorted by name."""
    normalized = RewardContract()
    normalized.CopyFrom(contract)
    for name, value in effective_scoring(contract.scoring_policy).items():
        setattr(normalized.scoring_policy, name, value)
    keys = sorted(normalized.oracle.identity_keys)
    del normalized.oracle.identity_keys[:]
    normalized.oracle.identity_keys.extend(keys)
    components = sorted(normalized.components, key=lambda c: c.name)
    copies = [type(c)(name=c.name, weight=c.weight) for c in components]
    del normalized.components[:]
    normalized.components.extend(copies)
    if normalized.task_parameters:  # R-MSG-11; a contract declaring none keeps its digest
        parameters = normalized_declarations(normalized.task_parameters)
        del normalized.task_parameters[:]
        normalized.task_parameters.extend(parameters)
    return normalized


def contract_digest(contract: RewardContract) -> str:
    """The contract digest (R-DIG-2): canonical JSON of the normalized contract."""
    return _contract_digest_of(contract.SerializeToString(deterministic=True))


def certificate_digest(certificate: RewardCertificate) -> str:
    """The certificate digest (R-DIG-2): covers the signed certificate, signature included."""
    return _certificate_digest_of(certificate.SerializeToString(deterministic=True))


# Digests are pure functions of the message, and scoring asks for the same contract's digest on
# every receipt: remember recent answers, keyed by the deterministic wire bytes.
@functools.lru_cache(maxsize=256)
def _contract_digest_of(wire: bytes) -> str:
    return digest_json(normalize_contract(RewardContract.FromString(wire)))


@functools.lru_cache(maxsize=256)
def _certificate_digest_of(wire: bytes) -> str:
    return digest_json(RewardCertificate.FromString(wire))


def scalar_for(outcome: int, contract: RewardContract) -> float | None:
    """The scalar the contract assigns to ``outcome``; None for unscored outcomes (R-SCORE-2)."""
    if outcome in UNSCORED_OUTCOMES:
        return None
    try:
        field = SCALAR_FIELD_BY_OUTCOME[outcome]
    except KeyError:
        raise ValidationError(f"reward outcome {outcome} is not a valid outcome") from None
    return effective_scoring(contract.scoring_policy)[field]


def component_values(contract: RewardContract, scalar: float) -> dict[str, float]:
    """Split a scalar over the contract's components in proportion to their weights.

    The components always sum to the scalar, so a reader can audit one from the other.
    """
    total = sum(c.weight for c in contract.components)
    if total <= 0:
        raise ValidationError("contract components must have positive weights")
    return {c.name: scalar * c.weight / total for c in contract.components}
