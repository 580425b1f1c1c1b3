"""The store's hot path on SQLite and PostgreSQL: the driver SQL of ``lookup``, ``credited_for``
and ``commit_receipts`` reads what SQLAlchemy wrote (and writes what it reads) exactly as the
Core statements did; evidence is stored packed and read back byte for byte, rows written before
the codec existed included; driver errors leave as the store's errors (issue 12)."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import bindparam, select, text
from support.worker_store import begin_episode, open_episode

from rewardseal.core.digest import canonical_json
from rewardseal.core.errors import RewardSealError
from rewardseal_server.sqlstore import AUTOCOMMIT_READ_OPTION
from rewardseal_worker.store import CreditsTaken, ReceiptToCommit, WorkerStore, evidence_codec
from rewardseal_worker.store.hot_sql import HotSql
from rewardseal_worker.store.schema import credited_records, open_episodes, policy_ledger, receipts

CONTRACT = "sha256:" + "c" * 64
T0 = datetime(2026, 11, 30, 12, 0, 0, 123456, tzinfo=UTC)
EVIDENCE = canonical_json(
    {
        "salt": "0026ba70a5b20ffc0773a3ec41804f96",
        "schema": "rewardseal.evidence.v1",
        "outcome": "REWARD_OUTCOME_VERIFIED",
        "uncertainty": "UNCERTAINTY_NONE",
        "rule": 5,
        "reason": "R-W-4 rule 5: every required effect is confirmed",
        "runtime_signal": "RUNTIME_SIGNAL_COMPLETED",
        "oracle_error": None,
        "verdicts": [
            {
                "effect": "triage_encounter_created",
                "kind": "required",
                "verdict": "CONFIRMED",
                "reason": "confirmed",
                "record_ids": ["enc-patient-0000448"],
            }
        ],
        "credited_record_ids": ["enc-patient-0000448"],
        "counts": {"required": 1, "forbidden": 0, "confirmed": 1, "new_records": 1},
    }
)


@pytest.fixture
def store(store_url: str) -> Iterator[WorkerStore]:
    opened = WorkerStore(store_url)
    yield opened
    opened.close()


def key(n: int) -> str:
    return canonical_json({"patient_id": f"P-{n}"}).decode()


def to_commit(n: int, *, evidence: bytes = EVIDENCE, credited: tuple[str, ...] = ()) -> Any:
    return ReceiptToCommit(
        receipt_id=f"rcpt-{n}",
        episode_id=f"ep-{n}",
        contract_digest=CONTRACT,
        policy_update=10 + n,
        identity_key=key(n),
        envelope=b"envelope-%d" % n,
        evidence=evidence,
        credited_record_ids=credited,
    )


def anonymous_credit() -> ReceiptToCommit:
    """A receipt committed without an identity key, crediting ``enc-anon`` (counts for every
    identity)."""
    return ReceiptToCommit(
        receipt_id="rcpt-anon",
        episode_id="ep-anon",
        contract_digest=CONTRACT,
        policy_update=5000,
        identity_key=None,
        envelope=b"e",
        evidence=b"{}",
        credited_record_ids=("enc-anon",),
    )


def core_read(store: WorkerStore, statement: Any, **params: Any) -> list[Any]:
    """Rows of a SQLAlchemy Core statement on the store's engine (the reference reader)."""
    engine = (
        store.engine.execution_options(isolation_level="AUTOCOMMIT")
        if store.dialect == "postgresql"
        else store.engine.execution_options(**{AUTOCOMMIT_READ_OPTION: True})
    )
    with engine.connect() as conn:
        return list(conn.execute(statement, params))


def test_lookup_reads_registrations_as_sqlalchemy_wrote_them(store: WorkerStore) -> None:
    baselines: list[list[dict[str, Any]] | None] = [
        [{"id": "enc-1", "patient_id": "P-0", "n": 1.5, "flag": True, "none": None}],
        None,
        [],
    ]
    for n, baseline in enumerate(baselines):
        begin_episode(
            store,
            contract_digest=CONTRACT,
            episode_id=f"ep-{n}",
            identity={"patient_id": f"P-{n}"},
            baseline=baseline,
            begun_at=T0,
            ttl_seconds=600,
        )
    store.commit_receipts([to_commit(7)])
    found = store.lookup(CONTRACT, ["ep-0", "ep-1", "ep-2", "ep-7", "ep-0", "ep-none"])
    assert dict(found.receipts) == {"ep-7": "rcpt-7"}
    assert found.highest == 17
    # The reference: the same rows through SQLAlchemy's JSON and timestamp types.
    reference = {
        row.episode_id: row
        for row in core_read(
            store,
            select(open_episodes).where(open_episodes.c.contract_digest == bindparam("c")),
            c=CONTRACT,
        )
    }
    assert set(found.open) == set(reference) == {"ep-0", "ep-1", "ep-2"}
    for episode_id, registration in found.open.items():
        row = reference[episode_id]
        assert dict(registration.identity) == row.identity
        assert registration.identity.key == row.identity_key
        assert registration.baseline == row.baseline
        assert registration.begun_at == row.begun_at == T0
        assert registration.begun_at.tzinfo is not None
    assert found.open["ep-0"].baseline == baselines[0]
    assert found.open["ep-1"].baseline is None


def test_task_parameters_are_stored_and_read_back_on_both_paths(store: WorkerStore) -> None:
    """R-W-18: a registration's task parameters (COPY on PostgreSQL, INSERT on SQLite) come
    back from the hot lookup and the Core read alike, typed as bound; none stay None."""
    bound = {"encounter_type": "Triage", "note": 'ünïcode "quoted"', "qty": 3, "w": 2.5}
    for n, parameters in enumerate([bound, None, {"flag": False}]):
        begin_episode(
            store,
            contract_digest=CONTRACT,
            episode_id=f"ep-p{n}",
            identity={"patient_id": f"P-p{n}"},
            baseline=[],
            begun_at=T0,
            ttl_seconds=600,
            task_parameters=parameters,
        )
    found = store.lookup(CONTRACT, ["ep-p0", "ep-p1", "ep-p2"])
    assert found.open["ep-p0"].task_parameters == bound
    assert isinstance(found.open["ep-p0"].task_parameters["w"], float)
    assert found.open["ep-p1"].task_parameters is None
    assert found.open["ep-p2"].task_parameters == {"flag": False}
    read = open_episode(store, CONTRACT, "ep-p0")
    assert read is not None
    assert read.task_parameters == bound


def test_lookup_of_nothing_and_of_an_empty_ledger(store: WorkerStore) -> None:
    found = store.lookup(CONTRACT, [])
    assert (dict(found.receipts), dict(found.open), found.highest) == ({}, {}, None)


def test_commit_writes_rows_sqlalchemy_reads_back(store: WorkerStore) -> None:
    before = datetime.now(UTC)
    results = store.commit_receipts(
        [to_commit(1, credited=("enc-a", "enc-b")), to_commit(2, credited=("enc-c",))]
    )
    assert all(r.stored for r in results)
    rows = {r.receipt_id: r for r in core_read(store, select(receipts))}
    assert set(rows) == {"rcpt-1", "rcpt-2"}
    assert rows["rcpt-1"].episode_id == "ep-1"
    assert rows["rcpt-1"].policy_update == 11
    assert bytes(rows["rcpt-1"].envelope) == b"envelope-1"
    assert evidence_codec.unpack(bytes(rows["rcpt-1"].evidence)) == EVIDENCE
    created = rows["rcpt-1"].created_at
    assert created.tzinfo is not None
    assert before <= created <= datetime.now(UTC)
    credits = {
        (r.record_id, r.receipt_id, r.identity_key)
        for r in core_read(store, select(credited_records))
    }
    assert credits == {
        ("enc-a", "rcpt-1", key(1)),
        ("enc-b", "rcpt-1", key(1)),
        ("enc-c", "rcpt-2", key(2)),
    }
    [ledger] = core_read(store, select(policy_ledger))
    assert (ledger.contract_digest, ledger.highest_update) == (CONTRACT, 12)


def test_evidence_is_stored_packed_and_read_back_exactly(store: WorkerStore) -> None:
    store.commit_receipts([to_commit(1)])
    [row] = core_read(store, select(receipts.c.evidence))
    stored = bytes(row.evidence)
    assert stored.startswith(evidence_codec.PACKED)
    assert len(stored) * 3 < len(EVIDENCE)
    got = store.receipt_by_id("rcpt-1")
    assert got is not None
    assert got.evidence == EVIDENCE
    episode = store.receipt_by_episode("ep-1")
    assert episode is not None
    assert episode.evidence == EVIDENCE


def test_rows_written_before_the_codec_are_read_as_they_are(store: WorkerStore) -> None:
    """An existing data dir: evidence stored raw by an older worker still reads back."""
    store.commit_receipts([to_commit(1)])
    with store.engine.begin() as conn:
        conn.execute(
            receipts.update()
            .values(evidence=bindparam("raw"))
            .where(receipts.c.receipt_id == "rcpt-1"),
            {"raw": EVIDENCE},
        )
    got = store.receipt_by_id("rcpt-1")
    assert got is not None
    assert got.evidence == EVIDENCE


@pytest.mark.parametrize(
    "evidence",
    [
        EVIDENCE,
        b"{}",
        b"",
        b"\x00D not packed at all",
        b"\x00R",
        bytes(range(256)) * 3,  # incompressible
        canonical_json({"salt": "ab" * 16, "verdicts": [{"record_ids": ["r"] * 500}]}),
    ],
)
def test_codec_round_trips_any_bytes(evidence: bytes) -> None:
    stored = evidence_codec.pack(evidence)
    assert evidence_codec.unpack(stored) == evidence
    assert len(stored) <= len(evidence) + len(evidence_codec.ESCAPED)


def test_codec_refuses_a_corrupt_packed_value() -> None:
    stored = evidence_codec.pack(EVIDENCE)
    with pytest.raises(zlib.error):
        evidence_codec.unpack(stored[:-8])


def test_codec_dictionary_is_frozen() -> None:
    """Stored rows depend on it: a changed dictionary needs a new marker, never an edit."""
    assert len(evidence_codec.DICTIONARY_V1) == 911
    assert hashlib.sha256(evidence_codec.DICTIONARY_V1).hexdigest() == (
        "9c6780a339434d24d061aa55b14b39a407cf25d755c15af9fbd27f404c88a03f"
    )


def test_credited_for_many_keys_and_anonymous_credits(store: WorkerStore) -> None:
    keys = [key(n) for n in range(1200)]  # beyond one IN chunk of the Core statements
    items = [to_commit(n, credited=(f"enc-{n}",)) for n in range(0, 1200, 3)]
    anonymous = anonymous_credit()
    assert all(r.stored for r in store.commit_receipts([*items, anonymous]))
    credited = store.credited_for(CONTRACT, keys)
    assert set(credited) == set(keys)
    for n, identity_key in enumerate(keys):
        expected = {"enc-anon"} | ({f"enc-{n}"} if n % 3 == 0 else set())
        assert credited[identity_key] == expected


# Record ids come from the system of record: any text. Identity keys are canonical JSON (quotes,
# and backslashes for some values). A list of them is bound as ONE parameter (a JSON array on
# SQLite, the text of an array literal on PostgreSQL), so each must arrive exactly as it is.
AWKWARD = (
    'say "hi"',
    "back\\slash",
    'end\\"',
    "{braced,comma}",
    "NULL",
    "",
    " padded ",
    "ünï-cödé ✓",
    "tab\there",
    "'single'",
)


def crediting(name: str, identity_key: str | None, record: str) -> ReceiptToCommit:
    """A receipt ``rcpt-<name>`` of episode ``ep-<name>`` crediting ``record``."""
    return ReceiptToCommit(
        receipt_id=f"rcpt-{name}",
        episode_id=f"ep-{name}",
        contract_digest=CONTRACT,
        policy_update=1,
        identity_key=identity_key,
        envelope=b"e",
        evidence=b"{}",
        credited_record_ids=(record,),
    )


def test_list_parameters_match_awkward_strings_exactly(store: WorkerStore) -> None:
    identities = [{"patient_id": f"p{value}"} for value in AWKWARD]
    keys = [canonical_json(identity).decode() for identity in identities]
    items = [
        crediting(f"awkward-{n}", identity_key, record)
        for n, (identity_key, record) in enumerate(zip(keys, AWKWARD, strict=True))
    ]
    assert all(r.stored for r in store.commit_receipts(items))
    credited = store.credited_for(CONTRACT, [*keys, key(999)])
    assert credited == {
        **{k: {record} for k, record in zip(keys, AWKWARD, strict=True)},
        key(999): set(),
    }
    # Each record is taken (found by the commit's check under the lock), and only it: a
    # near miss of an escaped form is a record of its own.
    again = [
        crediting(f"again-{n}", None, record)
        for n, record in enumerate([*AWKWARD, 'say \\"hi\\"', "back\\\\slash"])
    ]
    results = store.commit_receipts(again)
    assert [r.credit_conflicts if isinstance(r, CreditsTaken) else () for r in results] == [
        (record,) for record in AWKWARD
    ] + [(), ()]


def test_lookup_reads_the_registrations_credits_in_its_snapshot(store: WorkerStore) -> None:
    """The lookup's credited records are what ``credited_for`` gives for the open
    registrations' identities: their own credits on the contract plus anonymous ones; credits
    of other identities and other contracts are not theirs."""
    for n in (0, 1, 2):
        begin_episode(
            store,
            contract_digest=CONTRACT,
            episode_id=f"ep-next-{n}",
            identity={"patient_id": f"P-{n}"},
            baseline=[],
            begun_at=T0,
            ttl_seconds=600,
        )
    anonymous = anonymous_credit()
    elsewhere = ReceiptToCommit(
        receipt_id="rcpt-else",
        episode_id="ep-else",
        contract_digest="sha256:" + "d" * 64,
        policy_update=1,
        identity_key=key(1),
        envelope=b"e",
        evidence=b"{}",
        credited_record_ids=("enc-else",),
    )
    committed = store.commit_receipts(
        [
            to_commit(0, credited=("enc-0a", "enc-0b")),
            to_commit(9, credited=("enc-9",)),  # an identity with no registration here
            anonymous,
            elsewhere,
        ]
    )
    assert all(r.stored for r in committed)
    found = store.lookup(CONTRACT, ["ep-next-0", "ep-next-1", "ep-next-2", "ep-missing"])
    keys = [key(0), key(1), key(2)]
    assert dict(found.credited) == {
        key(0): {"enc-0a", "enc-0b", "enc-anon"},
        key(1): {"enc-anon"},
        key(2): {"enc-anon"},
    }
    assert dict(found.credited) == store.credited_for(CONTRACT, keys)
    assert dict(store.lookup(CONTRACT, ["ep-missing"]).credited) == {}


def test_lookup_credits_search_the_identity_index(tmp_path: Path) -> None:
    """The lookup's credited part is index searches too, never a walk over every credit."""
    url = f"sqlite:///{tmp_path / 'worker.db'}"
    WorkerStore(url).close()
    statement = HotSql("sqlite")._lookup
    with sqlite3.connect(tmp_path / "worker.db") as conn:
        plan = conn.execute(
            f"EXPLAIN QUERY PLAN {statement}", (CONTRACT, json.dumps(["ep-1"]))
        ).fetchall()
    searches = [detail for *_, detail in plan if "credited_records" in detail]
    assert len(searches) == 2
    assert all("contract_digest=? AND identity_key=?" in detail for detail in searches)


def test_credited_read_searches_the_identity_index(tmp_path: Path) -> None:
    """The credited read is two index searches: its cost follows the batch's identities, not
    how many records the contract has credited (an ``OR ... IS NULL`` made SQLite walk them
    all)."""
    url = f"sqlite:///{tmp_path / 'worker.db'}"
    WorkerStore(url).close()
    statement = HotSql("sqlite")._credited  # the statement under test
    with sqlite3.connect(tmp_path / "worker.db") as conn:
        plan = conn.execute(
            f"EXPLAIN QUERY PLAN {statement}", (CONTRACT, json.dumps([]))
        ).fetchall()
    searches = [detail for *_, detail in plan if "credited_records" in detail]
    assert len(searches) == 2
    assert all("contract_digest=? AND identity_key=?" in detail for detail in searches)


def test_a_driver_error_leaves_as_a_store_error_naming_no_values(store: WorkerStore) -> None:
    with store.engine.begin() as conn:
        conn.execute(text("DROP TABLE credited_records"))
    secret = "P-secret-identity"
    with pytest.raises(RewardSealError) as caught:
        store.credited_for(CONTRACT, [secret])
    assert "worker store" in str(caught.value)
    assert secret not in str(caught.value)
    with pytest.raises(RewardSealError) as caught:
        store.commit_receipts([to_commit(1, credited=(secret,))])
    assert secret not in str(caught.value)
    # Nothing of the failed commit was kept.
    assert store.receipt_by_id("rcpt-1") is None
