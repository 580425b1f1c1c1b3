"""Between the integrity messages (``rewardseal.v1.integrity_pb2``) and core's integrity types:
the wire rules the trainer side, the clients, the control plane and its CLI share.

Spec documents travel as ``google.protobuf.Struct``, whose numbers are all doubles: a whole
number comes back as an ``int`` (within 2**53, where a double is exact) so that ``"seed": 42``
is an integer again and digests as the JSON the operator wrote; NaN and infinities are kept, for
core to refuse with a ``not_finite`` blocker (docs/spec.md §12, R-I-1). Enum values map to
core's lowercase words by their suffix (``SIGNAL_OUTCOME_ACCEPTED`` is ``accepted``); an
UNSPECIFIED value where one is required is refused. A :class:`~rewardseal.core.integrity.SignalRow`
goes out with :func:`signal_row_message` (the trainer appending rows) and comes back with
:func:`signal_row` (the control plane reading them, anyone reading an audit's samples). A gate
client reads audits back with :func:`audit_standing` for
:func:`~rewardseal.core.integrity.run_gate`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC
from typing import Any, Final, cast

from google.protobuf import struct_pb2

from rewardseal.core.errors import ValidationError
from rewardseal.core.integrity import (
    AuditorObservation,
    AuditStanding,
    DecisionEntry,
    SentinelObservation,
    SignalRow,
)
from rewardseal.core.integrity.fields import rfc3339
from rewardseal.core.integrity.gate import AuditStateName
from rewardseal.v1 import integrity_pb2 as pb

__all__ = [
    "audit_standing",
    "decision_entry",
    "enum_value",
    "enum_word",
    "signal_row",
    "signal_row_message",
    "spec_struct",
    "struct_document",
]

_EXACT_INTEGER: Final = 2**53


def spec_struct(spec: Mapping[str, Any]) -> struct_pb2.Struct:
    """A JSON spec document (a reward system, protocol or profile) as the ``Struct`` the RPCs
    take. Numbers travel as doubles, as in any JSON reader; the control plane validates.

    Raises:
        ValidationError: ``spec`` holds something JSON cannot (a set, bytes, a non-string key).
    """
    struct = struct_pb2.Struct()
    try:
        struct.update(spec)
    except (TypeError, ValueError, AttributeError) as exc:
        raise ValidationError(f"the spec is not a JSON object: {exc}") from None
    return struct


def _value(value: struct_pb2.Value) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        return struct_document(value.struct_value)
    if kind == "list_value":
        return [_value(item) for item in value.list_value.values]
    if kind == "number_value":
        number = value.number_value
        if math.isfinite(number) and number.is_integer() and abs(number) < _EXACT_INTEGER:
            return int(number)
        return number
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return value.bool_value
    return None


def struct_document(struct: struct_pb2.Struct) -> dict[str, Any]:
    """A ``Struct`` (a spec on the wire, a revision's stored content) back as a plain JSON
    object: whole numbers as ints, NaN and infinities kept."""
    return {key: _value(item) for key, item in struct.fields.items()}


def enum_word(enum: Any, value: int, prefix: str) -> str | None:
    """The lowercase word of an enum value (``None`` for UNSPECIFIED or an unknown number)."""
    try:
        name = str(enum.Name(value))
    except ValueError:
        return None
    word = name.removeprefix(prefix).lower()
    return None if word == "unspecified" else word


def enum_value(enum: Any, word: str | None, prefix: str) -> int:
    """The enum number of a lowercase word (0, UNSPECIFIED, for None)."""
    return 0 if word is None else int(enum.Value(prefix + word.upper()))


def _required(enum: Any, value: int, prefix: str, where: str) -> str:
    word = enum_word(enum, value, prefix)
    if word is None:
        raise ValidationError(f"{where} is required (not UNSPECIFIED)")
    return word


def _opt(message: Any, name: str) -> Any:
    return getattr(message, name) if message.HasField(name) else None


def signal_row(message: pb.SignalRow, where: str = "row") -> SignalRow:
    """A core SignalRow from its message (core validates every field).

    Raises:
        ValidationError: a field is missing, out of range or not finite (``where`` names the
            row).
    """
    try:
        sentinel = None
        if message.HasField("sentinel"):
            observed = message.sentinel
            sentinel = SentinelObservation(
                outcome=_required(  # type: ignore[arg-type]
                    pb.SignalOutcome, observed.outcome, "SIGNAL_OUTCOME_", "sentinel.outcome"
                ),
                reward=_opt(observed, "reward"),
                receipt_id=_opt(observed, "receipt_id"),
                receipt_digest=_opt(observed, "receipt_digest"),
                error=_opt(observed, "error"),
            )
        auditors = tuple(
            AuditorObservation(
                auditor=item.auditor,
                outcome=_required(  # type: ignore[arg-type]
                    pb.SignalOutcome, item.outcome, "SIGNAL_OUTCOME_", "auditors[].outcome"
                ),
                reward=_opt(item, "reward"),
                receipt_digest=_opt(item, "receipt_digest"),
            )
            for item in message.auditors
        )
        return SignalRow(
            record_id=message.record_id,
            candidate=message.candidate,
            episode_id=message.episode_id,
            output_digest=message.output_digest,
            optimizer_raw=_opt(message, "optimizer_raw"),
            optimizer_mapped=_opt(message, "optimizer_mapped"),
            group_id=message.group_id,
            selection=_required(  # type: ignore[arg-type]
                pb.SignalSelection, message.selection, "SIGNAL_SELECTION_", "selection"
            ),
            checkpoint=message.checkpoint,
            policy_update=message.policy_update,
            runtime_identity=message.runtime_identity,
            sentinel=sentinel,
            auditors=auditors,
            components=dict(message.components),
            subgroups=dict(message.subgroups),
        )
    except ValidationError as exc:
        raise ValidationError(f"{where}: {exc.message}") from None


def signal_row_message(row: SignalRow) -> pb.SignalRow:
    """The message of a core SignalRow."""
    message = pb.SignalRow(
        record_id=row.record_id,
        candidate=row.candidate,
        episode_id=row.episode_id,
        output_digest=row.output_digest,
        group_id=row.group_id,
        selection=enum_value(pb.SignalSelection, row.selection, "SIGNAL_SELECTION_"),  # type: ignore[arg-type]
        checkpoint=row.checkpoint,
        policy_update=row.policy_update,
        runtime_identity=row.runtime_identity,
        components=dict(row.components),
        subgroups=dict(row.subgroups),
    )
    for name in ("optimizer_raw", "optimizer_mapped"):
        if getattr(row, name) is not None:
            setattr(message, name, getattr(row, name))
    if row.sentinel is not None:
        sentinel = message.sentinel
        sentinel.outcome = enum_value(pb.SignalOutcome, row.sentinel.outcome, "SIGNAL_OUTCOME_")  # type: ignore[assignment]
        for name in ("reward", "receipt_id", "receipt_digest", "error"):
            if getattr(row.sentinel, name) is not None:
                setattr(sentinel, name, getattr(row.sentinel, name))
    for observed in row.auditors:
        item = message.auditors.add(
            auditor=observed.auditor,
            outcome=enum_value(pb.SignalOutcome, observed.outcome, "SIGNAL_OUTCOME_"),
        )
        if observed.reward is not None:
            item.reward = observed.reward
        if observed.receipt_digest is not None:
            item.receipt_digest = observed.receipt_digest
    return message


def decision_entry(message: pb.DecisionEntry) -> DecisionEntry:
    """A decision entry message as core's :class:`~rewardseal.core.integrity.DecisionEntry`.

    Raises:
        ValidationError: an UNSPECIFIED or unknown kind, outcome or action.
    """
    where = "decision"
    doc: dict[str, Any] = {
        "sequence": message.sequence,
        "kind": _required(pb.DecisionKind, message.kind, "DECISION_KIND_", f"{where}.kind"),
        "outcome": _required(
            pb.DecisionOutcome, message.outcome, "DECISION_OUTCOME_", f"{where}.outcome"
        ),
        "action": _required(pb.RunAction, message.action, "RUN_ACTION_", f"{where}.action"),
        "reasons": list(message.reasons),
        "at": rfc3339(message.at.ToDatetime(tzinfo=UTC), f"{where}.at"),
        "review_action": enum_word(pb.ReviewAction, message.review_action, "REVIEW_ACTION_"),
        "review_reason": message.review_reason or None,
        "checkpoint": message.checkpoint or None,
        "reviewer": message.reviewer or None,
        "supersedes": _opt(message, "supersedes"),
    }
    return DecisionEntry.from_json(doc)


def audit_standing(message: pb.Audit) -> AuditStanding:
    """An audit message as the gate reads it (its state and the decision in force on it).

    Raises:
        ValidationError: an UNSPECIFIED state, or a malformed decision.
    """
    state = _required(pb.AuditState, message.state, "AUDIT_STATE_", "audit.state")
    decided = state == "done" and message.HasField("decision")
    return AuditStanding(
        audit_id=message.audit_id,
        boundary=message.boundary,
        state=cast(AuditStateName, state),
        decision=decision_entry(message.decision) if decided else None,
    )
