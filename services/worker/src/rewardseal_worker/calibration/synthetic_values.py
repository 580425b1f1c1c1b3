"""The synthetic values calibration trials are made of: subjects, near misses, filler text,
record ids, and a field's value changed or type-confused.

Nothing here means anything: every identity is fresh (``customer-1a2b3c4d``), every text is
marked synthetic, every id is minted per trial. A trial's generator (:mod:`.trials`,
:mod:`.family_trials`) draws them in a fixed order, so a run stays reproducible per seed.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["World", "filler", "fresh_identity", "near_miss", "other_value", "type_confused"]

_WORDS = (
    "headache",
    "sore throat",
    "ankle sprain",
    "allergy flare",
    "low fever",
    "minor cut",
    "dry cough",
    "back stiffness",
    "vitals stable",
    "follow up",
)


class World:
    """Mints record ids for one trial; ids are unique within the trial and carry no meaning."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._next = rng.randrange(1, 1_000_000)

    def mint(self) -> str:
        self._next += self._rng.randint(1, 7)
        return f"rec-{self._next:07d}"


def _slug(key: str) -> str:
    stem = key.removesuffix("_id").replace("_", "-").strip("-")
    return stem or "subject"


def fresh_identity(
    rng: random.Random, keys: Sequence[str], avoid: Mapping[str, str]
) -> dict[str, str]:
    while True:
        identity = {k: f"{_slug(k)}-{rng.getrandbits(32):08x}" for k in keys}
        if all(identity[k] != avoid.get(k) for k in keys):
            return identity


def near_miss(rng: random.Random, value: str) -> str:
    """A value that a careless comparison could take for ``value``."""
    candidates = [
        value.upper(),
        value + "0",
        value[:-1],
        value + " ",
        " " + value,
        value.replace("-", "_"),
    ]
    choices = [c for c in candidates if c and c != value]
    return rng.choice(choices)


def filler(rng: random.Random, field: str) -> str:
    return f"Synthetic {field.replace('_', ' ')}: {rng.choice(_WORDS)} {rng.getrandbits(16):04x}"


def other_value(rng: random.Random, value: Any) -> Any:
    """Another value of the same JSON type."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + rng.randint(1, 9)
    if isinstance(value, float):
        return value + 0.5 + rng.random()
    text = str(value)
    return rng.choice(
        [t for t in (text.lower(), text.upper(), text + " ", f"Not {text}", "Consult") if t != text]
    )


def type_confused(value: Any) -> Any:
    """The same text in another JSON type, which a sound judge must not take as equal.

    None when no other scalar type spells the value (a word has no number form).
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    text = str(value)
    if text.lstrip("-").isdigit():
        return int(text)
    return None
