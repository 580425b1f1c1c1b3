"""``rewardseal-kit proof --integrity``: start the services, play the drift, audit three cases.

    rewardseal-kit proof --integrity --json out.json --markdown out.md [--png out.png]
                     [--records 104] [--run-dir DIR]

Control, MockMed and three workers are started as child processes in a temporary directory
(``--run-dir`` keeps them in DIR) and stopped on exit, also on errors and SIGTERM. Exit status
as the other proof: 0 every check holds, 1 a check failed (reports still written), 2 it could
not run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Final

from rewardseal_kit.proof.command import (
    EXIT_NOT_RUN,
    guarded,
    run_directory,
    verdict,
    written,
)
from rewardseal_kit.proof.integrity_run import (
    DRIFT,
    REST,
    SQL,
    SQL_REPLICA,
    CaseRun,
    local_integrity_services,
    play_boundaries,
    run_case,
)

__all__ = ["CASES", "MIN_RECORDS", "run_integrity"]

MIN_RECORDS: Final = 100
"""The evidence rule's distinct records (R-I-7): fewer and no audit could decide."""
CASES: Final[tuple[tuple[str, str, str], ...]] = (
    ("a", "screen_t0", SQL),
    ("b", SQL, REST),
    ("c", SQL, SQL_REPLICA),
)
"""(case, optimizer, primary sentinel)."""


def run_integrity(args: argparse.Namespace) -> int:
    """Run the integrity proof as ``args`` say, write the reports; the exit status."""
    from rewardseal.core.errors import RewardSealError
    from rewardseal_kit.integrity_case import CASE_RECORDS
    from rewardseal_kit.proof.integrity_report import (
        check_integrity,
        integrity_json,
        render_integrity_markdown,
    )

    records = CASE_RECORDS if args.records is None else args.records
    if records < MIN_RECORDS:
        print(f"proof: --records must be at least {MIN_RECORDS}", file=sys.stderr)
        return EXIT_NOT_RUN
    if args.worker_target:
        print("proof: --integrity starts its own services (no --worker-target)", file=sys.stderr)
        return EXIT_NOT_RUN
    started = time.monotonic()

    def audited() -> tuple[float, float, dict[str, CaseRun]]:
        with (
            run_directory(args.run_dir) as run_dir,
            local_integrity_services(run_dir) as services,
        ):
            ready = time.monotonic()
            boundaries = play_boundaries(services, DRIFT, records)
            played = time.monotonic()
            return (
                ready,
                played,
                {
                    name: run_case(
                        services, boundaries, name=name, optimizer=optimizer, sentinel=sentinel
                    )
                    for name, optimizer, sentinel in CASES
                },
            )

    done, status = guarded(audited)
    if done is None:
        return status
    ready, played, cases = done
    finished = time.monotonic()
    problems = check_integrity(cases, len(DRIFT))
    meta = {
        "records_per_boundary": records,
        "start_seconds": round(ready - started, 3),
        "play_seconds": round(played - ready, 3),
        "audit_seconds": round(finished - played, 3),
    }
    document = integrity_json(cases, DRIFT, problems, meta)
    try:
        for path in (args.json, args.markdown, args.png):
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")
        args.markdown.write_text(render_integrity_markdown(cases, DRIFT, problems, meta))
        if args.png is not None:
            from rewardseal_kit.proof.integrity_plot import write_integrity_png

            write_integrity_png(cases, DRIFT, args.png)
    except RewardSealError as exc:
        print(f"proof: {exc.message}", file=sys.stderr)
        return EXIT_NOT_RUN
    return verdict(problems, f"wrote {written(args)}")
