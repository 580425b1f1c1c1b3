"""Reward integrity on a real control plane: specs and rows as the wire carries them, a boundary
captured and sealed, an audit followed to its end, and a stored row edited behind the triggers.

The specs and rows are the shared builders (``tests/support/integrity_builders.py``), turned
into messages by the wire rules of :mod:`rewardseal.core.integrity.messages`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import text

from rewardseal.core.integrity import SignalRow
from rewardseal.core.integrity.messages import signal_row_message, spec_struct
from rewardseal.rpc.integrity_client import AsyncIntegrityClient
from rewardseal.v1 import integrity_pb2 as pb
from rewardseal_control.store import ControlStore
from support.control import ADMIN, CLIENT_TOKEN, TRAINER, ControlStack
from support.integrity_builders import agreeing_rows, output_digest, row, spec, system

__all__ = [
    "agreeing_rows",
    "audit_to_end",
    "capture",
    "create_system",
    "edit_stored",
    "output_digest",
    "row",
    "spec",
    "system",
]


async def create_system(stack: ControlStack, doc: dict[str, Any] | None = None) -> str:
    """Create the reward system ``doc`` (default: core's test spec); its revision id."""
    answer = await stack.integrity_stub().CreateRewardSystem(
        pb.CreateRewardSystemRequest(spec=spec_struct(doc or spec())), metadata=ADMIN
    )
    return answer.revision.revision_id


async def capture(
    stack: ControlStack,
    rows: Sequence[SignalRow],
    *,
    system_id: str,
    run_id: str = "run-0001",
    protocol: str = "exhaustive",
) -> pb.SignalShard:
    """Append ``rows`` (one boundary) as the trainer and seal them; the sealed shard."""
    stub = stack.integrity_stub()
    boundary = rows[0].policy_update
    await stub.AppendSignalRows(
        pb.AppendSignalRowsRequest(
            run_id=run_id,
            boundary=boundary,
            system_revision_id=system_id,
            protocol_revision_id=protocol,
            rows=[signal_row_message(r) for r in rows],
        ),
        metadata=TRAINER,
    )
    sealed = await stub.SealSignalShard(
        pb.SealSignalShardRequest(run_id=run_id, boundary=boundary), metadata=TRAINER
    )
    return sealed.shard


async def audit_to_end(
    stack: ControlStack, shard_id: str, profile: str = "human_aligned_integrity"
) -> pb.Audit:
    """Start an audit of ``shard_id`` and follow it until it is done, failed or cancelled."""
    stub = stack.integrity_stub()
    started = await stub.StartAudit(
        pb.StartAuditRequest(shard_id=shard_id, profile_revision_id=profile), metadata=TRAINER
    )
    return await wait_for_audit(stack, started.audit.audit_id)


async def wait_for_audit(stack: ControlStack, audit_id: str) -> pb.Audit:
    """Follow ``audit_id`` as a trainer does (the client's ``wait_for_audit`` on WatchAudit)
    until it is done, failed or cancelled; within a minute."""
    async with AsyncIntegrityClient(stack.target, token=CLIENT_TOKEN, timeout=20) as client:
        return await client.wait_for_audit(audit_id, deadline=60)


def edit_stored(store: ControlStore, table: str, statement: str, **params: Any) -> int:
    """Run an UPDATE on an immutable ``table`` with its triggers set aside (what someone with
    the database's owner rights could do); the rows changed. The triggers are back afterwards."""
    engine = store.store_engine.engine
    with engine.begin() as conn:
        if store.backend == "postgresql":
            conn.execute(text(f"ALTER TABLE {table} DISABLE TRIGGER USER"))
            changed = conn.execute(text(statement), params).rowcount
            conn.execute(text(f"ALTER TABLE {table} ENABLE TRIGGER USER"))
            return int(changed)
        triggers = conn.execute(
            text("SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = :t"),
            {"t": table},
        ).all()
        for name, _ in triggers:
            conn.execute(text(f"DROP TRIGGER {name}"))
        changed = conn.execute(text(statement), params).rowcount
        for _, sql in triggers:
            conn.execute(text(sql))
        return int(changed)
