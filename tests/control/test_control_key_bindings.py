"""Worker keys bound to contracts (docs/spec.md R-C-10, R-C-11, R-C-5), attacked with the one
credential every worker shares.

A worker credential registers only a key it holds (proof of possession); a key writes the
receipt index only once admitted (by the admin, or by a one-time enrollment credential the
admin made) and only for the contracts it is bound to; a receipt names only a certificate
control issued for its contract or the bundle certificate its key registered; and the index is
keyed by (contract digest, episode id).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import grpc
import pytest
from support.builders import make_certificate
from support.control import ADMIN, TRAINER, WORKER, ControlStack, start_control, stop_control
from support.control import wire_error as call_error
from support.control_store import list_audit
from support.control_store_builders import contract_version, sealed

from rewardseal.core.contract import contract_digest
from rewardseal.core.key_possession import MAX_POSSESSION_SKEW, sign_registration
from rewardseal.core.signing import SigningKey
from rewardseal.v1 import control_service_pb2 as pb
from rewardseal.v1.certificate_pb2 import IssuerKey, RewardCertificate
from rewardseal.v1.enums_pb2 import IssuerKeyRole
from rewardseal.v1.receipt_pb2 import SignedEnvelope
from rewardseal_kit.mockmed import mockmed_contract

CONTRACT_A = mockmed_contract()
CONTRACT_B = contract_version(2)
DIGEST_A = contract_digest(CONTRACT_A)
DIGEST_B = contract_digest(CONTRACT_B)
WORKER_ROLE = IssuerKeyRole.ISSUER_KEY_ROLE_WORKER


@pytest.fixture
async def control(store_url: str) -> AsyncIterator[ControlStack]:
    """Control on each backend, with two contracts registered by the worker credential."""
    stack = await start_control(store_url)
    stub = stack.stub()
    for contract in (CONTRACT_A, CONTRACT_B):
        await stub.RegisterContract(
            pb.RegisterContractRequest(
                contract=contract, reward_contract_digest=contract_digest(contract)
            ),
            metadata=WORKER,
        )
    yield stack
    await stop_control(stack)


def registration(
    control: ControlStack,
    key: SigningKey,
    *contracts: str,
    signer: SigningKey | None = None,
    enrollment: str = "",
    bundle: RewardCertificate | None = None,
    skew: timedelta = timedelta(0),
) -> pb.RegisterIssuerKeyRequest:
    """A worker's registration of ``key``, signed by ``signer`` (default: the key itself)."""
    request = pb.RegisterIssuerKeyRequest(
        key=IssuerKey(public_key=key.public_key, role=WORKER_ROLE, display_name="a worker"),
        reason="worker start",
        reward_contract_digests=list(contracts),
        enrollment_credential=enrollment,
    )
    if bundle is not None:
        request.bundle_certificate.CopyFrom(bundle)
    signing = signer or key
    if signing is not key:
        # A forger signs a statement naming the victim's public key with its own private key.
        forged = pb.RegisterIssuerKeyRequest()
        forged.CopyFrom(request)
        forged.key.public_key = signing.public_key
        sign_registration(forged, signing, control.clock.now + skew)
        request.possession.CopyFrom(forged.possession)
    else:
        sign_registration(request, key, control.clock.now + skew)
    return request


async def enroll(control: ControlStack, *contracts: str, ttl: int = 0) -> str:
    answer = await control.stub().CreateEnrollment(
        pb.CreateEnrollmentRequest(reward_contract_digests=list(contracts), ttl_seconds=ttl),
        metadata=ADMIN,
    )
    return answer.enrollment_credential


async def record(control: ControlStack, *envelopes: SignedEnvelope) -> list[pb.RecordReceiptResult]:
    answer = await control.stub().RecordReceipts(
        pb.RecordReceiptsRequest(receipts=list(envelopes)), metadata=WORKER
    )
    return list(answer.results)


def refusal(result: pb.RecordReceiptResult) -> tuple[int, str]:
    assert not result.recorded
    return result.error.code, result.error.reason


async def registered_keys(control: ControlStack) -> set[bytes]:
    listed = await control.stub().ListIssuerKeys(pb.ListIssuerKeysRequest(), metadata=ADMIN)
    return {bytes(k.public_key) for k in listed.keys}


async def test_worker_credential_cannot_register_a_key_it_does_not_hold(
    control: ControlStack,
) -> None:
    victim, attacker = SigningKey.generate(), SigningKey.generate()
    unsigned = registration(control, victim, DIGEST_A)
    unsigned.ClearField("possession")
    altered = registration(control, victim, DIGEST_A)
    altered.reward_contract_digests.append(DIGEST_B)  # changed after signing
    attempts = {
        "no proof": unsigned,
        "signed by another key": registration(control, victim, DIGEST_A, signer=attacker),
        "altered after signing": altered,
        "stale": registration(
            control, victim, DIGEST_A, skew=-(MAX_POSSESSION_SKEW + timedelta(seconds=1))
        ),
    }
    for what, request in attempts.items():
        code, reason, _, message = await call_error(
            control, "RegisterIssuerKey", request, metadata=WORKER
        )
        assert (code, reason) == (grpc.StatusCode.PERMISSION_DENIED, "permission_denied"), what
        assert "possession" in message, what
    assert victim.public_key not in await registered_keys(control)
    # The key's own signature registers it (not admitted: no enrollment, not the admin).
    answer = await control.stub().RegisterIssuerKey(
        registration(control, victim, DIGEST_A), metadata=WORKER
    )
    assert answer.key.public_key == victim.public_key
    assert not answer.admission.admitted
    assert list(answer.admission.reward_contract_digests) == []


async def test_receipt_of_a_key_not_yet_admitted_waits_for_the_admin(
    control: ControlStack,
) -> None:
    key = SigningKey.generate()
    bundle = make_certificate(CONTRACT_A)
    await control.stub().RegisterIssuerKey(
        registration(control, key, DIGEST_A, bundle=bundle), metadata=WORKER
    )
    envelope = sealed("episode.wait", contract=CONTRACT_A, key=key, certificate=bundle)
    [first] = await record(control, envelope)
    assert refusal(first) == (grpc.StatusCode.FAILED_PRECONDITION.value[0], "key_not_admitted")
    assert f"keys approve {key.key_id} --contract {DIGEST_A}" in first.error.message
    # The worker's credential cannot admit its own key.
    approve = pb.ApproveIssuerKeyRequest(key_id=key.key_id, reward_contract_digests=[DIGEST_A])
    for credential in (WORKER, TRAINER):
        code, _, _, _ = await call_error(control, "ApproveIssuerKey", approve, metadata=credential)
        assert code == grpc.StatusCode.PERMISSION_DENIED
    approve.reason = "worker 1 in rack 3"
    answer = await control.stub().ApproveIssuerKey(approve, metadata=ADMIN)
    assert answer.admission.admitted
    assert list(answer.admission.reward_contract_digests) == [DIGEST_A]
    [again] = await record(control, envelope)
    assert again.recorded
    assert not again.duplicate
    [audited] = list_audit(control.store, action="issuer_key.approve").items
    assert (audited.actor, audited.target, audited.reason) == (
        "admin",
        key.key_id,
        "worker 1 in rack 3",
    )


async def test_receipt_signed_by_a_key_not_bound_to_the_contract_is_refused_by_the_index(
    control: ControlStack,
) -> None:
    key = SigningKey.generate()
    credential = await enroll(control, DIGEST_A)
    answer = await control.stub().RegisterIssuerKey(
        registration(control, key, DIGEST_A, enrollment=credential), metadata=WORKER
    )
    assert answer.admission.admitted
    assert list(answer.admission.reward_contract_digests) == [DIGEST_A]
    # A receipt for contract B, signed by the key bound to contract A only.
    foreign = sealed("episode.b1", contract=CONTRACT_B, key=key)
    [refused] = await record(control, foreign)
    assert refusal(refused) == (grpc.StatusCode.PERMISSION_DENIED.value[0], "key_not_bound")
    # The worker credential cannot add contract B through its registration either.
    code, _, _, _ = await call_error(
        control,
        "RegisterIssuerKey",
        registration(control, key, DIGEST_A, DIGEST_B, enrollment=credential),
        metadata=WORKER,
    )
    assert code == grpc.StatusCode.PERMISSION_DENIED
    plain = await control.stub().RegisterIssuerKey(
        registration(control, key, DIGEST_B), metadata=WORKER
    )
    assert list(plain.admission.reward_contract_digests) == [DIGEST_A]
    [still] = await record(control, foreign)
    assert refusal(still)[1] == "key_not_bound"
    # Unbinding (admin) makes the key's receipts for that contract refused from then on.
    own = sealed("episode.a1", contract=CONTRACT_A, key=key)
    unbind = pb.UnbindIssuerKeyRequest(
        key_id=key.key_id, reward_contract_digests=[DIGEST_A], reason="worker decommissioned"
    )
    unbound = await control.stub().UnbindIssuerKey(unbind, metadata=ADMIN)
    assert list(unbound.admission.reward_contract_digests) == []
    [after] = await record(control, own)
    assert refusal(after)[1] == "key_not_bound"
    summary = await control.stub().GetReceiptSummary(
        pb.GetReceiptSummaryRequest(reward_contract_digest=DIGEST_B), metadata=ADMIN
    )
    assert summary.total == 0


async def test_receipt_naming_a_certificate_control_never_issued_is_refused(
    control: ControlStack,
) -> None:
    key = SigningKey.generate()
    bundle = make_certificate(CONTRACT_A)
    credential = await enroll(control, DIGEST_A)
    await control.stub().RegisterIssuerKey(
        registration(control, key, DIGEST_A, enrollment=credential, bundle=bundle),
        metadata=WORKER,
    )
    forged = make_certificate(CONTRACT_A, certificate_id="cert.never.issued")
    # Same id as the registered bundle certificate, other content (another digest).
    twin = make_certificate(CONTRACT_A, checker_configuration_digest="sha256:" + "d" * 64)
    results = await record(
        control,
        sealed("episode.c1", contract=CONTRACT_A, key=key, certificate=forged),
        sealed("episode.c2", contract=CONTRACT_A, key=key, certificate=twin),
        sealed("episode.c3", contract=CONTRACT_A, key=key, certificate=bundle),
    )
    invalid = grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert refusal(results[0]) == (invalid, "certificate_unknown")
    assert refusal(results[1]) == (invalid, "certificate_unknown")
    assert results[2].recorded


async def test_same_episode_id_under_two_contracts_keeps_both_receipts(
    control: ControlStack,
) -> None:
    key_a, key_b = SigningKey.generate(), SigningKey.generate()
    for key, contract in ((key_a, CONTRACT_A), (key_b, CONTRACT_B)):
        digest = contract_digest(contract)
        credential = await enroll(control, digest)
        bundle = make_certificate(contract)  # the one sealed() names
        await control.stub().RegisterIssuerKey(
            registration(control, key, digest, enrollment=credential, bundle=bundle),
            metadata=WORKER,
        )
    first = sealed("episode.shared", contract=CONTRACT_A, key=key_a)
    # Each worker names its receipts itself: two workers, two receipt ids.
    second = sealed("episode.shared", contract=CONTRACT_B, key=key_b, receipt_id="rcpt.b.1")
    results = await record(control, first, second)
    assert [r.recorded for r in results] == [True, True], results
    listed = await control.stub().ListReceipts(pb.ListReceiptsRequest(), metadata=ADMIN)
    assert sorted(r.reward_contract_digest for r in listed.receipts) == sorted([DIGEST_A, DIGEST_B])
    # A different receipt for (contract A, the same episode) is still a duplicate episode.
    other = sealed(
        "episode.shared", contract=CONTRACT_A, key=key_a, policy_update=101, receipt_id="rcpt.a.2"
    )
    [duplicate] = await record(control, other)
    assert refusal(duplicate)[1] == "duplicate_episode"
    assert duplicate.error.metadata["receipt_id"] == results[0].receipt_id


async def test_enrollment_credential_is_single_use_and_expires(control: ControlStack) -> None:
    first, second, late = SigningKey.generate(), SigningKey.generate(), SigningKey.generate()
    credential = await enroll(control, DIGEST_A)
    answer = await control.stub().RegisterIssuerKey(
        registration(control, first, DIGEST_A, enrollment=credential), metadata=WORKER
    )
    assert answer.admission.admitted
    # A restart of the same worker presents it again: a no-op, not an error.
    again = await control.stub().RegisterIssuerKey(
        registration(control, first, DIGEST_A, enrollment=credential), metadata=WORKER
    )
    assert list(again.admission.reward_contract_digests) == [DIGEST_A]
    code, _, _, message = await call_error(
        control,
        "RegisterIssuerKey",
        registration(control, second, DIGEST_A, enrollment=credential),
        metadata=WORKER,
    )
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert "already used" in message
    short = await enroll(control, DIGEST_A, ttl=60)
    control.clock.advance(timedelta(seconds=61))
    code, _, _, message = await call_error(
        control,
        "RegisterIssuerKey",
        registration(control, late, DIGEST_A, enrollment=short),
        metadata=WORKER,
    )
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert "expired" in message
    assert second.public_key not in await registered_keys(control)
    # A key that already holds its contract never needs the credential it presents.
    restarted = await control.stub().RegisterIssuerKey(
        registration(control, first, DIGEST_A, enrollment=short), metadata=WORKER
    )
    assert list(restarted.admission.reward_contract_digests) == [DIGEST_A]
    # Only the admin makes them, and the audit log never holds the credential.
    code, _, _, _ = await call_error(
        control,
        "CreateEnrollment",
        pb.CreateEnrollmentRequest(reward_contract_digests=[DIGEST_A]),
        metadata=WORKER,
    )
    assert code == grpc.StatusCode.PERMISSION_DENIED
    entries = list_audit(control.store).items
    assert [e.action for e in entries].count("enrollment.create") == 2
    assert all(credential not in e.details and short not in e.details for e in entries)


async def test_bootstrap_enrollment_binds_the_contract_the_worker_registers_once(
    control: ControlStack,
) -> None:
    credential = "compose-enrollment-" + "e" * 24  # as deploy/.env would hold it
    first = control.store.bindings.ensure_enrollment(credential, "control.startup", "compose")
    assert first is not None
    key, thief = SigningKey.generate(), SigningKey.generate()
    answer = await control.stub().RegisterIssuerKey(
        registration(control, key, DIGEST_B, enrollment=credential), metadata=WORKER
    )
    assert list(answer.admission.reward_contract_digests) == [DIGEST_B]
    # A restart of control arms nothing again: the credential stays used.
    assert control.store.bindings.ensure_enrollment(credential, "control.startup", "x") is None
    code, _, _, message = await call_error(
        control,
        "RegisterIssuerKey",
        registration(control, thief, DIGEST_A, enrollment=credential),
        metadata=WORKER,
    )
    assert code == grpc.StatusCode.PERMISSION_DENIED
    assert "already used" in message


async def certificate_ids(control: ControlStack, digest: str) -> list[str]:
    listed = await control.stub().ListCertificates(
        pb.ListCertificatesRequest(reward_contract_digest=digest), metadata=WORKER
    )
    return [c.certificate_id for c in listed.certificates]


async def test_an_accepting_enrollment_lists_the_bundle_certificate_and_revoking_it_works(
    control: ControlStack,
) -> None:
    accepted_key, plain_key = SigningKey.generate(), SigningKey.generate()
    answer = await control.stub().CreateEnrollment(
        pb.CreateEnrollmentRequest(
            reward_contract_digests=[DIGEST_A], accept_bundle_certificate=True
        ),
        metadata=ADMIN,
    )
    bundle = make_certificate(CONTRACT_A, key=accepted_key, certificate_id="cert.bundle.accepted")
    await control.stub().RegisterIssuerKey(
        registration(
            control, accepted_key, DIGEST_A, enrollment=answer.enrollment_credential, bundle=bundle
        ),
        metadata=WORKER,
    )
    # Without acceptance a key's bundle certificate is known to the index, never listed.
    plain = make_certificate(CONTRACT_A, key=plain_key, certificate_id="cert.bundle.plain")
    await control.stub().RegisterIssuerKey(
        registration(
            control, plain_key, DIGEST_A, enrollment=await enroll(control, DIGEST_A), bundle=plain
        ),
        metadata=WORKER,
    )
    assert await certificate_ids(control, DIGEST_A) == ["cert.bundle.accepted"]
    got = await control.stub().GetCertificate(
        pb.GetCertificateRequest(certificate_id="cert.bundle.accepted"), metadata=ADMIN
    )
    assert got.certificate == bundle  # the worker's bytes, signed by its own key
    # A restart registers the same certificate again: nothing new is accepted or audited.
    await control.stub().RegisterIssuerKey(
        registration(
            control, accepted_key, DIGEST_A, enrollment=answer.enrollment_credential, bundle=bundle
        ),
        metadata=WORKER,
    )
    accepts = [e for e in list_audit(control.store).items if e.action == "certificate.accept"]
    assert [e.target for e in accepts] == ["cert.bundle.accepted"]
    # Revocable by id like any certificate (R-C-4).
    await control.stub().RevokeCertificate(
        pb.RevokeCertificateRequest(certificate_id="cert.bundle.accepted", reason="bad bundle"),
        metadata=ADMIN,
    )
    got = await control.stub().GetCertificate(
        pb.GetCertificateRequest(certificate_id="cert.bundle.accepted"), metadata=ADMIN
    )
    assert got.revoked


def accepting_approval(key_id: str, digest: str) -> pb.ApproveIssuerKeyRequest:
    """An approval of ``key_id`` for ``digest`` that also accepts its bundle certificate."""
    return pb.ApproveIssuerKeyRequest(
        key_id=key_id, reward_contract_digests=[digest], accept_bundle_certificate=True
    )


async def test_approval_accepts_the_registered_bundle_certificate_only_when_asked(
    control: ControlStack,
) -> None:
    key = SigningKey.generate()
    bundle = make_certificate(CONTRACT_A, key=key, certificate_id="cert.bundle.approved")
    await control.stub().RegisterIssuerKey(
        registration(control, key, DIGEST_A, bundle=bundle), metadata=WORKER
    )
    stub = control.stub()
    plain = await stub.ApproveIssuerKey(
        pb.ApproveIssuerKeyRequest(key_id=bundle.issuer_key_id, reward_contract_digests=[DIGEST_A]),
        metadata=ADMIN,
    )
    assert plain.admission.admitted
    assert list(plain.accepted_certificate_ids) == []
    assert await certificate_ids(control, DIGEST_A) == []
    # Accepting for a contract it registered no bundle certificate for: refused, nothing bound.
    code, reason, _, message = await call_error(
        control,
        "ApproveIssuerKey",
        accepting_approval(bundle.issuer_key_id, DIGEST_B),
        metadata=ADMIN,
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "invalid_argument")
    assert "registered no bundle certificate" in message
    admission = await stub.ApproveIssuerKey(
        accepting_approval(bundle.issuer_key_id, DIGEST_A),
        metadata=ADMIN,
    )
    assert list(admission.accepted_certificate_ids) == ["cert.bundle.approved"]
    assert list(admission.admission.reward_contract_digests) == [DIGEST_A]
    assert await certificate_ids(control, DIGEST_A) == ["cert.bundle.approved"]
    # Only the admin approves.
    code, _, _, _ = await call_error(
        control,
        "ApproveIssuerKey",
        accepting_approval(bundle.issuer_key_id, DIGEST_A),
        metadata=WORKER,
    )
    assert code == grpc.StatusCode.PERMISSION_DENIED


async def test_a_bundle_certificate_under_a_revoked_contract_is_never_accepted(
    control: ControlStack,
) -> None:
    await control.stub().RevokeCertificate(
        pb.RevokeCertificateRequest(reward_contract_digest=DIGEST_A, reason="contract withdrawn"),
        metadata=ADMIN,
    )
    approved, enrolled = SigningKey.generate(), SigningKey.generate()
    bundle = make_certificate(CONTRACT_A, key=approved, certificate_id="cert.bundle.late")
    await control.stub().RegisterIssuerKey(
        registration(control, approved, DIGEST_A, bundle=bundle), metadata=WORKER
    )
    # The admin asked for it explicitly: refused as IssueCertificate refuses (R-C-13), and the
    # approval it came with is not half done.
    code, reason, metadata, _ = await call_error(
        control,
        "ApproveIssuerKey",
        accepting_approval(bundle.issuer_key_id, DIGEST_A),
        metadata=ADMIN,
    )
    assert (code, reason) == (grpc.StatusCode.INVALID_ARGUMENT, "certification_refused")
    assert metadata["rule"] == "R-C-13"
    assert not control.store.bindings.admission(bundle.issuer_key_id).admitted
    # Through an accepting enrollment the key is admitted; its certificate stays unlisted.
    answer = await control.stub().CreateEnrollment(
        pb.CreateEnrollmentRequest(
            reward_contract_digests=[DIGEST_A], accept_bundle_certificate=True
        ),
        metadata=ADMIN,
    )
    late = make_certificate(CONTRACT_A, key=enrolled, certificate_id="cert.bundle.enrolled")
    registered = await control.stub().RegisterIssuerKey(
        registration(
            control, enrolled, DIGEST_A, enrollment=answer.enrollment_credential, bundle=late
        ),
        metadata=WORKER,
    )
    assert registered.admission.admitted
    assert await certificate_ids(control, DIGEST_A) == []
