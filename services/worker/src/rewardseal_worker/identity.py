"""An oracle identity as one typed value: its names and values, and its canonical key (R-W-2).

The worker checks an identity where it enters (BeginEpisode, a descriptor, a registration read
back from the store) and from then on passes this value: the reader and the judge read it as a
mapping, the store keys open episodes and credited records by :attr:`Identity.key`. The key is
computed once, when the value is made, so no layer carries a mapping and a key string side by
side or turns a key back into an identity.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from rewardseal.digest import canonical_json


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
        self._key = canonical_json(self._values).decode()

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

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Identity):
            return self._key == other._key
        return super().__eq__(other)

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        return f"Identity({self._values!r})"
