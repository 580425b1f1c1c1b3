"""Reward-system specs and captured signal rows (as the wire carries them) for the integrity
client and CLI tests: an independent binding, a correlated one, and boundaries whose sentinel
agrees with the optimizer or says the opposite."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rewardseal.digest import digest_bytes
from rewardseal.integrity_client import AsyncIntegrityClient
from rewardseal.v1 import integrity_pb2 as ipb

CONTRACT_A = "sha256:" + "a" * 64
WORKER_1 = "ed25519:sha256:" + "1" * 64
RUNTIME = "python3.11"


def spec(*, threshold: float = 0.5, correlated: bool = False, **extra: Any) -> dict[str, Any]:
    """A tier-0 screen reward optimized, a tier-2 ``sql`` worker as primary sentinel; with
    ``correlated`` the sentinel runs the optimizer's own code (R-I-2: inspection only)."""
    sentinel: dict[str, Any] = {
        "role": "primary_sentinel",
        "kind": "contract",
        "contract_digest": CONTRACT_A,
        "worker_key_id": WORKER_1,
        "fingerprints": {"implementation": "recipe:sql"},
    }
    if correlated:
        sentinel = {
            "role": "primary_sentinel",
            "kind": "external",
            "fingerprints": {"implementation": "screen-reward-v1"},
            "label": "the optimizer's own code, deployed again",
        }
    return {
        "optimizer": {"kind": "external", "fingerprints": {"implementation": "screen-reward-v1"}},
        "auditors": [sentinel],
        "mapping": {"normalization": {"min": 0, "max": 1}, "threshold": threshold},
        **extra,
    }


def write_spec(path: Path, document: object) -> Path:
    path.write_text(json.dumps(document))
    return path


def signal_rows(records: int, boundary: int, *, inverted: bool = False) -> list[ipb.SignalRow]:
    """One candidate per record, half accepted by the optimizer; the sentinel agrees (or, with
    ``inverted``, says the opposite of every verdict: asymmetric acceptance everywhere)."""
    accepted_outcome = ipb.SignalOutcome.SIGNAL_OUTCOME_ACCEPTED
    refused_outcome = ipb.SignalOutcome.SIGNAL_OUTCOME_REFUSED
    rows = []
    for record in range(records):
        accepted = record % 2 == 0
        sentinel_accepts = accepted != inverted
        reward = 1.0 if accepted else 0.0
        rows.append(
            ipb.SignalRow(
                record_id=f"rec-{record}",
                candidate=0,
                episode_id=f"ep-{record}-{boundary}",
                output_digest=digest_bytes(f"output {record} {boundary}".encode()),
                optimizer_raw=reward,
                optimizer_mapped=reward,
                group_id=f"group-{record}",
                selection=ipb.SignalSelection.SIGNAL_SELECTION_SELECTED,
                checkpoint=f"ckpt-{boundary}",
                policy_update=boundary,
                runtime_identity=RUNTIME,
                sentinel=ipb.SentinelObservation(
                    outcome=accepted_outcome if sentinel_accepts else refused_outcome,
                    reward=1.0 if sentinel_accepts else 0.0,
                ),
                subgroups={"parity": "even" if accepted else "odd"},
            )
        )
    return rows


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
