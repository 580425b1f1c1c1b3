"""Signal shards on a real control plane (SQLite and PostgreSQL): append a boundary's rows, seal
them under a retention protocol, verify and list (R-I-3, R-I-4); every bad input refused with
its code and reason, and nothing stored on a refusal."""

from __future__ import annotations

import dataclasses

import grpc
import pytest
from sqlalchemy import text
from support.control import TRAINER, WORKER, ControlStack, wire_error
from support.integrity import agreeing_rows, capture, create_system
from support.integrity import system as core_system

from rewardseal.core.integrity import BUILTIN_PROTOCOLS, retain, seal_shard
from rewardseal.core.integrity.messages import signal_row_message
from rewardseal.v1 import integrity_pb2 as pb

RUN = "run-0001"


def _count(control: ControlStack, table: str) -> int:
    with control.store.store_engine.engine.connect() as conn:
        return int(conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())


def _append(
    system_id: str, rows: list[pb.SignalRow], boundary: int = 10
) -> pb.AppendSignalRowsRequest:
    return pb.AppendSignalRowsRequest(
        run_id=RUN,
        boundary=boundary,
        system_revision_id=system_id,
        protocol_revision_id="balanced_256",
        rows=rows,
    )


async def test_a_boundary_is_retained_sealed_listed_and_verified(control: ControlStack) -> None:
    system_id = await create_system(control)
    stub = control.integrity_stub()
    rows = agreeing_rows(300)
    for start in (0, 150):
        answer = await stub.AppendSignalRows(
            _append(system_id, [signal_row_message(r) for r in rows[start : start + 150]]),
            metadata=TRAINER,
        )
        assert answer.appended == 150
    assert answer.open_rows == 300
    # The trainer may seal locally first and name what it expects: the same rules, the same id.
    protocol = BUILTIN_PROTOCOLS["balanced_256"]
    expected = seal_shard(
        retain(rows, protocol, core_system().mapping), run_id=RUN, system_revision_id=system_id
    )
    sealed = await stub.SealSignalShard(
        pb.SealSignalShardRequest(run_id=RUN, boundary=10, expected_shard_id=expected.shard_id),
        metadata=TRAINER,
    )
    assert sealed.created
    shard = sealed.shard
    assert shard.shard_id == expected.shard_id
    assert (shard.captured, shard.core_rows, shard.diagnostic_rows) == (300, 192, 64)
    assert not shard.exact
    assert _count(control, "integrity_open_rows") == 0
    assert _count(control, "integrity_shard_rows") == 256
    again = await stub.SealSignalShard(
        pb.SealSignalShardRequest(run_id=RUN, boundary=10), metadata=TRAINER
    )
    assert not again.created
    assert again.shard.shard_id == shard.shard_id
    verified = await stub.VerifySignalShard(
        pb.VerifySignalShardRequest(shard_id=shard.shard_id), metadata=TRAINER
    )
    assert verified.shard.shard_id == shard.shard_id
    small = await capture(control, agreeing_rows(40, boundary=11), system_id=system_id, run_id=RUN)
    assert small.exact
    assert small.core_rows == 40
    listed = await stub.ListSignalShards(
        pb.ListSignalShardsRequest(run_id=RUN, page_size=1), metadata=TRAINER
    )
    assert [s.boundary for s in listed.shards] == [10]
    rest = await stub.ListSignalShards(
        pb.ListSignalShardsRequest(run_id=RUN, page_size=1, page_token=listed.next_page_token),
        metadata=TRAINER,
    )
    assert [s.boundary for s in rest.shards] == [11]


async def test_rows_appended_to_a_sealed_shard_are_refused(control: ControlStack) -> None:
    system_id = await create_system(control)
    shard = await capture(control, agreeing_rows(30), system_id=system_id, run_id=RUN)
    late = agreeing_rows(31)[30:]
    code, reason, _, _ = await wire_error(
        control,
        "AppendSignalRows",
        _append(system_id, [signal_row_message(r) for r in late]),
        metadata=TRAINER,
    )
    assert (code, reason) == (grpc.StatusCode.FAILED_PRECONDITION, "shard_sealed")
    assert _count(control, "integrity_open_rows") == 0
    assert _count(control, "integrity_shard_rows") == shard.core_rows == 30


async def test_a_seal_that_does_not_hash_to_the_expected_manifest_is_refused(
    control: ControlStack,
) -> None:
    system_id = await create_system(control)
    stub = control.integrity_stub()
    await stub.AppendSignalRows(
        _append(system_id, [signal_row_message(r) for r in agreeing_rows(30)]), metadata=TRAINER
    )
    code, reason, metadata, _ = await wire_error(
        control,
        "SealSignalShard",
        pb.SealSignalShardRequest(run_id=RUN, boundary=10, expected_shard_id="sha256:" + "0" * 64),
        metadata=TRAINER,
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "shard_corrupt")
    assert metadata["shard_id"].startswith("sha256:")
    assert _count(control, "integrity_shards") == 0
    assert _count(control, "integrity_open_rows") == 30  # nothing sealed; still open
    sealed = await stub.SealSignalShard(
        pb.SealSignalShardRequest(run_id=RUN, boundary=10, expected_shard_id=metadata["shard_id"]),
        metadata=TRAINER,
    )
    assert sealed.created


def _bad_rows() -> list[tuple[str, list[pb.SignalRow], str]]:
    good = agreeing_rows(3)
    nan = signal_row_message(good[0])
    nan.optimizer_raw = float("nan")
    infinite = signal_row_message(good[0])
    infinite.components["a"] = float("inf")
    no_outcome = signal_row_message(good[0])
    no_outcome.sentinel.outcome = pb.SIGNAL_OUTCOME_UNSPECIFIED
    other_boundary = signal_row_message(dataclasses.replace(good[1], policy_update=9))
    return [
        ("NaN reward", [signal_row_message(good[1]), nan], "rows[1]"),
        ("inf component", [infinite], "components"),
        ("no sentinel outcome", [no_outcome], "sentinel.outcome"),
        ("another boundary", [other_boundary], "boundary"),
        ("a repeated identity", [signal_row_message(good[0])] * 2, "identity"),
        ("no rows", [], "at least one row"),
    ]


@pytest.mark.parametrize(
    ("rows", "says"), [(r, s) for _, r, s in _bad_rows()], ids=[n for n, _, _ in _bad_rows()]
)
async def test_bad_rows_are_refused_and_none_of_the_batch_is_stored(
    control: ControlStack, rows: list[pb.SignalRow], says: str
) -> None:
    system_id = await create_system(control)
    code, reason, _, message = await wire_error(
        control, "AppendSignalRows", _append(system_id, rows), metadata=TRAINER
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "invalid_argument")
    assert says in message
    assert _count(control, "integrity_open_rows") == 0


async def test_unknown_revisions_runs_and_shards_are_refused(control: ControlStack) -> None:
    system_id = await create_system(control)
    rows = [signal_row_message(agreeing_rows(1)[0])]
    unknown_system = _append("sha256:" + "0" * 64, rows)
    unknown_protocol = _append(system_id, rows)
    unknown_protocol.protocol_revision_id = "no_such_protocol"
    for request in (unknown_system, unknown_protocol):
        code, reason, _, _ = await wire_error(
            control, "AppendSignalRows", request, metadata=TRAINER
        )
        assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "not_found")
    bad_run = _append(system_id, rows)
    bad_run.run_id = "x"
    code, reason, _, _ = await wire_error(control, "AppendSignalRows", bad_run, metadata=TRAINER)
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "invalid_argument")
    for method, request in (
        ("SealSignalShard", pb.SealSignalShardRequest(run_id=RUN, boundary=3)),
        ("VerifySignalShard", pb.VerifySignalShardRequest(shard_id="sha256:" + "1" * 64)),
        (
            "StartAudit",
            pb.StartAuditRequest(
                shard_id="sha256:" + "1" * 64, profile_revision_id="human_aligned_integrity"
            ),
        ),
    ):
        code, reason, _, _ = await wire_error(control, method, request, metadata=TRAINER)
        assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "not_found"), method
    code, _, _, _ = await wire_error(control, "AppendSignalRows", unknown_system, metadata=WORKER)
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert _count(control, "integrity_open_rows") == 0
    assert _count(control, "integrity_audits") == 0
