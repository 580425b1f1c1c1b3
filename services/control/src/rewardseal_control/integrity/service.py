"""The gRPC face of reward integrity: ``RewardIntegrityService`` (docs/spec.md §12, R-I-1..10).

Served by the control plane next to ``ControlPlaneService``, over the same store and the same
credentials (roles in :mod:`rewardseal_control.roles`; the audit log names the role the
interceptor recorded for the call). The rules are core's (:mod:`rewardseal.core.integrity`, the
audit computation :mod:`rewardseal_server.integrity_audit`); the store keeps revisions, shards,
audits, bundles and decisions; audits run in the
:class:`~rewardseal_control.integrity.runner.AuditRunner`, never on an RPC: StartAudit and
RetryAudit answer with a queued audit at once, GetAudit and WatchAudit follow it. Errors are
``rewardseal.core.errors`` classes mapped in one place (``rewardseal.rpc.status``); a refused
request stores nothing (every write is one transaction of the store).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from datetime import datetime
from typing import Any, Final

import grpc

from rewardseal.core.clock import utc_now
from rewardseal.core.errors import (
    AuditStateConflict,
    RewardSealError,
    ShardCorrupt,
    ValidationError,
)
from rewardseal.core.integrity import (
    DEFAULT_PROFILE,
    AuditBundle,
    Review,
    correlation_reasons,
    parse_reward_system,
    resolve_binding,
    validate_reward_system,
)
from rewardseal.core.integrity.messages import enum_word, signal_row, struct_document
from rewardseal.core.signing import SigningKey
from rewardseal.rpc.status import abort, maps_errors
from rewardseal.v1 import integrity_pb2 as pb
from rewardseal.v1 import integrity_pb2_grpc as pb_grpc
from rewardseal_control.integrity.convert import (
    audit_message,
    entry_message,
    profile_message,
    protocol_message,
    shard_message,
    system_message,
)
from rewardseal_control.integrity.runner import AuditFunction, AuditRunner, verified_report
from rewardseal_control.integrity.store.audits import TERMINAL_STATES, StoredAudit
from rewardseal_control.integrity.store.revisions import StoredRevision, SystemFilter
from rewardseal_control.integrity.store.shards import MAX_APPEND_ROWS
from rewardseal_control.integrity.views import (
    compare_audits,
    list_samples,
    metrics_response,
    samples_of,
)
from rewardseal_control.roles import caller_actor
from rewardseal_control.store import ControlStore
from rewardseal_server.integrity_audit.bootstrap import RESAMPLES

__all__ = ["RewardIntegrityServicer"]

WATCH_POLL_SECONDS: Final = 0.5
"""A watcher re-reads its audit at least this often (another replica may run it)."""
_REPORT_CACHE: Final = 256

Context = grpc.aio.ServicerContext[Any, Any]


def _system_reasons(stored: StoredRevision) -> list[str]:
    system = stored.system()
    return correlation_reasons(system.optimizer, system.primary_sentinel)


class RewardIntegrityServicer(pb_grpc.RewardIntegrityServiceServicer):
    """Implements every RPC of ``RewardIntegrityService`` and owns the audit runner.

    ``key`` is the organization key that signs audit bundles. Call :meth:`start` before serving
    (it stores the built-in protocols and profiles and starts the runner) and :meth:`close` when
    stopping (``server.py`` does both).
    """

    def __init__(
        self,
        store: ControlStore,
        key: SigningKey,
        *,
        clock: Callable[[], datetime] = utc_now,
        resamples: int = RESAMPLES,
        audit: AuditFunction | None = None,
    ) -> None:
        """``resamples`` and ``audit`` go to the runner (tests use fewer resamples)."""
        self.store = store
        self.key = key
        self.clock = clock
        self.resamples = resamples
        extra: dict[str, Any] = {} if audit is None else {"audit": audit}
        self.runner = AuditRunner(
            store, key, clock=clock, on_change=self._notify, resamples=resamples, **extra
        )
        self._changed = asyncio.Condition()
        self._closing = False
        self._reports: dict[str, AuditBundle] = {}

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Store the built-in revisions (once) and start the audit runner."""
        await asyncio.to_thread(self.store.integrity_revisions.ensure_builtins, at=self.clock())
        await self.runner.start()

    async def close(self) -> None:
        """Stop the runner and end every watch stream."""
        self._closing = True
        await self.runner.close()
        await self._notify()

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    # ------------------------------------------------------------------ audits as messages

    def _report(self, audit: StoredAudit) -> AuditBundle | None:
        """The verified bundle of a decided audit (bundles are immutable: cached by id)."""
        if audit.bundle_id is None:
            return None
        cached = self._reports.get(audit.bundle_id)
        if cached is None:
            stored = self.store.integrity_decisions.bundle(audit.bundle_id)
            cached = verified_report(self.store, stored)
            if len(self._reports) >= _REPORT_CACHE:
                self._reports.clear()
            self._reports[audit.bundle_id] = cached
        return cached

    def _audit_message(self, audit: StoredAudit) -> pb.Audit:
        return audit_message(audit, self._report(audit))

    async def _decided(self, audit_id: str) -> tuple[StoredAudit, AuditBundle]:
        audit = await asyncio.to_thread(self.store.integrity_audits.get, audit_id)
        bundle = await asyncio.to_thread(self._report, audit)
        if audit.state != "done" or bundle is None:
            raise AuditStateConflict(
                f"audit {audit_id} is {audit.state}, not decided yet",
                metadata={"state": audit.state},
            )
        return audit, bundle

    # ------------------------------------------------------------------ reward systems

    @maps_errors
    async def ValidateRewardSystem(  # noqa: N802
        self, request: pb.ValidateRewardSystemRequest, context: Context
    ) -> pb.ValidateRewardSystemResponse:
        spec = struct_document(request.spec)
        blockers = validate_reward_system(spec)
        if blockers:
            return pb.ValidateRewardSystemResponse(blockers=blockers)
        system = parse_reward_system(spec)
        reasons = correlation_reasons(system.optimizer, system.primary_sentinel)
        return pb.ValidateRewardSystemResponse(
            revision_id=system.revision_id,
            primary_sentinel_independent=not reasons,
            correlation_reasons=reasons,
        )

    @maps_errors
    async def CreateRewardSystem(  # noqa: N802
        self, request: pb.CreateRewardSystemRequest, context: Context
    ) -> pb.CreateRewardSystemResponse:
        stored, created = await asyncio.to_thread(
            self.store.integrity_revisions.create_system,
            struct_document(request.spec),
            caller_actor(),
            at=self.clock(),
        )
        return pb.CreateRewardSystemResponse(
            revision=system_message(stored, _system_reasons(stored)), created=created
        )

    @maps_errors
    async def GetRewardSystem(  # noqa: N802
        self, request: pb.GetRewardSystemRequest, context: Context
    ) -> pb.GetRewardSystemResponse:
        stored = await asyncio.to_thread(
            self.store.integrity_revisions.get, "system", request.revision_id
        )
        return pb.GetRewardSystemResponse(revision=system_message(stored, _system_reasons(stored)))

    @maps_errors
    async def ListRewardSystems(  # noqa: N802
        self, request: pb.ListRewardSystemsRequest, context: Context
    ) -> pb.ListRewardSystemsResponse:
        filters = SystemFilter(
            contract_digest=request.contract_digest or None,
            implementation_fingerprint=request.implementation_fingerprint or None,
            independent=(
                request.primary_sentinel_independent
                if request.HasField("primary_sentinel_independent")
                else None
            ),
        )
        page = await asyncio.to_thread(
            self.store.integrity_revisions.list_revisions,
            "system",
            request.page_size,
            request.page_token,
            filters,
        )
        return pb.ListRewardSystemsResponse(
            revisions=[system_message(s, _system_reasons(s)) for s in page.items],
            next_page_token=page.next_page_token,
        )

    # ------------------------------------------------------------------ protocols and profiles

    @maps_errors
    async def ListRetentionProtocols(  # noqa: N802
        self, request: pb.ListRetentionProtocolsRequest, context: Context
    ) -> pb.ListRetentionProtocolsResponse:
        page = await asyncio.to_thread(
            self.store.integrity_revisions.list_revisions,
            "protocol",
            request.page_size,
            request.page_token,
        )
        return pb.ListRetentionProtocolsResponse(
            protocols=[protocol_message(p) for p in page.items],
            next_page_token=page.next_page_token,
        )

    @maps_errors
    async def GetRetentionProtocol(  # noqa: N802
        self, request: pb.GetRetentionProtocolRequest, context: Context
    ) -> pb.GetRetentionProtocolResponse:
        stored = await asyncio.to_thread(
            self.store.integrity_revisions.get, "protocol", request.revision_id
        )
        return pb.GetRetentionProtocolResponse(protocol=protocol_message(stored))

    @maps_errors
    async def CreateRetentionProtocol(  # noqa: N802
        self, request: pb.CreateRetentionProtocolRequest, context: Context
    ) -> pb.CreateRetentionProtocolResponse:
        stored, created = await asyncio.to_thread(
            self.store.integrity_revisions.create_protocol,
            struct_document(request.spec),
            caller_actor(),
            at=self.clock(),
        )
        return pb.CreateRetentionProtocolResponse(
            protocol=protocol_message(stored), created=created
        )

    @maps_errors
    async def ListIntegrityProfiles(  # noqa: N802
        self, request: pb.ListIntegrityProfilesRequest, context: Context
    ) -> pb.ListIntegrityProfilesResponse:
        page = await asyncio.to_thread(
            self.store.integrity_revisions.list_revisions,
            "profile",
            request.page_size,
            request.page_token,
        )
        return pb.ListIntegrityProfilesResponse(
            profiles=[profile_message(p, default_name=DEFAULT_PROFILE) for p in page.items],
            next_page_token=page.next_page_token,
        )

    @maps_errors
    async def GetIntegrityProfile(  # noqa: N802
        self, request: pb.GetIntegrityProfileRequest, context: Context
    ) -> pb.GetIntegrityProfileResponse:
        stored = await asyncio.to_thread(
            self.store.integrity_revisions.get, "profile", request.revision_id
        )
        return pb.GetIntegrityProfileResponse(
            profile=profile_message(stored, default_name=DEFAULT_PROFILE)
        )

    @maps_errors
    async def CreateIntegrityProfile(  # noqa: N802
        self, request: pb.CreateIntegrityProfileRequest, context: Context
    ) -> pb.CreateIntegrityProfileResponse:
        stored, created = await asyncio.to_thread(
            self.store.integrity_revisions.create_profile,
            struct_document(request.spec),
            caller_actor(),
            at=self.clock(),
        )
        return pb.CreateIntegrityProfileResponse(
            profile=profile_message(stored, default_name=DEFAULT_PROFILE), created=created
        )

    @maps_errors
    async def ResolveBinding(  # noqa: N802
        self, request: pb.ResolveBindingRequest, context: Context
    ) -> pb.ResolveBindingResponse:
        revisions = self.store.integrity_revisions

        def lookup(kind: Any, revision_id: str) -> StoredRevision | None:
            return revisions.get(kind, revision_id) if revision_id else None

        system, protocol, profile = [
            await asyncio.to_thread(lookup, kind, revision_id)
            for kind, revision_id in (
                ("system", request.system_revision_id),
                ("protocol", request.protocol_revision_id),
                ("profile", request.profile_revision_id),
            )
        ]
        resolution = resolve_binding(
            system.system() if system else None,
            protocol.protocol() if protocol else None,
            profile.profile() if profile else None,
        )
        return pb.ResolveBindingResponse(
            gating_eligible=resolution.gating_eligible,
            blockers=list(resolution.blockers),
            system_revision_id=system.revision_id if system else "",
            protocol_revision_id=protocol.revision_id if protocol else "",
            profile_revision_id=profile.revision_id if profile else "",
        )

    # ------------------------------------------------------------------ signal shards

    @maps_errors
    async def AppendSignalRows(  # noqa: N802
        self, request: pb.AppendSignalRowsRequest, context: Context
    ) -> pb.AppendSignalRowsResponse:
        if len(request.rows) > MAX_APPEND_ROWS:
            raise ValidationError(f"at most {MAX_APPEND_ROWS} rows per append")
        rows = [signal_row(row, f"rows[{index}]") for index, row in enumerate(request.rows)]
        appended, open_rows = await asyncio.to_thread(
            self.store.integrity_shards.append_rows,
            request.run_id,
            request.boundary,
            request.system_revision_id,
            request.protocol_revision_id,
            rows,
            at=self.clock(),
        )
        return pb.AppendSignalRowsResponse(appended=appended, open_rows=open_rows)

    @maps_errors
    async def SealSignalShard(  # noqa: N802
        self, request: pb.SealSignalShardRequest, context: Context
    ) -> pb.SealSignalShardResponse:
        shard, created = await asyncio.to_thread(
            self.store.integrity_shards.seal,
            request.run_id,
            request.boundary,
            expected_shard_id=request.expected_shard_id,
            at=self.clock(),
        )
        return pb.SealSignalShardResponse(shard=shard_message(shard), created=created)

    @maps_errors
    async def VerifySignalShard(  # noqa: N802
        self, request: pb.VerifySignalShardRequest, context: Context
    ) -> pb.VerifySignalShardResponse:
        shard = await asyncio.to_thread(self.store.integrity_shards.verify, request.shard_id)
        return pb.VerifySignalShardResponse(shard=shard_message(shard))

    @maps_errors
    async def ListSignalShards(  # noqa: N802
        self, request: pb.ListSignalShardsRequest, context: Context
    ) -> pb.ListSignalShardsResponse:
        page = await asyncio.to_thread(
            self.store.integrity_shards.list_shards,
            request.run_id,
            request.page_size,
            request.page_token,
        )
        return pb.ListSignalShardsResponse(
            shards=[shard_message(s) for s in page.items], next_page_token=page.next_page_token
        )

    # ------------------------------------------------------------------ audits

    @maps_errors
    async def StartAudit(  # noqa: N802
        self, request: pb.StartAuditRequest, context: Context
    ) -> pb.StartAuditResponse:
        if not request.shard_id:
            raise ValidationError("shard_id is required")
        if not request.profile_revision_id:
            # R-I-9: a binding names its profile; there is no silent default.
            raise ValidationError("profile_revision_id is required (an id or a built-in's name)")
        audit = await asyncio.to_thread(
            self.store.integrity_audits.create,
            request.shard_id,
            request.profile_revision_id,
            at=self.clock(),
        )
        self.runner.wake()
        await self._notify()
        return pb.StartAuditResponse(audit=await asyncio.to_thread(self._audit_message, audit))

    @maps_errors
    async def GetAudit(  # noqa: N802
        self, request: pb.GetAuditRequest, context: Context
    ) -> pb.GetAuditResponse:
        audit = await asyncio.to_thread(self.store.integrity_audits.get, request.audit_id)
        return pb.GetAuditResponse(audit=await asyncio.to_thread(self._audit_message, audit))

    @maps_errors
    async def ListAudits(  # noqa: N802
        self, request: pb.ListAuditsRequest, context: Context
    ) -> pb.ListAuditsResponse:
        state = enum_word(pb.AuditState, request.state, "AUDIT_STATE_") or ""
        page = await asyncio.to_thread(
            self.store.integrity_audits.list_audits,
            request.run_id,
            state,
            request.page_size,
            request.page_token,
        )
        audits = [await asyncio.to_thread(self._audit_message, audit) for audit in page.items]
        return pb.ListAuditsResponse(audits=audits, next_page_token=page.next_page_token)

    async def WatchAudit(  # noqa: N802
        self, request: pb.WatchAuditRequest, context: Context
    ) -> AsyncIterator[pb.WatchAuditResponse]:
        """The audit now, then after every change, until it is done, failed or cancelled."""
        try:
            last: tuple[Any, ...] | None = None
            while True:
                audit = await asyncio.to_thread(self.store.integrity_audits.get, request.audit_id)
                seen = (audit.state, audit.attempts, audit.updated_at, audit.bundle_id)
                if seen != last:
                    last = seen
                    yield pb.WatchAuditResponse(
                        audit=await asyncio.to_thread(self._audit_message, audit)
                    )
                if audit.state in TERMINAL_STATES or self._closing:
                    return
                async with self._changed:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._changed.wait(), WATCH_POLL_SECONDS)
        except RewardSealError as error:
            await abort(context, error)

    @maps_errors
    async def ListAuditSamples(  # noqa: N802
        self, request: pb.ListAuditSamplesRequest, context: Context
    ) -> pb.ListAuditSamplesResponse:
        audit = await asyncio.to_thread(self.store.integrity_audits.get, request.audit_id)
        samples = await asyncio.to_thread(self._samples, audit)
        return list_samples(audit.audit_id, samples, request)

    def _samples(self, audit: StoredAudit) -> list[Any]:
        system = self.store.integrity_revisions.get("system", audit.system_revision_id).system()
        loaded = self.store.integrity_shards.load(audit.shard_id)
        return samples_of(loaded.rows, system.mapping)

    @maps_errors
    async def GetAuditMetrics(  # noqa: N802
        self, request: pb.GetAuditMetricsRequest, context: Context
    ) -> pb.GetAuditMetricsResponse:
        audit, bundle = await self._decided(request.audit_id)
        profile = await asyncio.to_thread(
            self.store.integrity_revisions.get, "profile", audit.profile_revision_id
        )
        return metrics_response(audit.audit_id, bundle.report, profile.profile(), self.resamples)

    @maps_errors
    async def CompareAudits(  # noqa: N802
        self, request: pb.CompareAuditsRequest, context: Context
    ) -> pb.CompareAuditsResponse:
        left, left_bundle = await self._decided(request.left_audit_id)
        right, right_bundle = await self._decided(request.right_audit_id)
        return compare_audits(
            (left_bundle.report, await asyncio.to_thread(self._samples, left)),
            (right_bundle.report, await asyncio.to_thread(self._samples, right)),
            request.pairing,
        )

    @maps_errors
    async def VerifyAudit(  # noqa: N802
        self, request: pb.VerifyAuditRequest, context: Context
    ) -> pb.VerifyAuditResponse:
        audit = await asyncio.to_thread(self.store.integrity_audits.get, request.audit_id)
        if audit.state != "done" or audit.bundle_id is None:
            raise AuditStateConflict(
                f"audit {audit.audit_id} is {audit.state}: it has no bundle yet",
                metadata={"state": audit.state},
            )
        stored = await asyncio.to_thread(self.store.integrity_decisions.bundle, audit.bundle_id)
        # Never the cache: verification reads the stored bytes every time.
        bundle = await asyncio.to_thread(verified_report, self.store, stored)
        shards = self.store.integrity_shards
        current = await asyncio.to_thread(shards.get, audit.shard_id)
        names = [s.shard_id for s in await asyncio.to_thread(shards.earlier, current)] + [
            audit.shard_id
        ]
        if list(bundle.report.shard_ids) != names:
            raise ShardCorrupt("the bundle names other shards than the audit's evidence")
        for shard_id in names:
            await asyncio.to_thread(shards.verify, shard_id)
        return pb.VerifyAuditResponse(
            bundle_id=bundle.bundle_id,
            bundle=bundle.envelope,
            signer_key_id=stored.signer_key_id,
            shard_ids=names,
        )

    @maps_errors
    async def CancelAudit(  # noqa: N802
        self, request: pb.CancelAuditRequest, context: Context
    ) -> pb.CancelAuditResponse:
        audit = await asyncio.to_thread(
            self.store.integrity_audits.cancel,
            request.audit_id,
            request.reason,
            caller_actor(),
            at=self.clock(),
        )
        await self._notify()
        return pb.CancelAuditResponse(audit=await asyncio.to_thread(self._audit_message, audit))

    @maps_errors
    async def RetryAudit(  # noqa: N802
        self, request: pb.RetryAuditRequest, context: Context
    ) -> pb.RetryAuditResponse:
        audit = await asyncio.to_thread(
            self.store.integrity_audits.retry,
            request.audit_id,
            request.reason,
            caller_actor(),
            at=self.clock(),
        )
        self.runner.wake()
        await self._notify()
        return pb.RetryAuditResponse(audit=await asyncio.to_thread(self._audit_message, audit))

    # ------------------------------------------------------------------ decisions

    @maps_errors
    async def ReviewDecision(  # noqa: N802
        self, request: pb.ReviewDecisionRequest, context: Context
    ) -> pb.ReviewDecisionResponse:
        decisions = self.store.integrity_decisions
        supersedes = request.supersedes if request.HasField("supersedes") else None
        if supersedes is None:
            history = await asyncio.to_thread(decisions.history, request.audit_id)
            supersedes = history[-1].sequence if history else 0
        actor = caller_actor()
        review = Review(
            action=enum_word(pb.ReviewAction, request.action, "REVIEW_ACTION_") or "",
            reason=request.reason,
            supersedes=supersedes,
            checkpoint=request.checkpoint or None,
            reviewer=actor,
        )
        entry = await asyncio.to_thread(
            decisions.review, request.audit_id, review, actor, at=self.clock()
        )
        _, bundle = await self._decided(request.audit_id)
        await self._notify()
        return pb.ReviewDecisionResponse(
            entry=entry_message(entry, report_only=bundle.report.decision.report_only)
        )

    @maps_errors
    async def GetDecisionHistory(  # noqa: N802
        self, request: pb.GetDecisionHistoryRequest, context: Context
    ) -> pb.GetDecisionHistoryResponse:
        history = await asyncio.to_thread(self.store.integrity_decisions.history, request.audit_id)
        audit = await asyncio.to_thread(self.store.integrity_audits.get, request.audit_id)
        bundle = await asyncio.to_thread(self._report, audit)
        report_only = bundle is not None and bundle.report.decision.report_only
        return pb.GetDecisionHistoryResponse(
            entries=[entry_message(entry, report_only=report_only) for entry in history]
        )
