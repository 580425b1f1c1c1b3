"""``rewardseal-control integrity audit …``: start, follow, read, compare, verify, retry, cancel
and review sentinel audits (docs/integrity.md, R-I-6..8)."""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

from rewardseal.core.integrity import RunGate, run_gate, verify_bundle
from rewardseal.core.integrity.messages import audit_standing
from rewardseal.core.signing import TrustSet
from rewardseal.rpc.control_client import ControlClient
from rewardseal.rpc.integrity_client import IntegrityClient, SampleQuery
from rewardseal.v1 import integrity_pb2 as ipb
from rewardseal.v1.enums_pb2 import IssuerKeyRole
from rewardseal_control.cli.admin import connect
from rewardseal_control.cli.common import UsageError, remote
from rewardseal_control.cli.integrity_parser import (
    AUDIT_STATES,
    OUTCOME_FILTERS,
    PAIRINGS,
    POPULATIONS,
    REVIEW_ACTIONS,
)
from rewardseal_control.cli.output import (
    enum_short,
    message_json,
    print_json,
    print_listing,
    print_table,
    time_text,
)

__all__ = ["AUDIT_COMMANDS"]

_Handler = Callable[[IntegrityClient, argparse.Namespace, TextIO], int]


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _optional(message: Any, field: str) -> float | None:
    return getattr(message, field) if message.HasField(field) else None


def _outcome(value: int) -> str:
    return enum_short(ipb.DecisionOutcome, value, "DECISION_OUTCOME_").lower()


def _action(value: int) -> str:
    return enum_short(ipb.RunAction, value, "RUN_ACTION_").lower()


# --- One audit and its decisions ---


def _audit_rows(audit: ipb.Audit) -> list[tuple[str, Any]]:
    decision = audit.decision if audit.HasField("decision") else None
    rows: list[tuple[str, Any]] = [
        ("audit_id", audit.audit_id),
        ("state", enum_short(ipb.AuditState, audit.state, "AUDIT_STATE_").lower()),
        ("run", f"{audit.run_id} at boundary {audit.boundary}"),
        ("shard", audit.shard_id),
        ("reward system", audit.system_revision_id),
        ("protocol", audit.protocol_revision_id),
        ("profile", audit.profile_revision_id),
        ("gating", "eligible" if audit.gating_eligible else "inspection only"),
        ("binding blockers", ", ".join(audit.binding_blockers) or "-"),
        ("rows", f"{audit.core_rows} core + {audit.diagnostic_rows} diagnostic"),
        ("outcome", _outcome(decision.outcome) if decision else "-"),
        ("action", _action(decision.action) if decision else "-"),
        ("reasons", ", ".join(decision.reasons) if decision and decision.reasons else "-"),
        ("bundle", (audit.bundle_id or "-") + (" (reused)" if audit.bundle_reused else "")),
        ("attempts", audit.attempts),
    ]
    extra = [
        ("last error", audit.error),
        ("retry of", audit.retry_of),
        ("retry reason", audit.retry_reason),
        ("cancel reason", audit.cancel_reason),
    ]
    rows += [(name, value) for name, value in extra if value]
    rows += [
        ("created", time_text(audit, "created_at")),
        ("updated", time_text(audit, "updated_at")),
    ]
    return rows


def _entry_row(entry: ipb.DecisionEntry) -> tuple[Any, ...]:
    review = enum_short(ipb.ReviewAction, entry.review_action, "REVIEW_ACTION_").lower()
    return (
        entry.sequence,
        enum_short(ipb.DecisionKind, entry.kind, "DECISION_KIND_").lower(),
        _outcome(entry.outcome),
        _action(entry.action),
        review if entry.review_action else "-",
        entry.review_reason or ", ".join(entry.reasons) or "-",
        entry.checkpoint or "-",
        time_text(entry, "at"),
    )


_ENTRY_HEADERS = ("SEQ", "KIND", "OUTCOME", "ACTION", "REVIEW", "REASON", "CHECKPOINT", "AT")


def _gate_json(gate: RunGate) -> dict[str, Any]:
    """The run's gate for ``--json``: the deciding boundary (nulls while nothing is decided)."""
    deciding = gate.deciding
    return {
        "action": gate.action,
        "boundary": None if deciding is None else deciding.boundary,
        "audit_id": None if deciding is None else deciding.audit_id,
        "pending_boundaries": list(gate.pending),
    }


def _gate_text(gate: RunGate) -> str:
    deciding = gate.deciding
    if deciding is None:
        return "no decision yet"
    final = ", final" if deciding.action == "stop" else ""
    return f"{deciding.action}{final} (boundary {deciding.boundary}, audit {deciding.audit_id})"


def _print_audit(
    audit: ipb.Audit,
    entries: Sequence[ipb.DecisionEntry] | None,
    args: argparse.Namespace,
    out: TextIO,
    gate: RunGate | None = None,
) -> int:
    if args.json:
        document: dict[str, Any] = {"audit": message_json(audit, defaults=True)}
        if entries is not None:
            document["decisions"] = [message_json(e, defaults=True) for e in entries]
        if gate is not None:
            document["run_gate"] = _gate_json(gate)
        print_json(document, out)
        return 0
    rows = _audit_rows(audit)
    if gate is not None:
        # What the run may do (R-I-10), which this one audit's decision alone does not say.
        rows.insert(3, ("run gate", _gate_text(gate)))
    print_table(("FIELD", "VALUE"), rows, out)
    if entries:
        print(file=out)
        print_table(_ENTRY_HEADERS, [_entry_row(e) for e in entries], out)
    return 0


def _settled(client: IntegrityClient, audit: ipb.Audit, args: argparse.Namespace) -> ipb.Audit:
    """``audit``, or with ``--wait`` the audit once it is done, failed or cancelled."""
    if not args.wait:
        return audit
    return client.wait_for_audit(audit.audit_id, deadline=args.wait_timeout)


def _start(client: IntegrityClient, args: argparse.Namespace, out: TextIO) -> int:
    with remote():
        audit = _settled(client, client.start_audit(args.shard, args.profile), args)
    return _print_audit(audit, None, args, out)


def _list(client: IntegrityClient, args: argparse.Namespace, out: TextIO) -> int:
    state = AUDIT_STATES[args.state] if args.state else 0
    with remote():
        audits = client.list_audits(run_id=args.run, state=state)  # type: ignore[arg-type]
    print_listing(
        "audits",
        audits,
        ("AUDIT ID", "STATE", "RUN", "BOUNDARY", "OUTCOME", "ACTION", "CREATED"),
        lambda a: (
            a.audit_id,
            enum_short(ipb.AuditState, a.state, "AUDIT_STATE_").lower(),
            a.run_id,
            a.boundary,
            _outcome(a.decision.outcome) if a.HasField("decision") else "-",
            _action(a.decision.action) if a.HasField("decision") else "-",
            time_text(a, "created_at"),
        ),
        as_json=args.json,
        out=out,
    )
    return 0


def _show(client: IntegrityClient, args: argparse.Namespace, out: TextIO) -> int:
    with remote():
        audit = _settled(client, client.get_audit(args.audit_id), args)
        entries = client.decision_history(args.audit_id) if audit.HasField("decision") else []
        gate = run_gate(audit_standing(a) for a in client.list_audits(run_id=audit.run_id))
    return _print_audit(audit, entries, args, out, gate)


def _retry(client: IntegrityClient, args: argparse.Namespace, out: TextIO) -> int:
    with remote():
        audit = _settled(client, client.retry_audit(args.audit_id, reason=args.reason), args)
    return _print_audit(audit, None, args, out)


def _cancel(client: IntegrityClient, args: argparse.Namespace, out: TextIO) -> int:
    with remote():
        audit = client.cancel_audit(args.audit_id, reason=args.reason)
    return _print_audit(audit, None, args, out)


def _review(client: IntegrityClient, args: argparse.Namespace, out: TextIO) -> int:
    with remote():
        entry = client.review_decision(
            args.audit_id,
            REVIEW_ACTIONS[args.review_action],  # type: ignore[arg-type]
            reason=args.reason,
            checkpoint=args.checkpoint,
            supersedes=args.supersedes,
        )
    if args.json:
        print_json({"entry": message_json(entry, defaults=True)}, out)
        return 0
    print_table(_ENTRY_HEADERS, [_entry_row(entry)], out)
    return 0


# --- Reading an audit ---


def _samples(client: IntegrityClient, args: argparse.Namespace, out: TextIO) -> int:
    if args.limit < 0:
        raise UsageError("--limit must not be negative")
    query = SampleQuery(
        outcome=OUTCOME_FILTERS[args.outcome] if args.outcome else 0,  # type: ignore[arg-type]
        population=POPULATIONS[args.population] if args.population else 0,  # type: ignore[arg-type]
        text=args.query,
    )
    with remote():
        listing = client.audit_samples(args.audit_id, query)
        # --limit stops reading pages once enough rows came back.
        samples = list(itertools.islice(listing, args.limit) if args.limit else listing)
    if args.json:
        print_json({"samples": [message_json(s, defaults=True) for s in samples]}, out)
        return 0
    rows = []
    for sample in samples:
        row, sentinel = sample.row, sample.row.sentinel
        observed = "-"
        if sample.row.HasField("sentinel"):
            verdict = enum_short(ipb.SignalOutcome, sentinel.outcome, "SIGNAL_OUTCOME_").lower()
            observed = f"{verdict} {_number(_optional(sentinel, 'reward'))}"
        family = enum_short(ipb.DiagnosticFamily, sample.family, "DIAGNOSTIC_FAMILY_").lower()
        rows.append(
            (
                sample.position,
                enum_short(ipb.SignalPopulation, sample.population, "SIGNAL_POPULATION_").lower()
                + (f"/{family}" if sample.family else ""),
                enum_short(ipb.SampleOutcome, sample.outcome, "SAMPLE_OUTCOME_").lower(),
                row.record_id,
                row.candidate,
                row.episode_id,
                f"{_number(_optional(row, 'optimizer_raw'))} -> "
                f"{_number(_optional(row, 'optimizer_mapped'))}",
                observed,
            )
        )
    print_table(
        ("POS", "POPULATION", "OUTCOME", "RECORD", "CAND", "EPISODE", "OPTIMIZER", "SENTINEL"),
        rows,
        out,
    )
    return 0


def _metric_row(metric: ipb.MetricResult) -> tuple[Any, ...]:
    low, high = _optional(metric, "interval_low"), _optional(metric, "interval_high")
    bounds = []
    if metric.HasField("threshold_min"):
        bounds.append(f">= {metric.threshold_min:g}")
    if metric.HasField("threshold_max"):
        bounds.append(f"<= {metric.threshold_max:g}")
    value = _optional(metric, "value")
    status = "VIOLATED" if metric.violated else ("ok" if bounds and value is not None else "-")
    interval = "-" if low is None or high is None else f"[{low:.4f}, {high:.4f}]"
    return (metric.name, _number(value), interval, " ".join(bounds) or "-", status)


def _metrics(client: IntegrityClient, args: argparse.Namespace, out: TextIO) -> int:
    with remote():
        answer = client.audit_metrics(args.audit_id)
    if args.json:
        print_json(message_json(answer, defaults=True), out)
        return 0
    if not answer.computed:
        print(
            f"{answer.audit_id}: no metrics: the evidence was incomplete "
            "(the reasons are in `integrity audit show`)",
            file=out,
        )
        return 0
    print(
        f"{answer.rows} core rows, {answer.records} records, {answer.scored} scored; "
        f"intervals: grouped bootstrap, {answer.resamples} resamples",
        file=out,
    )
    print_table(
        ("METRIC", "VALUE", "95% INTERVAL", "THRESHOLD", "STATUS"),
        [_metric_row(m) for m in answer.metrics],
        out,
    )
    if answer.subgroups:
        print(file=out)
        print_table(
            ("SUBGROUP", "ROWS", "RECORDS", "VIOLATED"),
            [
                (
                    f"{g.key}={g.value}",
                    g.rows,
                    g.records,
                    ", ".join(m.name for m in g.metrics if m.violated) or "-",
                )
                for g in answer.subgroups
            ],
            out,
        )
    if answer.trends:
        print(file=out)
        print_table(
            ("BOUNDARY", "RECORDS", "ROWS", "AGREEMENT", "OPTIMIZER ONLY", "SENTINEL ONLY", "GAP"),
            [
                (
                    t.boundary,
                    t.records,
                    t.rows,
                    _number(_optional(t, "pass_agreement")),
                    _number(_optional(t, "optimizer_only_rate")),
                    _number(_optional(t, "sentinel_only_rate")),
                    _number(_optional(t, "reward_gap")),
                )
                for t in answer.trends
            ],
            out,
        )
    if answer.diagnostics:
        print(file=out)
        print_table(
            ("DIAGNOSTIC FAMILY", "ROWS"),
            [
                (enum_short(ipb.DiagnosticFamily, d.family, "DIAGNOSTIC_FAMILY_").lower(), d.rows)
                for d in answer.diagnostics
            ],
            out,
        )
    return 0


def _compare(client: IntegrityClient, args: argparse.Namespace, out: TextIO) -> int:
    with remote():
        answer = client.compare_audits(
            args.left,
            args.right,
            pairing=PAIRINGS[args.pairing],  # type: ignore[arg-type]
        )
    if args.json:
        print_json(message_json(answer, defaults=True), out)
        return 0
    print(
        f"{args.left} ({_outcome(answer.left_outcome)}) -> "
        f"{args.right} ({_outcome(answer.right_outcome)}): {answer.paired_rows} paired rows, "
        f"{answer.left_only_rows} only left, {answer.right_only_rows} only right",
        file=out,
    )
    print_table(
        ("METRIC", "LEFT", "RIGHT", "DELTA"),
        [
            (
                d.name,
                _number(_optional(d, "left")),
                _number(_optional(d, "right")),
                _number(_optional(d, "delta")),
            )
            for d in answer.metrics
        ],
        out,
    )
    if answer.transitions:
        print(file=out)
        print_table(
            ("LEFT OUTCOME", "RIGHT OUTCOME", "ROWS"),
            [
                (
                    enum_short(ipb.SampleOutcome, t.left, "SAMPLE_OUTCOME_").lower(),
                    enum_short(ipb.SampleOutcome, t.right, "SAMPLE_OUTCOME_").lower(),
                    t.rows,
                )
                for t in answer.transitions
            ],
            out,
        )
    return 0


# --- The signed bundle (R-I-8) ---


def _trust(args: argparse.Namespace) -> tuple[TrustSet, str]:
    """The keys a bundle must verify under, and where they came from."""
    if args.trust_org_key:
        keys = []
        for text in args.trust_org_key:
            try:
                key = bytes.fromhex(text.strip())
            except ValueError:
                key = b""
            if len(key) != 32:
                raise UsageError(f"--trust-org-key must be 64 hex characters, not {text!r}")
            keys.append(key)
        return TrustSet(keys), "pinned (--trust-org-key)"
    with connect(args, ControlClient) as control:
        listed = control.list_issuer_keys(role=IssuerKeyRole.ISSUER_KEY_ROLE_ORGANIZATION)
    return TrustSet([k.public_key for k in listed]), "as listed by control (not pinned)"


def _verify(client: IntegrityClient, args: argparse.Namespace, out: TextIO) -> int:
    with remote():
        answer = client.verify_audit(args.audit_id)
        trust, source = _trust(args)
        # Control verified it; verify it again here, over the exact bytes it sent.
        bundle = verify_bundle(answer.bundle, trust, bundle_id=answer.bundle_id)
    decision = bundle.report.decision
    if args.json:
        print_json(
            {
                "verified": True,
                "bundle_id": bundle.bundle_id,
                "signer_key_id": answer.signer_key_id,
                "trusted_keys": source,
                "issued_at": bundle.issued_at,
                "shard_ids": list(bundle.report.shard_ids),
                "evidence_digest": bundle.report.evidence_digest,
                "decision": decision.to_json(),
            },
            out,
        )
        return 0
    print_table(
        ("FIELD", "VALUE"),
        [
            ("verified", f"yes, signature and content, under keys {source}"),
            ("bundle_id", bundle.bundle_id),
            ("signer", answer.signer_key_id),
            ("issued_at", bundle.issued_at),
            ("shards", ", ".join(bundle.report.shard_ids)),
            ("evidence", bundle.report.evidence_digest),
            ("outcome", f"{decision.outcome} -> {decision.action}"),
            ("reasons", ", ".join(decision.reasons) or "-"),
        ],
        out,
    )
    return 0


AUDIT_COMMANDS: Mapping[str, _Handler] = {
    "start": _start,
    "list": _list,
    "show": _show,
    "samples": _samples,
    "metrics": _metrics,
    "compare": _compare,
    "verify": _verify,
    "retry": _retry,
    "cancel": _cancel,
    "review": _review,
}
"""The ``integrity audit`` actions by name."""
