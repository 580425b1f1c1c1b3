"""Binding resolution (R-I-9): may this (system, protocol, profile) triple gate a training run?

A run names all three revisions together. The binding gates only when all three are present, the
primary sentinel is independent of the optimizer (R-I-2) and the profile is not report-only;
otherwise the audit is inspection only and the trainer refuses to start a *monitored* run.
"""

from __future__ import annotations

from typing import NamedTuple

from rewardseal.core.errors import BindingRefused
from rewardseal.core.integrity.fields import JsonObject
from rewardseal.core.integrity.independence import correlation_reasons
from rewardseal.core.integrity.profiles import IntegrityProfile
from rewardseal.core.integrity.protocols import RetentionProtocol
from rewardseal.core.integrity.systems import RewardSystem

__all__ = ["BindingResolution", "require_gating_binding", "resolve_binding"]


class BindingResolution(NamedTuple):
    """``gating_eligible`` and the sorted blockers that deny it (empty when eligible).

    Blockers: ``system_missing``, ``protocol_missing``, ``profile_missing``,
    ``primary_sentinel_correlated`` (with one ``primary_sentinel_correlated:<reason>`` per R-I-2
    reason), ``profile_report_only``.
    """

    gating_eligible: bool
    blockers: tuple[str, ...]

    def to_json(self) -> JsonObject:
        """The plain-dict form."""
        return {"gating_eligible": self.gating_eligible, "blockers": list(self.blockers)}


def resolve_binding(
    system: RewardSystem | None,
    protocol: RetentionProtocol | None,
    profile: IntegrityProfile | None,
) -> BindingResolution:
    """Resolve a binding; a correlated primary sentinel is reported, never raised."""
    blockers: set[str] = set()
    for name, part in (("system", system), ("protocol", protocol), ("profile", profile)):
        if part is None:
            blockers.add(f"{name}_missing")
    if system is not None:
        reasons = correlation_reasons(system.optimizer, system.primary_sentinel)
        if reasons:
            blockers.add("primary_sentinel_correlated")
            blockers.update(f"primary_sentinel_correlated:{reason}" for reason in reasons)
    if profile is not None and profile.report_only:
        blockers.add("profile_report_only")
    ordered = tuple(sorted(blockers))
    return BindingResolution(gating_eligible=not ordered, blockers=ordered)


def require_gating_binding(
    system: RewardSystem | None,
    protocol: RetentionProtocol | None,
    profile: IntegrityProfile | None,
) -> None:
    """Refuse a binding that cannot gate, before training starts (R-I-9).

    Raises:
        BindingRefused: with ``metadata["blockers"]`` (comma-separated).
    """
    resolution = resolve_binding(system, protocol, profile)
    if not resolution.gating_eligible:
        raise BindingRefused(
            f"the binding cannot gate a training run: {', '.join(resolution.blockers)}",
            metadata={"blockers": ",".join(resolution.blockers)},
        )
