"""What the reward-integrity clients are built on (:mod:`rewardseal.rpc.integrity_client`): the
idempotent RPCs of ``RewardIntegrityService``, its listings, its request building and its filters.

Built on :class:`~rewardseal.rpc.call_rules.PagedRules`, so the credentials, deadlines, retry
and paging rules are the control plane's own (docs/spec.md §12, R-I-1..10).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from rewardseal.rpc.call_rules import Listing, PagedRules
from rewardseal.v1 import integrity_pb2 as ipb

__all__ = [
    "TERMINAL_AUDIT_STATES",
    "IntegrityProtocol",
    "RewardSystemQuery",
    "SampleQuery",
]

TERMINAL_AUDIT_STATES: Final = frozenset(
    {
        ipb.AuditState.AUDIT_STATE_DONE,
        ipb.AuditState.AUDIT_STATE_FAILED,
        ipb.AuditState.AUDIT_STATE_CANCELLED,
    }
)
"""States an audit never leaves: ``WatchAudit`` ends at one."""


@dataclass(frozen=True)
class RewardSystemQuery:
    """Which reward-system revisions to list; the defaults pick every one."""

    contract_digest: str = ""
    """Only revisions whose optimizer or an auditor names this contract digest."""
    implementation_fingerprint: str = ""
    """Only revisions whose optimizer or an auditor has this implementation fingerprint."""
    primary_sentinel_independent: bool | None = None
    """True: only gating-capable sentinels; False: only correlated ones (R-I-2)."""

    def request(self) -> ipb.ListRewardSystemsRequest:
        """The ListRewardSystems request for these filters (paging fields unset)."""
        request = ipb.ListRewardSystemsRequest(
            contract_digest=self.contract_digest,
            implementation_fingerprint=self.implementation_fingerprint,
        )
        if self.primary_sentinel_independent is not None:
            request.primary_sentinel_independent = self.primary_sentinel_independent
        return request


@dataclass(frozen=True)
class SampleQuery:
    """Which retained rows of an audit to list; the defaults pick every one."""

    outcome: ipb.SampleOutcome.ValueType = ipb.SampleOutcome.SAMPLE_OUTCOME_UNSPECIFIED
    """AGREEMENT, DISAGREEMENT (either side alone), OPTIMIZER_ONLY (the hacking candidates),
    SENTINEL_ONLY or ERROR; UNSPECIFIED: every outcome."""
    population: ipb.SignalPopulation.ValueType = ipb.SignalPopulation.SIGNAL_POPULATION_UNSPECIFIED
    """CORE or DIAGNOSTIC; UNSPECIFIED: both."""
    text: str = ""
    """A case-insensitive substring of the record, episode, group, checkpoint, output digest,
    a subgroup label or the sentinel's error."""

    def request(self, audit_id: str) -> ipb.ListAuditSamplesRequest:
        """The ListAuditSamples request of ``audit_id`` for these filters."""
        return ipb.ListAuditSamplesRequest(
            audit_id=audit_id, outcome=self.outcome, population=self.population, query=self.text
        )


class IntegrityProtocol(PagedRules):
    """``RewardIntegrityService``'s idempotent RPCs, listings and requests for both clients."""

    IDEMPOTENT = frozenset(
        {
            "ValidateRewardSystem",
            "CreateRewardSystem",
            "GetRewardSystem",
            "ListRewardSystems",
            "ListRetentionProtocols",
            "GetRetentionProtocol",
            "CreateRetentionProtocol",
            "ListIntegrityProfiles",
            "GetIntegrityProfile",
            "CreateIntegrityProfile",
            "ResolveBinding",
            "SealSignalShard",
            "VerifySignalShard",
            "ListSignalShards",
            "GetAudit",
            "ListAudits",
            "ListAuditSamples",
            "GetAuditMetrics",
            "CompareAudits",
            "VerifyAudit",
            "GetDecisionHistory",
        }
    )
    """The reads, the three ``Create*`` (a revision is its content: a repeat answers
    ``created=False``) and ``SealSignalShard`` (a sealed boundary answers its stored shard). A
    resent ``AppendSignalRows`` could append a boundary's rows twice, a resent ``StartAudit`` or
    ``RetryAudit`` start a second audit, a resent ``ReviewDecision`` append a second entry, and
    ``CancelAudit`` writes a reason: none is retried."""

    def reward_systems(
        self, query: RewardSystemQuery | None, page_size: int | None
    ) -> Listing[ipb.RewardSystemRevision]:
        """Every reward-system revision ``query`` picks (None: all)."""
        request = (query or RewardSystemQuery()).request()
        return self.listing("ListRewardSystems", request, lambda page: page.revisions, page_size)

    def retention_protocols(self, page_size: int | None) -> Listing[ipb.RetentionProtocolRevision]:
        """Every retention protocol (the built-ins and custom revisions)."""
        request = ipb.ListRetentionProtocolsRequest()
        return self.listing(
            "ListRetentionProtocols", request, lambda page: page.protocols, page_size
        )

    def integrity_profiles(self, page_size: int | None) -> Listing[ipb.IntegrityProfileRevision]:
        """Every integrity profile (the built-ins and custom revisions)."""
        request = ipb.ListIntegrityProfilesRequest()
        return self.listing("ListIntegrityProfiles", request, lambda page: page.profiles, page_size)

    def signal_shards(self, run_id: str, page_size: int | None) -> Listing[ipb.SignalShard]:
        """Every shard of ``run_id``, in boundary order."""
        request = ipb.ListSignalShardsRequest(run_id=run_id)
        return self.listing("ListSignalShards", request, lambda page: page.shards, page_size)

    def audits(
        self, run_id: str, state: ipb.AuditState.ValueType, page_size: int | None
    ) -> Listing[ipb.Audit]:
        """Every audit (of one run, in one state, when given), in the order they were started."""
        request = ipb.ListAuditsRequest(run_id=run_id, state=state)
        return self.listing("ListAudits", request, lambda page: page.audits, page_size)

    def audit_samples(
        self, audit_id: str, query: SampleQuery | None, page_size: int | None
    ) -> Listing[ipb.AuditSample]:
        """Every retained row of ``audit_id`` that ``query`` picks, in shard order."""
        request = (query or SampleQuery()).request(audit_id)
        return self.listing("ListAuditSamples", request, lambda page: page.samples, page_size)

    @staticmethod
    def append_request(
        run_id: str,
        boundary: int,
        system_revision_id: str,
        protocol_revision_id: str,
        rows: Iterable[ipb.SignalRow],
    ) -> ipb.AppendSignalRowsRequest:
        """The AppendSignalRows request for ``rows`` of one open boundary."""
        return ipb.AppendSignalRowsRequest(
            run_id=run_id,
            boundary=boundary,
            system_revision_id=system_revision_id,
            protocol_revision_id=protocol_revision_id,
            rows=list(rows),
        )

    @staticmethod
    def resolve_request(
        system_revision_id: str, protocol_revision_id: str, profile_revision_id: str
    ) -> ipb.ResolveBindingRequest:
        """The ResolveBinding request (protocol and profile may be built-in names)."""
        return ipb.ResolveBindingRequest(
            system_revision_id=system_revision_id,
            protocol_revision_id=protocol_revision_id,
            profile_revision_id=profile_revision_id,
        )

    @staticmethod
    def compare_request(
        left_audit_id: str, right_audit_id: str, pairing: ipb.AuditPairing.ValueType
    ) -> ipb.CompareAuditsRequest:
        """The CompareAudits request."""
        return ipb.CompareAuditsRequest(
            left_audit_id=left_audit_id, right_audit_id=right_audit_id, pairing=pairing
        )

    @staticmethod
    def review_request(
        audit_id: str,
        action: ipb.ReviewAction.ValueType,
        reason: str,
        checkpoint: str,
        supersedes: int | None,
    ) -> ipb.ReviewDecisionRequest:
        """The ReviewDecision request; ``supersedes`` None reviews the current entry."""
        request = ipb.ReviewDecisionRequest(
            audit_id=audit_id, action=action, reason=reason, checkpoint=checkpoint
        )
        if supersedes is not None:
            request.supersedes = supersedes
        return request

    @staticmethod
    def is_settled(audit: ipb.Audit) -> bool:
        """True once ``audit`` is done, failed or cancelled."""
        return audit.state in TERMINAL_AUDIT_STATES
