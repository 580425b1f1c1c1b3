"""Reward integrity (docs/spec.md section 12, R-I-1..10): pure rules, no I/O, no clock.

A training run binds a reward-system revision, a retention protocol and an integrity profile
(:mod:`.binding`). At each boundary the trainer captures :class:`.signals.SignalRow` s, which are
retained (:mod:`.retention`) and sealed into a shard (:mod:`.shards`). The control plane audits
the shard (:mod:`rewardseal_server.integrity_audit`: metrics, bootstrap, trends, the decision
table), and publishes what it found (:mod:`.reports`) as a signed bundle (:mod:`.bundles`) with a
decision history (:mod:`.decisions`); the run's gate (:mod:`.gate`) reads the decisions in force.
Time and seeds are always passed in, so the same inputs give the same bytes.

This package is what a trainer needs: the spec documents, capture, retention and shards, the
report and decision types, bundle verification and the gate. The computation only auditors
run is in ``rewardseal_server``, which trainers never install.

Modules, in the order the evidence flows: ``scrubbing``, ``revisions``, ``mapping``,
``systems``, ``protocols``, ``profiles``, ``independence``, ``binding``, ``signals``,
``retention``, ``shards``, ``decisions``, ``reports``, ``bundles``, ``gate`` (``fields`` reads
typed values out of stored JSON for every ``from_json``; ``messages`` is the wire).
"""

from __future__ import annotations

from rewardseal.core.integrity.binding import (
    BindingResolution,
    require_gating_binding,
    resolve_binding,
)
from rewardseal.core.integrity.bundles import (
    BUNDLE_PAYLOAD_TYPE,
    AuditBundle,
    build_bundle,
    verify_bundle,
)
from rewardseal.core.integrity.decisions import (
    Decision,
    DecisionEntry,
    Review,
    current_entry,
    initial_entry,
    review_decision,
)
from rewardseal.core.integrity.gate import AuditStanding, BoundaryDecision, RunGate, run_gate
from rewardseal.core.integrity.independence import correlation_reasons
from rewardseal.core.integrity.mapping import MappedReward, Normalization, RewardMapping, map_reward
from rewardseal.core.integrity.profiles import (
    BUILTIN_PROFILES,
    DEFAULT_PROFILE,
    IntegrityProfile,
    parse_profile,
    validate_profile,
)
from rewardseal.core.integrity.protocols import (
    BUILTIN_PROTOCOLS,
    RetentionProtocol,
    parse_protocol,
    validate_protocol,
)
from rewardseal.core.integrity.reports import (
    AuditReport,
    BoundaryTrend,
    CoreMetrics,
    Interval,
    SubgroupMetrics,
)
from rewardseal.core.integrity.retention import RetainedRow, Retention, retain
from rewardseal.core.integrity.revisions import revision_id
from rewardseal.core.integrity.scrubbing import scrub_credentials
from rewardseal.core.integrity.shards import ShardManifest, seal_shard, verify_shard
from rewardseal.core.integrity.signals import AuditorObservation, SentinelObservation, SignalRow
from rewardseal.core.integrity.systems import (
    Auditor,
    Fingerprints,
    RewardSource,
    RewardSystem,
    parse_reward_system,
    validate_reward_system,
)

__all__ = [
    "BUILTIN_PROFILES",
    "BUILTIN_PROTOCOLS",
    "BUNDLE_PAYLOAD_TYPE",
    "DEFAULT_PROFILE",
    "AuditBundle",
    "AuditReport",
    "AuditStanding",
    "Auditor",
    "AuditorObservation",
    "BindingResolution",
    "BoundaryDecision",
    "BoundaryTrend",
    "CoreMetrics",
    "Decision",
    "DecisionEntry",
    "Fingerprints",
    "IntegrityProfile",
    "Interval",
    "MappedReward",
    "Normalization",
    "RetainedRow",
    "Retention",
    "RetentionProtocol",
    "Review",
    "RewardMapping",
    "RewardSource",
    "RewardSystem",
    "RunGate",
    "SentinelObservation",
    "ShardManifest",
    "SignalRow",
    "SubgroupMetrics",
    "build_bundle",
    "correlation_reasons",
    "current_entry",
    "initial_entry",
    "map_reward",
    "parse_profile",
    "parse_protocol",
    "parse_reward_system",
    "require_gating_binding",
    "resolve_binding",
    "retain",
    "review_decision",
    "revision_id",
    "run_gate",
    "scrub_credentials",
    "seal_shard",
    "validate_profile",
    "validate_protocol",
    "validate_reward_system",
    "verify_bundle",
    "verify_shard",
]
