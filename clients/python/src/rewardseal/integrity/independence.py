"""Independence of an auditor from the optimizer (R-I-2).

An auditor that shares what computes the optimizer's reward would share its blind spots: it
cannot catch a policy exploiting them. So an auditor is *correlated* when it shares the
optimizer's revision, contract digest, worker key, implementation fingerprint or artifact
fingerprint, or when either side has no implementation fingerprint (nothing shows they differ).
"""

from __future__ import annotations

from typing import Final

from rewardseal.core.integrity.systems import RewardSource

__all__ = ["CORRELATION_REASONS", "correlation_reasons", "is_independent"]

CORRELATION_REASONS: Final = (
    "auditor_unfingerprinted",
    "optimizer_unfingerprinted",
    "shared_artifact_fingerprint",
    "shared_contract_digest",
    "shared_implementation_fingerprint",
    "shared_revision",
    "shared_worker_key",
)
"""Every code :func:`correlation_reasons` may return, sorted."""


def _shared(left: str | None, right: str | None) -> bool:
    return left is not None and left == right


def correlation_reasons(optimizer: RewardSource, auditor: RewardSource) -> list[str]:
    """Why ``auditor`` is correlated with ``optimizer``, sorted; empty when independent."""
    reasons: set[str] = set()
    if optimizer.source_revision == auditor.source_revision:
        reasons.add("shared_revision")
    if _shared(optimizer.contract_digest, auditor.contract_digest):
        reasons.add("shared_contract_digest")
    if _shared(optimizer.worker_key_id, auditor.worker_key_id):
        reasons.add("shared_worker_key")
    ours, theirs = optimizer.fingerprints, auditor.fingerprints
    if _shared(ours.implementation, theirs.implementation):
        reasons.add("shared_implementation_fingerprint")
    if _shared(ours.artifact, theirs.artifact):
        reasons.add("shared_artifact_fingerprint")
    if ours.implementation is None:
        reasons.add("optimizer_unfingerprinted")
    if theirs.implementation is None:
        reasons.add("auditor_unfingerprinted")
    return sorted(reasons)


def is_independent(optimizer: RewardSource, auditor: RewardSource) -> bool:
    """True when :func:`correlation_reasons` finds nothing."""
    return not correlation_reasons(optimizer, auditor)
