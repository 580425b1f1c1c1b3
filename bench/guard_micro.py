"""In-process micro-benchmark of two per-request guards: what the metadata check and the HTTP
body's nesting pre-scan cost (issue 24, finding 7).

* ``check_metadata`` (``rewardseal.core.validation``) runs on every descriptor of every face. It now
  walks the Struct with an explicit stack and bounds the depth (R-MSG-9); before, it converted
  the Struct to a dict and walked that recursively.
* ``nests_deeper_than`` (``rewardseal_worker.http.guards``) scans every HTTP body before JSON
  parsing, so that no nesting reaches a parser's recursion.

Medians of ``--rounds`` timed loops, in microseconds (thread CPU). The script imports what the
interpreter it runs under has installed, so the same file measures another checkout too (run it
with that checkout's ``.venv/bin/python``); a checkout without the pre-scan reports ``null`` for
it. Run by hand (``make bench`` does not): ``.venv/bin/python bench/guard_micro.py``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from google.protobuf.struct_pb2 import Struct

from rewardseal.core.validation import check_metadata

# What trainers put in metadata (a few scalars, a group, a list of tags).
METADATA = {"trainer": "trl", "step": 12, "group": {"index": 3, "size": 8}, "tags": ["a", "b"]}
BODY_EPISODES = 64


def per_call_us(call: Callable[[], object], loops: int, rounds: int) -> float:
    """The median over ``rounds`` of the thread CPU per call of ``loops`` calls, in µs."""
    samples = []
    for _ in range(rounds):
        started = time.thread_time()
        for _ in range(loops):
            call()
        samples.append((time.thread_time() - started) / loops * 1e6)
    return round(statistics.median(samples), 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    args = parser.parse_args()
    metadata = Struct()
    metadata.update(METADATA)
    results: dict[str, object] = {
        "check_metadata_us": per_call_us(lambda: check_metadata(metadata), 5000, args.rounds)
    }
    body = json.dumps(
        {
            "episodes": [
                {
                    "episode_id": f"ep-{i}",
                    "metadata": {**METADATA, "group": {"index": i, "size": 8}},
                    "oracle_identity": {"patient_id": "p1"},
                }
                for i in range(BODY_EPISODES)
            ]
        }
    ).encode()
    try:
        from rewardseal_worker.http.guards import nests_deeper_than
    except ImportError:  # a checkout from before the pre-scan
        results["prescan_body_us"] = None
    else:
        results["prescan_body_us"] = per_call_us(
            lambda: nests_deeper_than(body, 34), 500, args.rounds
        )
    results.update(
        body_bytes=len(body),
        body_episodes=BODY_EPISODES,
        generated_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )
    text = json.dumps(results, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
