"""The client for the control plane's ``RewardIntegrityService``, written once for asyncio:
``AsyncIntegrityClient`` here, ``IntegrityClient`` in its generated blocking twin
(:mod:`rewardseal.rpc.aio`); :mod:`rewardseal.rpc.integrity_client` documents both.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from typing import Any

from rewardseal.core.integrity.messages import spec_struct
from rewardseal.rpc.aio.transport import AsyncTransport
from rewardseal.rpc.integrity_protocol import IntegrityProtocol, RewardSystemQuery, SampleQuery
from rewardseal.v1 import integrity_pb2 as ipb
from rewardseal.v1.integrity_pb2_grpc import RewardIntegrityServiceStub

__all__ = ["AsyncIntegrityClient"]

_ANY_STATE = ipb.AuditState.AUDIT_STATE_UNSPECIFIED
_BY_RECORD = ipb.AuditPairing.AUDIT_PAIRING_RECORD


class AsyncIntegrityClient(AsyncTransport[IntegrityProtocol]):
    """asyncio client for ``RewardIntegrityService``.

    Listings are async iterators that fetch page after page as they are read (``reward_systems``,
    ``retention_protocols``, ``integrity_profiles``, ``signal_shards``, ``audits``,
    ``audit_samples``); ``list_*`` collects one into a list.
    """

    STUB = RewardIntegrityServiceStub
    RULES = IntegrityProtocol

    # --- Reward systems (R-I-1, R-I-2) ---

    async def validate_reward_system(
        self, spec: Mapping[str, Any]
    ) -> ipb.ValidateRewardSystemResponse:
        """Every blocker of ``spec`` (sorted; empty when valid), the revision id it would get and
        its sentinel's independence. Stores nothing."""
        request = ipb.ValidateRewardSystemRequest(spec=spec_struct(spec))
        answer: ipb.ValidateRewardSystemResponse = await self._call("ValidateRewardSystem", request)
        return answer

    async def create_reward_system(self, spec: Mapping[str, Any]) -> ipb.CreateRewardSystemResponse:
        """Store ``spec`` as a revision (admin); ``created`` is False when the same content was
        stored before. A spec with blockers is refused (IntegritySpecInvalid) and stores
        nothing."""
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
        return [item async for item in self.reward_systems(query, page_size=page_size)]

    # --- Retention protocols (R-I-4) and integrity profiles (R-I-7) ---

    def retention_protocols(
        self, *, page_size: int | None = None
    ) -> AsyncIterator[ipb.RetentionProtocolRevision]:
        """Every retention protocol, page after page."""
        return self._read(self._protocol.retention_protocols(page_size))

    async def list_retention_protocols(
        self, *, page_size: int | None = None
    ) -> list[ipb.RetentionProtocolRevision]:
        """Every retention protocol, collected."""
        return [item async for item in self.retention_protocols(page_size=page_size)]

    async def get_retention_protocol(self, revision_id: str) -> ipb.RetentionProtocolRevision:
        """One protocol by revision id or built-in name."""
        request = ipb.GetRetentionProtocolRequest(revision_id=revision_id)
        answer: ipb.GetRetentionProtocolResponse = await self._call("GetRetentionProtocol", request)
        return answer.protocol

    async def create_retention_protocol(
        self, spec: Mapping[str, Any]
    ) -> ipb.CreateRetentionProtocolResponse:
        """Store a custom protocol revision (admin); ``created`` False for known content."""
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
        return [item async for item in self.integrity_profiles(page_size=page_size)]

    async def get_integrity_profile(self, revision_id: str) -> ipb.IntegrityProfileRevision:
        """One profile by revision id or built-in name."""
        request = ipb.GetIntegrityProfileRequest(revision_id=revision_id)
        answer: ipb.GetIntegrityProfileResponse = await self._call("GetIntegrityProfile", request)
        return answer.profile

    async def create_integrity_profile(
        self, spec: Mapping[str, Any]
    ) -> ipb.CreateIntegrityProfileResponse:
        """Store a custom profile revision (admin); ``created`` False for known content."""
        request = ipb.CreateIntegrityProfileRequest(spec=spec_struct(spec))
        answer: ipb.CreateIntegrityProfileResponse = await self._call(
            "CreateIntegrityProfile", request
        )
        return answer

    # --- Binding (R-I-9) ---

    async def resolve_binding(
        self, system_revision_id: str, protocol_revision_id: str, profile_revision_id: str
    ) -> ipb.ResolveBindingResponse:
        """Whether the triple may gate a run, its blockers, and the ids names resolved to."""
        request = self._protocol.resolve_request(
            system_revision_id, protocol_revision_id, profile_revision_id
        )
        answer: ipb.ResolveBindingResponse = await self._call("ResolveBinding", request)
        return answer

    # --- Signal shards (R-I-3) ---

    async def append_signal_rows(
        self,
        run_id: str,
        boundary: int,
        rows: Iterable[ipb.SignalRow],
        *,
        system_revision_id: str,
        protocol_revision_id: str,
    ) -> ipb.AppendSignalRowsResponse:
        """Add captured rows to an open boundary. Never retried: a resend could append twice."""
        request = self._protocol.append_request(
            run_id, boundary, system_revision_id, protocol_revision_id, rows
        )
        answer: ipb.AppendSignalRowsResponse = await self._call("AppendSignalRows", request)
        return answer

    async def seal_signal_shard(
        self, run_id: str, boundary: int, *, expected_shard_id: str = ""
    ) -> ipb.SealSignalShardResponse:
        """Retain and seal a boundary; with ``expected_shard_id`` a different result is refused
        (ShardCorrupt) and nothing is sealed."""
        request = ipb.SealSignalShardRequest(
            run_id=run_id, boundary=boundary, expected_shard_id=expected_shard_id
        )
        answer: ipb.SealSignalShardResponse = await self._call("SealSignalShard", request)
        return answer

    async def verify_signal_shard(self, shard_id: str) -> ipb.SignalShard:
        """The shard, once its stored rows hash to its manifest again (ShardCorrupt if not)."""
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
        return [item async for item in self.signal_shards(run_id, page_size=page_size)]

    # --- Audits (R-I-6..8) ---

    async def start_audit(self, shard_id: str, profile_revision_id: str) -> ipb.Audit:
        """Queue an audit of a sealed shard; answers at once. Never retried."""
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
        return [item async for item in self.audits(run_id=run_id, state=state, page_size=page_size)]

    async def watch_audit(
        self, audit_id: str, *, deadline: float | None = None
    ) -> AsyncGenerator[ipb.Audit, None]:
        """The audit now and after every change of state; ends once it is done, failed or
        cancelled. No deadline unless ``deadline`` (seconds) is given; never retried."""
        request = ipb.WatchAuditRequest(audit_id=audit_id)
        async for message in self._stream("WatchAudit", request, deadline):
            yield message.audit

    async def wait_for_audit(self, audit_id: str, *, deadline: float | None = None) -> ipb.Audit:
        """The audit once it is done, failed or cancelled (or as it stood when the stream ended
        early; check :attr:`~rewardseal.v1.integrity_pb2.Audit.state`)."""
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
        return [item async for item in self.audit_samples(audit_id, query, page_size=page_size)]

    async def audit_metrics(self, audit_id: str) -> ipb.GetAuditMetricsResponse:
        """Every metric with its interval and threshold, subgroups, trends and diagnostics."""
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
        """Metric deltas and outcome transitions of rows paired by record (or episode)."""
        request = self._protocol.compare_request(left_audit_id, right_audit_id, pairing)
        answer: ipb.CompareAuditsResponse = await self._call("CompareAudits", request)
        return answer

    async def verify_audit(self, audit_id: str) -> ipb.VerifyAuditResponse:
        """The signed bundle once control verified it and every shard it names (verify it
        yourself with :func:`rewardseal.core.integrity.verify_bundle` and the pinned org key)."""
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

    # --- Decisions (R-I-8) ---

    async def review_decision(
        self,
        audit_id: str,
        action: ipb.ReviewAction.ValueType,
        *,
        reason: str,
        checkpoint: str = "",
        supersedes: int | None = None,
    ) -> ipb.DecisionEntry:
        """Append a reviewed entry superseding the current one (admin); ``supersedes`` names
        the entry reviewed (None: the current one; a stale one is DecisionSuperseded)."""
        request = self._protocol.review_request(audit_id, action, reason, checkpoint, supersedes)
        answer: ipb.ReviewDecisionResponse = await self._call("ReviewDecision", request)
        return answer.entry

    async def decision_history(self, audit_id: str) -> list[ipb.DecisionEntry]:
        """Every decision entry of an audit, oldest first; the last one is in force."""
        request = ipb.GetDecisionHistoryRequest(audit_id=audit_id)
        answer: ipb.GetDecisionHistoryResponse = await self._call("GetDecisionHistory", request)
        return list(answer.entries)
