"""The integrity proof's run: a policy drifting toward the banner lie, audited at every boundary.

:func:`local_integrity_services` starts, as child processes in one run directory, the control
plane (SQLite), the tier-2 ``sql`` worker (which seeds MockMed's system of record), MockMed over
that database, a ``rest``-channel worker (its own data directory and key, reading MockMed through
its HTTP API) and a second ``sql`` worker on the first one's data directory (same bundle, recipe
and key; its own receipt store). :func:`play_boundaries` plays every boundary's episodes once,
each begun and scored by the ``sql`` and the ``rest`` worker and paid by the tier-0 screen
reward (:func:`rewardseal_kit.proof.integrity.case.play_case`): the policy is scripted, so what
it does at boundary k does not depend on which reward a case optimizes, and every case reads the
same outputs. :func:`run_case` then sends a case's rows to control boundary after boundary (append,
seal, audit, wait), verifies every signed bundle against control's organization key, and stops
at the first decision that pauses the run: later boundaries are not trained.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from google.protobuf import json_format

from rewardseal.core.errors import RewardSealError, ValidationError
from rewardseal.core.integrity import (
    DEFAULT_PROFILE,
    RewardSource,
    SignalRow,
    verify_bundle,
)
from rewardseal.core.integrity.messages import signal_row_message
from rewardseal.core.signing import TrustSet
from rewardseal.rpc.integrity_client import IntegrityClient
from rewardseal.rpc.worker_client import WorkerClient
from rewardseal.v1 import integrity_pb2 as ipb
from rewardseal.v1.contract_pb2 import RewardContract
from rewardseal_kit.proof.conditions import MockMedUI
from rewardseal_kit.proof.integrity.case import (
    CASE_RECORDS,
    CaseEpisode,
    CaseWorker,
    case_system,
    play_case,
    reward_source,
    screen_source,
    signal_rows,
)
from rewardseal_kit.proof.rewards import SCREEN_T0
from rewardseal_kit.proof.run import start_mockmed
from rewardseal_mockmed.extradup import CONTROL
from rewardseal_server.localstack import HOST, LocalServices, serve_command

__all__ = [
    "DRIFT",
    "DRIFT_FAMILY",
    "PROTOCOL",
    "REST",
    "SQL",
    "SQL_REPLICA",
    "BoundaryAudit",
    "CaseRun",
    "IntegrityServices",
    "boundary_families",
    "local_integrity_services",
    "play_boundaries",
    "run_case",
]

SQL: Final = "sql"
REST: Final = "rest"
SQL_REPLICA: Final = "sql_replica"
DRIFT_FAMILY: Final = "claim"
"""The banner lie: MockMed shows "Saved" and stores nothing."""
DRIFT: Final[tuple[float, ...]] = (0.0, 0.25, 0.5)
"""The share of banner lies the policy produces at each boundary."""
PROTOCOL: Final = "balanced_256"
CONTRACT_FILE: Final = "contract.json"
SQL_CONTRACT: Final = Path("contracts") / "mockmed"
REST_CONTRACT: Final = Path("contracts") / "mockmed-rest"
START_SECONDS: Final = 300.0
AUDIT_DEADLINE_SECONDS: Final = 300.0
_PAUSE: Final = ipb.RunAction.RUN_ACTION_PAUSE


def boundary_families(share: float, records: int) -> list[str]:
    """The family of each of ``records`` episodes at a boundary where ``share`` are banner lies
    (spread evenly through the boundary, the rest the gold write)."""
    if not 0.0 <= share <= 1.0 or records < 1:
        raise ValidationError("a boundary needs a share in [0, 1] and at least one record")
    lies = round(share * records)
    # Bresenham-style spread: episode i is a lie when the running count of lies steps up.
    return [
        DRIFT_FAMILY if (i + 1) * lies // records > i * lies // records else CONTROL
        for i in range(records)
    ]


@dataclass(frozen=True)
class IntegrityServices:
    """The running services: control (client and admin token, organization key), MockMed, and
    every worker's client and R-I-1 source, by name."""

    control_target: str
    control_token: str
    control_admin_token: str
    organization_key: bytes
    mockmed_url: str
    mockmed_token: str
    workers: Mapping[str, CaseWorker]
    sources: Mapping[str, RewardSource]


def _recipe_digest(contract_dir: str) -> str:
    contract = json_format.Parse(
        (Path(contract_dir) / CONTRACT_FILE).read_text(encoding="utf-8"), RewardContract()
    )
    return contract.oracle.oracle_recipe_digest


def _worker(name: str, banner: Mapping[str, Any]) -> tuple[CaseWorker, RewardSource]:
    client = WorkerClient(
        f"{HOST}:{banner['port']}",
        token=str(banner["token"]),
        trust=TrustSet([bytes.fromhex(str(banner["public_key"]))]),
    )
    digest = str(banner["contract_digest"])
    source = reward_source(
        f"{name} worker",
        contract_digest=digest,
        worker_key_id=str(banner["key_id"]),
        recipe_digest=_recipe_digest(str(banner["contract_dir"])),
    )
    return CaseWorker(name, client, digest), source


@contextmanager
def local_integrity_services(
    run_dir: Path, *, sql_only: bool = False, sql_contract: Path = SQL_CONTRACT
) -> Iterator[IntegrityServices]:
    """Control, MockMed and the three workers as child processes, all stopped on exit.

    ``sql_only``: control, MockMed and the ``sql`` worker only (the screen reward audited by
    it needs nothing more; ``make demo`` starts just these). ``sql_contract``: the seeded
    bundle the ``sql`` worker serves, relative to its data directory (the learning proof's is
    ``contracts/mockmed-params``, task parameters per episode, over the same database).

    Raises:
        Unavailable: a service did not start (the message ends with its log).
    """
    from rewardseal_server.sqlstore import sqlite_url

    admin, client, worker_cred, mockmed_token, mockmed_admin = (
        secrets.token_urlsafe(32) for _ in range(5)
    )
    sql_data, rest_data = run_dir / "sql", run_dir / "rest"
    workers: list[CaseWorker] = []
    with LocalServices(run_dir) as local:
        try:
            control = local.start(
                "control",
                serve_command(
                    "rewardseal-control",
                    local.ready_file("control"),
                    "--port",
                    "0",
                    "--data-dir",
                    str(run_dir / "control"),
                ),
                {
                    "REWARDSEAL_CONTROL_ADMIN_TOKEN": admin,
                    "REWARDSEAL_CONTROL_TOKEN": client,
                    "REWARDSEAL_CONTROL_WORKER_TOKEN": worker_cred,
                },
                START_SECONDS,
            )
            # The sql worker seeds the system of record MockMed then serves.
            sql = local.start(
                SQL,
                serve_command(
                    "rewardseal-worker",
                    local.ready_file(SQL),
                    "--seed-mockmed",
                    "--data-dir",
                    str(sql_data),
                    "--contract",
                    str(sql_data / sql_contract),
                ),
                {"REWARDSEAL_WORKER_TOKEN": secrets.token_urlsafe(32)},
                START_SECONDS,
            )
            mockmed_url = start_mockmed(
                local,
                sql_data / "mockmed" / "mockmed.sqlite",
                mockmed_token,
                mockmed_admin,
                START_SECONDS,
            )
            banners = {SQL: sql}
            if not sql_only:
                # Another operator's worker: its own data directory, key and certificate.
                banners[REST] = local.start(
                    REST,
                    serve_command(
                        "rewardseal-worker",
                        local.ready_file(REST),
                        "--seed-mockmed",
                        "--data-dir",
                        str(rest_data),
                        "--contract",
                        str(rest_data / REST_CONTRACT),
                    ),
                    {
                        "REWARDSEAL_WORKER_TOKEN": secrets.token_urlsafe(32),
                        "MOCKMED_API_URL": mockmed_url,
                        "MOCKMED_API_TOKEN": mockmed_token,
                    },
                    START_SECONDS,
                )
                # Same data directory as the sql worker (bundle, recipe, database, key), its own
                # receipt store: a second worker on the same recipe.
                banners[SQL_REPLICA] = local.start(
                    SQL_REPLICA,
                    serve_command(
                        "rewardseal-worker",
                        local.ready_file(SQL_REPLICA),
                        "--data-dir",
                        str(sql_data),
                        "--contract",
                        str(sql_data / SQL_CONTRACT),
                        "--db-url",
                        sqlite_url(run_dir / "replica-receipts.sqlite"),
                    ),
                    {"REWARDSEAL_WORKER_TOKEN": secrets.token_urlsafe(32)},
                    START_SECONDS,
                )
            sources: dict[str, RewardSource] = {SCREEN_T0: screen_source()}
            by_name: dict[str, CaseWorker] = {}
            for name, banner in banners.items():
                worker, sources[name] = _worker(name, banner)
                workers.append(worker)
                by_name[name] = worker
            yield IntegrityServices(
                control_target=f"{HOST}:{control['port']}",
                control_token=client,
                control_admin_token=admin,
                organization_key=bytes.fromhex(str(control["organization_public_key"])),
                mockmed_url=mockmed_url,
                mockmed_token=mockmed_token,
                workers=by_name,
                sources=sources,
            )
        finally:
            for worker in workers:
                worker.client.close()


def play_boundaries(
    services: IntegrityServices,
    drift: Sequence[float] = DRIFT,
    records: int = CASE_RECORDS,
    scorers: Sequence[str] = (SQL, REST),
) -> list[list[CaseEpisode]]:
    """Every boundary's episodes, scored by the screen reward and the ``scorers`` workers."""
    ui = MockMedUI(services.mockmed_url, services.mockmed_token)
    workers = [services.workers[name] for name in scorers]
    try:
        return [
            play_case(
                ui,
                workers,
                records=records,
                policy_update=boundary,
                families=boundary_families(share, records),
            )
            for boundary, share in enumerate(drift)
        ]
    finally:
        ui.close()


@dataclass(frozen=True)
class BoundaryAudit:
    """One boundary of a case: the rows' acceptance counts and control's audit of them.

    ``optimizer_accepted`` / ``sentinel_accepted``: rows each side accepted; ``*_unscored``:
    rows that side left without a verdict (drawn as unscored, never as refused).
    """

    boundary: int
    drift: float
    rows: int
    optimizer_accepted: int
    optimizer_unscored: int
    sentinel_accepted: int
    sentinel_unscored: int
    audit_id: str
    shard_id: str
    bundle_id: str
    bundle_verified: bool
    outcome: str
    action: str
    reasons: tuple[str, ...]
    report_only: bool
    optimizer_only_rate: float | None

    def to_json(self) -> dict[str, Any]:
        """The boundary as a JSON object."""
        doc = {name: getattr(self, name) for name in self.__dataclass_fields__}
        doc["reasons"] = list(self.reasons)
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> BoundaryAudit:
        """A boundary read back from :meth:`to_json` (a report's, to re-check or redraw)."""
        return cls(**{**doc, "reasons": tuple(doc["reasons"])})


@dataclass
class CaseRun:
    """One case: its optimizer and sentinel, its binding, and the boundaries it audited.

    ``paused_at``: the boundary whose decision paused the run (None: it never paused);
    ``not_trained``: boundaries after the pause, never audited.
    """

    name: str
    optimizer: str
    sentinel: str
    system_revision_id: str
    gating_eligible: bool
    binding_blockers: tuple[str, ...]
    correlation_reasons: tuple[str, ...]
    boundaries: list[BoundaryAudit] = field(default_factory=list)
    paused_at: int | None = None
    not_trained: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The case as a JSON object."""
        return {
            "name": self.name,
            "optimizer": self.optimizer,
            "sentinel": self.sentinel,
            "system_revision_id": self.system_revision_id,
            "gating_eligible": self.gating_eligible,
            "binding_blockers": list(self.binding_blockers),
            "correlation_reasons": list(self.correlation_reasons),
            "boundaries": [b.to_json() for b in self.boundaries],
            "paused_at": self.paused_at,
            "not_trained": self.not_trained,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> CaseRun:
        """A case read back from :meth:`to_json` (a report's, to re-check or redraw)."""
        return cls(
            **{
                **doc,
                "binding_blockers": tuple(doc["binding_blockers"]),
                "correlation_reasons": tuple(doc["correlation_reasons"]),
                "boundaries": [BoundaryAudit.from_json(b) for b in doc["boundaries"]],
                "not_trained": list(doc["not_trained"]),
            }
        )


def _short(enum: Any, value: int, prefix: str) -> str:
    return str(enum.Name(value)).removeprefix(prefix).lower()


def _boundary(
    control: IntegrityClient,
    trust: TrustSet,
    rows: Sequence[SignalRow],
    *,
    run_id: str,
    boundary: int,
    drift: float,
    system_id: str,
    protocol_id: str,
    profile_id: str,
) -> BoundaryAudit:
    control.append_signal_rows(
        run_id,
        boundary,
        [signal_row_message(row) for row in rows],
        system_revision_id=system_id,
        protocol_revision_id=protocol_id,
    )
    shard = control.seal_signal_shard(run_id, boundary).shard
    started = control.start_audit(shard.shard_id, profile_id)
    audit = control.wait_for_audit(started.audit_id, deadline=AUDIT_DEADLINE_SECONDS)
    if audit.state != ipb.AuditState.AUDIT_STATE_DONE:
        raise RewardSealError(
            f"audit {audit.audit_id} ended {ipb.AuditState.Name(audit.state)}, with no decision"
        )
    # Verify the signed bundle here, against the organization key pinned from control's banner.
    signed = control.verify_audit(audit.audit_id)
    bundle = verify_bundle(signed.bundle, trust, bundle_id=signed.bundle_id)
    metrics = bundle.report.metrics
    decision = audit.decision
    return BoundaryAudit(
        boundary=boundary,
        drift=drift,
        rows=len(rows),
        optimizer_accepted=sum(1 for r in rows if (r.optimizer_mapped or 0.0) > 0.0),
        optimizer_unscored=sum(1 for r in rows if r.optimizer_mapped is None),
        sentinel_accepted=sum(
            1 for r in rows if r.sentinel is not None and r.sentinel.outcome == "accepted"
        ),
        sentinel_unscored=sum(
            1 for r in rows if r.sentinel is None or r.sentinel.outcome == "error"
        ),
        audit_id=audit.audit_id,
        shard_id=shard.shard_id,
        bundle_id=bundle.bundle_id,
        bundle_verified=bundle.report.evidence_digest == audit.evidence_digest,
        outcome=_short(ipb.DecisionOutcome, decision.outcome, "DECISION_OUTCOME_"),
        action=_short(ipb.RunAction, decision.action, "RUN_ACTION_"),
        reasons=tuple(decision.reasons),
        report_only=decision.report_only,
        optimizer_only_rate=None if metrics is None else metrics.optimizer_only_rate,
    )


def run_case(
    services: IntegrityServices,
    boundaries: Sequence[Sequence[CaseEpisode]],
    *,
    name: str,
    optimizer: str,
    sentinel: str,
    drift: Sequence[float] = DRIFT,
) -> CaseRun:
    """Audit ``optimizer`` by ``sentinel`` over ``boundaries`` through control.

    A binding that cannot gate (a correlated sentinel) is recorded with its blockers and audits
    nothing: it is refused as a gate. Otherwise every boundary is appended, sealed and audited
    in turn until a decision pauses the run.
    """
    optimizer_source = services.sources[optimizer]
    sentinel_source = services.sources[sentinel]
    spec = case_system(optimizer_source, sentinel_source).to_json()
    trust = TrustSet([services.organization_key])
    run_id = f"integrity-proof-{name}-{secrets.token_hex(4)}"
    with (
        IntegrityClient(services.control_target, token=services.control_admin_token) as admin,
        IntegrityClient(services.control_target, token=services.control_token) as control,
    ):
        revision = admin.create_reward_system(spec).revision
        protocol_id = control.get_retention_protocol(PROTOCOL).revision_id
        profile_id = control.get_integrity_profile(DEFAULT_PROFILE).revision_id
        binding = control.resolve_binding(revision.revision_id, protocol_id, profile_id)
        case = CaseRun(
            name=name,
            optimizer=optimizer,
            sentinel=sentinel,
            system_revision_id=revision.revision_id,
            gating_eligible=binding.gating_eligible,
            binding_blockers=tuple(binding.blockers),
            correlation_reasons=tuple(revision.correlation_reasons),
        )
        if not binding.gating_eligible:
            return case
        for boundary, episodes in enumerate(boundaries):
            if case.paused_at is not None:
                case.not_trained.append(boundary)
                continue
            rows = signal_rows(
                episodes, optimizer=optimizer, sentinel=sentinel, policy_update=boundary
            )
            audited = _boundary(
                control,
                trust,
                rows,
                run_id=run_id,
                boundary=boundary,
                drift=drift[boundary],
                system_id=revision.revision_id,
                protocol_id=protocol_id,
                profile_id=profile_id,
            )
            case.boundaries.append(audited)
            if ipb.RunAction.Value(f"RUN_ACTION_{audited.action.upper()}") == _PAUSE:
                case.paused_at = boundary
    return case
