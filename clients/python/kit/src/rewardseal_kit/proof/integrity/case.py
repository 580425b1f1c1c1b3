"""The ExtraDup integrity case: one set of episodes, judged by several rewards, audited (R-I-2..7).

A scripted policy plays every ExtraDup family (the gold write and the seven hacks) through
MockMed, one fresh synthetic patient per episode (:func:`play_case`). Every episode is begun
and scored by each of several running workers (a tier-2 ``sql`` worker, a ``rest``-channel
worker, a second ``sql`` worker...) and paid by the proof's tier-0 screen reward
(:mod:`rewardseal_kit.proof.rewards`), so each episode carries one judgement per reward, all of
the *same* output.

:func:`signal_rows` turns those episodes into the signal rows a trainer captures at a boundary
(R-I-3): the optimizer's raw and mapped reward (the screen reward or one worker's receipt) and
the primary sentinel's verified receipt for the same episode id. :func:`reward_source` and
:func:`screen_source` describe the rewards as R-I-1 sources, so the same choice of optimizer
and sentinel gives a reward-system revision (:func:`case_system`) whose independence R-I-2
decides; :func:`audit_case` runs the pure audit (retain, seal, audit) over the rows.

What the case shows: the screen reward pays every hack a worker refuses (asymmetric
acceptance: the audit fails); a ``sql`` worker and a ``rest`` worker agree (independent readers
of one system of record: the audit passes); a second ``sql`` worker on the same recipe shares
the first's blind spots, so it may be audited for inspection but never gates.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from rewardseal.core.contract import contract_digest
from rewardseal.core.digest import digest_bytes
from rewardseal.core.errors import ValidationError
from rewardseal.core.integrity import (
    BUILTIN_PROFILES,
    BUILTIN_PROTOCOLS,
    DEFAULT_PROFILE,
    AuditReport,
    Fingerprints,
    IntegrityProfile,
    Retention,
    RetentionProtocol,
    RewardMapping,
    RewardSource,
    RewardSystem,
    ShardManifest,
    SignalRow,
    map_reward,
    parse_reward_system,
    retain,
    seal_shard,
)
from rewardseal.rpc.worker_client import VerifiedReceipt, WorkerClient, make_descriptor
from rewardseal.trainers.integrity.capture import sentinel_observation
from rewardseal_kit.proof.conditions import MockMedUI, play
from rewardseal_kit.proof.rewards import SCREEN_T0, TrialResult, screen_result, screen_says_saved
from rewardseal_mockmed.contract import IDENTITY_KEY, THRESHOLD, mockmed_contract
from rewardseal_mockmed.extradup import FAMILIES, mockmed_write_spec, scripted_completion
from rewardseal_server.integrity_audit import audit_boundary

__all__ = [
    "CASE_MAPPING",
    "CASE_RECORDS",
    "CHECKPOINT",
    "CaseAudit",
    "CaseEpisode",
    "CaseWorker",
    "RUNTIME_IDENTITY",
    "audit_case",
    "case_system",
    "play_case",
    "reward_source",
    "screen_source",
    "signal_rows",
]

CASE_RECORDS: Final = 13 * len(FAMILIES)
"""Episodes the case plays by default: 13 per family, just above the evidence rule's 100
distinct records (R-I-7), one patient (one record) each."""
CHECKPOINT: Final = "policy_checkpoint_integrity_0"
RUNTIME_IDENTITY: Final = "rewardseal-kit/integrity-case"
"""The runtime the rows name (no source in the case pins a runtime fingerprint)."""
CASE_MAPPING: Final = RewardMapping.from_json(
    {
        "normalization": {"min": 0.0, "max": 1.0, "direction": "maximize"},
        "scale": 1.0,
        "center": 0.0,
        "threshold": THRESHOLD,
        "failure_behavior": "reject",
    }
)
"""Every reward of the case pays in [0, 1]; accepted at the MockMed contract's threshold."""


@dataclass(frozen=True)
class CaseWorker:
    """A running worker the case begins and scores every episode with, under ``name``."""

    name: str
    client: WorkerClient
    contract_digest: str


@dataclass(frozen=True)
class CaseEpisode:
    """One episode: its record (the patient), family, exact output and every reward's judgement.

    ``screen`` is the tier-0 screen reward's result; ``receipts`` maps each worker's name to the
    receipt it signed for this episode id (verified against that worker's key).
    """

    record_id: str
    family: str
    episode_id: str
    output_digest: str
    screen: TrialResult
    receipts: Mapping[str, VerifiedReceipt]


def play_case(
    ui: MockMedUI,
    workers: Sequence[CaseWorker],
    *,
    records: int = CASE_RECORDS,
    policy_update: int = 0,
    families: Sequence[str] | None = None,
) -> list[CaseEpisode]:
    """Play ``records`` episodes, the families in turn, each scored by the screen and every worker.

    ``families``: the family of each episode instead (one per record: a policy's mix at one
    boundary); None plays every family in turn.

    Each worker begins the episode before the policy acts (its baseline read), then scores it
    after; the screen reward reads the screen the episode ended on.

    Raises:
        ValidationError: no workers, two with one name, fewer than one record, or
            ``families`` not one known family per record.
        RewardSealError: a worker or MockMed refused or failed (nothing is retried here).
    """
    names = [worker.name for worker in workers]
    if not names or len(set(names)) != len(names) or SCREEN_T0 in names:
        raise ValidationError(f"the case needs workers with distinct names other than {SCREEN_T0}")
    if records < 1:
        raise ValidationError("the case needs at least one record")
    if families is not None and (
        len(families) != records or any(f not in FAMILIES for f in families)
    ):
        raise ValidationError(f"the case needs one known family per record ({records})")
    run = secrets.token_hex(4)
    episodes: list[CaseEpisode] = []
    for index in range(records):
        family = FAMILIES[index % len(FAMILIES)] if families is None else families[index]
        patient = f"patient-integrity-{run}-{index:04d}"
        episode_id = f"integrity-{run}-{index:04d}-{family.replace('_', '-')}"
        identity = {IDENTITY_KEY: patient}
        for worker in workers:
            worker.client.begin(episode_id, worker.contract_digest, identity)
        screen = screen_result(family, index, episode_id, play(family, patient, ui))
        receipts = {
            worker.name: worker.client.score(
                make_descriptor(
                    episode_id=episode_id,
                    policy_checkpoint_id=CHECKPOINT,
                    policy_update=policy_update,
                    reward_contract_digest=worker.contract_digest,
                    oracle_identity=identity,
                )
            )
            for worker in workers
        }
        output = scripted_completion(family, mockmed_write_spec(patient))
        episodes.append(
            CaseEpisode(
                record_id=patient,
                family=family,
                episode_id=episode_id,
                output_digest=digest_bytes(output.encode("utf-8")),
                screen=screen,
                receipts=receipts,
            )
        )
    return episodes


def screen_source() -> RewardSource:
    """The tier-0 screen reward as an external source: its checker is its implementation.

    It signs nothing and has no worker key, so it is named by the code that pays (the screen
    checker) and configured by the tier-0 MockMed contract it scores under.
    """
    return RewardSource(
        kind="external",
        label=SCREEN_T0,
        fingerprints=Fingerprints(
            implementation=f"{screen_says_saved.__module__}.{screen_says_saved.__qualname__}",
            configuration=contract_digest(mockmed_contract(tier=0)),
        ),
    )


def reward_source(
    label: str, *, contract_digest: str, worker_key_id: str, recipe_digest: str
) -> RewardSource:
    """A worker's contract as a source. Every worker runs the same binary, so what computes its
    reward is its oracle recipe (the reader and what it reads): that digest is its
    implementation fingerprint, and two workers on one recipe are correlated (R-I-2)."""
    return RewardSource(
        kind="contract",
        label=label,
        contract_digest=contract_digest,
        worker_key_id=worker_key_id,
        fingerprints=Fingerprints(implementation=recipe_digest),
    )


def case_system(
    optimizer: RewardSource, sentinel: RewardSource, mapping: RewardMapping = CASE_MAPPING
) -> RewardSystem:
    """The reward-system revision: ``optimizer`` audited by ``sentinel`` (no diagnostics)."""
    return parse_reward_system(
        {
            "optimizer": optimizer.to_json(),
            "auditors": [{"role": "primary_sentinel", **sentinel.to_json()}],
            "mapping": mapping.to_json(),
        }
    )


def _optimizer_raw(episode: CaseEpisode, optimizer: str) -> float | None:
    if optimizer == SCREEN_T0:
        return episode.screen.scalar
    return episode.receipts[optimizer].scalar


def signal_rows(
    episodes: Sequence[CaseEpisode],
    *,
    optimizer: str,
    sentinel: str,
    mapping: RewardMapping = CASE_MAPPING,
    policy_update: int = 0,
) -> list[SignalRow]:
    """One boundary's rows: ``optimizer`` (:data:`SCREEN_T0` or a worker name) as the reward
    training used, ``sentinel`` (a worker name) as the primary sentinel, per episode.

    Every row is its own record (one patient per episode), candidate 0, selected, labelled with
    its family as a subgroup (reported apart, R-I-6).

    Raises:
        ValidationError: ``sentinel`` is the screen reward (it signs no receipt), a name no
            episode was scored by, or the optimizer and the sentinel are the same reward.
    """
    if sentinel == SCREEN_T0:
        raise ValidationError("the screen reward signs nothing; a sentinel must be a worker")
    if sentinel == optimizer:
        raise ValidationError("the optimizer cannot be its own sentinel")
    for name in (optimizer, sentinel):
        if name != SCREEN_T0 and any(name not in e.receipts for e in episodes):
            raise ValidationError(f"no receipts from worker {name!r} for every episode")
    rows: list[SignalRow] = []
    for episode in episodes:
        raw = _optimizer_raw(episode, optimizer)
        rows.append(
            SignalRow(
                record_id=episode.record_id,
                candidate=0,
                episode_id=episode.episode_id,
                output_digest=episode.output_digest,
                optimizer_raw=raw,
                optimizer_mapped=map_reward(raw, mapping).mapped,
                group_id=episode.record_id,
                selection="selected",
                checkpoint=CHECKPOINT,
                policy_update=policy_update,
                runtime_identity=RUNTIME_IDENTITY,
                sentinel=sentinel_observation(episode.receipts[sentinel]),
                subgroups={"family": episode.family},
            )
        )
    return rows


@dataclass(frozen=True)
class CaseAudit:
    """What :func:`audit_case` retained, sealed and found."""

    retention: Retention
    manifest: ShardManifest
    report: AuditReport


def audit_case(
    rows: Sequence[SignalRow],
    system: RewardSystem,
    *,
    run_id: str,
    protocol: RetentionProtocol = BUILTIN_PROTOCOLS["balanced_256"],
    profile: IntegrityProfile = BUILTIN_PROFILES[DEFAULT_PROFILE],
) -> CaseAudit:
    """Retain one boundary's rows, seal the shard and audit it (the pure pipeline, R-I-4..7)."""
    retention = retain(rows, protocol, system.mapping)
    manifest = seal_shard(retention, run_id=run_id, system_revision_id=system.revision_id)
    report = audit_boundary(
        manifest,
        retention.rows,
        system=system,
        protocol=protocol,
        profile=profile,
        shard_id=manifest.shard_id,
    )
    return CaseAudit(retention, manifest, report)
