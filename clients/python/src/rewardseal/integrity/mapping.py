"""The reward mapping of a reward-system revision: normalize, then scale and center, then the
threshold (R-I-1).

``normalized = (raw - min) / (max - min)`` (``(max - raw) / (max - min)`` when the direction is
``minimize``), ``mapped = normalized * scale + center``, accepted when ``mapped >= threshold``.
The mapped range is therefore ``[center, center + scale]`` and a threshold outside it is a
blocker: it would accept everything or nothing. A raw reward that is not finite or lies outside
``[min, max]`` is a mapping failure, handled by ``failure_behavior``:

* ``reject``: the output counts as refused (no mapped value);
* ``raise``: :class:`~rewardseal.core.errors.RewardMappingError`;
* ``abstain``: no verdict at all (the output is left out of agreement rates).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

from rewardseal.core.errors import RewardMappingError, ValidationError
from rewardseal.core.integrity import fields
from rewardseal.core.integrity.fields import JsonObject

__all__ = [
    "DIRECTIONS",
    "FAILURE_BEHAVIORS",
    "Direction",
    "FailureBehavior",
    "MappedReward",
    "Normalization",
    "RewardMapping",
    "map_reward",
    "mapping_blockers",
]

Direction = Literal["maximize", "minimize"]
FailureBehavior = Literal["reject", "raise", "abstain"]
DIRECTIONS: Final[tuple[str, ...]] = get_args(Direction)
FAILURE_BEHAVIORS: Final[tuple[str, ...]] = get_args(FailureBehavior)

_NORMALIZATION_KEYS: Final = ("min", "max", "direction")
_MAPPING_KEYS: Final = ("normalization", "scale", "center", "threshold", "failure_behavior")


@dataclass(frozen=True, slots=True)
class Normalization:
    """The raw reward's range and which end is good."""

    minimum: float
    maximum: float
    direction: Direction = "maximize"

    def to_json(self) -> JsonObject:
        """The plain-dict form (``min``/``max`` as floats, so 5 and 5.0 digest alike)."""
        return {"min": self.minimum, "max": self.maximum, "direction": self.direction}

    @classmethod
    def from_json(cls, doc: object) -> Normalization:
        """Read a normalization; refuse unknown keys, non-finite bounds and an empty range."""
        where = "mapping.normalization"
        data = fields.mapping(doc, where)
        fields.no_unknown_keys(data, _NORMALIZATION_KEYS, where)
        direction = data.get("direction", "maximize")
        if direction not in DIRECTIONS:
            raise ValidationError(f"{where}.direction must be one of {', '.join(DIRECTIONS)}")
        made = cls(fields.finite(data, "min", where), fields.finite(data, "max", where), direction)
        if made.minimum >= made.maximum:
            raise ValidationError(f"{where}: min must be below max")
        return made


@dataclass(frozen=True, slots=True)
class MappedReward:
    """What the mapping made of one raw reward.

    ``accepted`` is None only when the mapping failed under ``abstain``; ``failure`` names why the
    mapping failed (``not_finite`` or ``out_of_range``) and is None when it did not.
    """

    normalized: float | None
    mapped: float | None
    accepted: bool | None
    failure: str | None = None


@dataclass(frozen=True, slots=True)
class RewardMapping:
    """Normalization, scale, center, threshold and failure behaviour of one reward system."""

    normalization: Normalization
    threshold: float
    scale: float = 1.0
    center: float = 0.0
    failure_behavior: FailureBehavior = "reject"

    @property
    def mapped_range(self) -> tuple[float, float]:
        """The lowest and highest value :func:`map_reward` can return (scale is positive)."""
        return (self.center, self.center + self.scale)

    def to_json(self) -> JsonObject:
        """The plain-dict form with every default explicit (it is part of a revision's content)."""
        return {
            "normalization": self.normalization.to_json(),
            "scale": self.scale,
            "center": self.center,
            "threshold": self.threshold,
            "failure_behavior": self.failure_behavior,
        }

    @classmethod
    def from_json(cls, doc: object) -> RewardMapping:
        """Read a mapping and refuse it unless :func:`mapping_blockers` finds nothing."""
        blockers = mapping_blockers(doc)
        if blockers:
            raise ValidationError(f"reward mapping refused: {'; '.join(blockers)}")
        data = fields.mapping(doc, "mapping")
        return cls(
            normalization=Normalization.from_json(data["normalization"]),
            threshold=float(data["threshold"]),
            scale=float(data.get("scale", 1.0)),
            center=float(data.get("center", 0.0)),
            failure_behavior=data.get("failure_behavior", "reject"),
        )


def mapping_blockers(doc: object, where: str = "mapping") -> list[str]:
    """Every reason a mapping document cannot be used, sorted and unique (empty when valid)."""
    if not isinstance(doc, Mapping):
        return [f"wrong_type:{where}"]
    found: set[str] = {f"unknown_key:{where}.{key}" for key in doc if key not in _MAPPING_KEYS}
    norm = doc.get("normalization")
    low = high = None
    if not isinstance(norm, Mapping):
        found.add(f"missing:{where}.normalization" if norm is None else f"wrong_type:{where}")
    else:
        found |= {
            f"unknown_key:{where}.normalization.{key}"
            for key in norm
            if key not in _NORMALIZATION_KEYS
        }
        low, high = fields.finite_number(norm.get("min")), fields.finite_number(norm.get("max"))
        for key, number in (("min", low), ("max", high)):
            if number is None:
                found.add(f"invalid_value:{where}.normalization.{key}")
        if low is not None and high is not None and low >= high:
            found.add("normalization_range_empty")
        if norm.get("direction", "maximize") not in DIRECTIONS:
            found.add(f"invalid_value:{where}.normalization.direction")
    scale, center = (
        fields.finite_number(doc.get("scale", 1.0)),
        fields.finite_number(doc.get("center", 0.0)),
    )
    if scale is None or scale <= 0:
        found.add("scale_not_positive" if scale is not None else f"invalid_value:{where}.scale")
    if center is None:
        found.add(f"invalid_value:{where}.center")
    threshold = fields.finite_number(doc.get("threshold"))
    if threshold is None:
        found.add(f"invalid_value:{where}.threshold")
    elif (
        scale is not None
        and scale > 0
        and center is not None
        and not center <= threshold <= center + scale
    ):
        found.add("threshold_outside_mapped_range")
    if doc.get("failure_behavior", "reject") not in FAILURE_BEHAVIORS:
        found.add(f"invalid_value:{where}.failure_behavior")
    return sorted(found)


def _failed(mapping: RewardMapping, failure: str, message: str) -> MappedReward:
    if mapping.failure_behavior == "raise":
        raise RewardMappingError(message, metadata={"failure": failure})
    accepted = None if mapping.failure_behavior == "abstain" else False
    return MappedReward(normalized=None, mapped=None, accepted=accepted, failure=failure)


def map_reward(raw: Any, mapping: RewardMapping) -> MappedReward:
    """Map one raw reward: normalize, scale and center, compare with the threshold.

    Raises:
        RewardMappingError: ``raw`` is not a finite number or lies outside the normalization
            range, and the failure behaviour is ``raise``.
    """
    value = fields.finite_number(raw)
    if value is None:
        return _failed(mapping, "not_finite", f"raw reward {raw!r} is not a finite number")
    norm = mapping.normalization
    if not norm.minimum <= value <= norm.maximum:
        return _failed(
            mapping,
            "out_of_range",
            f"raw reward {value!r} lies outside [{norm.minimum!r}, {norm.maximum!r}]",
        )
    span = norm.maximum - norm.minimum
    offset = value - norm.minimum if norm.direction == "maximize" else norm.maximum - value
    normalized = offset / span
    mapped = normalized * mapping.scale + mapping.center
    return MappedReward(normalized=normalized, mapped=mapped, accepted=mapped >= mapping.threshold)
