"""Reward-system specs and captured signal rows (as the wire carries them) for the integrity
client, CLI and trainer tests, from the shared builders (``support.integrity_builders``): an
independent binding, a correlated one, and boundaries whose sentinel agrees with the optimizer or
says the opposite, appended through the typed client."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rewardseal.core.integrity.messages import signal_row_message
from rewardseal.rpc.integrity_client import AsyncIntegrityClient
from rewardseal.v1 import integrity_pb2 as ipb
from support import integrity_builders as builders

CORRELATED_SENTINEL = {
    "kind": "external",
    "fingerprints": {"implementation": "screen-reward-v1"},
    "label": "the optimizer's own code, deployed again",
}
"""The optimizer's own code as primary sentinel (R-I-2: inspection only)."""


def spec(*, threshold: float = 0.5, correlated: bool = False, **extra: Any) -> dict[str, Any]:
    """The shared builders' spec (a tier-0 screen reward optimized, a tier-2 ``sql`` worker as
    primary sentinel) with no runtime fingerprint; with ``correlated`` the sentinel runs the
    optimizer's own code. ``extra`` adds or replaces top-level keys."""
    sentinel = CORRELATED_SENTINEL if correlated else None
    return {**builders.spec(threshold=threshold, sentinel=sentinel, runtime=None), **extra}


def write_spec(path: Path, document: object) -> Path:
    path.write_text(json.dumps(document))
    return path


def signal_rows(records: int, boundary: int, *, inverted: bool = False) -> list[ipb.SignalRow]:
    """The shared builders' :func:`~support.integrity_builders.agreeing_rows` as the wire
    carries them: half accepted by the optimizer, the sentinel agreeing (or, with ``inverted``,
    saying the opposite of every verdict: asymmetric acceptance everywhere)."""
    rows = builders.agreeing_rows(records, boundary=boundary, inverted=inverted)
    return [signal_row_message(row) for row in rows]


async def capture(
    client: AsyncIntegrityClient,
    system_revision_id: str,
    *,
    run_id: str,
    boundary: int,
    records: int,
    inverted: bool = False,
    protocol: str = "exhaustive",
) -> ipb.SignalShard:
    """Append a boundary's rows in two calls and seal it, as a trainer does; the sealed shard."""
    rows = signal_rows(records, boundary, inverted=inverted)
    half = len(rows) // 2
    for part in (rows[:half], rows[half:]):
        await client.append_signal_rows(
            run_id,
            boundary,
            part,
            system_revision_id=system_revision_id,
            protocol_revision_id=protocol,
        )
    sealed = await client.seal_signal_shard(run_id, boundary)
    return sealed.shard
