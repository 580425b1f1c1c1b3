"""Builders the integrity tests share, core's and the control plane's: reward-system specs, signal
rows, sealed shards and audited boundaries (``tests/unit/test_integrity_round_trips.py`` keeps
them honest: every built value reads back from its own ``to_json``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from rewardseal.core.integrity import (
    BUILTIN_PROFILES,
    BUILTIN_PROTOCOLS,
    AuditorObservation,
    AuditReport,
    IntegrityProfile,
    RetainedRow,
    Retention,
    RetentionProtocol,
    RewardSystem,
    SentinelObservation,
    ShardManifest,
    SignalRow,
    parse_reward_system,
    retain,
    seal_shard,
)
from rewardseal.core.integrity.signals import Outcome
from rewardseal_server.integrity_audit import audit_boundary

CONTRACT_A = "sha256:" + "a" * 64
CONTRACT_B = "sha256:" + "b" * 64
WORKER_1 = "ed25519:sha256:" + "1" * 64
WORKER_2 = "ed25519:sha256:" + "2" * 64
RUNTIME = "python3.11+torch2.9"


def output_digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def spec(
    *,
    threshold: float = 0.5,
    sentinel: Mapping[str, Any] | None = None,
    diagnostics: Sequence[Mapping[str, Any]] = (),
    runtime: str | None = RUNTIME,
) -> dict[str, Any]:
    """A valid spec: a tier-0 screen reward optimized, a tier-2 ``sql`` worker as sentinel."""
    optimizer_prints: dict[str, Any] = {"implementation": "screen-reward-v1"}
    if runtime is not None:
        optimizer_prints["runtime"] = runtime
    return {
        "optimizer": {"kind": "external", "fingerprints": optimizer_prints},
        "auditors": [
            dict(
                sentinel
                or {
                    "kind": "contract",
                    "contract_digest": CONTRACT_A,
                    "worker_key_id": WORKER_1,
                    "fingerprints": {"implementation": "recipe:sql"},
                },
                role="primary_sentinel",
            ),
            *({**d, "role": "diagnostic"} for d in diagnostics),
        ],
        "mapping": {"normalization": {"min": 0, "max": 1}, "threshold": threshold},
    }


def system(**kwargs: Any) -> RewardSystem:
    return parse_reward_system(spec(**kwargs))


def row(
    record: int | str,
    *,
    optimizer: float,
    sentinel: Outcome | None,
    sentinel_reward: float | None = None,
    candidate: int = 0,
    boundary: int = 10,
    runtime: str = RUNTIME,
    components: Mapping[str, float] | None = None,
    subgroups: Mapping[str, str] | None = None,
    auditors: Sequence[AuditorObservation] = (),
) -> SignalRow:
    """A row whose optimizer reward is ``optimizer`` on [0, 1] (mapping min 0, max 1)."""
    observation = None
    if sentinel is not None:
        reward = sentinel_reward
        if reward is None and sentinel != "error":
            reward = 1.0 if sentinel == "accepted" else 0.0
        observation = SentinelObservation(
            sentinel,
            reward=reward,
            receipt_id=f"rcpt-{record}-{candidate}-{boundary}",
            receipt_digest=output_digest(f"receipt {record} {candidate} {boundary}"),
            error="oracle timeout" if sentinel == "error" else None,
        )
    return SignalRow(
        record_id=f"rec-{record}",
        candidate=candidate,
        episode_id=f"ep-{record}-{candidate}-{boundary}",
        output_digest=output_digest(f"output {record} {candidate} {boundary}"),
        optimizer_raw=optimizer,
        optimizer_mapped=optimizer,
        group_id=f"group-{record}",
        selection="selected",
        checkpoint=f"ckpt-{boundary}",
        policy_update=boundary,
        runtime_identity=runtime,
        sentinel=observation,
        auditors=tuple(auditors),
        components=dict(components or {}),
        subgroups=dict(subgroups or {}),
    )


def varied_rows() -> list[SignalRow]:
    """One row of each shape: every optional field set (a diagnostic auditor, reward components,
    subgroups, a sentinel reward off the verdict's), a sentinel error, and no sentinel at all."""
    auditor = AuditorObservation(CONTRACT_B, "refused", 0.25, output_digest("x"))
    return [
        row(
            7,
            optimizer=0.75,
            sentinel="accepted",
            sentinel_reward=0.5,
            components={"format": 1.0, "content": 0.0},
            subgroups={"language": "de"},
            auditors=[auditor],
        ),
        row(8, optimizer=0.0, sentinel="error"),
        row(9, optimizer=0.1, sentinel=None),
    ]


def agreeing_rows(records: int, *, boundary: int = 10, inverted: bool = False) -> list[SignalRow]:
    """Half accepted, half refused by the optimizer; the sentinel agrees (or says the opposite)."""
    rows = []
    for record in range(records):
        accepted = record % 2 == 0
        sentinel_accepts = accepted != inverted
        rows.append(
            row(
                record,
                optimizer=1.0 if accepted else 0.0,
                sentinel="accepted" if sentinel_accepts else "refused",
                boundary=boundary,
            )
        )
    return rows


def sealed(
    rows: Sequence[SignalRow],
    reward_system: RewardSystem,
    protocol: RetentionProtocol | None = None,
) -> tuple[Retention, ShardManifest]:
    protocol = protocol or BUILTIN_PROTOCOLS["exhaustive"]
    retention = retain(rows, protocol, reward_system.mapping)
    manifest = seal_shard(retention, run_id="run-1", system_revision_id=reward_system.revision_id)
    return retention, manifest


def audit(
    rows: Sequence[SignalRow],
    *,
    reward_system: RewardSystem | None = None,
    profile: IntegrityProfile | None = None,
    stored: Sequence[RetainedRow] | None = None,
    resamples: int = 2_000,
    **kwargs: Any,
) -> AuditReport:
    """Retain everything, seal, and audit (``stored`` replaces the rows read back)."""
    reward_system = reward_system or system()
    retention, manifest = sealed(rows, reward_system)
    return audit_boundary(
        manifest,
        retention.rows if stored is None else stored,
        system=reward_system,
        protocol=BUILTIN_PROTOCOLS["exhaustive"],
        profile=profile or BUILTIN_PROFILES["human_aligned_integrity"],
        shard_id=manifest.shard_id,
        resamples=resamples,
        **kwargs,
    )
