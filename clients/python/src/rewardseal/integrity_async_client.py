"""The asyncio client for the control plane's ``RewardIntegrityService``
(:class:`AsyncIntegrityClient`); import it from :mod:`rewardseal.rpc.integrity_client`, which
documents both clients and holds the blocking one.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from typing import Any

from rewardseal.core.integrity.messages import spec_struct
from rewardseal.rpc.integrity_protocol import IntegrityProtocol, RewardSystemQuery, SampleQuery
from rewardseal.rpc.transport import AsyncTransport
from rewardseal.v1 import integrity_pb2 as ipb
from rewardseal.v1.integrity_pb2_grpc import RewardIntegrityServiceStub

__all__ = ["AsyncIntegrityClient"]

_ANY_STATE = ipb.AuditState.AUDIT_STATE_UNSPECIFIED
_BY_RECORD = ipb.AuditPairing.AUDIT_PAIRING_RECORD


class AsyncIntegrityClient(AsyncTransport[IntegrityProtocol]):
    """asyncio client for ``RewardIntegrityService``; see
    :class:`rewardseal.rpc.integrity_client.IntegrityClient`.

    Listings are async iterators that fetch page after page as they are read; ``list_*``
    collects one into a list.
    """

    STUB = RewardIntegrityServiceStub
    RULES = IntegrityProtocol

    # --- Reward systems ---

    async def validate_reward_system(
        self, spec: Mapping[str, Any]
    ) -> ipb.ValidateRewardSystemResponse:
        """See :meth:`IntegrityClient.validate_reward_system`."""
        request = ipb.ValidateRewardSystemRequest(spec=spec_struct(spec))
        answer: ipb.ValidateRewardSystemResponse = await self._call("ValidateRewardSystem", request)
        return answer

    async def create_reward_system(self, spec: Mapping[str, Any]) -> ipb.CreateRewardSystemResponse:
        """See :meth:`IntegrityClient.create_reward_system`."""
        request = ipb.CreateRewardSystemRequest(spec=spec_struct(spec))
        answer: ipb.CreateRewardSystemResponse = await self._call("CreateRewardSystem", request)
        return answer

    async def get_reward_system(self, revision_id: str) -> ipb.RewardSystemRevision:
        """One revision (NotFound when control does not know it)."""
        request = ipb.GetRewardSystemRequest(revision_id=revision_id)
        answer: ipb.GetRewardSystemResponse = await self._call("GetRewardSystem", request)
        return answer.revision

    def reward_systems(
        self, query: RewardSystemQuery | None = None, *, page_size: int | None = None
    ) -> AsyncIterator[ipb.RewardSystemRevision]:
        """Every revision ``query`` picks (None: all), page after page."""
        return self._read(self._protocol.reward_systems(query, page_size))

    async def list_reward_systems(
        self, query: RewardSystemQuery | None = None, *, page_size: int | None = None
    ) -> list[ipb.RewardSystemRevision]:
        """Every revision ``query`` picks, collected."""
        return [r async for r in self.reward_systems(query, page_size=page_size)]

    # --- Retention protocols and integrity profiles ---

    def retention_protocols(
        self, *, page_size: int | None = None
    ) -> AsyncIterator[ipb.RetentionProtocolRevision]:
        """Every retention protocol, page after page."""
        return self._read(self._protocol.retention_protocols(page_size))

    async def list_retention_protocols(
        self, *, page_size: int | None = None
    ) -> list[ipb.RetentionProtocolRevision]:
        """Every retention protocol, collected."""
        return [p async for p in self.retention_protocols(page_size=page_size)]

    async def get_retention_protocol(self, revision_id: str) -> ipb.RetentionProtocolRevision:
        """One protocol by revision id or built-in name."""
        request = ipb.GetRetentionProtocolRequest(revision_id=revision_id)
        answer: ipb.GetRetentionProtocolResponse = await self._call("GetRetentionProtocol", request)
        return answer.protocol

    async def create_retention_protocol(
        self, spec: Mapping[str, Any]
    ) -> ipb.CreateRetentionProtocolResponse:
        """Store a custom protocol revision (admin)."""
        request = ipb.CreateRetentionProtocolRequest(spec=spec_struct(spec))
        answer: ipb.CreateRetentionProtocolResponse = await self._call(
            "CreateRetentionProtocol", request
        )
        return answer

    def integrity_profiles(
        self, *, page_size: int | None = None
    ) -> AsyncIterator[ipb.IntegrityProfileRevision]:
        """Every integrity profile, page after page."""
        return self._read(self._protocol.integrity_profiles(page_size))

    async def list_integrity_profiles(
        self, *, page_size: int | None = None
    ) -> list[ipb.IntegrityProfileRevision]:
        """Every integrity profile, collected."""
        return [p async for p in self.integrity_profiles(page_size=page_size)]

    async def get_integrity_profile(self, revision_id: str) -> ipb.IntegrityProfileRevision:
        """One profile by revision id or built-in name."""
        request = ipb.GetIntegrityProfileRequest(revision_id=revision_id)
        answer: ipb.GetIntegrityProfileResponse = await self._call("GetIntegrityProfile", request)
        return answer.profile

    async def create_integrity_profile(
        self, spec: Mapping[str, Any]
    ) -> ipb.CreateIntegrityProfileResponse:
        """Store a custom profile revision (admin)."""
        request = ipb.CreateIntegrityProfileRequest(spec=spec_struct(spec))
        answer: ipb.CreateIntegrityProfileResponse = await self._call(
            "CreateIntegrityProfile", request
        )
        return answer

    # --- Binding ---

    async def resolve_binding(
        self, system_revision_id: str, protocol_revision_id: str, profile_revision_id: str
    ) -> ipb.ResolveBindingResponse:
        """See :meth:`IntegrityClient.resolve_binding`."""
        request = self._protocol.resolve_request(
            system_revision_id, protocol_revision_id, profile_revision_id
        )
        answer: ipb.ResolveBindingResponse = await self._call("ResolveBinding", request)
        return answer

    # --- Signal shards ---

    async def append_signal_rows(
        self,
        run_id: str,
        boundary: int,
        rows: Iterable[ipb.SignalRow],
        *,
        system_revision_id: str,
        protocol_revision_id: str,
    ) -> ipb.AppendSignalRowsResponse:
        """See :meth:`IntegrityClient.append_signal_rows`."""
        request = self._protocol.append_request(
            run_id, boundary, system_revision_id, protocol_revision_id, rows
        )
        answer: ipb.AppendSignalRowsResponse = await self._call("AppendSignalRows", request)
        return answer

    async def seal_signal_shard(
        self, run_id: str, boundary: int, *, expected_shard_id: str = ""
    ) -> ipb.SealSignalShardResponse:
        """See :meth:`IntegrityClient.seal_signal_shard`."""
        request = ipb.SealSignalShardRequest(
            run_id=run_id, boundary=boundary, expected_shard_id=expected_shard_id
        )
        answer: ipb.SealSignalShardResponse = await self._call("SealSignalShard", request)
        return answer

    async def verify_signal_shard(self, shard_id: str) -> ipb.SignalShard:
        """See :meth:`IntegrityClient.verify_signal_shard`."""
        request = ipb.VerifySignalShardRequest(shard_id=shard_id)
        answer: ipb.VerifySignalShardResponse = await self._call("VerifySignalShard", request)
        return answer.shard

    def signal_shards(
        self, run_id: str, *, page_size: int | None = None
    ) -> AsyncIterator[ipb.SignalShard]:
        """Every shard of ``run_id``, in boundary order, page after page."""
        return self._read(self._protocol.signal_shards(run_id, page_size))

    async def list_signal_shards(
        self, run_id: str, *, page_size: int | None = None
    ) -> list[ipb.SignalShard]:
        """Every shard of ``run_id``, collected."""
        return [s async for s in self.signal_shards(run_id, page_size=page_size)]

    # --- Audits ---

    async def start_audit(self, shard_id: str, profile_revision_id: str) -> ipb.Audit:
        """See :meth:`IntegrityClient.start_audit`."""
        request = ipb.StartAuditRequest(shard_id=shard_id, profile_revision_id=profile_revision_id)
        answer: ipb.StartAuditResponse = await self._call("StartAudit", request)
        return answer.audit

    async def get_audit(self, audit_id: str) -> ipb.Audit:
        """One audit as it stands."""
        request = ipb.GetAuditRequest(audit_id=audit_id)
        answer: ipb.GetAuditResponse = await self._call("GetAudit", request)
        return answer.audit

    def audits(
        self,
        *,
        run_id: str = "",
        state: ipb.AuditState.ValueType = _ANY_STATE,
        page_size: int | None = None,
    ) -> AsyncIterator[ipb.Audit]:
        """Every audit (of one run, in one state, when given), in the order they were started."""
        return self._read(self._protocol.audits(run_id, state, page_size))

    async def list_audits(
        self,
        *,
        run_id: str = "",
        state: ipb.AuditState.ValueType = _ANY_STATE,
        page_size: int | None = None,
    ) -> list[ipb.Audit]:
        """Every audit (of one run, in one state, when given), collected."""
        return [a async for a in self.audits(run_id=run_id, state=state, page_size=page_size)]

    async def watch_audit(
        self, audit_id: str, *, deadline: float | None = None
    ) -> AsyncGenerator[ipb.Audit, None]:
        """See :meth:`IntegrityClient.watch_audit`."""
        request = ipb.WatchAuditRequest(audit_id=audit_id)
        async for message in self._stream("WatchAudit", request, deadline):
            yield message.audit

    async def wait_for_audit(self, audit_id: str, *, deadline: float | None = None) -> ipb.Audit:
        """See :meth:`IntegrityClient.wait_for_audit`."""
        last: ipb.Audit | None = None
        async with contextlib.aclosing(self.watch_audit(audit_id, deadline=deadline)) as watch:
            async for audit in watch:
                last = audit
                if self._protocol.is_settled(audit):
                    break  # closing the watch cancels the stream
        return last if last is not None else await self.get_audit(audit_id)

    def audit_samples(
        self, audit_id: str, query: SampleQuery | None = None, *, page_size: int | None = None
    ) -> AsyncIterator[ipb.AuditSample]:
        """Every retained row of an audit that ``query`` picks (None: all), in shard order."""
        return self._read(self._protocol.audit_samples(audit_id, query, page_size))

    async def list_audit_samples(
        self, audit_id: str, query: SampleQuery | None = None, *, page_size: int | None = None
    ) -> list[ipb.AuditSample]:
        """Every retained row ``query`` picks, collected."""
        return [s async for s in self.audit_samples(audit_id, query, page_size=page_size)]

    async def audit_metrics(self, audit_id: str) -> ipb.GetAuditMetricsResponse:
        """See :meth:`IntegrityClient.audit_metrics`."""
        request = ipb.GetAuditMetricsRequest(audit_id=audit_id)
        answer: ipb.GetAuditMetricsResponse = await self._call("GetAuditMetrics", request)
        return answer

    async def compare_audits(
        self,
        left_audit_id: str,
        right_audit_id: str,
        *,
        pairing: ipb.AuditPairing.ValueType = _BY_RECORD,
    ) -> ipb.CompareAuditsResponse:
        """See :meth:`IntegrityClient.compare_audits`."""
        request = self._protocol.compare_request(left_audit_id, right_audit_id, pairing)
        answer: ipb.CompareAuditsResponse = await self._call("CompareAudits", request)
        return answer

    async def verify_audit(self, audit_id: str) -> ipb.VerifyAuditResponse:
        """See :meth:`IntegrityClient.verify_audit`."""
        request = ipb.VerifyAuditRequest(audit_id=audit_id)
        answer: ipb.VerifyAuditResponse = await self._call("VerifyAudit", request)
        return answer

    async def cancel_audit(self, audit_id: str, *, reason: str = "") -> ipb.Audit:
        """Cancel a queued or running audit (admin)."""
        request = ipb.CancelAuditRequest(audit_id=audit_id, reason=reason)
        answer: ipb.CancelAuditResponse = await self._call("CancelAudit", request)
        return answer.audit

    async def retry_audit(self, audit_id: str, *, reason: str) -> ipb.Audit:
        """Start a new audit of the same evidence (admin; the reason is required)."""
        request = ipb.RetryAuditRequest(audit_id=audit_id, reason=reason)
        answer: ipb.RetryAuditResponse = await self._call("RetryAudit", request)
        return answer.audit

    # --- Decisions ---

    async def review_decision(
        self,
        audit_id: str,
        action: ipb.ReviewAction.ValueType,
        *,
        reason: str,
        checkpoint: str = "",
        supersedes: int | None = None,
    ) -> ipb.DecisionEntry:
        """See :meth:`IntegrityClient.review_decision`."""
        request = self._protocol.review_request(audit_id, action, reason, checkpoint, supersedes)
        answer: ipb.ReviewDecisionResponse = await self._call("ReviewDecision", request)
        return answer.entry

    async def decision_history(self, audit_id: str) -> list[ipb.DecisionEntry]:
        """Every decision entry of an audit, oldest first; the last one is in force."""
        request = ipb.GetDecisionHistoryRequest(audit_id=audit_id)
        answer: ipb.GetDecisionHistoryResponse = await self._call("GetDecisionHistory", request)
        return list(answer.entries)
