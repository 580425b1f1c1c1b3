"""An oracle identity as one typed value: its names and values, and its canonical key (R-W-2).

The worker checks an identity where it enters (BeginEpisode, a descriptor, a registration read
back from the store) and from then on passes this value: the reader and the judge read it as a
mapping, the store keys open episodes and credited records by :attr:`Identity.key`. The key is
computed once, when the value is made, so no layer carries a mapping and a key string side by
side or turns a key back into an identity.
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterator, KeysView, Mapping, ValuesView
from typing import Any

from rewardseal.core.digest import canonical_json
from rewardseal.core.digest import canonical_string as quote


class Identity(Mapping[str, str]):
    """An immutable oracle identity (name -> value) and its canonical key.

    Equal identities have equal keys: the key is the identity's canonical JSON (RFC 8785), the
    string the store has always keyed by. Compares equal to any mapping with the same entries.
    """

    __slots__ = ("_key", "_values")

    def __init__(self, values: Mapping[str, str]) -> None:
        """The identity of ``values`` (copied, in name order, as its key lists them), already
        checked by the caller.

        Raises:
            ValidationError: a value has no canonical JSON form.
        """
        self._values: dict[str, str] = dict(sorted(values.items()))
        self._key = _key_of(self._values)

    @property
    def key(self) -> str:
        """The canonical string of this identity (``canonical_json(identity).decode()``)."""
        return self._key

    def __getitem__(self, name: str) -> str:
        return self._values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    # The dict's own views and lookups: Mapping's generic ones call back into Python per item,
    # and the checks and the judge read every identity several times per episode.
    def __contains__(self, name: object) -> bool:
        return name in self._values

    def keys(self) -> KeysView[str]:
        return self._values.keys()

    def items(self) -> ItemsView[str, str]:
        return self._values.items()

    def values(self) -> ValuesView[str]:
        return self._values.values()

    def get(self, name: str, default: Any = None) -> Any:
        return self._values.get(name, default)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Identity):
            return self._key == other._key
        return super().__eq__(other)

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        return f"Identity({self._values!r})"


def _key_of(values: dict[str, str]) -> str:
    """``canonical_json(values).decode()`` for ``values`` in name order.

    Identities are short maps of ASCII names to (mostly ASCII) strings, and the worker makes two
    per episode: those are written here member by member (ASCII names sort the same by code
    point and by RFC 8785's UTF-16 units; an ASCII value has a UTF-8 form), anything else takes
    canonical_json. A property test holds the two to rfc8785.
    """
    members = []
    for name, value in values.items():
        if not (type(name) is str and type(value) is str and name.isascii() and value.isascii()):
            return canonical_json(values).decode()
        members.append(f"{quote(name)}:{quote(value)}")
    return "{" + ",".join(members) + "}"
