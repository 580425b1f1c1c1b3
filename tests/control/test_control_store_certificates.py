"""ControlStore certificates and revocations (R-C-3, R-C-4) on SQLite and PostgreSQL: recording,
signed revocation lists with rising versions, re-signing, concurrent revokers."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from support.builders import make_certificate
from support.control_store import get_revocation_list, list_audit, revocation
from support.control_store_builders import (
    ADMIN,
    ORG_KEY,
    T0,
    all_pages,
    contract_version,
    seeded,
    signer,
)

from rewardseal.core.contract import contract_digest
from rewardseal.core.errors import (
    NotFound,
    ValidationError,
)
from rewardseal.core.signing import (
    REVOCATION_LIST_PAYLOAD_TYPE,
    TrustSet,
)
from rewardseal.core.validation import parse_strict
from rewardseal.v1.certificate_pb2 import RevocationList, RewardCertificate
from rewardseal.v1.receipt_pb2 import SignedEnvelope
from rewardseal_control.store import (
    ControlStore,
)
from rewardseal_kit.mockmed import mockmed_contract

# ---------------------------------------------------------------------- certificates


def test_record_and_get_certificate(store: ControlStore) -> None:
    digest = seeded(store)
    certificate = make_certificate(mockmed_contract())
    stored, created = store.certificates.record_certificate(certificate, ADMIN, "calibrated", at=T0)
    assert created
    assert stored.certificate == certificate
    assert stored.certificate.reward_contract_digest == digest
    assert not stored.revoked
    again, created = store.certificates.record_certificate(certificate, ADMIN, "retry")
    assert not created
    assert again == stored
    assert store.certificates.get_certificate(certificate.certificate_id) == stored
    with pytest.raises(NotFound):
        store.certificates.get_certificate("cert.unknown.0001")
    with pytest.raises(ValidationError):
        store.certificates.get_certificate("../etc/passwd")


def test_record_certificate_refusals(store: ControlStore) -> None:
    certificate = make_certificate(mockmed_contract())
    with pytest.raises(NotFound, match="contract"):
        store.certificates.record_certificate(certificate, ADMIN, "")
    store.contracts.register_contract(mockmed_contract(), None)
    with pytest.raises(ValidationError, match="issuer key"):
        store.certificates.record_certificate(certificate, ADMIN, "")  # its key is not registered
    seeded(store)
    store.certificates.record_certificate(certificate, ADMIN, "")
    other = make_certificate(mockmed_contract(), expiry_policy_updates=10)
    with pytest.raises(ValidationError, match="another certificate"):
        store.certificates.record_certificate(other, ADMIN, "")
    unsigned = RewardCertificate()
    unsigned.CopyFrom(certificate)
    unsigned.signature = b"short"
    with pytest.raises(ValidationError, match="signature"):
        store.certificates.record_certificate(unsigned, ADMIN, "")


def test_list_certificates_pages_per_contract(store: ControlStore) -> None:
    seeded(store)
    other_contract = contract_version(2)
    store.contracts.register_contract(other_contract, None)
    ids = []
    for n in range(7):
        stamp = make_certificate().issued_at
        stamp.FromDatetime(T0 + timedelta(minutes=n))
        certificate = make_certificate(certificate_id=f"cert.mockmed.{n:04d}", issued_at=stamp)
        store.certificates.record_certificate(certificate, ADMIN, "")
        ids.append(certificate.certificate_id)
    store.certificates.record_certificate(
        make_certificate(other_contract, certificate_id="cert.other.0001"), ADMIN, ""
    )
    digest = contract_digest(mockmed_contract())
    pages = all_pages(lambda **kw: store.certificates.list_certificates(digest, **kw), 3)
    assert [len(p.items) for p in pages] == [3, 3, 1]
    assert [c.certificate.certificate_id for p in pages for c in p.items] == ids  # type: ignore[attr-defined]
    assert len(store.certificates.list_certificates().items) == 8
    assert store.certificates.list_certificates("sha256:" + "0" * 64).items == []


# ---------------------------------------------------------------------- revocation


def _revocation_list(envelope: SignedEnvelope) -> RevocationList:
    verified = TrustSet([ORG_KEY.public_key]).verify(
        envelope, payload_type=REVOCATION_LIST_PAYLOAD_TYPE
    )
    return parse_strict(RevocationList, verified.payload)


def test_revoke_publishes_a_signed_list_with_a_higher_version(store: ControlStore) -> None:
    seeded(store)
    first = make_certificate()
    second = make_certificate(certificate_id="cert.mockmed.0002")
    store.certificates.record_certificate(first, ADMIN, "")
    store.certificates.record_certificate(second, ADMIN, "")
    assert store.revocations.revocation_head() is None

    head, created = store.revocations.revoke(
        first.certificate_id, "key leaked", ADMIN, sign=signer(), at=T0
    )
    assert created
    assert head.version == 1
    assert head.expires_at == T0 + timedelta(hours=24)
    listed = _revocation_list(head.envelope)
    assert listed.version == 1
    assert listed.issuer_key_id == ORG_KEY.key_id
    assert [e.certificate_id for e in listed.entries] == [first.certificate_id]
    assert listed.entries[0].reason == "key leaked"

    later = T0 + timedelta(minutes=5)
    head2, created = store.revocations.revoke(
        second.certificate_id, "bad corpus", ADMIN, sign=signer(), ttl=timedelta(hours=1), at=later
    )
    assert created
    assert head2.version == 2
    assert head2.expires_at == later + timedelta(hours=1)
    assert [e.certificate_id for e in _revocation_list(head2.envelope).entries] == [
        first.certificate_id,
        second.certificate_id,
    ]
    # Revoking again changes nothing and returns the current head.
    head3, created = store.revocations.revoke(first.certificate_id, "again", ADMIN, sign=signer())
    assert not created
    assert head3 == head2
    assert store.revocations.revocation_head() == head2
    assert get_revocation_list(store, 1) == head

    record = revocation(store, first.certificate_id)
    assert record is not None
    assert record.list_version == 1
    assert record.reason == "key leaked"
    assert revocation(store, second.certificate_id).list_version == 2  # type: ignore[union-attr]
    stored = store.certificates.get_certificate(first.certificate_id)
    assert stored.revoked
    assert stored.revocation_reason == "key leaked"
    assert stored.revoked_at == T0


def test_revoke_refusals_store_nothing(store: ControlStore) -> None:
    seeded(store)
    certificate = make_certificate()
    store.certificates.record_certificate(certificate, ADMIN, "")
    with pytest.raises(NotFound):
        store.revocations.revoke("cert.unknown.0001", "r", ADMIN, sign=signer())
    with pytest.raises(ValidationError, match="reason"):
        store.revocations.revoke(certificate.certificate_id, "", ADMIN, sign=signer())
    with pytest.raises(ValidationError, match="ttl"):
        store.revocations.revoke(
            certificate.certificate_id, "r", ADMIN, sign=signer(), ttl=timedelta(0)
        )

    def forger(revocations: RevocationList) -> SignedEnvelope:
        del revocations.entries[:]  # signs a list without the revocation
        return signer()(revocations)

    with pytest.raises(ValidationError, match="another revocation list"):
        store.revocations.revoke(certificate.certificate_id, "r", ADMIN, sign=forger)
    assert revocation(store, certificate.certificate_id) is None
    assert store.revocations.revocation_head() is None
    assert not store.certificates.get_certificate(certificate.certificate_id).revoked
    assert list_audit(store, action="certificate.revoke").items == []


def test_publish_revocation_list_resigns_under_a_new_version(store: ControlStore) -> None:
    seeded(store)
    first = store.revocations.publish_revocation_list(sign=signer(), at=T0)
    assert first.version == 1
    assert list(_revocation_list(first.envelope).entries) == []
    certificate = make_certificate()
    store.certificates.record_certificate(certificate, ADMIN, "")
    revoked, _ = store.revocations.revoke(
        certificate.certificate_id, "r", ADMIN, sign=signer(), at=T0
    )
    resigned = store.revocations.publish_revocation_list(
        sign=signer(), ttl=timedelta(hours=2), at=T0 + timedelta(hours=12)
    )
    assert resigned.version == revoked.version + 1 == 3
    assert resigned.expires_at == T0 + timedelta(hours=14)
    assert list(_revocation_list(resigned.envelope).entries) == list(
        _revocation_list(revoked.envelope).entries
    )
    assert store.revocations.revocation_head() == resigned
    with pytest.raises(NotFound):
        get_revocation_list(store, 99)


def test_concurrent_revocations_get_distinct_versions(store: ControlStore) -> None:
    seeded(store)
    ids = [f"cert.mockmed.{n:04d}" for n in range(6)]
    for certificate_id in ids:
        store.certificates.record_certificate(
            make_certificate(certificate_id=certificate_id), ADMIN, ""
        )
    with ThreadPoolExecutor(max_workers=6) as pool:
        heads = list(
            pool.map(
                lambda c: store.revocations.revoke(c, "batch", ADMIN, sign=signer())[0].version, ids
            )
        )
    assert sorted(heads) == [1, 2, 3, 4, 5, 6]
    head = store.revocations.revocation_head()
    assert head is not None
    assert head.version == 6
    assert [e.certificate_id for e in _revocation_list(head.envelope).entries] == ids
