"""``rewardseal-control integrity``: reward systems, protocols, profiles, bindings and shards
(docs/integrity.md); the audit commands are in :mod:`.integrity_audits`.

Each handler asks ``RewardIntegrityService`` and prints a table, or one JSON document with
``--json``. A refusal by control is exit status 1; so is a spec with blockers and a binding that
cannot gate (the answer is printed first, then one line on stderr). A spec file that cannot be
read or is not a JSON object is exit status 2. ``system validate`` without ``--target`` (or
``$REWARDSEAL_CONTROL_TARGET``) runs the core rules here and needs no token.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from rewardseal.core import strict_json
from rewardseal.core.errors import BindingRefused, IntegritySpecInvalid
from rewardseal.core.integrity import (
    correlation_reasons,
    parse_reward_system,
    validate_reward_system,
)
from rewardseal.core.integrity.messages import struct_document
from rewardseal.rpc.integrity_client import IntegrityClient, RewardSystemQuery
from rewardseal.v1 import integrity_pb2 as ipb
from rewardseal_control.cli.admin import connect
from rewardseal_control.cli.common import TARGET_ENV, Refused, UsageError, remote
from rewardseal_control.cli.integrity_audits import AUDIT_COMMANDS
from rewardseal_control.cli.output import (
    message_json,
    print_json,
    print_listing,
    print_table,
    time_text,
)

__all__ = ["INTEGRITY_COMMANDS", "read_spec", "run_integrity"]

_Handler = Callable[[IntegrityClient, argparse.Namespace, TextIO], int]


def read_spec(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``, decoded strictly (no NaN, no repeated key).

    Raises:
        UsageError: the file cannot be read, is not JSON, or is not one JSON object.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the spec {path}: {exc}") from None
    try:
        document = strict_json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"the spec {path} is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise UsageError(f"the spec {path} is not a JSON object")
    return document


def _fields(rows: list[tuple[str, Any]], out: TextIO) -> None:
    print_table(("FIELD", "VALUE"), rows, out)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


# --- Reward systems ---


def _print_validation(result: dict[str, Any], args: argparse.Namespace, out: TextIO) -> None:
    if args.json:
        print_json(result, out)
        return
    _fields(
        [
            ("valid", _yes(not result["blockers"])),
            ("checked by", result["checked_by"]),
            ("revision_id", result["revision_id"] or "-"),
            ("sentinel independent", _yes(result["primary_sentinel_independent"])),
            ("correlation reasons", ", ".join(result["correlation_reasons"]) or "-"),
        ],
        out,
    )
    if result["blockers"]:
        print_table(("BLOCKER",), [(b,) for b in result["blockers"]], out)


def _refuse_blockers(blockers: list[str]) -> None:
    if blockers:
        raise Refused(
            IntegritySpecInvalid(
                f"the reward-system spec has {len(blockers)} blocker(s): {', '.join(blockers)}"
            )
        )


def validate_locally(args: argparse.Namespace, out: TextIO) -> int:
    """``system validate`` with the core rules, offline: the same blockers and revision id
    control computes (rewardseal.core.integrity)."""
    spec = read_spec(args.spec)
    blockers = validate_reward_system(spec)
    revision_id, reasons = "", []
    if not blockers:
        system = parse_reward_system(spec)
        revision_id = system.revision_id
        reasons = correlation_reasons(system.optimizer, system.primary_sentinel)
    result: dict[str, Any] = {
        "checked_by": "local",
        "blockers": blockers,
        "revision_id": revision_id,
        "primary_sentinel_independent": not blockers and not reasons,
        "correlation_reasons": reasons,
    }
    _print_validation(result, args, out)
    _refuse_blockers(blockers)
    return 0


def _system_validate(client: IntegrityClient, args: argparse.Namespace, out: TextIO) -> int:
    spec = read_spec(args.spec)
    with remote():
        answer = client.validate_reward_system(spec)
    result: dict[str, Any] = {
        "checked_by": "control",
        "blockers": list(answer.blockers),
        "revision_id": answer.revision_id,
        "primary_sentinel_independent": answer.primary_sentinel_independent,
        "correlation_reasons": list(answer.correlation_reasons),
    }
    _print_validation(result, args, out)
    _refuse_blockers(result["blockers"])
    return 0


def _source_text(source: Mapping[str, Any]) -> str:
    """One cell naming a reward source: its label, else what identifies it."""
    if source.get("label"):
        return str(source["label"])
    if source.get("kind") == "contract":
        return f"contract {source.get('contract_digest', '?')}"
    prints = source.get("fingerprints") or {}
    return f"external {prints.get('implementation', '?')}"


def _system_rows(revision: ipb.RewardSystemRevision) -> list[tuple[str, Any]]:
    content = struct_document(revision.content)
    auditors = content.get("auditors") or []
    sentinel: Mapping[str, Any] = next(
        (a for a in auditors if a.get("role") == "primary_sentinel"), {}
    )
    diagnostics = [a for a in auditors if a.get("role") == "diagnostic"]
    mapping = content.get("mapping") or {}
    norm = mapping.get("normalization") or {}
    return [
        ("revision_id", revision.revision_id),
        ("created_at", time_text(revision, "created_at")),
        ("optimizer", _source_text(content.get("optimizer") or {})),
        ("primary sentinel", _source_text(sentinel)),
        ("diagnostic auditors", ", ".join(_source_text(d) for d in diagnostics) or "-"),
        ("sentinel independent", _yes(revision.primary_sentinel_independent)),
        ("correlation reasons", ", ".join(revision.correlation_reasons) or "-"),
        (
            "mapping",
            f"[{norm.get('min')}, {norm.get('max')}] {norm.get('direction', 'maximize')}, "
            f"scale {mapping.get('scale')}, center {mapping.get('center')}, "
            f"threshold {mapping.get('threshold')}, on failure {mapping.get('failure_behavior')}",
        ),
    ]


def _system_create(client: IntegrityClient, args: argparse.Namespace, out: TextIO) -> int:
    spec = read_spec(args.spec)
    with remote():
        answer = client.create_reward_system(spec)
    if args.json:
        print_json(
            {"created": answer.created, "revision": message_json(answer.revision, defaults=True)},
            out,
        )
        return 0
    state = "created" if answer.created else "existing (the same content was stored before)"
    _fields([("revision", state), *_system_rows(answer.revision)], out)
    return 0


def _system_show(client: IntegrityClient, args: argparse.Namespace, out: TextIO) -> int:
    with remote():
        revision = client.get_reward_system(args.revision_id)
    if args.json:
        print_json({"revision": message_json(revision, defaults=True)}, out)
        return 0
    _fields(_system_rows(revision), out)
    return 0


def _system_list(client: IntegrityClient, args: argparse.Namespace, out: TextIO) -> int:
    query = RewardSystemQuery(
        contract_digest=args.contract,
        implementation_fingerprint=args.implementation,
        primary_sentinel_independent=args.independent,
    )
    with remote():
        revisions = client.list_reward_systems(query)

    def row(revision: ipb.RewardSystemRevision) -> tuple[Any, ...]:
        described = dict(_system_rows(revision))
        return (
            revision.revision_id,
            described["optimizer"],
            described["primary sentinel"],
            described["sentinel independent"],
            described["created_at"],
        )

    headers = ("REVISION ID", "OPTIMIZER", "PRIMARY SENTINEL", "INDEPENDENT", "CREATED")
    print_listing("revisions", revisions, headers, row, as_json=args.json, out=out)
    return 0


# --- Protocols, profiles, bindings ---


def _protocol_list(client: IntegrityClient, args: argparse.Namespace, out: TextIO) -> int:
    with remote():
        protocols = client.list_retention_protocols()
    print_listing(
        "protocols",
        protocols,
        ("NAME", "REVISION ID", "BUILTIN", "CORE", "DIAGNOSTIC", "SEED", "BAND"),
        lambda p: (
            p.name,
            p.revision_id,
            _yes(p.builtin),
            p.core_size if p.HasField("core_size") else "all",
            p.diagnostic_size,
            p.seed,
            f"{p.threshold_band:g}",
        ),
        as_json=args.json,
        out=out,
    )
    return 0


def _threshold_text(threshold: ipb.MetricThreshold) -> str:
    bounds = []
    if threshold.HasField("min"):
        bounds.append(f">={threshold.min:g}")
    if threshold.HasField("max"):
        bounds.append(f"<={threshold.max:g}")
    return f"{threshold.metric}{','.join(bounds)}"


def _profile_list(client: IntegrityClient, args: argparse.Namespace, out: TextIO) -> int:
    with remote():
        profiles = client.list_integrity_profiles()
    print_listing(
        "profiles",
        profiles,
        ("NAME", "REVISION ID", "BUILTIN", "DEFAULT", "REPORT ONLY", "INTERVALS", "THRESHOLDS"),
        lambda p: (
            p.name,
            p.revision_id,
            _yes(p.builtin),
            _yes(p.is_default),
            _yes(p.report_only),
            "warn" if p.warn_on_interval else "-",
            " ".join(_threshold_text(t) for t in p.thresholds) or "-",
        ),
        as_json=args.json,
        out=out,
    )
    return 0


def _binding_resolve(client: IntegrityClient, args: argparse.Namespace, out: TextIO) -> int:
    with remote():
        answer = client.resolve_binding(args.system, args.protocol, args.profile)
    if args.json:
        print_json(message_json(answer, defaults=True), out)
    else:
        _fields(
            [
                ("gating_eligible", _yes(answer.gating_eligible)),
                ("system", answer.system_revision_id or "-"),
                ("protocol", answer.protocol_revision_id or "-"),
                ("profile", answer.profile_revision_id or "-"),
                ("blockers", ", ".join(answer.blockers) or "-"),
            ],
            out,
        )
    if not answer.gating_eligible:
        # R-I-9: a binding that cannot gate is refused before training starts; a script
        # chaining `binding resolve && train` must stop here.
        raise Refused(
            BindingRefused(f"the binding cannot gate a training run: {', '.join(answer.blockers)}")
        )
    return 0


# --- Shards ---

_SHARD_HEADERS = (
    "SHARD ID",
    "RUN",
    "BOUNDARY",
    "CAPTURED",
    "CORE",
    "DIAGNOSTIC",
    "EXACT",
    "SEALED",
)


def _shard_row(shard: ipb.SignalShard) -> tuple[Any, ...]:
    return (
        shard.shard_id or "(open)",
        shard.run_id,
        shard.boundary,
        shard.captured,
        shard.core_rows,
        shard.diagnostic_rows,
        _yes(shard.exact),
        time_text(shard, "sealed_at"),
    )


def _shard_list(client: IntegrityClient, args: argparse.Namespace, out: TextIO) -> int:
    with remote():
        shards = client.list_signal_shards(args.run)
    print_listing("shards", shards, _SHARD_HEADERS, _shard_row, as_json=args.json, out=out)
    return 0


def _shard_verify(client: IntegrityClient, args: argparse.Namespace, out: TextIO) -> int:
    with remote():
        shard = client.verify_signal_shard(args.shard_id)
    if args.json:
        print_json({"verified": True, "shard": message_json(shard, defaults=True)}, out)
        return 0
    print(f"verified: every stored row of {shard.shard_id} hashes to its manifest", file=out)
    print_table(_SHARD_HEADERS, [_shard_row(shard)], out)
    return 0


INTEGRITY_COMMANDS: Mapping[tuple[str, str], _Handler] = {
    ("system", "validate"): _system_validate,
    ("system", "create"): _system_create,
    ("system", "show"): _system_show,
    ("system", "list"): _system_list,
    ("protocol", "list"): _protocol_list,
    ("profile", "list"): _profile_list,
    ("binding", "resolve"): _binding_resolve,
    ("shard", "list"): _shard_list,
    ("shard", "verify"): _shard_verify,
    **{("audit", action): handler for action, handler in AUDIT_COMMANDS.items()},
}


def run_integrity(args: argparse.Namespace, out: TextIO) -> int:
    """Run the ``integrity`` command ``args`` names; its exit status."""
    if (args.area, args.action) == ("system", "validate") and not (
        args.target or os.environ.get(TARGET_ENV)
    ):
        return validate_locally(args, out)
    handler = INTEGRITY_COMMANDS[(args.area, args.action)]
    with connect(args, IntegrityClient) as client:
        return handler(client, args, out)
