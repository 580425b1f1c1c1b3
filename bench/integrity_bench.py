"""Reward-integrity audit of one boundary shard (``make bench``; not a test).

The pure pipeline a control-plane audit runner calls
(``rewardseal_server.integrity_audit.audit_boundary``):
verify the sealed shard against its manifest, check the evidence, compute every R-I-6 metric over
the core, 10,000 record-grouped bootstrap resamples (seed 42), subgroups, the decision, then sign
the bundle. Two shards of 512 retained rows, graded rewards, two candidates per record:

- ``exhaustive_512``: 512 captured rows, all core (the bootstrap resamples 256 records / 512 rows);
- ``broad_512``: 700 captured rows under ``broad_512``: 384 core + 128 diagnostic rows.

Per case: the median and max wall time of ``repeats`` audits, the bootstrap alone, the bundle
signature, and the peak Python-heap memory of one audit (tracemalloc, which sees numpy's
buffers). Target (issue 13): an audit <= 2 s and <= 200 MB. Results: bench/results/integrity.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from rewardseal.core.integrity import (
    BUILTIN_PROFILES,
    BUILTIN_PROTOCOLS,
    RetentionProtocol,
    RewardSystem,
    SentinelObservation,
    SignalRow,
    build_bundle,
    parse_reward_system,
    retain,
    seal_shard,
)
from rewardseal.core.signing import SigningKey
from rewardseal_server.integrity_audit import audit_boundary, grouped_bootstrap
from rewardseal_server.integrity_audit.metrics import metric_columns

RESULTS = Path(__file__).resolve().parent / "results" / "integrity.json"
RESAMPLES = 10_000
SPEC: dict[str, Any] = {
    "optimizer": {"kind": "external", "fingerprints": {"implementation": "screen-reward-v1"}},
    "auditors": [
        {
            "role": "primary_sentinel",
            "kind": "contract",
            "contract_digest": "sha256:" + "a" * 64,
            "worker_key_id": "ed25519:sha256:" + "1" * 64,
            "fingerprints": {"implementation": "recipe:sql"},
        }
    ],
    "mapping": {"normalization": {"min": 0, "max": 1}, "threshold": 0.5},
}


def rows(count: int, seed: int = 7) -> list[SignalRow]:
    """``count`` rows, two candidates per record; the sentinel tracks the optimizer with noise."""
    rng = np.random.default_rng(seed)
    made = []
    for index in range(count):
        record, candidate = divmod(index, 2)
        reward = float(rng.uniform())
        noisy = float(np.clip(reward + rng.normal(0.0, 0.03), 0.0, 1.0))
        made.append(
            SignalRow(
                record_id=f"record-{record}",
                candidate=candidate,
                episode_id=f"episode-{index}",
                output_digest=f"sha256:{index:064x}",
                optimizer_raw=reward,
                optimizer_mapped=reward,
                group_id=f"group-{record}",
                selection="selected",
                checkpoint="ckpt-100",
                policy_update=100,
                runtime_identity="bench",
                sentinel=SentinelObservation(
                    "accepted" if noisy >= 0.5 else "refused", reward=noisy
                ),
                subgroups={"split": "even" if record % 2 == 0 else "odd"},
            )
        )
    return made


def timed(action: Callable[[], object], repeats: int) -> dict[str, float]:
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - start)
    return {
        "median_s": round(statistics.median(seconds), 4),
        "max_s": round(max(seconds), 4),
    }


def peak_mb(action: Callable[[], object]) -> float:
    tracemalloc.start()
    try:
        action()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return round(peak / 2**20, 2)


def case(
    system: RewardSystem, protocol: RetentionProtocol, captured: int, repeats: int
) -> dict[str, Any]:
    retention = retain(rows(captured), protocol, system.mapping)
    manifest = seal_shard(retention, run_id="bench", system_revision_id=system.revision_id)
    profile = BUILTIN_PROFILES["human_aligned_integrity"]

    def run() -> Any:
        return audit_boundary(
            manifest,
            retention.rows,
            system=system,
            protocol=protocol,
            profile=profile,
            shard_id=manifest.shard_id,
            resamples=RESAMPLES,
        )

    report = run()
    columns = metric_columns(retention.core, system.mapping)
    key = SigningKey.from_seed(bytes(32))
    issued = datetime(2026, 1, 1, tzinfo=UTC)
    audit_time = timed(run, repeats)
    memory = peak_mb(run)
    return {
        "captured_rows": captured,
        "retained_rows": len(retention.rows),
        "core_rows": report.core_rows,
        "records": report.metrics.records if report.metrics else 0,
        "resamples": RESAMPLES,
        "outcome": report.decision.outcome,
        "audit": audit_time,
        "bootstrap_only": timed(lambda: grouped_bootstrap(columns, resamples=RESAMPLES), repeats),
        "bundle_sign": timed(lambda: build_bundle(report, key, issued_at=issued), repeats),
        "audit_peak_mb": memory,
        "within_target": audit_time["max_s"] <= 2.0 and memory <= 200.0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    system = parse_reward_system(SPEC)
    results: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "numpy": np.__version__,
        "target": {"audit_max_s": 2.0, "audit_peak_mb": 200.0},
        "exhaustive_512": case(system, BUILTIN_PROTOCOLS["exhaustive"], 512, args.repeats),
        "broad_512": case(system, BUILTIN_PROTOCOLS["broad_512"], 700, args.repeats),
        "process_max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    json.dump(results, sys.stdout, indent=2)
    print()
    return 0  # benchmarks measure, never assert: read within_target


if __name__ == "__main__":
    raise SystemExit(main())
