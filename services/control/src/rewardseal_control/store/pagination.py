"""Keyset pagination with opaque page tokens, for every listing of the control store.

A token is base64url (unpadded) of JSON ``{"a": last sort key, "k": listing, "q": filters}``:
``k`` names the listing and ``q`` is a short fingerprint of its filters, so a token handed to
another listing, or to the same listing with other filters, is refused instead of silently
skipping rows. A malformed token is refused with ValidationError. ``page_size`` 0 means
:data:`DEFAULT_PAGE_SIZE`; anything larger than :data:`MAX_PAGE_SIZE` means that.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Generic, NamedTuple, TypeVar, cast

from sqlalchemy import ColumnElement, Select, and_, or_
from sqlalchemy.engine import Connection

from rewardseal.core.errors import ValidationError
from rewardseal_control.store.tables import AnyRow
from rewardseal_server.sqlstore import StoreEngine

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "MAX_PAGE_SIZE",
    "KeyPart",
    "Page",
    "Listing",
    "fingerprint",
    "offset_page",
]

_T = TypeVar("_T")

DEFAULT_PAGE_SIZE: Final = 50
MAX_PAGE_SIZE: Final = 500
_MAX_TOKEN_LENGTH: Final = 2048
_TOKEN_PATTERN: Final = re.compile(r"^[A-Za-z0-9_-]+\Z")

KeyPart = type[str] | type[int] | type[datetime]
"""The type of one column of a listing's sort key (what a token's values must decode to)."""


class Page(NamedTuple, Generic[_T]):
    """One page of a listing; ``next_page_token`` is empty on the last page."""

    items: list[_T]
    next_page_token: str


def fingerprint(**query: object) -> str:
    """A short digest of a listing's filters, bound into its page tokens."""
    body = json.dumps(query, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(body.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Listing:
    """One keyset-paginated listing: its name, its sort key and the types of that key.

    ``order`` must be unique per row (so no row is skipped or repeated between pages);
    ``kind`` is bound into the listing's page tokens, with the fingerprint of its filters.
    """

    kind: str
    order: tuple[ColumnElement[Any], ...]
    shape: tuple[KeyPart, ...]

    def read(
        self,
        db: StoreEngine,
        statement: Select[Any],
        *,
        query: str,
        page_size: int,
        page_token: str,
        snapshot: bool = False,
    ) -> tuple[list[AnyRow], str]:
        """One page of ``statement`` (filtered, unordered) in one read of ``db``: its rows and
        the next token ("" at the end). ``query`` is the :func:`fingerprint` of the filters."""
        return db.read(
            lambda conn: self.page(conn, statement, query=query, size=page_size, token=page_token),
            snapshot=snapshot,
        )

    def page(
        self, conn: Connection, statement: Select[Any], *, query: str, size: int, token: str
    ) -> tuple[list[AnyRow], str]:
        """:meth:`read` inside the caller's ``conn``."""
        limit = _page_size(size)
        after = _decode_token(token, self.kind, query, self.shape)
        if after is not None:
            statement = statement.where(_after(self.order, after))
        rows = list(conn.execute(statement.order_by(*self.order).limit(limit + 1)))
        if len(rows) <= limit:
            return rows, ""
        rows = rows[:limit]
        last = rows[-1]
        key = [last._mapping[column] for column in self.order]
        return rows, _encode_token(self.kind, query, key)


def offset_page(
    items: Sequence[_T], *, kind: str, query: str, page_size: int, page_token: str
) -> Page[_T]:
    """One page of a listing computed in memory (filtered rows of one stored document, such as
    an audit's samples), with the same opaque, listing-bound tokens as :class:`Listing`."""
    limit = _page_size(page_size)
    after = _decode_token(page_token, kind, query, (int,))
    start = 0 if after is None else int(after[0])
    end = start + limit
    token = _encode_token(kind, query, [end]) if end < len(items) else ""
    return Page(list(items[start:end]), token)


def _page_size(page_size: int) -> int:
    if isinstance(page_size, bool) or not isinstance(page_size, int):
        raise ValidationError("page_size must be an integer")
    if page_size < 0:
        raise ValidationError(f"page_size must not be negative, got {page_size}")
    return min(page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)


def _after(columns: Sequence[ColumnElement[Any]], values: Sequence[Any]) -> ColumnElement[bool]:
    """Rows whose ``columns`` sort after ``values`` (lexicographic row comparison)."""
    first, *rest = columns
    head, *tail = values
    greater = cast(ColumnElement[bool], first > head)
    if not rest:
        return greater
    return or_(greater, and_(first == head, _after(rest, tail)))


def _encode_token(kind: str, query: str, last: Sequence[str | int | datetime]) -> str:
    values = [v.isoformat() if isinstance(v, datetime) else v for v in last]
    body = json.dumps({"a": values, "k": kind, "q": query}, separators=(",", ":"))
    return base64.urlsafe_b64encode(body.encode()).rstrip(b"=").decode("ascii")


def _malformed_token() -> ValidationError:
    return ValidationError("page_token is malformed; pass the next_page_token of a previous page")


def _decode_token(
    token: str, kind: str, query: str, shape: Sequence[KeyPart]
) -> tuple[Any, ...] | None:
    """The sort key after which the page starts; None for the first page."""
    if not isinstance(token, str):
        raise _malformed_token()
    if not token:
        return None
    if len(token) > _MAX_TOKEN_LENGTH or not _TOKEN_PATTERN.match(token):
        raise _malformed_token()
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        document = json.loads(raw.decode("utf-8"))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise _malformed_token() from None
    if (
        not isinstance(document, dict)
        or set(document) != {"a", "k", "q"}
        or not isinstance(document["a"], list)
        or len(document["a"]) != len(shape)
    ):
        raise _malformed_token()
    if document["k"] != kind or document["q"] != query:
        raise ValidationError("page_token belongs to another listing or to other filters")
    values: list[Any] = []
    for value, expected in zip(document["a"], shape, strict=True):
        if expected is datetime:
            if not isinstance(value, str) or len(value) > 64:
                raise _malformed_token()
            try:
                moment = datetime.fromisoformat(value)
            except ValueError:
                raise _malformed_token() from None
            if moment.tzinfo is None:
                raise _malformed_token()
            values.append(moment.astimezone(UTC))
        elif expected is int:
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
                raise _malformed_token()
            values.append(value)
        else:
            if not isinstance(value, str) or len(value) > 256:
                raise _malformed_token()
            values.append(value)
    return tuple(values)
