"""RewardIntegrityService revisions on a real control plane (SQLite and PostgreSQL): reward
systems, retention protocols, integrity profiles and binding resolution (R-I-1, R-I-2, R-I-4,
R-I-7, R-I-9), with every refusal's code and reason, and nothing stored on a refusal."""

from __future__ import annotations

import math
from typing import Any

import grpc
import pytest
from sqlalchemy import text
from support.control import (
    ADMIN,
    TRAINER,
    WORKER,
    ControlStack,
    wire_error,
)
from support.integrity import create_system, spec

from rewardseal.core.integrity import BUILTIN_PROFILES, BUILTIN_PROTOCOLS
from rewardseal.core.integrity.messages import spec_struct, struct_document
from rewardseal.v1 import integrity_pb2 as pb

OTHER_SENTINEL = {"kind": "external", "fingerprints": {"implementation": "judge-llm-v2"}}


def _revision_rows(control: ControlStack, kind: str) -> int:
    with control.store.store_engine.engine.connect() as conn:
        return int(
            conn.execute(
                text("SELECT count(*) FROM integrity_revisions WHERE kind = :k"), {"k": kind}
            ).scalar_one()
        )


async def test_identical_specs_are_one_revision_and_listed_with_filters(
    control: ControlStack,
) -> None:
    stub = control.integrity_stub()
    validated = await stub.ValidateRewardSystem(
        pb.ValidateRewardSystemRequest(spec=spec_struct(spec())), metadata=TRAINER
    )
    assert list(validated.blockers) == []
    assert validated.primary_sentinel_independent
    first = await stub.CreateRewardSystem(
        pb.CreateRewardSystemRequest(spec=spec_struct(spec())), metadata=ADMIN
    )
    again = await stub.CreateRewardSystem(
        pb.CreateRewardSystemRequest(spec=spec_struct(spec())), metadata=ADMIN
    )
    assert first.created
    assert not again.created
    assert first.revision.revision_id == again.revision.revision_id == validated.revision_id
    other = await create_system(control, spec(sentinel=OTHER_SENTINEL))
    assert other != first.revision.revision_id
    got = await stub.GetRewardSystem(pb.GetRewardSystemRequest(revision_id=other), metadata=TRAINER)
    assert struct_document(got.revision.content)["auditors"][0]["fingerprints"] == {
        "implementation": "judge-llm-v2"
    }
    # Filters on what a revision names; pages carry on where the last stopped.
    by_contract = await stub.ListRewardSystems(
        pb.ListRewardSystemsRequest(contract_digest="sha256:" + "a" * 64), metadata=TRAINER
    )
    assert [r.revision_id for r in by_contract.revisions] == [first.revision.revision_id]
    by_print = await stub.ListRewardSystems(
        pb.ListRewardSystemsRequest(implementation_fingerprint="judge-llm-v2"), metadata=TRAINER
    )
    assert [r.revision_id for r in by_print.revisions] == [other]
    page = await stub.ListRewardSystems(pb.ListRewardSystemsRequest(page_size=1), metadata=TRAINER)
    rest = await stub.ListRewardSystems(
        pb.ListRewardSystemsRequest(page_size=1, page_token=page.next_page_token),
        metadata=TRAINER,
    )
    assert {page.revisions[0].revision_id, rest.revisions[0].revision_id} == {
        first.revision.revision_id,
        other,
    }
    assert rest.next_page_token == ""
    assert _revision_rows(control, "system") == 2


def _with(doc: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**doc, **changes}


def _bad_specs() -> list[tuple[str, dict[str, Any], str]]:
    good = spec()
    sentinel = good["auditors"][0]
    diagnostic = {"kind": "external", "role": "diagnostic"}
    return [
        (
            "two primary sentinels",
            _with(good, auditors=[sentinel, sentinel | {"label": "x"}]),
            "primary_sentinels_multiple",
        ),
        (
            "four diagnostics",
            _with(
                good,
                auditors=[
                    sentinel,
                    *(diagnostic | {"fingerprints": {"implementation": f"d{i}"}} for i in range(4)),
                ],
            ),
            "diagnostic_auditors_over_limit",
        ),
        (
            "duplicate auditor",
            _with(
                good,
                auditors=[
                    sentinel,
                    diagnostic | {"fingerprints": {"implementation": "d"}},
                    diagnostic | {"fingerprints": {"implementation": "d"}, "label": "again"},
                ],
            ),
            "auditor_duplicate:auditors[2]",
        ),
        (
            "threshold outside the mapped range",
            _with(good, mapping={"normalization": {"min": 0, "max": 10}, "threshold": 1.5}),
            "threshold_outside_mapped_range",
        ),
        (
            "NaN",
            _with(good, mapping={"normalization": {"min": 0, "max": 1}, "threshold": math.nan}),
            "not_finite:$.mapping.threshold",
        ),
        (
            "infinity",
            _with(
                good,
                mapping={"normalization": {"min": 0, "max": math.inf}, "threshold": 0.5},
            ),
            "not_finite:$.mapping.normalization.max",
        ),
    ]


@pytest.mark.parametrize(
    ("doc", "blocker"), [(d, b) for _, d, b in _bad_specs()], ids=[n for n, _, _ in _bad_specs()]
)
async def test_a_bad_spec_is_refused_with_its_blocker_and_nothing_is_stored(
    control: ControlStack, doc: dict[str, Any], blocker: str
) -> None:
    validated = await control.integrity_stub().ValidateRewardSystem(
        pb.ValidateRewardSystemRequest(spec=spec_struct(doc)), metadata=TRAINER
    )
    assert blocker in validated.blockers
    assert validated.revision_id == ""
    code, reason, metadata, message = await wire_error(
        control, "CreateRewardSystem", pb.CreateRewardSystemRequest(spec=spec_struct(doc))
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "integrity_spec_invalid")
    assert blocker in metadata["blockers"].split(",")
    assert "refused" in message
    assert _revision_rows(control, "system") == 0


async def test_credentials_are_scrubbed_before_anything_is_stored(control: ControlStack) -> None:
    doc = spec(
        sentinel={
            "kind": "external",
            "fingerprints": {"implementation": "judge-llm-v2"},
            "parameters": {
                "endpoint": "https://bob:hunter2@judge.example/v1?api_key=sk-live-123",
                "headers": {"Authorization": "Bearer sk-live-456"},
                "auth": {"user": "bob", "password": "hunter2"},
            },
        }
    )
    revision_id = await create_system(control, doc)
    with control.store.store_engine.engine.connect() as conn:
        stored = conn.execute(
            text("SELECT content FROM integrity_revisions WHERE revision_id = :r"),
            {"r": revision_id},
        ).scalar_one()
    for secret in ("hunter2", "sk-live-123", "sk-live-456"):
        assert secret not in stored
    assert "[scrubbed]" in stored
    # A rotated credential is the same reward system.
    rotated = spec(sentinel=doc["auditors"][0] | {"parameters": {"auth": {"password": "new"}}})
    rotated["auditors"][0]["parameters"] = {
        **doc["auditors"][0]["parameters"],
        "auth": {"user": "bob", "password": "rotated"},
    }
    assert await create_system(control, rotated) == revision_id


async def test_revisions_are_the_admins_to_create(control: ControlStack) -> None:
    for metadata in (TRAINER, WORKER):
        code, reason, _, _ = await wire_error(
            control,
            "CreateRewardSystem",
            pb.CreateRewardSystemRequest(spec=spec_struct(spec())),
            metadata=metadata,
        )
        assert (code, reason) == (grpc.StatusCode.PERMISSION_DENIED, "permission_denied")
    code, _, _, _ = await wire_error(
        control, "ListRetentionProtocols", pb.ListRetentionProtocolsRequest(), metadata=WORKER
    )
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert _revision_rows(control, "system") == 0


async def test_builtin_protocols_and_profiles_are_listed_and_gettable(
    control: ControlStack,
) -> None:
    stub = control.integrity_stub()
    protocols = await stub.ListRetentionProtocols(
        pb.ListRetentionProtocolsRequest(), metadata=TRAINER
    )
    assert {p.name: p.revision_id for p in protocols.protocols} == {
        name: p.revision_id for name, p in BUILTIN_PROTOCOLS.items()
    }
    balanced = await stub.GetRetentionProtocol(
        pb.GetRetentionProtocolRequest(revision_id="balanced_256"), metadata=TRAINER
    )
    assert (balanced.protocol.core_size, balanced.protocol.diagnostic_size) == (192, 64)
    assert balanced.protocol.builtin
    assert balanced.protocol.seed == 42
    exhaustive = await stub.GetRetentionProtocol(
        pb.GetRetentionProtocolRequest(revision_id=BUILTIN_PROTOCOLS["exhaustive"].revision_id),
        metadata=TRAINER,
    )
    assert not exhaustive.protocol.HasField("core_size")
    profiles = await stub.ListIntegrityProfiles(pb.ListIntegrityProfilesRequest(), metadata=TRAINER)
    assert {p.name for p in profiles.profiles} == set(BUILTIN_PROFILES)
    assert [p.name for p in profiles.profiles if p.is_default] == ["human_aligned_integrity"]
    exploratory = next(p for p in profiles.profiles if p.name == "exploratory")
    assert exploratory.report_only


async def test_custom_protocols_and_profiles_are_immutable_revisions(
    control: ControlStack,
) -> None:
    stub = control.integrity_stub()
    protocol = {"name": "tiny_64", "core_size": 48, "diagnostic_size": 16}
    made = await stub.CreateRetentionProtocol(
        pb.CreateRetentionProtocolRequest(spec=spec_struct(protocol)), metadata=ADMIN
    )
    again = await stub.CreateRetentionProtocol(
        pb.CreateRetentionProtocolRequest(spec=spec_struct(protocol)), metadata=ADMIN
    )
    assert made.created
    assert not again.created
    assert made.protocol.seed == 42
    assert made.protocol.core_size == 48
    assert made.protocol.revision_id == again.protocol.revision_id
    profile = {"name": "tight", "thresholds": {"pass_agreement": {"min": 0.99}}}
    created = await stub.CreateIntegrityProfile(
        pb.CreateIntegrityProfileRequest(spec=spec_struct(profile)), metadata=ADMIN
    )
    assert [(t.metric, t.min) for t in created.profile.thresholds] == [("pass_agreement", 0.99)]
    refusals = [
        (
            "CreateRetentionProtocol",
            pb.CreateRetentionProtocolRequest(
                spec=spec_struct({"name": "balanced_256", "core_size": 10})
            ),
            "name_reserved",
        ),
        (
            "CreateRetentionProtocol",
            pb.CreateRetentionProtocolRequest(spec=spec_struct({"name": "neg", "core_size": -1})),
            "invalid_value:core_size",
        ),
        (
            "CreateIntegrityProfile",
            pb.CreateIntegrityProfileRequest(spec=spec_struct({"name": "strict_integrity"})),
            "name_reserved",
        ),
        (
            "CreateIntegrityProfile",
            pb.CreateIntegrityProfileRequest(
                spec=spec_struct({"name": "bad", "thresholds": {"nope": {"min": 1}}})
            ),
            "unknown_metric:thresholds.nope",
        ),
        (
            "CreateIntegrityProfile",
            pb.CreateIntegrityProfileRequest(
                spec=spec_struct({"name": "nan", "thresholds": {"coverage": {"min": math.nan}}})
            ),
            "not_finite:$.thresholds.coverage.min",
        ),
    ]
    for method, request, blocker in refusals:
        code, reason, metadata, _ = await wire_error(control, method, request)
        assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "integrity_spec_invalid")
        assert blocker in metadata["blockers"].split(","), (method, metadata)
    assert _revision_rows(control, "protocol") == len(BUILTIN_PROTOCOLS) + 1
    assert _revision_rows(control, "profile") == len(BUILTIN_PROFILES) + 1


async def test_binding_resolution_reports_blockers_and_refuses_unknown_ids(
    control: ControlStack,
) -> None:
    stub = control.integrity_stub()
    independent = await create_system(control)
    correlated = await create_system(
        control,
        spec(sentinel={"kind": "external", "fingerprints": {"implementation": "screen-reward-v1"}}),
    )

    async def resolve(system: str, protocol: str, profile: str) -> pb.ResolveBindingResponse:
        return await stub.ResolveBinding(
            pb.ResolveBindingRequest(
                system_revision_id=system,
                protocol_revision_id=protocol,
                profile_revision_id=profile,
            ),
            metadata=TRAINER,
        )

    good = await resolve(independent, "balanced_256", "human_aligned_integrity")
    assert good.gating_eligible
    assert list(good.blockers) == []
    assert good.protocol_revision_id == BUILTIN_PROTOCOLS["balanced_256"].revision_id
    bad = await resolve(correlated, "balanced_256", "human_aligned_integrity")
    assert not bad.gating_eligible
    assert "primary_sentinel_correlated" in bad.blockers
    assert "primary_sentinel_correlated:shared_implementation_fingerprint" in bad.blockers
    partial = await resolve(independent, "", "exploratory")
    assert list(partial.blockers) == ["profile_report_only", "protocol_missing"]
    for system, protocol, profile in (
        ("sha256:" + "0" * 64, "balanced_256", "human_aligned_integrity"),
        (independent, "no_such_protocol", "human_aligned_integrity"),
        (independent, "balanced_256", "sha256:" + "f" * 64),
    ):
        code, reason, _, _ = await wire_error(
            control,
            "ResolveBinding",
            pb.ResolveBindingRequest(
                system_revision_id=system,
                protocol_revision_id=protocol,
                profile_revision_id=profile,
            ),
            metadata=TRAINER,
        )
        assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "not_found")
    code, reason, _, _ = await wire_error(
        control,
        "GetRewardSystem",
        pb.GetRewardSystemRequest(revision_id="sha256:" + "0" * 64),
        metadata=TRAINER,
    )
    assert (code, reason) == (grpc.StatusCode.NOT_FOUND, "not_found")
