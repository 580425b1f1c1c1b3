"""The worker's certificate follows control while it runs, under pinned organization keys only.

Real control plane and worker on port 0, real Ed25519 signatures, real SQLite (and PostgreSQL
for the worker store where a server is available). Found by an attack: a man in the middle
(or a rogue control plane) made the worker certify under a certificate of its own making, a
restart re-adopted a revoked certificate, and after 50 certificates the newest was never seen.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from support.control_mitm import control_mitm
from support.linked_stack import (
    ADMIN_TOKEN,
    WORKER_TOKEN,
    approve,
    control_client,
    control_receipts,
    control_stub,
    enrollment,
    eventually,
    in_use,
    issue_certificate,
    link_of,
    organization_key,
    polled_after,
    revoke,
    revoke_every_certificate,
    score_honest,
    scoring_under,
    start_control_plane,
    start_linked_worker,
)
from support.worker_stack import RunningStack, stop_stack

from rewardseal.core.errors import CertificationRefused, ValidationError
from rewardseal.core.scoring import score
from rewardseal.core.signing import SigningKey, sign_certificate
from rewardseal.v1 import control_service_pb2 as cpb
from rewardseal.v1.certificate_pb2 import IssuerKey, RevocationList, RewardCertificate
from rewardseal.v1.enums_pb2 import CertificateState, IssuerKeyRole, RewardOutcome
from rewardseal_control.app import ControlApp
from rewardseal_worker.bundle import CERTIFICATE_FILE
from rewardseal_worker.engine import Scorer
from rewardseal_worker.settings import resolve_settings as worker_settings
from rewardseal_worker.store import REVOCATION_VERSION

WORKER = (("authorization", f"Bearer {WORKER_TOKEN}"),)


@pytest.fixture
async def control(tmp_path: Path) -> AsyncIterator[ControlApp]:
    app = await start_control_plane(tmp_path)
    yield app
    await app.stop()


@pytest.fixture
def adopted(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """Every certificate id any scorer was switched to, in order (None: no certificate)."""
    seen: list[str | None] = []
    original = Scorer.use_certificate

    def record(self: Scorer, certificate, digest):  # type: ignore[no-untyped-def]
        seen.append(certificate.certificate_id if certificate is not None else None)
        original(self, certificate, digest)

    monkeypatch.setattr(Scorer, "use_certificate", record)
    return seen


async def holding_a_list(stack: RunningStack) -> None:
    link = link_of(stack)

    async def held() -> bool:
        follower = link._follower
        return follower is not None and follower.held is not None

    await eventually(held)


# --- trust is pinned, never taken from control ---


async def test_control_link_refuses_certificates_signed_by_an_unpinned_key(
    tmp_path: Path, data_dir: Path
) -> None:
    """A rogue control plane (or a man in the middle answering for control) registers its own
    organization key and signs certificates and revocation lists with it: the worker, pinning
    the real organization key, adopts none of them and certifies nothing."""
    genuine = SigningKey.generate()
    rogue = await start_control_plane(tmp_path, directory="rogue")
    stack = await start_linked_worker(data_dir, rogue.target, genuine)
    try:
        link = link_of(stack)
        seeded = in_use(stack)
        # Control's registry vouches for the rogue key: it used to be enough.
        channel, stub = control_stub(rogue.target)
        try:
            keys = await stub.ListIssuerKeys(
                cpb.ListIssuerKeysRequest(role=IssuerKeyRole.ISSUER_KEY_ROLE_ORGANIZATION),
                metadata=WORKER,
            )
        finally:
            await channel.close()
        assert rogue.key.public_key in {k.public_key for k in keys.keys}
        forged = await issue_certificate(rogue, data_dir, stack.digest)
        await polled_after(stack)
        await polled_after(stack)
        assert in_use(stack) == seeded != forged
        # Its revocation lists are refused too: no list, no vouching, no certified receipt.
        assert link._follower is not None
        assert link._follower.held is None
        forged_certificate = rogue.store.certificates.get_certificate(forged).certificate
        assert link.revocation(forged_certificate).value == "unknown"
        got = await score_honest(stack, 1)
        assert got.receipt.certificate_id != forged
        assert got.receipt.certified is False
    finally:
        await stop_stack(stack)
        await rogue.stop()


async def test_worker_holds_no_admin_credential(
    control: ControlApp, data_dir: Path, tmp_path: Path
) -> None:
    with pytest.raises(ValidationError, match="must not hold the control plane's admin"):
        worker_settings(
            data_dir=data_dir,
            control_target=control.target,
            trust_org_keys=[control.key.public_key.hex()],
            env={
                "REWARDSEAL_WORKER_CONTROL_TOKEN": WORKER_TOKEN,
                "REWARDSEAL_WORKER_CONTROL_ADMIN_TOKEN": "admin-token-" + "a" * 32,
            },
        )
    with pytest.raises(ValidationError, match="--trust-org-key"):
        worker_settings(
            data_dir=data_dir,
            control_target=control.target,
            env={"REWARDSEAL_WORKER_CONTROL_TOKEN": WORKER_TOKEN},
        )
    stack = await start_linked_worker(data_dir, control.target, control.key)
    try:
        await asyncio.wait_for(link_of(stack).registered.wait(), 20)
        # The worker registered its own key with the worker credential alone.
        registered = control.store.keys.get_issuer_key(stack.app.key.key_id)
        assert registered.role == IssuerKeyRole.ISSUER_KEY_ROLE_WORKER
        certificate_id = await issue_certificate(control, data_dir, stack.digest)
        channel, stub = control_stub(control.target)
        try:
            refused = [
                stub.IssueCertificate(cpb.IssueCertificateRequest(), metadata=WORKER),
                stub.RevokeCertificate(
                    cpb.RevokeCertificateRequest(certificate_id=certificate_id, reason="x"),
                    metadata=WORKER,
                ),
                stub.RetireIssuerKey(
                    cpb.RetireIssuerKeyRequest(key_id=control.key.key_id, reason="x"),
                    metadata=WORKER,
                ),
                stub.RegisterIssuerKey(
                    cpb.RegisterIssuerKeyRequest(
                        key=IssuerKey(
                            public_key=SigningKey.generate().public_key,
                            role=IssuerKeyRole.ISSUER_KEY_ROLE_ORGANIZATION,
                        ),
                        reason="x",
                    ),
                    metadata=WORKER,
                ),
            ]
            for call in refused:
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await call
                assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
        finally:
            await channel.close()
        assert not control.store.certificates.get_certificate(certificate_id).revoked
    finally:
        await stop_stack(stack)


# --- certificates follow control while the worker runs ---


async def test_certificate_issued_while_running_is_adopted_without_restart(
    control: ControlApp, data_dir: Path
) -> None:
    stack = await start_linked_worker(data_dir, control.target, control.key)
    try:
        await holding_a_list(stack)
        certificate_id = await issue_certificate(control, data_dir, stack.digest)
        await scoring_under(stack, certificate_id)
        health = await stack.client.health()
        assert health.certificate_id == certificate_id
        assert stack.app.banner()["certificate_id"] == certificate_id
        got = await score_honest(stack, 1)
        assert got.receipt.certificate_id == certificate_id
        assert got.receipt.certified, got.receipt.certification_refusals
    finally:
        await stop_stack(stack)


async def test_with_two_valid_certificates_the_newest_valid_wins(
    control: ControlApp, data_dir: Path
) -> None:
    stack = await start_linked_worker(data_dir, control.target, control.key)
    try:
        await holding_a_list(stack)
        later_update = await issue_certificate(
            control, data_dir, stack.digest, issued_at_policy_update=2
        )
        await issue_certificate(control, data_dir, stack.digest, issued_at_policy_update=0)
        # Issued later, but for an earlier policy update: the update decides first.
        await polled_after(stack)
        assert in_use(stack) == later_update
        same_update_later = await issue_certificate(
            control, data_dir, stack.digest, issued_at_policy_update=2
        )
        # Same policy update: the one issued later wins.
        await scoring_under(stack, same_update_later)
    finally:
        await stop_stack(stack)


async def test_certificate_for_a_future_update_does_not_displace_the_current_one(
    control: ControlApp, data_dir: Path
) -> None:
    """Training is at update 0; a newer certificate issued for update 5000 would read
    NOT_YET_VALID on every receipt. The worker keeps the one that certifies today's episodes
    and moves once training reaches the new one's window."""
    stack = await start_linked_worker(data_dir, control.target, control.key)
    try:
        await holding_a_list(stack)
        today = await issue_certificate(control, data_dir, stack.digest)
        await scoring_under(stack, today)
        got = await score_honest(stack, 1, update=0)
        assert got.receipt.certified, got.receipt.certification_refusals
        ahead = await issue_certificate(
            control, data_dir, stack.digest, issued_at_policy_update=5000
        )
        await polled_after(stack)
        assert in_use(stack) == today
        got = await score_honest(stack, 2, update=900)
        assert got.receipt.certificate_id == today
        assert got.receipt.certified, got.receipt.certification_refusals
        # Training reaches the new certificate's window (the old one expired at 1000).
        got = await score_honest(stack, 3, update=5000)
        assert got.receipt.certificate_state == CertificateState.CERTIFICATE_STATE_EXPIRED
        await scoring_under(stack, ahead)
        got = await score_honest(stack, 4, update=5001)
        assert got.receipt.certificate_id == ahead
        assert got.receipt.certified, got.receipt.certification_refusals
    finally:
        await stop_stack(stack)


async def test_more_than_one_page_of_certificates(control: ControlApp, data_dir: Path) -> None:
    """Control lists oldest first, 50 to a page: the newest is on the last page."""
    stack = await start_linked_worker(data_dir, control.target, control.key)
    try:
        issued = [
            await issue_certificate(
                control, data_dir, stack.digest, certificate_id=f"cert.page.{n:03d}"
            )
            for n in range(57)
        ]
        channel, stub = control_stub(control.target)
        try:
            first = await stub.ListCertificates(
                cpb.ListCertificatesRequest(reward_contract_digest=stack.digest), metadata=WORKER
            )
        finally:
            await channel.close()
        assert first.next_page_token
        assert issued[-1] not in {c.certificate_id for c in first.certificates}
        await scoring_under(stack, issued[-1])
    finally:
        await stop_stack(stack)


async def test_revoked_certificate_in_use_falls_back_to_the_previous_valid_one(
    control: ControlApp, data_dir: Path, adopted: list[str | None]
) -> None:
    stack = await start_linked_worker(data_dir, control.target, control.key)
    try:
        older = await issue_certificate(control, data_dir, stack.digest)
        newer = await issue_certificate(control, data_dir, stack.digest)
        await scoring_under(stack, newer)
        await revoke(control, newer)
        # Pushed by the revocation stream, acted on at once (not at the next poll).
        await scoring_under(stack, older)
        got = await score_honest(stack, 1)
        assert got.receipt.certificate_id == older
        assert got.receipt.certified, got.receipt.certification_refusals
        assert adopted[-2:] == [newer, older]
    finally:
        await stop_stack(stack)


async def test_revoked_certificate_in_use_falls_back_to_none(
    control: ControlApp, data_dir: Path
) -> None:
    (data_dir / "contracts" / "mockmed" / CERTIFICATE_FILE).unlink()
    stack = await start_linked_worker(data_dir, control.target, control.key)
    try:
        assert in_use(stack) is None
        only = await issue_certificate(control, data_dir, stack.digest)
        await scoring_under(stack, only)
        await revoke(control, only)
        await scoring_under(stack, None)
        got = await score_honest(stack, 1)
        assert got.receipt.certificate_state == CertificateState.CERTIFICATE_STATE_ABSENT
        assert got.receipt.certified is False
        assert got.scalar == 1.0
        assert (await stack.client.health()).certificate_id == ""
    finally:
        await stop_stack(stack)


async def test_restart_never_readopts_a_revoked_certificate(
    control: ControlApp, data_dir: Path, adopted: list[str | None]
) -> None:
    """Revoked while the worker was down: on restart the worker adopts nothing from control
    before it holds a verified list, and then the older valid certificate, never the revoked
    newer one (it used to take the first verifying one, ties to the older)."""
    stack = await start_linked_worker(data_dir, control.target, control.key)
    try:
        older = await issue_certificate(control, data_dir, stack.digest)
        newer = await issue_certificate(control, data_dir, stack.digest)
        await scoring_under(stack, newer)
    finally:
        await stop_stack(stack)
    await revoke(control, newer)
    adopted.clear()
    stack = await start_linked_worker(data_dir, control.target, control.key)
    try:
        await scoring_under(stack, older)
        await polled_after(stack)
        assert newer not in adopted
        assert adopted == [older]
        got = await score_honest(stack, 1)
        assert got.receipt.certificate_id == older
        assert got.receipt.certified, got.receipt.certification_refusals
    finally:
        await stop_stack(stack)


async def test_revocation_list_rollback_across_restart_is_refused(
    tmp_path: Path, data_dir: Path, store_url: str, adopted: list[str | None]
) -> None:
    """Control's database is restored from a copy taken before a revocation (same organization
    key, so its old list verifies): a restarted worker refuses the older list, so it never
    adopts the certificate that list does not yet revoke."""
    control = await start_control_plane(tmp_path)
    stack = await start_linked_worker(data_dir, control.target, control.key, db_url=store_url)
    try:
        certificate_id = await issue_certificate(control, data_dir, stack.digest)
        await scoring_under(stack, certificate_id)
    finally:
        await stop_stack(stack)
        await control.stop()
    shutil.copytree(tmp_path / "control", tmp_path / "control-before-revocation")

    control = await start_control_plane(tmp_path)
    try:
        version = await revoke(control, certificate_id)
        revoked_certificate = control.store.certificates.get_certificate(certificate_id).certificate
        stack = await start_linked_worker(data_dir, control.target, control.key, db_url=store_url)
        try:
            link = link_of(stack)

            async def revoked_dropped_and_kept() -> bool:
                # The follower answers "revoked" as soon as it accepts the list; keeping its
                # version and choosing again follow a moment later (off the event loop), so
                # all three are awaited together rather than asserted right after the first.
                return (
                    link.revocation(revoked_certificate).value == "revoked"
                    and in_use(stack) != certificate_id
                    and stack.app.store.state_value(REVOCATION_VERSION) >= version
                )

            await eventually(revoked_dropped_and_kept)
        finally:
            await stop_stack(stack)
    finally:
        await control.stop()

    restored = await start_control_plane(tmp_path, directory="control-before-revocation")
    adopted.clear()
    stack = await start_linked_worker(data_dir, restored.target, restored.key, db_url=store_url)
    try:
        link = link_of(stack)

        async def refused() -> bool:
            return link._distrusted

        await eventually(refused)
        await polled_after(stack)
        assert certificate_id not in adopted
        assert in_use(stack) != certificate_id
        assert link._follower is not None
        assert link._follower.held is None
        got = await score_honest(stack, 1)
        assert got.receipt.certified is False
    finally:
        await stop_stack(stack)
        await restored.stop()


async def test_pinned_key_can_come_from_controls_ready_file(
    control: ControlApp, data_dir: Path, tmp_path: Path
) -> None:
    from rewardseal_server.serving import write_ready_file

    ready = tmp_path / "control.ready.json"
    write_ready_file(ready, control.banner())
    stack = await start_linked_worker(data_dir, control.target, str(ready))
    try:
        assert stack.app.settings.trust_org_keys == (control.key.public_key,)
        certificate_id = await issue_certificate(control, data_dir, stack.digest)
        await scoring_under(stack, certificate_id)
    finally:
        await stop_stack(stack)


# --- revocation stops certification (R-C-9, R-C-13) ---


def certificate_at(control: ControlApp, certificate_id: str) -> RewardCertificate:
    return control.store.certificates.get_certificate(certificate_id).certificate


def held_list(stack: RunningStack) -> RevocationList:
    follower = link_of(stack)._follower
    assert follower is not None
    assert follower.held is not None
    return follower.held


async def assert_uncertified(stack: RunningStack, index: int) -> None:
    """The next receipt: scored (VERIFIED, 1.0) and certified by nothing."""
    got = await score_honest(stack, index)
    assert got.receipt.reward_outcome == RewardOutcome.REWARD_OUTCOME_VERIFIED
    assert got.scalar == 1.0
    assert got.receipt.certified is False
    assert got.receipt.certificate_id == ""
    assert got.receipt.certificate_state == CertificateState.CERTIFICATE_STATE_ABSENT
    assert (await stack.client.health()).certificate_id == ""


async def test_revoking_the_certificate_in_use_leaves_receipts_uncertified(
    control: ControlApp, data_dir: Path, adopted: list[str | None]
) -> None:
    """Finding 4: the worker's bundle holds a self-signed certificate computed by the same
    checker; once control revoked the certificate in use the worker fell back to it and kept
    answering certified=true. Linked, the bundle's certificate counts only if control lists it."""
    stack = await start_linked_worker(data_dir, control.target, control.key)
    try:
        bundle_certificate = stack.app.bundle.certificate
        assert bundle_certificate is not None
        # The start-up window: nothing is certified under the bundle's certificate before
        # the worker has read control's list (it starts under none, not the bundle's).
        assert in_use(stack) is None
        assert stack.app.banner()["certificate_id"] is None
        await assert_uncertified(stack, 1)
        issued = await issue_certificate(control, data_dir, stack.digest)
        await scoring_under(stack, issued)
        got = await score_honest(stack, 2)
        assert got.receipt.certified, got.receipt.certification_refusals

        await revoke(control, issued)
        await scoring_under(stack, None)
        await polled_after(stack)
        assert in_use(stack) is None
        await assert_uncertified(stack, 3)
        assert bundle_certificate.certificate_id not in adopted
        assert adopted == [issued, None]

        # Until control says otherwise: the next certificate it issues is adopted.
        again = await issue_certificate(control, data_dir, stack.digest)
        await scoring_under(stack, again)
        got = await score_honest(stack, 4)
        assert got.receipt.certificate_id == again
        assert got.receipt.certified, got.receipt.certification_refusals
    finally:
        await stop_stack(stack)


async def listed_ids(control: ControlApp, digest: str) -> list[str]:
    """The ids control lists for ``digest`` (what the worker's poll reads)."""
    channel, stub = control_stub(control.target)
    try:
        answer = await stub.ListCertificates(
            cpb.ListCertificatesRequest(reward_contract_digest=digest), metadata=WORKER
        )
    finally:
        await channel.close()
    return [c.certificate_id for c in answer.certificates]


async def test_an_accepted_bundle_certificate_is_listed_and_revocable(
    control: ControlApp, data_dir: Path, adopted: list[str | None]
) -> None:
    """The compose path (R-C-11): the admin's enrollment accepts the bundle's self-signed
    certificate, so control lists it and the linked worker certifies under it; revoked by id
    like any certificate, receipts are uncertified again (the bundle's own never stands in)."""
    accepting = await enrollment(control.target, accept_bundle_certificate=True)
    stack = await start_linked_worker(data_dir, control.target, control.key, env=accepting)
    try:
        bundle_certificate = stack.app.bundle.certificate
        assert bundle_certificate is not None
        bundle_id = bundle_certificate.certificate_id
        await asyncio.wait_for(link_of(stack).registered.wait(), 60)
        assert await listed_ids(control, stack.digest) == [bundle_id]
        stored = control.store.certificates.get_certificate(bundle_id)
        assert stored.certificate == bundle_certificate  # signed by the worker key itself
        assert stored.certificate.issuer_key_id == stack.app.key.key_id
        await scoring_under(stack, bundle_id)
        got = await score_honest(stack, 1)
        assert got.receipt.certificate_id == bundle_id
        assert got.receipt.certified, got.receipt.certification_refusals
        # Another worker's accepted bundle certificate for the same contract is listed too: this
        # worker skips it, quietly (not under a pinned key), and keeps its own.
        other = SigningKey.generate()
        theirs = RewardCertificate()
        theirs.CopyFrom(bundle_certificate)
        theirs.certificate_id = "cert.bundle.other-worker"
        theirs = sign_certificate(theirs, other)
        async with control_client(control.target, ADMIN_TOKEN) as admin:
            registration = cpb.RegisterIssuerKeyRequest(
                key=IssuerKey(
                    public_key=other.public_key, role=IssuerKeyRole.ISSUER_KEY_ROLE_WORKER
                )
            )
            registration.bundle_certificate.CopyFrom(theirs)
            await admin.register_key(registration)
            approved = await admin.approve_issuer_key(
                other.key_id, [stack.digest], accept_bundle_certificate=True
            )
        assert list(approved.accepted_certificate_ids) == [theirs.certificate_id]
        await polled_after(stack)
        assert in_use(stack) == bundle_id
        assert link_of(stack)._ignored == set()
        # The receipt index takes it: a certificate control lists for the contract.
        receipt_id = got.receipt.receipt_id

        async def indexed() -> bool:
            return receipt_id in await control_receipts(control, stack.digest)

        await eventually(indexed)

        await revoke(control, bundle_id)
        await scoring_under(stack, None)
        await polled_after(stack)
        await assert_uncertified(stack, 2)
        assert adopted == [bundle_id, None]
        assert control.store.certificates.get_certificate(bundle_id).revoked
    finally:
        await stop_stack(stack)


async def test_an_approval_that_accepts_the_bundle_certificate_lets_it_certify(
    control: ControlApp, data_dir: Path
) -> None:
    """The approve path: a key registered without enrollment certifies nothing under its
    bundle's certificate; a plain approval changes nothing there; one with
    --accept-bundle-certificate makes control list it, and the worker certifies under it."""
    stack = await start_linked_worker(data_dir, control.target, control.key, enroll=False)
    try:
        bundle_certificate = stack.app.bundle.certificate
        assert bundle_certificate is not None
        assert await approve(control, stack) == []
        await polled_after(stack)
        assert in_use(stack) is None
        assert await listed_ids(control, stack.digest) == []
        accepted = await approve(control, stack, accept_bundle_certificate=True)
        assert accepted == [bundle_certificate.certificate_id]
        await scoring_under(stack, bundle_certificate.certificate_id)
        got = await score_honest(stack, 1)
        assert got.receipt.certified, got.receipt.certification_refusals
    finally:
        await stop_stack(stack)


async def test_contract_wide_revocation_is_honoured_by_worker_and_score(
    control: ControlApp, data_dir: Path, adopted: list[str | None]
) -> None:
    """One signed entry revokes every certificate of the contract: the one in use and the older
    valid one the worker would otherwise fall back to (one made afterwards too: control refuses
    to issue it, and the MITM test below shows the bundle's own covered). A reader that holds
    the list (score()) refuses each as revoked."""
    stack = await start_linked_worker(data_dir, control.target, control.key)
    try:
        older = await issue_certificate(control, data_dir, stack.digest)
        newer = await issue_certificate(control, data_dir, stack.digest)
        await scoring_under(stack, newer)
        before = len(adopted)
        version = await revoke_every_certificate(control, contract=stack.digest)

        async def holds_it() -> bool:
            follower = link_of(stack)._follower
            return follower is not None and follower.version >= version

        await eventually(holds_it)
        await scoring_under(stack, None)
        # Control will not issue another under it (it would be revoked at birth).
        with pytest.raises(CertificationRefused, match=f"contract {stack.digest} is revoked"):
            await issue_certificate(control, data_dir, stack.digest)
        await polled_after(stack)
        assert in_use(stack) is None
        # Never the older one the worker would have fallen back to.
        assert adopted[before:] == [None]
        await assert_uncertified(stack, 1)

        contract = stack.app.bundle.contract
        revocations = held_list(stack)
        for certificate_id in (older, newer):
            certificate = certificate_at(control, certificate_id)
            assert link_of(stack).revocation(certificate).value == "revoked"
            refused = score(
                RewardOutcome.REWARD_OUTCOME_VERIFIED,
                tier=stack.app.bundle.tier,
                certificate=certificate,
                policy_update=0,
                contract=contract,
                revocation_list=revocations,
            )
            assert refused.scalar == 1.0
            assert not refused.certified
            assert f"certificate {certificate_id} is revoked" in refused.refusals
        # The same reader without the list would have certified: the list is what refuses.
        assert score(
            RewardOutcome.REWARD_OUTCOME_VERIFIED,
            tier=stack.app.bundle.tier,
            certificate=certificate_at(control, older),
            policy_update=0,
            contract=contract,
        ).certified
    finally:
        await stop_stack(stack)


async def test_checker_wide_revocation_stops_certification(
    control: ControlApp, data_dir: Path
) -> None:
    stack = await start_linked_worker(data_dir, control.target, control.key)
    try:
        issued = await issue_certificate(control, data_dir, stack.digest)
        await scoring_under(stack, issued)
        checker = certificate_at(control, issued).checker_configuration_digest
        await revoke_every_certificate(control, checker=checker)
        await scoring_under(stack, None)
        await assert_uncertified(stack, 1)
    finally:
        await stop_stack(stack)


async def test_a_man_in_the_middle_cannot_bring_certification_back_after_revocation(
    control: ControlApp, data_dir: Path
) -> None:
    """The MITM case of finding 4: between worker and control, an attacker passes control's
    signed revocation lists through (it cannot forge them) and answers ListCertificates
    itself. Hiding control's certificates leaves the worker certifying nothing (no fallback to
    the bundle's); a listing is not signed, so one that names the bundle's own certificate is
    taken (docs/spec.md R-C-9 says so) -- until control revokes the contract, which the signed
    list carries and nothing in the middle can drop."""
    listing = {"certificates": cpb.ListCertificatesResponse().SerializeToString()}

    def answer(request: bytes) -> bytes:
        return listing["certificates"]

    stack: RunningStack | None = None
    async with control_mitm(control.target, {"ListCertificates": answer}) as target:
        stack = await start_linked_worker(data_dir, target, control.key)
        try:
            bundle_certificate = stack.app.bundle.certificate
            assert bundle_certificate is not None
            real = await issue_certificate(control, data_dir, stack.digest)
            listing["certificates"] = cpb.ListCertificatesResponse(
                certificates=[certificate_at(control, real)]
            ).SerializeToString()
            await scoring_under(stack, real)
            # Revoked at control; the man in the middle now hides every certificate.
            listing["certificates"] = cpb.ListCertificatesResponse().SerializeToString()
            await revoke(control, real)
            await scoring_under(stack, None)
            await polled_after(stack)
            await assert_uncertified(stack, 1)

            # It lists the bundle's own certificate: a listing is not signed.
            listing["certificates"] = cpb.ListCertificatesResponse(
                certificates=[bundle_certificate]
            ).SerializeToString()
            await scoring_under(stack, bundle_certificate.certificate_id)
            # Control revokes the contract: the signed entry covers the bundle's certificate.
            await revoke_every_certificate(control, contract=stack.digest)
            await scoring_under(stack, None)
            await polled_after(stack)
            assert in_use(stack) is None
            await assert_uncertified(stack, 2)
        finally:
            await stop_stack(stack)


def test_organization_key_helper_matches_control(tmp_path: Path) -> None:
    key = organization_key(tmp_path)
    assert organization_key(tmp_path).public_key == key.public_key
