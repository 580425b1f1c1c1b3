"""Signal rows (R-I-3): one exact training output, its optimizer reward and the sentinel's verdict.

A row is captured at an audit boundary (a policy update) by the trainer side. It holds the output
by digest only, the optimizer's raw and mapped reward exactly as training used them, and the
primary sentinel's observation of the *same* episode (for a rewardseal worker: the receipt it
signed for that episode id). Rows are immutable; :attr:`SignalRow.digest` is what a shard
manifest lists.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, get_args

from rewardseal.core.digest import digest_json, is_digest
from rewardseal.core.errors import ValidationError
from rewardseal.core.integrity import fields
from rewardseal.core.integrity.fields import JsonObject

__all__ = [
    "OUTCOMES",
    "SELECTIONS",
    "AuditorObservation",
    "Outcome",
    "Selection",
    "SentinelObservation",
    "SignalRow",
]

Outcome = Literal["accepted", "refused", "error"]
Selection = Literal["selected", "not_selected", "filtered"]
OUTCOMES: Final[tuple[str, ...]] = get_args(Outcome)
SELECTIONS: Final[tuple[str, ...]] = get_args(Selection)

_SENTINEL_KEYS: Final = ("outcome", "reward", "receipt_id", "receipt_digest", "error")
_AUDITOR_KEYS: Final = ("auditor", "outcome", "reward", "receipt_digest")
_ROW_KEYS: Final = (
    "record_id",
    "candidate",
    "episode_id",
    "output_digest",
    "optimizer_raw",
    "optimizer_mapped",
    "group_id",
    "selection",
    "checkpoint",
    "policy_update",
    "runtime_identity",
    "sentinel",
    "auditors",
    "components",
    "subgroups",
)


def _unit_reward(value: float | None, where: str) -> None:
    if value is not None and not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise ValidationError(f"{where} must be a finite number in [0, 1]")


def _outcome(doc: Mapping[str, Any], where: str) -> Outcome:
    outcome = doc.get("outcome")
    if outcome not in OUTCOMES:
        raise ValidationError(f"{where}.outcome must be one of {', '.join(OUTCOMES)}")
    return outcome  # type: ignore[no-any-return]


def _digest_or_none(value: str | None, where: str) -> None:
    if value is not None and not is_digest(value):
        raise ValidationError(f"{where} must be a sha256: digest")


@dataclass(frozen=True, slots=True)
class SentinelObservation:
    """The primary sentinel's verdict on one episode.

    ``reward`` is the sentinel's score in [0, 1] when it grades (None for accept/refuse-only
    sentinels and always None on ``error``); ``error`` says what went wrong on ``error``.
    """

    outcome: Outcome
    reward: float | None = None
    receipt_id: str | None = None
    receipt_digest: str | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValidationError(f"sentinel outcome {self.outcome!r} is not one of {OUTCOMES}")
        _unit_reward(self.reward, "sentinel.reward")
        if self.outcome == "error" and self.reward is not None:
            raise ValidationError("a sentinel error carries no reward")
        _digest_or_none(self.receipt_digest, "sentinel.receipt_digest")

    def to_json(self) -> JsonObject:
        """The plain-dict form (absent fields as null, so every row has the same keys)."""
        return {
            "outcome": self.outcome,
            "reward": self.reward,
            "receipt_id": self.receipt_id,
            "receipt_digest": self.receipt_digest,
            "error": self.error,
        }

    @classmethod
    def from_json(cls, doc: object) -> SentinelObservation:
        """Read an observation; refuse unknown keys and out-of-range rewards."""
        data = fields.mapping(doc, "sentinel")
        fields.no_unknown_keys(data, _SENTINEL_KEYS, "sentinel")
        return cls(
            outcome=_outcome(data, "sentinel"),
            reward=fields.optional_finite(data, "reward", "sentinel"),
            receipt_id=fields.optional_string(data, "receipt_id", "sentinel"),
            receipt_digest=fields.optional_string(data, "receipt_digest", "sentinel"),
            error=fields.optional_string(data, "error", "sentinel"),
        )


@dataclass(frozen=True, slots=True)
class AuditorObservation:
    """A diagnostic auditor's verdict; ``auditor`` is its source revision id."""

    auditor: str
    outcome: Outcome
    reward: float | None = None
    receipt_digest: str | None = None

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValidationError(f"auditor outcome {self.outcome!r} is not one of {OUTCOMES}")
        _unit_reward(self.reward, "auditors[].reward")
        _digest_or_none(self.receipt_digest, "auditors[].receipt_digest")

    def to_json(self) -> JsonObject:
        """The plain-dict form."""
        return {
            "auditor": self.auditor,
            "outcome": self.outcome,
            "reward": self.reward,
            "receipt_digest": self.receipt_digest,
        }

    @classmethod
    def from_json(cls, doc: object) -> AuditorObservation:
        """Read an auditor observation."""
        data = fields.mapping(doc, "auditors[]")
        fields.no_unknown_keys(data, _AUDITOR_KEYS, "auditors[]")
        return cls(
            auditor=fields.string(data, "auditor", "auditors[]"),
            outcome=_outcome(data, "auditors[]"),
            reward=fields.optional_finite(data, "reward", "auditors[]"),
            receipt_digest=fields.optional_string(data, "receipt_digest", "auditors[]"),
        )


@dataclass(frozen=True, slots=True)
class SignalRow:
    """One captured training output at one boundary (R-I-3).

    ``(record_id, candidate)`` identifies the row within its boundary; ``record_id`` is the
    stable source record (the bootstrap's resampling unit, matched across boundaries).
    ``optimizer_raw`` is None when the optimizer produced no number; ``optimizer_mapped`` is
    what training used (None when the mapping failed). ``sentinel`` is None when no observation
    of this episode was captured. ``components`` are per-component scores in [0, 1];
    ``subgroups`` are labels (``{"language": "de"}``) reported apart.
    """

    record_id: str
    candidate: int
    episode_id: str
    output_digest: str
    optimizer_raw: float | None
    optimizer_mapped: float | None
    group_id: str
    selection: Selection
    checkpoint: str
    policy_update: int
    runtime_identity: str
    sentinel: SentinelObservation | None
    auditors: tuple[AuditorObservation, ...] = ()
    components: Mapping[str, float] = field(default_factory=dict)
    subgroups: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("record_id", "episode_id", "group_id", "checkpoint", "runtime_identity"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValidationError(f"signal row {name} must be a non-empty string")
        if isinstance(self.candidate, bool) or not isinstance(self.candidate, int):
            raise ValidationError("signal row candidate must be an integer")
        if self.candidate < 0 or self.policy_update < 0:
            raise ValidationError("signal row candidate and policy_update must be >= 0")
        if not is_digest(self.output_digest):
            raise ValidationError("signal row output_digest must be a sha256: digest")
        if self.selection not in SELECTIONS:
            raise ValidationError(f"signal row selection must be one of {', '.join(SELECTIONS)}")
        for name in ("optimizer_raw", "optimizer_mapped"):
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise ValidationError(f"signal row {name} must be finite")
        for name, score in self.components.items():
            _unit_reward(score, f"components.{name}")

    @property
    def identity(self) -> tuple[str, int]:
        """``(record_id, candidate)``: unique within one boundary."""
        return (self.record_id, self.candidate)

    @property
    def digest(self) -> str:
        """The R-DIG-1 digest of :meth:`to_json`: what a shard manifest lists for this row."""
        return digest_json(self.to_json())

    def to_json(self) -> JsonObject:
        """The plain-dict form; every key present (null where absent)."""
        return {
            "record_id": self.record_id,
            "candidate": self.candidate,
            "episode_id": self.episode_id,
            "output_digest": self.output_digest,
            "optimizer_raw": self.optimizer_raw,
            "optimizer_mapped": self.optimizer_mapped,
            "group_id": self.group_id,
            "selection": self.selection,
            "checkpoint": self.checkpoint,
            "policy_update": self.policy_update,
            "runtime_identity": self.runtime_identity,
            "sentinel": None if self.sentinel is None else self.sentinel.to_json(),
            "auditors": [auditor.to_json() for auditor in self.auditors],
            "components": {name: float(v) for name, v in sorted(self.components.items())},
            "subgroups": dict(sorted(self.subgroups.items())),
        }

    @classmethod
    def from_json(cls, doc: object) -> SignalRow:
        """Read a row; refuse unknown keys, wrong types and non-finite numbers."""
        where = "row"
        data = fields.mapping(doc, where)
        fields.no_unknown_keys(data, _ROW_KEYS, where)
        components = fields.mapping(data.get("components", {}), "row.components")
        subgroups = fields.mapping(data.get("subgroups", {}), "row.subgroups")
        if not all(isinstance(label, str) for label in subgroups.values()):
            raise ValidationError("row.subgroups values must be strings")
        sentinel = data.get("sentinel")
        selection = data.get("selection")
        if selection not in SELECTIONS:
            raise ValidationError(f"row.selection must be one of {', '.join(SELECTIONS)}")
        return cls(
            record_id=fields.string(data, "record_id", where),
            candidate=fields.integer(data, "candidate", where),
            episode_id=fields.string(data, "episode_id", where),
            output_digest=fields.string(data, "output_digest", where),
            optimizer_raw=fields.optional_finite(data, "optimizer_raw", where),
            optimizer_mapped=fields.optional_finite(data, "optimizer_mapped", where),
            group_id=fields.string(data, "group_id", where),
            selection=selection,
            checkpoint=fields.string(data, "checkpoint", where),
            policy_update=fields.integer(data, "policy_update", where),
            runtime_identity=fields.string(data, "runtime_identity", where),
            sentinel=None if sentinel is None else SentinelObservation.from_json(sentinel),
            auditors=tuple(
                AuditorObservation.from_json(item)
                for item in fields.sequence(data, "auditors", where)
            ),
            components={
                name: fields.finite(components, name, "row.components") for name in components
            },
            subgroups=dict(subgroups),
        )
