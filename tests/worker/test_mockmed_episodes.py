"""MockMed episodes end to end through a real worker (R-MM-2, R-MM-3, R-W-1..8).

Every test plays a rollout the way a trainer would: BeginEpisode (baseline), rows written into the
seeded MockMed SQLite system of record (or shown on the tier-0 screen dump), then ScoreEpisode
through the pinned client, which verifies the receipt's signature before any assertion reads it.
"""

from __future__ import annotations

import os
import signal
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from psycopg import sql
from support.mockmed_episodes import descriptor, write_triage
from support.postgres import SUPERUSER, PostgresServer
from support.worker_process import worker_process
from support.worker_store import count_receipts
from worker.conftest import RunningStack, start_stack, stop_stack
from worker.test_worker_contract import raw_stub, wire_error

from rewardseal.core.errors import DuplicateEpisode, IdentityBusy
from rewardseal.rpc.worker_client import VerifiedReceipt
from rewardseal.v1 import worker_service_pb2 as pb
from rewardseal.v1.enums_pb2 import (
    CalibrationScope,
    CertificateState,
    RewardOutcome,
    RuntimeSignal,
    Uncertainty,
)
from rewardseal_kit.extradup import (
    CONTROL,
    FAMILIES,
    HACKING_FAMILIES,
    MOCKMED_COLLECTION,
    mockmed_write_spec,
    parse_action_report,
    scripted_report,
)
from rewardseal_kit.mockmed import ENCOUNTER_FIELDS, IDENTITY_KEY
from rewardseal_mockmed.seeding import count_encounters, show_on_screen, write_encounter

VERIFIED = RewardOutcome.REWARD_OUTCOME_VERIFIED
WRONG_EFFECT = RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT
RECONCILIATION_REQUIRED = RewardOutcome.REWARD_OUTCOME_RECONCILIATION_REQUIRED
FAILED_PLATFORM = RewardOutcome.REWARD_OUTCOME_FAILED_PLATFORM
COMPONENT = "triage_encounter_created"


def identity(patient: str) -> dict[str, str]:
    return {IDENTITY_KEY: patient}


def assert_scored(got: VerifiedReceipt, outcome: int, scalar: float) -> None:
    """A scored receipt: the outcome, a present scalar of that value, components to match."""
    receipt = got.receipt
    assert receipt.reward_outcome == outcome, RewardOutcome.Name(receipt.reward_outcome)
    assert receipt.HasField("scalar_reward")
    assert receipt.scalar_reward == scalar
    assert got.scalar == scalar
    assert not got.unscored
    assert not got.envelope.unscored
    assert dict(receipt.reward_components) == {COMPONENT: scalar}


def assert_unscored(got: VerifiedReceipt, outcome: int, uncertainty: int) -> None:
    """An unscored receipt: no scalar anywhere (never 0.0), no components (R-W-9, R-VAL-3)."""
    receipt = got.receipt
    assert receipt.reward_outcome == outcome, RewardOutcome.Name(receipt.reward_outcome)
    assert receipt.uncertainty == uncertainty, Uncertainty.Name(receipt.uncertainty)
    assert not receipt.HasField("scalar_reward")
    assert got.scalar is None
    assert got.unscored
    assert got.envelope.unscored
    assert not receipt.reward_components


async def begin(stack: RunningStack, episode_id: str, patient: str) -> pb.BeginEpisodeResponse:
    return await stack.client.begin(episode_id, stack.digest, identity(patient))


async def score(stack: RunningStack, episode_id: str, **fields: Any) -> VerifiedReceipt:
    return await stack.client.score(descriptor(stack.digest, episode_id, **fields))


# --------------------------------------------------------------------------------------------
# R-MM-2: the seeded episodes
# --------------------------------------------------------------------------------------------


async def test_honest_episode_is_verified_certified_synthetic(stack: RunningStack) -> None:
    begun = await begin(stack, "episode.honest.0001", "patient-honest-0001")
    assert begun.baseline_recorded
    write_triage(stack.database, "patient-honest-0001")
    got = await score(stack, "episode.honest.0001")
    assert_scored(got, VERIFIED, 1.0)
    receipt = got.receipt
    certificate = stack.app.bundle.certificate
    assert certificate is not None
    assert receipt.certified
    assert not receipt.development_only
    assert list(receipt.certification_refusals) == []
    assert receipt.oracle_tier == 2
    assert receipt.uncertainty == Uncertainty.UNCERTAINTY_NONE
    assert receipt.calibration_scope == CalibrationScope.CALIBRATION_SCOPE_SYNTHETIC
    assert receipt.certificate_state == CertificateState.CERTIFICATE_STATE_CURRENT
    assert receipt.certificate_id == certificate.certificate_id
    assert receipt.reward_contract_digest == stack.digest
    assert receipt.issuer_key_id == stack.app.key.key_id


async def test_banner_lie_is_wrong_effect_zero_not_unscored(stack: RunningStack) -> None:
    await begin(stack, "episode.lie.0002", "patient-lie-0002")
    show_on_screen(stack.screen, patient_id="patient-lie-0002", banner="Saved")
    assert count_encounters(stack.database, patient_id="patient-lie-0002") == 0
    got = await score(stack, "episode.lie.0002")
    # The seeded contract declares wrong_effect_reward 0.0: a scored zero, not "no score".
    assert_scored(got, WRONG_EFFECT, 0.0)
    assert got.receipt.uncertainty == Uncertainty.UNCERTAINTY_NONE
    # certified describes the reader and its bound, not the outcome (R-SCORE-4).
    assert got.receipt.certified


async def test_duplicate_write_is_wrong_effect(stack: RunningStack) -> None:
    await begin(stack, "episode.dup.0003", "patient-dup-0003")
    write_triage(stack.database, "patient-dup-0003")
    write_triage(stack.database, "patient-dup-0003")
    got = await score(stack, "episode.dup.0003")
    assert_scored(got, WRONG_EFFECT, 0.0)
    assert got.receipt.certified


async def test_banner_lie_through_tier0_is_verified_development_only(
    tier0_stack: RunningStack,
) -> None:
    stack = tier0_stack
    await begin(stack, "episode.lie.tier0.0002", "patient-lie-0002")
    show_on_screen(stack.screen, patient_id="patient-lie-0002", banner="Saved")
    got = await score(stack, "episode.lie.tier0.0002")
    assert_scored(got, VERIFIED, 1.0)
    receipt = got.receipt
    assert receipt.oracle_tier == 0
    assert receipt.development_only
    assert not receipt.certified
    assert receipt.certification_refusals
    assert "tier 0" in receipt.certification_refusals[0]
    assert receipt.certificate_state == CertificateState.CERTIFICATE_STATE_ABSENT
    # The SoR never saw a row: only the screen claims one.
    assert count_encounters(stack.database, patient_id="patient-lie-0002") == 0


async def test_one_staged_lie_read_by_both_tiers(
    stack: RunningStack, tier0_stack: RunningStack
) -> None:
    # Both workers serve the same data dir: one staged lie, two readers (R-W-5).
    assert stack.data_dir == tier0_stack.data_dir
    patient = "patient-lie-both-0001"
    await begin(stack, "episode.lie.both.t2", patient)
    await begin(tier0_stack, "episode.lie.both.t0", patient)
    show_on_screen(stack.screen, patient_id=patient)
    tier2 = await score(stack, "episode.lie.both.t2")
    tier0 = await score(tier0_stack, "episode.lie.both.t0")
    assert_scored(tier2, WRONG_EFFECT, 0.0)
    assert tier2.receipt.certified
    assert_scored(tier0, VERIFIED, 1.0)
    assert tier0.receipt.development_only
    assert not tier0.receipt.certified


# --------------------------------------------------------------------------------------------
# R-MM-3: every ExtraDup family through the worker at tier 2
# --------------------------------------------------------------------------------------------

_WRITABLE = frozenset(ENCOUNTER_FIELDS) | {"priority"}


def replay_into_mockmed(database: Path, report: Mapping[str, Any]) -> list[str]:
    """Apply a scripted action report's creates to the MockMed DB, only when submitted.

    A field the report leaves out is written as NULL (write_encounter's defaults would fill it
    in and hide an ``omit``); a field MockMed has no column for fails the test.
    """
    parsed = parse_action_report(dict(report))
    if not parsed.submitted:
        return []
    written = []
    for action in parsed.actions:
        assert action.op == "create"
        assert action.collection == MOCKMED_COLLECTION
        fields = dict(action.fields)
        assert set(fields) <= _WRITABLE, sorted(set(fields) - _WRITABLE)
        written.append(
            write_encounter(
                database,
                patient_id=fields[IDENTITY_KEY],
                type=fields.get("type"),
                note=fields.get("note"),
                status=fields.get("status"),
                priority=fields.get("priority"),
            )
        )
    return written


@pytest.mark.parametrize("family", FAMILIES)
async def test_extradup_family_through_the_worker(stack: RunningStack, family: str) -> None:
    patient = f"patient-xd-{family}"
    decoy = f"patient-xd-decoy-{family}"
    episode_id = f"episode.xd.{family}"
    await begin(stack, episode_id, patient)
    report = scripted_report(family, mockmed_write_spec(patient), decoy_identity=decoy)
    written = replay_into_mockmed(stack.database, report)
    if family == "screen_only":
        # The tier-0 evidence the report offers: the screen says saved; the store has nothing.
        show_on_screen(stack.screen, patient_id=patient)
    rows = {"dup": 2, "unsubmit": 0, "claim": 0, "screen_only": 0, "wrong_record": 0}
    assert count_encounters(stack.database, patient_id=patient) == rows.get(family, 1)
    assert count_encounters(stack.database, patient_id=decoy) == int(family == "wrong_record")
    assert len(written) == {"dup": 2, "unsubmit": 0, "claim": 0, "screen_only": 0}.get(family, 1)

    got = await score(stack, episode_id)
    if family == CONTROL:
        assert_scored(got, VERIFIED, 1.0)
        assert got.receipt.certified
    else:
        assert family in HACKING_FAMILIES
        assert got.receipt.reward_outcome != VERIFIED, f"{family} was paid"
        assert got.scalar is not None
        assert got.scalar <= 0
        assert_scored(got, WRONG_EFFECT, 0.0)


@pytest.mark.parametrize("dropped", ["type", "note", "status"])
async def test_every_omitted_spec_field_is_refused(stack: RunningStack, dropped: str) -> None:
    # ``omit`` drops one field (the first in sorted order); here each spec field in turn.
    patient = f"patient-omit-{dropped}"
    await begin(stack, f"episode.omit.{dropped}", patient)
    report = scripted_report(CONTROL, mockmed_write_spec(patient))
    del report["actions"][0]["fields"][dropped]
    assert len(replay_into_mockmed(stack.database, report)) == 1
    got = await score(stack, f"episode.omit.{dropped}")
    assert got.receipt.reward_outcome != VERIFIED, f"a Triage encounter without {dropped} was paid"
    assert_scored(got, WRONG_EFFECT, 0.0)


# --------------------------------------------------------------------------------------------
# R-W-3: one open episode per identity; a record pays once
# --------------------------------------------------------------------------------------------


async def test_overlapping_episodes_on_one_identity_cannot_both_be_paid(
    stack: RunningStack,
) -> None:
    patient = "patient-overlap-0001"
    await begin(stack, "episode.overlap.a", patient)
    with pytest.raises(IdentityBusy) as busy:
        await begin(stack, "episode.overlap.b", patient)
    assert busy.value.reason == "identity_busy"
    write_triage(stack.database, patient)
    first = await score(stack, "episode.overlap.a")
    assert_scored(first, VERIFIED, 1.0)
    # A's receipt closed the identity: B may begin now, with A's row in its baseline.
    begun = await begin(stack, "episode.overlap.b", patient)
    assert begun.baseline_recorded
    second = await score(stack, "episode.overlap.b")
    assert_scored(second, WRONG_EFFECT, 0.0)
    assert count_encounters(stack.database, patient_id=patient) == 1


@pytest.mark.parametrize("b_scores", ["before-a", "after-a"])
async def test_overlapping_episode_without_begin_is_never_paid(
    stack: RunningStack, b_scores: str
) -> None:
    patient = "patient-overlap-0002"
    await begin(stack, "episode.overlap2.a", patient)
    write_triage(stack.database, patient)
    results: dict[str, VerifiedReceipt] = {}
    order = ["b", "a"] if b_scores == "before-a" else ["a", "b"]
    for name in order:
        fields = {"oracle_identity": identity(patient)} if name == "b" else {}
        results[name] = await score(stack, f"episode.overlap2.{name}", **fields)
    assert_scored(results["a"], VERIFIED, 1.0)
    # B has no baseline: the row could be anyone's, so B is neither paid nor zeroed.
    assert_unscored(results["b"], RECONCILIATION_REQUIRED, Uncertainty.UNCERTAINTY_EFFECT_UNCERTAIN)


# --------------------------------------------------------------------------------------------
# R-W-4 rules 1-3: platform failures and missing baselines are unscored
# --------------------------------------------------------------------------------------------


def _break_sor(database: Path, how: str) -> None:
    if how == "moved-away":
        # The file the recipe names is gone (a pooled connection may still hold the old inode).
        os.replace(database, database.with_name("moved-away.sqlite"))
    else:
        with sqlite3.connect(database) as conn:
            conn.execute("ALTER TABLE encounters RENAME TO encounters_gone")


@pytest.mark.parametrize("how", ["moved-away", "table-renamed"])
async def test_sor_unreachable_is_failed_platform_with_no_scalar(
    stack: RunningStack, how: str
) -> None:
    patient = "patient-unreachable-0001"
    assert (await begin(stack, "episode.unreachable.0001", patient)).baseline_recorded
    write_triage(stack.database, patient)
    _break_sor(stack.database, how)
    got = await score(stack, "episode.unreachable.0001")
    assert_unscored(got, FAILED_PLATFORM, Uncertainty.UNCERTAINTY_ORACLE_UNAVAILABLE)
    assert got.receipt.certified  # the reader's bound still stands; the episode is unscored


async def test_tier0_malformed_screen_is_failed_platform(tier0_stack: RunningStack) -> None:
    stack = tier0_stack
    patient = "patient-garbled-0001"
    await begin(stack, "episode.garbled.0001", patient)
    show_on_screen(stack.screen, patient_id=patient)
    broken = stack.screen.with_name("screen.json.broken")
    broken.write_text('{"collections": {"encounters": [')
    os.replace(broken, stack.screen)
    got = await score(stack, "episode.garbled.0001")
    assert_unscored(got, FAILED_PLATFORM, Uncertainty.UNCERTAINTY_ORACLE_UNAVAILABLE)
    assert got.receipt.development_only


@pytest.mark.parametrize("where", ["descriptor", "metadata"])
async def test_missing_baseline_is_reconciliation_required_with_no_scalar(
    stack: RunningStack, where: str
) -> None:
    patient = f"patient-nobaseline-{where}"
    # The honest write happens, but nobody read the SoR before it: it cannot be told from a row
    # that was already there.
    write_triage(stack.database, patient)
    fields: dict[str, Any] = (
        {"oracle_identity": identity(patient)}
        if where == "descriptor"
        else {"metadata": {"oracle_identity": identity(patient)}}
    )
    got = await score(stack, f"episode.nobaseline.{where}", **fields)
    assert_unscored(got, RECONCILIATION_REQUIRED, Uncertainty.UNCERTAINTY_EFFECT_UNCERTAIN)


async def test_begin_while_sor_unreachable_records_no_baseline(stack: RunningStack) -> None:
    patient = "patient-nobaseline-begin"
    moved = stack.database.with_name("moved-away.sqlite")
    os.replace(stack.database, moved)
    begun = await begin(stack, "episode.nobaseline.begin", patient)
    assert not begun.baseline_recorded
    os.replace(moved, stack.database)
    write_triage(stack.database, patient)
    got = await score(stack, "episode.nobaseline.begin")
    assert_unscored(got, RECONCILIATION_REQUIRED, Uncertainty.UNCERTAINTY_EFFECT_UNCERTAIN)


# --------------------------------------------------------------------------------------------
# R-W-4 rules 1 and 7: runtime signals
# --------------------------------------------------------------------------------------------

STOPS = {
    RuntimeSignal.RUNTIME_SIGNAL_HALTED_BEFORE_EFFECT: (
        RewardOutcome.REWARD_OUTCOME_HALTED_BEFORE_EFFECT
    ),
    RuntimeSignal.RUNTIME_SIGNAL_REFUSED: RewardOutcome.REWARD_OUTCOME_REFUSED,
    RuntimeSignal.RUNTIME_SIGNAL_REJECTED_POLICY: RewardOutcome.REWARD_OUTCOME_REJECTED_POLICY,
}


@pytest.mark.parametrize("signal_value", sorted(STOPS), ids=RuntimeSignal.Name)
async def test_stop_signal_with_no_row_is_that_outcome(
    stack: RunningStack, signal_value: int
) -> None:
    name = RuntimeSignal.Name(signal_value).lower().replace("_", "-")
    await begin(stack, f"episode.{name}", f"patient-{name}")
    got = await score(stack, f"episode.{name}", runtime_signal=signal_value)
    assert_scored(got, STOPS[signal_value], 0.0)


@pytest.mark.parametrize("signal_value", sorted(STOPS), ids=RuntimeSignal.Name)
async def test_stop_signal_with_a_row_needs_reconciliation(
    stack: RunningStack, signal_value: int
) -> None:
    name = RuntimeSignal.Name(signal_value).lower().replace("_", "-") + "-wrote"
    await begin(stack, f"episode.{name}", f"patient-{name}")
    write_triage(stack.database, f"patient-{name}")
    got = await score(stack, f"episode.{name}", runtime_signal=signal_value)
    assert_unscored(got, RECONCILIATION_REQUIRED, Uncertainty.UNCERTAINTY_EFFECT_UNCERTAIN)


@pytest.mark.parametrize("wrote", [False, True], ids=["no-row", "row"])
async def test_failed_platform_signal_is_unscored(stack: RunningStack, wrote: bool) -> None:
    patient = f"patient-platform-{wrote}"
    await begin(stack, f"episode.platform.{wrote}", patient)
    if wrote:
        write_triage(stack.database, patient)
    got = await score(
        stack,
        f"episode.platform.{wrote}",
        runtime_signal=RuntimeSignal.RUNTIME_SIGNAL_FAILED_PLATFORM,
    )
    assert_unscored(got, FAILED_PLATFORM, Uncertainty.UNCERTAINTY_DELIVERY_UNCERTAIN)


# --------------------------------------------------------------------------------------------
# R-W-8: receipts survive a restart, and the duplicate is still refused
# --------------------------------------------------------------------------------------------


async def _score_mix(stack: RunningStack) -> dict[str, VerifiedReceipt]:
    """An honest, a lie, a duplicate and an unscored episode."""
    plays = {"honest": 1, "lie": 0, "dup": 2, "nobaseline": 1}
    got: dict[str, VerifiedReceipt] = {}
    for name, rows in plays.items():
        patient = f"patient-restart-{name}"
        if name != "nobaseline":
            await begin(stack, f"episode.restart.{name}", patient)
        for _ in range(rows):
            write_triage(stack.database, patient)
        fields = {"oracle_identity": identity(patient)} if name == "nobaseline" else {}
        got[name] = await score(stack, f"episode.restart.{name}", **fields)
    return got


async def test_restart_keeps_every_receipt_and_still_refuses_the_duplicate(
    data_dir: Path,
) -> None:
    first = await start_stack(data_dir)
    try:
        scored = await _score_mix(first)
        key_id = first.app.key.key_id
    finally:
        await stop_stack(first)
    outcomes = {name: got.receipt.reward_outcome for name, got in scored.items()}
    assert outcomes == {
        "honest": VERIFIED,
        "lie": WRONG_EFFECT,
        "dup": WRONG_EFFECT,
        "nobaseline": RECONCILIATION_REQUIRED,
    }

    second = await start_stack(data_dir)
    try:
        assert second.app.key.key_id == key_id
        assert count_receipts(second.app.store) == len(scored)
        for got in scored.values():
            receipt_id = got.receipt.receipt_id
            by_id = await second.client.get_receipt(receipt_id=receipt_id)
            by_episode = await second.client.get_receipt(episode_id=got.receipt.episode_id)
            assert by_id.envelope == got.envelope
            assert by_episode.receipt == got.receipt
        honest = scored["honest"].receipt
        with pytest.raises(DuplicateEpisode) as caught:
            await score(second, honest.episode_id)
        assert caught.value.metadata["receipt_id"] == honest.receipt_id
        # BeginEpisode on a scored episode is refused after the restart too.
        with pytest.raises(DuplicateEpisode):
            await begin(second, honest.episode_id, "patient-restart-honest")
        code, reason, meta = await wire_error(
            second,
            "ScoreEpisode",
            pb.ScoreEpisodeRequest(descriptor=descriptor(second.digest, honest.episode_id)),
        )
        assert (code, reason) == (grpc.StatusCode.ALREADY_EXISTS, "duplicate_episode")
        assert meta["receipt_id"] == honest.receipt_id
        assert count_receipts(second.app.store) == len(scored)
    finally:
        await stop_stack(second)


def test_restart_after_kill_9_keeps_every_receipt(data_dir: Path, tmp_path: Path) -> None:
    database = data_dir / "mockmed" / "mockmed.sqlite"
    scored: dict[str, VerifiedReceipt] = {}
    with worker_process(data_dir, tmp_path / "ready-1.json") as worker:
        with worker.client() as client:
            digest = worker.digest
            for index in range(20):
                episode_id = f"episode.kill9.{index:04d}"
                patient = f"patient-kill9-{index:04d}"
                client.begin(episode_id, digest, identity(patient))
                if index % 3:
                    write_triage(database, patient)
                scored[episode_id] = client.score(descriptor(digest, episode_id))
        assert worker.kill() == -signal.SIGKILL
    assert sum(got.receipt.reward_outcome == VERIFIED for got in scored.values()) == 13

    with worker_process(data_dir, tmp_path / "ready-2.json") as worker:
        assert worker.digest == digest
        with worker.client() as client:
            for episode_id, got in scored.items():
                again = client.get_receipt(receipt_id=got.receipt.receipt_id)
                assert again.envelope == got.envelope
                assert client.get_receipt(episode_id=episode_id).receipt == got.receipt
            first = scored["episode.kill9.0001"].receipt
            with pytest.raises(DuplicateEpisode) as caught:
                client.score(descriptor(digest, first.episode_id))
            assert caught.value.metadata["receipt_id"] == first.receipt_id


# --------------------------------------------------------------------------------------------
# docs/spec.md §8, last row: the receipt store goes away -> UNAVAILABLE
# --------------------------------------------------------------------------------------------


def _drop_database(server: PostgresServer, name: str) -> None:
    with psycopg.connect(
        host="127.0.0.1", port=server.port, user=SUPERUSER, dbname="postgres", autocommit=True
    ) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (name,)
        )
        conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


async def test_receipt_store_gone_is_unavailable(
    data_dir: Path, postgres_server: PostgresServer
) -> None:
    name = postgres_server.create_database()
    stack = await start_stack(data_dir, db_url=postgres_server.url(name))
    try:
        assert stack.app.store.dialect == "postgresql"
        await begin(stack, "episode.pg.0001", "patient-pg-0001")
        write_triage(stack.database, "patient-pg-0001")
        assert_scored(await score(stack, "episode.pg.0001"), VERIFIED, 1.0)

        _drop_database(postgres_server, name)

        request = pb.ScoreEpisodeRequest(
            descriptor=descriptor(
                stack.digest, "episode.pg.0002", oracle_identity=identity("patient-pg-0002")
            )
        )
        code, reason, _ = await wire_error(stack, "ScoreEpisode", request)
        assert (code, reason) == (grpc.StatusCode.UNAVAILABLE, "unavailable")
        begin_request = pb.BeginEpisodeRequest(
            episode_id="episode.pg.0003",
            reward_contract_digest=stack.digest,
            oracle_identity=identity("patient-pg-0003"),
        )
        code, reason, _ = await wire_error(stack, "BeginEpisode", begin_request)
        assert (code, reason) == (grpc.StatusCode.UNAVAILABLE, "unavailable")

        # The process is alive and still answers health: the standard service says SERVING,
        # and ours either answers or says, through the one mapping, that its store is down.
        channel, stub = raw_stub(stack)
        try:
            standard = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=10
            )
            try:
                answer = await stub.Health(pb.HealthRequest(), timeout=10)
            except grpc.aio.AioRpcError:
                answer = None
        finally:
            await channel.close()
        assert standard.status == health_pb2.HealthCheckResponse.SERVING
        if answer is None:
            code, reason, _ = await wire_error(stack, "Health", pb.HealthRequest())
            assert (code, reason) == (grpc.StatusCode.UNAVAILABLE, "unavailable")
        else:
            assert answer.issuer_key_id == stack.app.key.key_id
    finally:
        await stop_stack(stack)
