"""The ``rewardseal-control integrity`` command line: every area, action and flag
(docs/integrity.md)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeAlias

from rewardseal.v1 import integrity_pb2 as ipb

__all__ = [
    "AUDIT_STATES",
    "OUTCOME_FILTERS",
    "PAIRINGS",
    "POPULATIONS",
    "REVIEW_ACTIONS",
    "add_integrity_commands",
    "enum_choices",
]


def enum_choices(enum: Any, prefix: str) -> Mapping[str, int]:
    """A proto enum's values by lowercase short name, UNSPECIFIED left out
    (``REVIEW_ACTION_FORK`` -> ``fork``)."""
    return {
        name.removeprefix(prefix).lower(): number
        for name, number in enum.items()
        if not name.endswith("_UNSPECIFIED")
    }


REVIEW_ACTIONS = enum_choices(ipb.ReviewAction, "REVIEW_ACTION_")
OUTCOME_FILTERS = enum_choices(ipb.SampleOutcome, "SAMPLE_OUTCOME_")
POPULATIONS = enum_choices(ipb.SignalPopulation, "SIGNAL_POPULATION_")
AUDIT_STATES = enum_choices(ipb.AuditState, "AUDIT_STATE_")
PAIRINGS = enum_choices(ipb.AuditPairing, "AUDIT_PAIRING_")

# A string: _SubParsersAction is generic to type checkers only.
_Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _area(areas: _Commands, name: str, what: str) -> _Commands:
    area = areas.add_parser(name, help=what)
    return area.add_subparsers(dest="action", required=True, metavar="ACTION")


def add_integrity_commands(commands: _Commands, client: argparse.ArgumentParser) -> None:
    """Register ``integrity AREA ACTION``; ``client`` carries the connection flags."""
    integrity = commands.add_parser(
        "integrity", help="reward integrity: reward systems, shards, sentinel audits, decisions"
    )
    areas = integrity.add_subparsers(dest="area", required=True, metavar="AREA")
    _systems(_area(areas, "system", "reward-system revisions (R-I-1)"), client)

    protocols = _area(areas, "protocol", "retention protocols (R-I-4)")
    protocols.add_parser("list", parents=[client], help="list retention protocols")
    profiles = _area(areas, "profile", "integrity profiles (R-I-7)")
    profiles.add_parser("list", parents=[client], help="list integrity profiles")

    binding = _area(areas, "binding", "training-run bindings (R-I-9)")
    resolve = binding.add_parser(
        "resolve", parents=[client], help="may this binding gate a run? exit 1 when not"
    )
    resolve.add_argument("--system", default="", metavar="ID", help="reward-system revision")
    resolve.add_argument(
        "--protocol", default="", metavar="ID_OR_NAME", help="retention protocol (balanced_256...)"
    )
    resolve.add_argument(
        "--profile", default="", metavar="ID_OR_NAME", help="integrity profile (human_aligned...)"
    )

    shards = _area(areas, "shard", "sealed signal shards (R-I-3)")
    shard_list = shards.add_parser("list", parents=[client], help="the shards of a run")
    shard_list.add_argument("--run", required=True, metavar="RUN_ID")
    shard_verify = shards.add_parser(
        "verify", parents=[client], help="check a shard's rows still hash to its manifest"
    )
    shard_verify.add_argument("shard_id", metavar="SHARD_ID")

    _audits(_area(areas, "audit", "sentinel audits and their decisions (R-I-6..8)"), client)


def _systems(systems: _Commands, client: argparse.ArgumentParser) -> None:
    validate = systems.add_parser(
        "validate",
        parents=[client],
        help="list a spec's blockers (locally, with the core rules, unless a target is given)",
    )
    validate.add_argument("--spec", required=True, type=Path, help="reward-system spec (JSON)")
    create = systems.add_parser("create", parents=[client], help="store a spec as a revision")
    create.add_argument("--spec", required=True, type=Path, help="reward-system spec (JSON)")
    show = systems.add_parser("show", parents=[client], help="one revision and its content")
    show.add_argument("revision_id", metavar="REVISION_ID")
    system_list = systems.add_parser("list", parents=[client], help="list revisions")
    system_list.add_argument("--contract", default="", metavar="DIGEST", help="names this contract")
    system_list.add_argument(
        "--implementation", default="", metavar="FINGERPRINT", help="has this implementation"
    )
    independence = system_list.add_mutually_exclusive_group()
    independence.add_argument(
        "--independent",
        dest="independent",
        action="store_const",
        const=True,
        help="only revisions whose primary sentinel may gate",
    )
    independence.add_argument(
        "--correlated",
        dest="independent",
        action="store_const",
        const=False,
        help="only revisions whose primary sentinel is correlated (inspection only)",
    )


def _audits(audits: _Commands, client: argparse.ArgumentParser) -> None:
    start = audits.add_parser("start", parents=[client], help="queue an audit of a sealed shard")
    start.add_argument("--shard", required=True, metavar="SHARD_ID")
    start.add_argument(
        "--profile",
        default="human_aligned_integrity",
        metavar="ID_OR_NAME",
        help="integrity profile (default human_aligned_integrity)",
    )
    _wait_flags(start)
    audit_list = audits.add_parser("list", parents=[client], help="list audits, oldest first")
    audit_list.add_argument("--run", default="", metavar="RUN_ID")
    audit_list.add_argument("--state", choices=sorted(AUDIT_STATES))
    show = audits.add_parser("show", parents=[client], help="an audit and its decisions")
    show.add_argument("audit_id", metavar="AUDIT_ID")
    _wait_flags(show)
    samples = audits.add_parser("samples", parents=[client], help="the retained rows, filtered")
    samples.add_argument("audit_id", metavar="AUDIT_ID")
    samples.add_argument("--outcome", choices=sorted(OUTCOME_FILTERS))
    samples.add_argument("--population", choices=sorted(POPULATIONS))
    samples.add_argument("--query", default="", metavar="TEXT", help="case-insensitive substring")
    samples.add_argument("--limit", type=int, default=0, metavar="N", help="at most N rows")
    metrics = audits.add_parser("metrics", parents=[client], help="metrics, intervals, trends")
    metrics.add_argument("audit_id", metavar="AUDIT_ID")
    compare = audits.add_parser("compare", parents=[client], help="pair two audits' rows")
    compare.add_argument("left", metavar="AUDIT_ID")
    compare.add_argument("right", metavar="OTHER_AUDIT_ID")
    compare.add_argument("--pairing", choices=sorted(PAIRINGS), default="record")
    verify = audits.add_parser(
        "verify", parents=[client], help="verify the signed audit bundle here, byte for byte"
    )
    verify.add_argument("audit_id", metavar="AUDIT_ID")
    verify.add_argument(
        "--trust-org-key",
        action="append",
        default=[],
        metavar="HEX",
        help="pinned organization public key, 64 hex (repeatable; default: the organization "
        "keys control lists, which proves the bytes intact but not who signed them)",
    )
    retry = audits.add_parser("retry", parents=[client], help="audit the same evidence again")
    retry.add_argument("audit_id", metavar="AUDIT_ID")
    retry.add_argument("--reason", required=True, help="why (kept with the new audit)")
    _wait_flags(retry)
    cancel = audits.add_parser("cancel", parents=[client], help="cancel a queued or running audit")
    cancel.add_argument("audit_id", metavar="AUDIT_ID")
    cancel.add_argument("--reason", default="", help="why")
    review = audits.add_parser(
        "review", parents=[client], help="append a reviewed decision superseding the current one"
    )
    review.add_argument("audit_id", metavar="AUDIT_ID")
    # Not dest "action": that names the subcommand (review) for the dispatch.
    review.add_argument(
        "--action", dest="review_action", required=True, choices=list(REVIEW_ACTIONS)
    )
    review.add_argument("--reason", required=True, help="why (required by control)")
    review.add_argument(
        "--checkpoint", default="", help="the checkpoint a fork starts from (fork only)"
    )
    review.add_argument(
        "--supersedes",
        type=int,
        metavar="SEQUENCE",
        help="the decision reviewed (default: the current one); a stale one is refused",
    )


def _wait_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--wait", action="store_true", help="follow the audit until it is done, failed or cancelled"
    )
    parser.add_argument(
        "--wait-timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="give up waiting after this long (default 600)",
    )
