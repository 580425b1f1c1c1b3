"""Revision ids (R-I-1, R-I-4, R-I-7): the R-DIG-1 digest of a definition's scrubbed content.

Reward systems, retention protocols and integrity profiles are immutable revisions. Each type
normalizes its document (defaults explicit, unordered lists sorted) in ``to_json``; the id is the
digest of that content after :func:`~rewardseal.integrity.scrubbing.scrub_credentials`, so the
same definition always gets the same id (stores deduplicate on it) and any change gets a new one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rewardseal.digest import digest_json
from rewardseal.integrity.scrubbing import scrub_credentials

__all__ = ["revision_id"]


def revision_id(content: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` over the RFC 8785 canonical JSON of the scrubbed ``content``.

    Raises:
        ValidationError: ``content`` has no canonical JSON form (a NaN, an unsafe integer).
    """
    return digest_json(scrub_credentials(content))
