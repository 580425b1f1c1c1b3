"""Revision ids (R-I-1, R-I-4, R-I-7): the R-DIG-1 digest of a definition's scrubbed content.

Reward systems, retention protocols and integrity profiles are immutable revisions. Each type
normalizes its document (defaults explicit, unordered lists sorted) in ``to_json``; the id is the
digest of that content after :func:`~rewardseal.core.integrity.scrubbing.scrub_credentials`, so the
same definition always gets the same id (stores deduplicate on it) and any change gets a new one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from rewardseal.core.digest import digest_json
from rewardseal.core.errors import IntegritySpecInvalid
from rewardseal.core.integrity.fields import non_finite_paths
from rewardseal.core.integrity.scrubbing import scrub_credentials

__all__ = ["NAME_PATTERN", "document_blockers", "refuse_blocked", "revision_id"]

NAME_PATTERN: Final = re.compile(r"[a-z][a-z0-9_]{0,62}")
"""The name of a protocol or profile revision: a short lowercase identifier."""


def revision_id(content: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` over the RFC 8785 canonical JSON of the scrubbed ``content``.

    Raises:
        ValidationError: ``content`` has no canonical JSON form (a NaN, an unsafe integer).
    """
    return digest_json(scrub_credentials(content))


def refuse_blocked(what: str, blockers: Sequence[str]) -> None:
    """Refuse a definition that has blockers, listing every one.

    Raises:
        IntegritySpecInvalid: ``blockers`` is not empty; ``metadata["blockers"]`` holds them
            comma-separated, and nothing of the definition may be stored.
    """
    if blockers:
        raise IntegritySpecInvalid(
            f"{what} refused: {'; '.join(blockers)}",
            metadata={"blockers": ",".join(blockers)},
        )


def document_blockers(doc: Mapping[str, Any], keys: Sequence[str], *, named: bool) -> set[str]:
    """The blockers every definition shares: NaN/inf anywhere, unknown top-level keys, and (for
    protocols and profiles, ``named``) a name that is not a short lowercase identifier."""
    found = {f"not_finite:{path}" for path in non_finite_paths(doc)}
    found |= {f"unknown_key:{key}" for key in doc if key not in keys}
    name = doc.get("name")
    if named and not (isinstance(name, str) and NAME_PATTERN.fullmatch(name)):
        found.add("invalid_value:name")
    return found
