"""The trainer's signal rows on a real control plane (R-I-3): delivered per batch and sealed per
boundary, buffered on disk (fsync'd JSON lines) while control is down and delivered in order
once it is back on the same data and port, and a full buffer refused with a clear error that
loses nothing already buffered."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from support.control import ControlStack
from support.integrity_trainer import (
    PROTOCOL,
    control_on_file,
    create_binding,
    deliver_when_back,
    make_capture,
    restart_control,
    samples,
    stop,
    trainer_client,
)

from rewardseal.core.errors import IntegrityBufferFull, ValidationError
from rewardseal.core.integrity import SignalRow
from rewardseal.trainers.integrity.buffer import BUFFER_FILE, BufferedEntry, SignalBuffer
from rewardseal.trainers.integrity.capture import IntegrityCapture, output_digest

RUN = "run-capture-0001"


async def test_rows_are_delivered_per_batch_and_sealed_per_boundary(
    integrity_control: ControlStack, tmp_path: Path
) -> None:
    binding = await create_binding(integrity_control)
    with trainer_client(integrity_control) as client:
        capture = make_capture(client, binding, tmp_path / "buffer")
        batch = samples(range(6), raw=[1.0, 0.0, 0.25, None, 1.0, 0.5])
        rows = await asyncio.to_thread(capture.record, batch, policy_update=4)
        assert len(capture.buffer) == 0  # acknowledged, so gone from disk
        shard_id = await asyncio.to_thread(capture.seal, 4)
        assert shard_id is not None
        assert capture.shard_ids == {4: shard_id}
        shard = await asyncio.to_thread(client.verify_signal_shard, shard_id)
    assert (shard.run_id, shard.boundary, shard.captured) == (RUN, 4, 6)
    # The exact output by digest only; raw and mapped as the mapping says; no sentinel asked.
    by_record = {row.record_id: row for row in rows}
    assert by_record["rec-0"].output_digest == output_digest("completion for record 0")
    assert by_record["rec-2"].optimizer_mapped == 0.25
    assert by_record["rec-3"].optimizer_raw is None
    assert by_record["rec-3"].optimizer_mapped is None
    assert all(row.sentinel is None for row in rows)
    assert all(row.policy_update == 4 and row.runtime_identity for row in rows)


async def test_steps_between_boundaries_and_late_rows_are_not_captured(
    integrity_control: ControlStack, tmp_path: Path
) -> None:
    binding = await create_binding(integrity_control)
    with trainer_client(integrity_control) as client:
        capture = make_capture(client, binding, tmp_path / "buffer")
        capture.boundary_every = 5
        assert not capture.captures(3)
        assert (
            await asyncio.to_thread(capture.record, samples([1], raw=[1.0]), policy_update=3) == []
        )
        await asyncio.to_thread(capture.record, samples([1], raw=[1.0]), policy_update=5)
        await asyncio.to_thread(capture.seal, 5)
        late = await asyncio.to_thread(capture.record, samples([2], raw=[1.0]), policy_update=5)
        assert late == []
        assert capture.late_rows == 1
        shards = await asyncio.to_thread(client.list_signal_shards, RUN)
        assert [s.captured for s in shards] == [1]


async def test_control_down_buffers_on_disk_and_delivers_in_order_once_back(tmp_path: Path) -> None:
    control = await control_on_file(tmp_path / "control.sqlite")
    binding = await create_binding(control)
    client = trainer_client(control, timeout=1.0)
    capture = make_capture(client, binding, tmp_path / "buffer")
    await asyncio.to_thread(capture.record, samples(range(3), raw=[1.0] * 3), policy_update=0)
    await stop(control)
    try:
        # Training goes on: every batch and the seal wait on disk, in capture order.
        for boundary, start in ((0, 3), (1, 0)):
            batch = samples(range(start, start + 3), raw=[0.0] * 3, prefix=f"ep{boundary}")
            await asyncio.to_thread(capture.record, batch, policy_update=boundary)
        assert await asyncio.to_thread(capture.seal, 0) is None
        await asyncio.to_thread(capture.record, samples([9], raw=[1.0]), policy_update=1)
        assert capture.last_error is not None
        assert capture.last_error.reason == "unavailable"
        on_disk = (tmp_path / "buffer" / BUFFER_FILE).read_bytes().splitlines()
        kinds = [(json.loads(line)["kind"], json.loads(line)["boundary"]) for line in on_disk]
        assert kinds == [("rows", 0), ("rows", 1), ("seal", 0), ("rows", 1)]
        assert capture.buffer.rows == 7
        assert capture.pending_seals() == [0]
        # A restarted trainer reads the same buffer back.
        reread = SignalBuffer(tmp_path / "buffer")
        assert [e.kind for e in reread.entries()] == ["rows", "rows", "seal", "rows"]
        assert reread.entries()[0].rows[0].episode_id == "ep0-3"
    finally:
        control = await restart_control(control, tmp_path / "control.sqlite")
    try:
        await deliver_when_back(capture)
        assert len(capture.buffer) == 0
        assert capture.last_error is None
        assert 0 in capture.shard_ids
        shard_id = await asyncio.to_thread(capture.seal, 1)
        shards = await asyncio.to_thread(client.list_signal_shards, RUN)
        assert [(s.boundary, s.captured) for s in shards] == [(0, 6), (1, 4)]
        assert shards[1].shard_id == shard_id
    finally:
        client.close()
        await stop(control)


async def test_a_full_buffer_is_refused_clearly_and_loses_nothing(tmp_path: Path) -> None:
    control = await control_on_file(tmp_path / "control.sqlite")
    binding = await create_binding(control)
    client = trainer_client(control, timeout=1.0)
    capture = make_capture(client, binding, tmp_path / "buffer", max_rows=5)
    await stop(control)
    try:
        await asyncio.to_thread(capture.record, samples(range(4), raw=[1.0] * 4), policy_update=0)
        with pytest.raises(IntegrityBufferFull, match="full") as caught:
            await asyncio.to_thread(
                capture.record, samples(range(4, 6), raw=[1.0] * 2), policy_update=0
            )
        error = caught.value
        assert error.reason == "integrity_buffer_full"
        assert error.metadata == {
            "rows": "4",
            "bytes": str(capture.buffer.size),
            "refused_rows": "2",
        }
        # The four buffered rows are all still there, on disk.
        assert SignalBuffer(tmp_path / "buffer").rows == 4
    finally:
        control = await restart_control(control, tmp_path / "control.sqlite")
    try:
        await deliver_when_back(capture)
        await asyncio.to_thread(capture.seal, 0)
        shards = await asyncio.to_thread(client.list_signal_shards, RUN)
        assert [s.captured for s in shards] == [4]
    finally:
        client.close()
        await stop(control)


def test_a_buffer_entry_round_trips_and_limits_are_checked(tmp_path: Path) -> None:
    row = samples([1], raw=[1.0])[0]
    signal = SignalRow(
        record_id=row.record_id,
        candidate=0,
        episode_id=row.episode_id,
        output_digest=output_digest(row.output_text),
        optimizer_raw=1.0,
        optimizer_mapped=1.0,
        group_id="g",
        selection="selected",
        checkpoint="c",
        policy_update=2,
        runtime_identity="r",
        sentinel=None,
    )
    entry = BufferedEntry("rows", RUN, 2, "sys", PROTOCOL, (signal,))
    assert BufferedEntry.from_line(entry.to_line()) == entry
    buffer = SignalBuffer(tmp_path / "b", max_bytes=len(entry.to_line()))
    buffer.add(entry)
    with pytest.raises(IntegrityBufferFull):
        buffer.add(BufferedEntry("seal", RUN, 2, "sys", PROTOCOL))
    buffer.drop_delivered(1)
    assert SignalBuffer(tmp_path / "b").entries() == []


async def test_a_batch_that_reached_control_before_a_crash_is_not_appended_twice(
    integrity_control: ControlStack, tmp_path: Path
) -> None:
    binding = await create_binding(integrity_control)
    with trainer_client(integrity_control) as client:
        # The trainer wrote the batch to disk, control took it, the process died before it
        # could drop the line: the restarted capture finds it on disk and sends it again.
        first = make_capture(client, binding, tmp_path / "buffer")
        rows = tuple(
            await asyncio.to_thread(first.record, samples(range(3), raw=[1.0] * 3), policy_update=0)
        )
        assert len(first.buffer) == 0
        SignalBuffer(tmp_path / "buffer").add(
            BufferedEntry("rows", RUN, 0, *_revisions(first), rows)
        )
        restarted = make_capture(client, binding, tmp_path / "buffer")
        assert await asyncio.to_thread(restarted.deliver, force=True)
        await asyncio.to_thread(restarted.seal, 0)
        shards = await asyncio.to_thread(client.list_signal_shards, RUN)
        assert [s.captured for s in shards] == [3]
        # A clash on a first send is a real one (two captures on one boundary): kept and raised.
        other = make_capture(client, binding, tmp_path / "other")
        await asyncio.to_thread(other.record, samples([7], raw=[1.0]), policy_update=1)
        await asyncio.to_thread(other.record, samples([7], raw=[0.0]), policy_update=1)
        assert other.buffer.rows == 1
        assert other.last_error is not None
        with pytest.raises(ValidationError, match="appended already"):
            other.raise_if_stuck()


def _revisions(capture: IntegrityCapture) -> tuple[str, str]:
    return (capture.system_revision_id, capture.protocol_revision_id)
