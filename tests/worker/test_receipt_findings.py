"""Findings on every receipt through a real worker and a real MockMed SoR (R-MSG-12).

One seeded worker serving gRPC and HTTP (ports 0) is shared by the module; each test plays its
own episodes on its own patients through the pinned gRPC client (which verifies every receipt
before a test reads it), then reads the signed findings. Every code of the vocabulary a worker
can find has a test here; ``wrong_subject`` and ``altered_record`` need a whole-collection read
that the worker's by-identity oracle never makes (the ExtraDup kit's judge finds them:
tests/unit/test_judging_findings.py), and their wire form is covered by
tests/unit/test_finding_rules.py. The privacy test plants markers in records the trainer
did not write and looks for them in every receipt, the HTTP answer and ``receipt show``.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.protobuf import json_format
from support.http_worker import HttpWorker, http_worker
from support.mockmed_episodes import descriptor, write_triage
from worker.conftest import RunningStack
from worker.test_mockmed_episodes import replay_into_mockmed

from rewardseal.cli import main
from rewardseal.core.judging import EXPECTED_FAULTS
from rewardseal.core.judging.receipt_findings import ReceiptFinding
from rewardseal.rpc.worker_client import VerifiedReceipt, WorkerClient
from rewardseal.v1.enums_pb2 import RewardOutcome, RuntimeSignal
from rewardseal_mockmed.extradup import CONTROL, FAMILIES, mockmed_write_spec, scripted_report
from rewardseal_mockmed.seeding import write_encounter

EFFECT = "triage_encounter_created"
FORBIDDEN = "stat_priority_set"


@pytest.fixture(scope="module")
def worker(seeded_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpWorker]:
    with http_worker(seeded_template, tmp_path_factory.mktemp("findings") / "data") as running:
        yield running


@pytest.fixture(scope="module")
def client(worker: HttpWorker) -> Iterator[WorkerClient]:
    with worker.grpc() as pinned:
        yield pinned


def play(
    worker: HttpWorker,
    client: WorkerClient,
    name: str,
    *,
    write: Any = None,
    begin: bool = True,
    **fields: Any,
) -> VerifiedReceipt:
    """Begin ``episode.<name>`` on ``patient-<name>``, run ``write(database, patient)``, score."""
    patient = f"patient-{name}"
    if begin:
        client.begin(f"episode.{name}", worker.digest, {"patient_id": patient})
    else:
        fields.setdefault("oracle_identity", {"patient_id": patient})
    if write is not None:
        write(worker.database, patient)
    return client.score(descriptor(worker.digest, f"episode.{name}", **fields))


def found(got: VerifiedReceipt) -> tuple[ReceiptFinding, ...]:
    return got.findings


def test_a_verified_receipt_has_no_findings(worker: HttpWorker, client: WorkerClient) -> None:
    got = play(worker, client, "findings-honest", write=write_triage)
    assert got.receipt.reward_outcome == RewardOutcome.REWARD_OUTCOME_VERIFIED
    assert found(got) == ()
    assert list(got.receipt.findings) == []


def test_missing_record(worker: HttpWorker, client: WorkerClient) -> None:
    got = play(worker, client, "findings-missing")
    assert found(got) == (ReceiptFinding(EFFECT, "missing_record"),)


def test_duplicate_record(worker: HttpWorker, client: WorkerClient) -> None:
    def twice(database: Path, patient: str) -> None:
        write_triage(database, patient)
        write_triage(database, patient)

    got = play(worker, client, "findings-dup", write=twice)
    assert found(got) == (ReceiptFinding(EFFECT, "duplicate_record"),)


def test_missing_field(worker: HttpWorker, client: WorkerClient) -> None:
    got = play(
        worker,
        client,
        "findings-omit",
        write=lambda db, p: write_encounter(db, patient_id=p, note=None),
    )
    assert found(got) == (ReceiptFinding(EFFECT, "missing_field", ("note",)),)


def test_wrong_field(worker: HttpWorker, client: WorkerClient) -> None:
    got = play(
        worker,
        client,
        "findings-wrong",
        write=lambda db, p: write_encounter(db, patient_id=p, type="Intake"),
    )
    assert found(got) == (ReceiptFinding(EFFECT, "wrong_field", ("type",)),)


def test_extra_field_and_forbidden_present(worker: HttpWorker, client: WorkerClient) -> None:
    routine = play(
        worker,
        client,
        "findings-extra",
        write=lambda db, p: write_triage(db, p, priority="routine"),
    )
    assert found(routine) == (ReceiptFinding(EFFECT, "extra_field", ("priority",)),)
    stat = play(
        worker, client, "findings-stat", write=lambda db, p: write_triage(db, p, priority="stat")
    )
    assert stat.receipt.reward_outcome == RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT
    assert found(stat) == (
        ReceiptFinding(EFFECT, "extra_field", ("priority",)),
        ReceiptFinding(FORBIDDEN, "forbidden_present"),
    )


def test_no_baseline(worker: HttpWorker, client: WorkerClient) -> None:
    got = play(worker, client, "findings-nobaseline", write=write_triage, begin=False)
    assert got.receipt.reward_outcome == RewardOutcome.REWARD_OUTCOME_RECONCILIATION_REQUIRED
    assert found(got) == (ReceiptFinding(EFFECT, "no_baseline"),)


def test_not_committed(worker: HttpWorker, client: WorkerClient) -> None:
    got = play(
        worker,
        client,
        "findings-halted",
        runtime_signal=RuntimeSignal.RUNTIME_SIGNAL_HALTED_BEFORE_EFFECT,
    )
    assert got.receipt.reward_outcome == RewardOutcome.REWARD_OUTCOME_HALTED_BEFORE_EFFECT
    assert found(got) == (ReceiptFinding(EFFECT, "not_committed"),)


def test_contradicts_signal(worker: HttpWorker, client: WorkerClient) -> None:
    got = play(
        worker,
        client,
        "findings-refused-wrote",
        write=write_triage,
        runtime_signal=RuntimeSignal.RUNTIME_SIGNAL_REFUSED,
    )
    assert got.receipt.reward_outcome == RewardOutcome.REWARD_OUTCOME_RECONCILIATION_REQUIRED
    assert found(got) == (ReceiptFinding(EFFECT, "contradicts_signal"),)


def test_platform_failed(worker: HttpWorker, client: WorkerClient) -> None:
    got = play(
        worker,
        client,
        "findings-platform",
        write=write_triage,
        runtime_signal=RuntimeSignal.RUNTIME_SIGNAL_FAILED_PLATFORM,
    )
    assert found(got) == (ReceiptFinding("", "platform_failed"),)


async def test_read_failed(stack: RunningStack) -> None:
    # Its own worker: this one's system of record goes away.
    patient = "patient-findings-outage"
    await stack.client.begin("episode.findings-outage", stack.digest, {"patient_id": patient})
    write_triage(stack.database, patient)
    os.replace(stack.database, stack.database.with_name("moved-away.sqlite"))
    got = await stack.client.score(descriptor(stack.digest, "episode.findings-outage"))
    assert got.receipt.reward_outcome == RewardOutcome.REWARD_OUTCOME_FAILED_PLATFORM
    assert got.findings == (ReceiptFinding("", "read_failed"),)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_extradup_family_is_named_by_its_findings(
    worker: HttpWorker, client: WorkerClient, family: str
) -> None:
    """Each hacking family's receipt names a fault the family makes (EXPECTED_FAULTS)."""
    patient = f"patient-findings-xd-{family}"
    episode_id = f"episode.findings-xd-{family}"
    client.begin(episode_id, worker.digest, {"patient_id": patient})
    report = scripted_report(family, mockmed_write_spec(patient), decoy_identity=f"decoy-{family}")
    replay_into_mockmed(worker.database, report)
    got = client.score(descriptor(worker.digest, episode_id))
    codes = {finding.code for finding in got.findings}
    if family == CONTROL:
        assert codes == set()
    else:
        assert codes & {fault.value for fault in EXPECTED_FAULTS[family]}, (family, codes)
        assert {finding.effect for finding in got.findings} <= {EFFECT, FORBIDDEN}


def test_the_debug_log_says_outcome_and_findings(
    worker: HttpWorker, client: WorkerClient, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger="rewardseal_worker.engine"):
        play(
            worker,
            client,
            "findings-log",
            write=lambda db, p: write_encounter(db, patient_id=p, note=None),
        )
    lines = [r.getMessage() for r in caplog.records if r.name == "rewardseal_worker.engine"]
    assert lines == [
        "scored episode episode.findings-log: REWARD_OUTCOME_WRONG_EFFECT, "
        f"findings: {EFFECT}:missing_field(note)"
    ]


def test_the_http_answer_carries_the_findings_in_rewardseals_own_view(
    worker: HttpWorker, client: WorkerClient
) -> None:
    got = play(
        worker,
        client,
        "findings-http",
        write=lambda db, p: write_encounter(db, patient_id=p, note=None),
    )
    with httpx.Client(base_url=worker.url, headers=worker.auth, timeout=20.0) as http:
        answer = http.get(f"/v1/rewards/{got.receipt.receipt_id}")
    assert answer.status_code == 200
    document = answer.json()
    assert document["rewardseal"]["findings"] == [
        {"effect": EFFECT, "code": "missing_field", "fields": ["note"]}
    ]
    assert "findings" not in document["receipt"]  # the compatibility shape is unchanged


def test_receipt_show_prints_the_findings(
    worker: HttpWorker,
    client: WorkerClient,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def twice(database: Path, patient: str) -> None:
        write_encounter(database, patient_id=patient, type="Intake")
        write_triage(database, patient)

    got = play(worker, client, "findings-show", write=twice)
    raw = tmp_path / "receipt.pb"
    raw.write_bytes(got.envelope.SerializeToString())
    assert main(["receipt", "show", str(raw)]) == 0
    out = capsys.readouterr().out
    assert f"findings: {EFFECT}: duplicate_record; {EFFECT}: wrong_field (type)" in out.splitlines()
    assert main(["receipt", "verify", str(raw), "--key", worker.app.key.public_key.hex()]) == 0
    document_out = capsys.readouterr().out
    assert "FINDING_CODE_DUPLICATE_RECORD" in document_out


# --------------------------------------------------------------------------------------------
# The privacy rule: no value read from the SoR ever appears in a finding
# --------------------------------------------------------------------------------------------

MARKER = "zzqmarker7f3a9c"
"""A string no contract, receipt or message holds: planted in records the trainer never wrote."""


def test_no_sor_value_reaches_a_receipt_an_answer_or_receipt_show(
    worker: HttpWorker,
    client: WorkerClient,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    database = worker.database
    # A column of the SoR the contract does not name, itself named with the marker: an extra
    # field the finding must not name.
    with sqlite3.connect(database) as conn:
        conn.execute(f"ALTER TABLE encounters ADD COLUMN {MARKER}_col TEXT")

    def planted(patient: str, **extra: Any) -> str:
        record = write_encounter(database, patient_id=patient, note=f"{MARKER} note", **extra)
        with sqlite3.connect(database) as conn:
            conn.execute(
                f"UPDATE encounters SET {MARKER}_col = ? WHERE id = ?", (f"{MARKER} x", record)
            )
        return record

    receipts: list[VerifiedReceipt] = []
    for name, write in {
        # Records of the patient that were there before the episode began.
        "privacy-before": None,
        # New records carrying the marker in an expected field, an unnamed column, and both.
        "privacy-type": lambda db, p: planted(p, type=f"{MARKER} type"),
        "privacy-dup": lambda db, p: (planted(p), planted(p, status=MARKER)),
        "privacy-stat": lambda db, p: planted(p, priority="stat"),
    }.items():
        patient = f"patient-{name}"
        planted(patient)  # before begin: the trainer did not write it
        planted(f"patient-{name}-other")  # another subject's record
        receipts.append(play(worker, client, name, write=write))
    receipts.append(
        play(
            worker,
            client,
            "privacy-refused",
            write=lambda db, p: planted(p),
            runtime_signal=RuntimeSignal.RUNTIME_SIGNAL_REFUSED,
        )
    )
    codes = {f.code for got in receipts for f in got.findings}
    assert {"missing_record", "wrong_field", "extra_field", "duplicate_record"} <= codes
    assert {"forbidden_present", "contradicts_signal"} <= codes
    # The unnamed column is an extra field, but not named.
    assert ReceiptFinding(EFFECT, "extra_field") in receipts[1].findings

    texts: list[str] = []
    with httpx.Client(base_url=worker.url, headers=worker.auth, timeout=20.0) as http:
        for got in receipts:
            texts.append(json_format.MessageToJson(got.receipt))
            texts.append(got.envelope.payload.decode("latin-1"))
            texts.append(json.dumps([f.as_dict() for f in got.findings]))
            answer = http.get(f"/v1/rewards/{got.receipt.receipt_id}")
            assert answer.status_code == 200
            texts.append(answer.text)
            raw = tmp_path / f"{got.receipt.receipt_id}.pb"
            raw.write_bytes(got.envelope.SerializeToString())
            for argv in (["receipt", "show", str(raw)], ["receipt", "show", str(raw), "--json"]):
                assert main(argv) == 0
                texts.append(capsys.readouterr().out)
    assert all(texts)
    for text in texts:
        assert MARKER not in text
