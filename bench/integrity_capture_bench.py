"""What trainer-side integrity capture costs a training step while control is away (not a test).

``IntegrityCapture.record`` first writes each scored batch to the on-disk buffer (one JSON line,
fsync'd), then tries to deliver. With control unreachable (a closed port: connection refused),
this measures, for batches of ``--rows`` rows (no sentinel, so only the capture's own work):

- ``buffer_add``: writing one batch to the buffer (serialize + write + fsync);
- ``first_outage_step``: the first ``record`` after control went away (buffer + one refused call);
- ``outage_step``: later ``record`` calls inside the retry pause (buffer only, no call);
- ``replay_read``: reading the whole buffer back, as a restarted trainer does.

Results: bench/results/integrity_capture.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rewardseal.core.integrity import RewardMapping
from rewardseal.rpc.integrity_client import IntegrityClient
from rewardseal.trainers.integrity.buffer import BufferedEntry, SignalBuffer
from rewardseal.trainers.integrity.capture import CapturedSample, IntegrityCapture

RESULTS = Path(__file__).parent / "results" / "integrity_capture.json"
MAPPING = RewardMapping.from_json({"normalization": {"min": 0, "max": 1}, "threshold": 0.5})


def _batch(rows: int, step: int) -> list[CapturedSample]:
    return [
        CapturedSample(
            record_id=f"record-{step}-{index // 2}",
            candidate=index % 2,
            episode_id=f"episode.bench.{step}.{index}",
            output_text="x" * 400,  # about a short completion
            optimizer_raw=float(index % 2),
            group_id=f"{step}:{index // 2}",
        )
        for index in range(rows)
    ]


def _closed_port() -> tuple[socket.socket, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    return sock, sock.getsockname()[1]


def _ms(seconds: list[float]) -> dict[str, float]:
    return {
        "median_ms": round(statistics.median(seconds) * 1000, 3),
        "max_ms": round(max(seconds) * 1000, 3),
    }


def run(rows: int, steps: int) -> dict[str, Any]:
    held, port = _closed_port()
    with tempfile.TemporaryDirectory() as tmp, held:
        control = IntegrityClient(f"127.0.0.1:{port}", token="bench-token", timeout=2.0, retries=0)
        capture = IntegrityCapture(
            control,
            run_id="run-bench-0001",
            system_revision_id="sha256:" + "0" * 64,
            protocol_revision_id="exhaustive",
            mapping=MAPPING,
            buffer=SignalBuffer(Path(tmp) / "buffer"),
            runtime_identity="bench",
            checkpoint="policy_checkpoint_bench",
            retry_after_s=3600.0,
        )
        first = time.perf_counter()
        capture.record(_batch(rows, 0), policy_update=0)
        first_step = time.perf_counter() - first
        outage: list[float] = []
        for step in range(1, steps):
            start = time.perf_counter()
            capture.record(_batch(rows, step), policy_update=step)
            outage.append(time.perf_counter() - start)
        adds: list[float] = []
        spare = SignalBuffer(Path(tmp) / "spare")
        for entry in capture.buffer.entries()[:steps]:
            copy = BufferedEntry(
                entry.kind,
                entry.run_id,
                entry.boundary,
                "s",
                entry.protocol_revision_id,
                entry.rows,
            )
            start = time.perf_counter()
            spare.add(copy)
            adds.append(time.perf_counter() - start)
        start = time.perf_counter()
        reread = SignalBuffer(Path(tmp) / "buffer")
        replay = time.perf_counter() - start
        control.close()
        return {
            "rows_per_batch": rows,
            "batches": steps,
            "buffered_rows": reread.rows,
            "buffered_bytes": reread.size,
            "first_outage_step_ms": round(first_step * 1000, 3),
            "outage_step": _ms(outage),
            "buffer_add": _ms(adds),
            "replay_read_ms": round(replay * 1000, 3),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    result = {
        "bench": "integrity_capture",
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "result": run(args.rows, args.steps),
    }
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
