"""The ExtraDup integrity case (R-I-2, R-I-3, R-I-6, R-I-7): real workers, real receipts, audited.

One MockMed (the real HTTP server over a seeded SQLite system of record) and three real workers
on free ports: the tier-2 ``sql`` worker, a ``rest``-channel worker (its own data directory
and key, reading the same MockMed through its HTTP API) and a second ``sql`` worker on the same
bundle and database (its own receipt store). A scripted policy plays every ExtraDup family
through MockMed, 13 episodes each over distinct patients (104 records: above the evidence
rule's 100); every episode is scored by the proof's tier-0 screen reward and by all three
workers. The rows are built by :mod:`rewardseal_kit.integrity_case` and audited with the
built-in protocol and profile:

* A: optimizer = the screen reward, sentinel = the ``sql`` worker -> ``fail``, asymmetric
  acceptance (``optimizer_only_rate``) among the reasons;
* B: optimizer = the ``sql`` worker, sentinel = the ``rest`` worker -> independent, ``pass``;
* C: sentinel = the second ``sql`` worker -> correlated: inspection only, never gating.
"""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.mockmed_service import running_mockmed
from support.worker_stack import RunningStack, start_stack, stop_stack

from rewardseal.core.errors import ValidationError
from rewardseal.core.integrity import (
    BUILTIN_PROFILES,
    BUILTIN_PROTOCOLS,
    DEFAULT_PROFILE,
    RewardSource,
    correlation_reasons,
    resolve_binding,
    verify_shard,
)
from rewardseal.core.signing import SigningKey
from rewardseal.rpc.worker_client import WorkerClient
from rewardseal.v1.enums_pb2 import RewardOutcome
from rewardseal_kit.extradup import CONTROL, FAMILIES, HACKING_FAMILIES
from rewardseal_kit.integrity_case import (
    CASE_RECORDS,
    CaseAudit,
    CaseEpisode,
    CaseWorker,
    audit_case,
    case_system,
    play_case,
    reward_source,
    screen_source,
    signal_rows,
)
from rewardseal_kit.proof.conditions import MockMedUI
from rewardseal_kit.proof.rewards import SCREEN_T0
from rewardseal_server.sqlstore import sqlite_url
from rewardseal_worker.seed import REST_BUNDLE, REST_TOKEN_ENV, REST_URL_ENV, seed_mockmed
from rewardseal_worker.settings import KEY_FILE

SQL, REST, SQL_REPLICA = "sql", "rest", "sql_replica"
VERIFIED = RewardOutcome.REWARD_OUTCOME_VERIFIED
PROTOCOL = BUILTIN_PROTOCOLS["balanced_256"]
PROFILE = BUILTIN_PROFILES[DEFAULT_PROFILE]


@dataclass(frozen=True)
class PlayedCase:
    """The episodes and every reward as an R-I-1 source."""

    episodes: list[CaseEpisode]
    sources: dict[str, RewardSource]


def _source(name: str, stack: RunningStack, client: WorkerClient) -> RewardSource:
    health = client.health()  # what the worker says it is: its key and contract
    assert health.reward_contract_digest == stack.digest
    return reward_source(
        f"{name} worker",
        contract_digest=health.reward_contract_digest,
        worker_key_id=health.issuer_key_id,
        recipe_digest=stack.app.bundle.contract.oracle.oracle_recipe_digest,
    )


async def _play(template: Path, root: Path) -> PlayedCase:
    sql_dir, rest_dir = root / "sql", root / "rest"
    shutil.copytree(template, sql_dir)
    # The rest worker is another operator's: its own data directory, key and certificate.
    seed_mockmed(rest_dir, key=SigningKey.load_or_create(rest_dir / KEY_FILE), trials=300)
    database = sql_dir / "mockmed" / "mockmed.sqlite"
    stacks: dict[str, RunningStack] = {}
    clients: dict[str, WorkerClient] = {}
    with (
        running_mockmed(f"sqlite:///{database}", root) as mockmed,
        pytest.MonkeyPatch.context() as env,
    ):
        env.setenv(REST_URL_ENV, mockmed.url)
        env.setenv(REST_TOKEN_ENV, mockmed.token)
        ui = MockMedUI(mockmed.url, mockmed.token)
        try:
            stacks[SQL] = await start_stack(sql_dir)
            stacks[REST] = await start_stack(rest_dir, contract=REST_BUNDLE.name)
            # Same data directory (so the same bundle, recipe, database and key), its own
            # receipt store: a second worker on the same recipe, not a replica sharing episodes.
            replica_store = sqlite_url(root / "replica-receipts.sqlite")
            stacks[SQL_REPLICA] = await start_stack(sql_dir, db_url=replica_store)
            for name, stack in stacks.items():
                clients[name] = WorkerClient(stack.target, token=stack.token, trust=stack.trust)
            workers = [CaseWorker(name, clients[name], stacks[name].digest) for name in stacks]
            # The kit's clients block, so they run in a thread; the workers serve on this loop.
            episodes = await asyncio.to_thread(play_case, ui, workers)
            sources = {
                name: await asyncio.to_thread(_source, name, stacks[name], clients[name])
                for name in stacks
            }
        finally:
            ui.close()
            for client in clients.values():
                client.close()
            for stack in stacks.values():
                await stop_stack(stack)
    return PlayedCase(episodes, {**sources, SCREEN_T0: screen_source()})


@pytest.fixture(scope="module")
def played(seeded_template: Path, tmp_path_factory: pytest.TempPathFactory) -> PlayedCase:
    """Every episode played and scored once for the module (the tests only read it)."""
    return asyncio.run(_play(seeded_template, tmp_path_factory.mktemp("integrity-case")))


def _audit(played: PlayedCase, optimizer: str, sentinel: str, run_id: str) -> CaseAudit:
    rows = signal_rows(played.episodes, optimizer=optimizer, sentinel=sentinel)
    system = case_system(played.sources[optimizer], played.sources[sentinel])
    return audit_case(rows, system, run_id=run_id, protocol=PROTOCOL, profile=PROFILE)


def test_every_reward_judged_every_episode_as_the_proof_says(played: PlayedCase) -> None:
    episodes = played.episodes
    assert len(episodes) == CASE_RECORDS >= 100
    assert len({e.record_id for e in episodes}) == len(episodes)
    assert {e.family for e in episodes} == set(FAMILIES)
    for episode in episodes:
        assert episode.screen.paid, episode.episode_id  # the screen pays every family
        for name in (SQL, REST, SQL_REPLICA):
            got = episode.receipts[name]
            assert got.receipt.episode_id == episode.episode_id
            verified = got.receipt.reward_outcome == VERIFIED
            assert verified == (episode.family == CONTROL), (name, episode.episode_id)
            assert got.receipt.certified
            assert got.scalar == (1.0 if verified else 0.0)
    receipt_ids = [e.receipts[name].receipt.receipt_id for e in episodes for name in (SQL, REST)]
    assert len(set(receipt_ids)) == len(receipt_ids)


def test_case_a_screen_reward_audited_by_the_sql_worker_fails_on_asymmetric_acceptance(
    played: PlayedCase,
) -> None:
    assert correlation_reasons(played.sources[SCREEN_T0], played.sources[SQL]) == []
    audit = _audit(played, SCREEN_T0, SQL, "run-integrity-case-a")
    report = audit.report
    assert audit.retention.exact
    assert report.core_rows == CASE_RECORDS
    assert report.gating_eligible
    assert report.binding_blockers == ()
    assert report.decision.outcome == "fail"
    assert report.decision.action == "pause"
    # Asymmetric acceptance and every other metric it drags outside its threshold, nothing else.
    assert report.decision.reasons == (
        "pass_agreement_below_minimum",
        "optimizer_only_rate_above_maximum",
        "reward_gap_above_maximum",
        "top_tail_disagreement_above_maximum",
    )
    metrics = report.metrics
    assert metrics is not None
    hacks = CASE_RECORDS * len(HACKING_FAMILIES) // len(FAMILIES)
    assert metrics.records == CASE_RECORDS
    assert metrics.scored == CASE_RECORDS
    assert metrics.optimizer_only_rate == pytest.approx(hacks / CASE_RECORDS)
    assert metrics.sentinel_only_rate == 0.0
    by_family = {group.value: group.metrics for group in report.subgroups if group.key == "family"}
    assert by_family[CONTROL].pass_agreement == 1.0
    for family in HACKING_FAMILIES:
        assert by_family[family].optimizer_only_rate == 1.0, family
    # Each row's sentinel observation is the sql worker's receipt for that same episode.
    for retained in audit.retention.rows:
        episode = next(e for e in played.episodes if e.episode_id == retained.row.episode_id)
        assert retained.row.sentinel is not None
        assert retained.row.sentinel.receipt_id == episode.receipts[SQL].receipt.receipt_id


def test_case_b_sql_worker_audited_by_a_rest_worker_is_independent_and_passes(
    played: PlayedCase,
) -> None:
    sql, rest = played.sources[SQL], played.sources[REST]
    assert correlation_reasons(sql, rest) == []
    audit = _audit(played, SQL, REST, "run-integrity-case-b")
    report = audit.report
    assert report.gating_eligible
    assert report.binding_blockers == ()
    assert report.decision.outcome == "pass", report.decision.reasons
    assert report.decision.action == "continue"
    assert report.decision.reasons == ()
    assert report.metrics is not None
    assert report.metrics.pass_agreement == 1.0
    assert report.metrics.optimizer_only_rate == 0.0
    # The shard verifies as sealed; the same rows and revisions give the same evidence digest.
    verify_shard(audit.manifest, audit.retention.rows, shard_id=audit.manifest.shard_id)
    again = _audit(played, SQL, REST, "run-integrity-case-b")
    assert again.report.evidence_digest == report.evidence_digest
    assert again.report.to_json() == report.to_json()


def test_case_c_a_second_sql_worker_on_the_same_recipe_is_inspection_only(
    played: PlayedCase,
) -> None:
    sql, replica = played.sources[SQL], played.sources[SQL_REPLICA]
    reasons = correlation_reasons(sql, replica)
    assert {"shared_contract_digest", "shared_implementation_fingerprint"} <= set(reasons)
    system = case_system(sql, replica)
    binding = resolve_binding(system, PROTOCOL, PROFILE)
    assert not binding.gating_eligible
    assert "primary_sentinel_correlated" in binding.blockers
    assert "primary_sentinel_correlated:shared_implementation_fingerprint" in binding.blockers
    # It is still audited, for inspection: the numbers, never a pause.
    report = _audit(played, SQL, SQL_REPLICA, "run-integrity-case-c").report
    assert not report.gating_eligible
    assert "primary_sentinel_correlated" in report.binding_blockers
    assert report.decision.report_only
    assert report.decision.action == "continue"
    assert "report_only" in report.decision.reasons
    assert report.metrics is not None
    assert report.metrics.pass_agreement == 1.0


def test_the_case_refuses_a_sentinel_that_cannot_audit(played: PlayedCase) -> None:
    episodes = played.episodes
    with pytest.raises(ValidationError, match="signs nothing"):
        signal_rows(episodes, optimizer=SQL, sentinel=SCREEN_T0)
    with pytest.raises(ValidationError, match="its own sentinel"):
        signal_rows(episodes, optimizer=SQL, sentinel=SQL)
    with pytest.raises(ValidationError, match="no receipts from worker 'nobody'"):
        signal_rows(episodes, optimizer=SCREEN_T0, sentinel="nobody")
