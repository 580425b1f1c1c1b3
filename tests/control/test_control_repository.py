"""ControlStore (SPEC section 9) on SQLite and PostgreSQL: every method, pagination, page
tokens, idempotent receipts, audit rows, validity windows and retired keys."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from support.builders import FIXED_TIME, make_certificate, make_facts
from support.control_store import audit, get_receipt, get_revocation_list, list_audit, revocation

from rewardseal.contract import contract_digest
from rewardseal.errors import (
    DuplicateEpisode,
    NotFound,
    SignatureError,
    ValidationError,
)
from rewardseal.mockmed import mockmed_contract
from rewardseal.receipts import build_receipt, seal_receipt
from rewardseal.signing import (
    RECEIPT_PAYLOAD_TYPE,
    REVOCATION_LIST_PAYLOAD_TYPE,
    SigningKey,
    TrustSet,
    sign_envelope,
)
from rewardseal.v1.certificate_pb2 import IssuerKey, RevocationList, RewardCertificate
from rewardseal.v1.contract_pb2 import RewardContract
from rewardseal.v1.enums_pb2 import CertificateState, IssuerKeyRole, RewardOutcome
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt, SignedEnvelope
from rewardseal.validation import parse_strict
from rewardseal_control.store import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    ControlStore,
    Page,
    ReceiptFilter,
    RevocationSigner,
)

WORKER = IssuerKeyRole.ISSUER_KEY_ROLE_WORKER
ORGANIZATION = IssuerKeyRole.ISSUER_KEY_ROLE_ORGANIZATION
WORKER_KEY = SigningKey.from_seed(bytes(range(32)))  # the key support.builders certifies with
ORG_KEY = SigningKey.from_seed(bytes(range(100, 132)))
ADMIN = "admin"
T0 = FIXED_TIME
VERIFIED = RewardOutcome.REWARD_OUTCOME_VERIFIED
WRONG = RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT
FAILED = RewardOutcome.REWARD_OUTCOME_FAILED_PLATFORM


@pytest.fixture
def store(store_url: str) -> Iterator[ControlStore]:
    """A migrated, empty control store on each backend."""
    opened = ControlStore(store_url)
    try:
        yield opened
    finally:
        opened.close()


# ---------------------------------------------------------------------- builders


def contract_version(n: int) -> RewardContract:
    """A distinct valid contract per ``n`` (another version: another digest)."""
    contract = mockmed_contract()
    contract.contract_version = f"{n}"
    return contract


def key_message(key: SigningKey, role: int, /, **fields: object) -> IssuerKey:
    message = IssuerKey(public_key=key.public_key, role=role, display_name="test key")  # type: ignore[arg-type]
    for name, value in fields.items():
        if name in ("not_before", "not_after"):
            getattr(message, name).FromDatetime(value)
        else:
            setattr(message, name, value)
    return message


def signer(key: SigningKey = ORG_KEY) -> RevocationSigner:
    """The service's list signer: sets the issuer key id and signs the exact bytes."""

    def sign(revocations: RevocationList) -> SignedEnvelope:
        revocations.issuer_key_id = key.key_id
        return sign_envelope(
            REVOCATION_LIST_PAYLOAD_TYPE, revocations.SerializeToString(deterministic=True), key
        )

    return sign


def sealed(
    episode: str,
    *,
    outcome: RewardOutcome.ValueType = VERIFIED,
    tier: int = 2,
    policy_update: int = 100,
    contract: RewardContract | None = None,
    key: SigningKey = WORKER_KEY,
) -> SignedEnvelope:
    """A signed receipt for one episode (certified at tier 2 inside the certificate window)."""
    contract = contract or mockmed_contract()
    receipt = build_receipt(
        make_facts(outcome, tier=tier, policy_update=policy_update, episode_id=episode),
        contract=contract,
        certificate=make_certificate(contract),
        issuer_key_id=key.key_id,
    )
    return seal_receipt(receipt, key)


def seeded(store: ControlStore) -> str:
    """Register the MockMed contract and the worker and organization keys; the digest."""
    digest, _ = store.contracts.register_contract(
        mockmed_contract(), contract_digest(mockmed_contract())
    )
    store.keys.register_issuer_key(key_message(WORKER_KEY, WORKER), ADMIN, "worker", at=T0)
    store.keys.register_issuer_key(key_message(ORG_KEY, ORGANIZATION), ADMIN, "org", at=T0)
    return digest


def all_pages(fetch: object, page_size: int) -> list[Page[object]]:
    """Follow next_page_token to the end; every page."""
    pages: list[Page[object]] = []
    token = ""
    while True:
        page = fetch(page_size=page_size, page_token=token)  # type: ignore[operator]
        pages.append(page)
        token = page.next_page_token
        if not token:
            return pages


# ---------------------------------------------------------------------- contracts


def test_register_contract_is_idempotent_and_recomputes_the_digest(store: ControlStore) -> None:
    contract = mockmed_contract()
    digest = contract_digest(contract)
    assert store.contracts.register_contract(contract, digest) == (digest, True)
    assert store.contracts.register_contract(contract, digest) == (digest, False)
    assert store.contracts.register_contract(contract, None) == (digest, False)

    registered = store.contracts.get_contract(digest)
    assert registered.reward_contract_digest == digest
    assert contract_digest(registered.contract) == digest
    assert registered.registered_at.ToDatetime().year >= 2024


def test_register_contract_refuses_a_digest_mismatch(store: ControlStore) -> None:
    contract = mockmed_contract()
    other = contract_digest(contract_version(2))
    with pytest.raises(ValidationError, match="does not match"):
        store.contracts.register_contract(contract, other)
    with pytest.raises(ValidationError):
        store.contracts.register_contract(contract, "")  # the claim is required when passed
    with pytest.raises(NotFound):
        store.contracts.get_contract(contract_digest(contract))


def test_register_contract_refuses_invalid_contracts(store: ControlStore) -> None:
    broken = mockmed_contract()
    broken.contract_id = "bad id"
    with pytest.raises(ValidationError):
        store.contracts.register_contract(broken, None)
    # Protobuf keeps unknown fields; add one on the wire (field 1023, varint 1).
    wire = mockmed_contract().SerializeToString() + b"\xf8\x3f\x01"
    with pytest.raises(ValidationError, match="does not know"):
        store.contracts.register_contract(RewardContract.FromString(wire), None)


def test_get_contract_refuses_a_malformed_digest(store: ControlStore) -> None:
    with pytest.raises(ValidationError):
        store.contracts.get_contract("sha256:XYZ")
    with pytest.raises(NotFound):
        store.contracts.get_contract("sha256:" + "0" * 64)


def test_list_contracts_pages(store: ControlStore) -> None:
    digests = []
    for n in range(7):
        digest, created = store.contracts.register_contract(
            contract_version(n), None, at=T0 + timedelta(seconds=n)
        )
        assert created
        digests.append(digest)
    pages = all_pages(store.contracts.list_contracts, 3)
    assert [len(p.items) for p in pages] == [3, 3, 1]
    listed = [c.reward_contract_digest for p in pages for c in p.items]  # type: ignore[attr-defined]
    assert listed == digests  # oldest registration first, each exactly once
    assert store.contracts.list_contracts().next_page_token == ""
    items, token = store.contracts.list_contracts(page_size=7)
    assert len(items) == 7
    assert token == ""


# ---------------------------------------------------------------------- issuer keys


def test_register_issuer_key(store: ControlStore) -> None:
    key, created = store.keys.register_issuer_key(
        key_message(WORKER_KEY, WORKER), ADMIN, "first worker", at=T0
    )
    assert created
    assert key.key_id == WORKER_KEY.key_id
    assert key.public_key == WORKER_KEY.public_key
    assert key.role == WORKER
    assert not key.retired
    assert key.not_before.ToDatetime() == T0.replace(tzinfo=None)
    assert not key.HasField("not_after")
    again, created = store.keys.register_issuer_key(
        key_message(WORKER_KEY, WORKER, key_id=WORKER_KEY.key_id), ADMIN, "again"
    )
    assert not created
    assert again == key
    assert store.keys.get_issuer_key(WORKER_KEY.key_id) == key


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"key_id": ORG_KEY.key_id}, "does not name public_key"),
        ({"role": IssuerKeyRole.ISSUER_KEY_ROLE_UNSPECIFIED}, "role"),
        ({"public_key": b"\x01" * 31}, "public_key"),
        ({"retired": True}, "retired"),
        ({"not_before": T0, "not_after": T0}, "not_after"),
        ({"display_name": "x\x00y"}, "control characters"),
    ],
)
def test_register_issuer_key_refusals(
    store: ControlStore, fields: dict[str, object], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        store.keys.register_issuer_key(key_message(WORKER_KEY, WORKER, **fields), ADMIN, "r")
    assert store.keys.list_issuer_keys().items == []
    assert list_audit(store).items == []


def test_a_key_keeps_its_role_and_window(store: ControlStore) -> None:
    store.keys.register_issuer_key(key_message(WORKER_KEY, WORKER), ADMIN, "", at=T0)
    with pytest.raises(ValidationError, match="another role"):
        store.keys.register_issuer_key(key_message(WORKER_KEY, ORGANIZATION), ADMIN, "escalate")
    with pytest.raises(ValidationError, match="validity window"):
        store.keys.register_issuer_key(
            key_message(WORKER_KEY, WORKER, not_before=T0 - timedelta(days=1)), ADMIN, ""
        )


@pytest.mark.parametrize("actor", ["", "Bearer abc", "admin token", "1admin", "a" * 200])
def test_actor_must_be_a_name(store: ControlStore, actor: str) -> None:
    with pytest.raises(ValidationError, match="actor"):
        store.keys.register_issuer_key(key_message(WORKER_KEY, WORKER), actor, "r")


def test_list_issuer_keys_pages_and_filters_by_role(store: ControlStore) -> None:
    workers = [SigningKey.from_seed(bytes([n]) * 32) for n in range(5)]
    for n, key in enumerate(workers):
        store.keys.register_issuer_key(
            key_message(key, WORKER), ADMIN, "", at=T0 + timedelta(seconds=n)
        )
    store.keys.register_issuer_key(
        key_message(ORG_KEY, ORGANIZATION), ADMIN, "", at=T0 + timedelta(seconds=9)
    )
    pages = all_pages(lambda **kw: store.keys.list_issuer_keys(WORKER, **kw), 2)
    assert [len(p.items) for p in pages] == [2, 2, 1]
    assert [k.key_id for p in pages for k in p.items] == [k.key_id for k in workers]  # type: ignore[attr-defined]
    assert [k.key_id for k in store.keys.list_issuer_keys(ORGANIZATION).items] == [ORG_KEY.key_id]
    assert len(store.keys.list_issuer_keys().items) == 6
    # A token made under one role filter does not continue another.
    token = store.keys.list_issuer_keys(WORKER, page_size=2).next_page_token
    with pytest.raises(ValidationError, match="other filters"):
        store.keys.list_issuer_keys(ORGANIZATION, page_size=2, page_token=token)


def test_retired_key_is_not_active(store: ControlStore) -> None:
    seeded(store)
    now = T0 + timedelta(hours=1)
    assert store.keys.active_key(WORKER_KEY.key_id, WORKER, now) is not None
    retired = store.keys.retire_issuer_key(WORKER_KEY.key_id, ADMIN, "rotated", at=now)
    assert retired.retired
    assert store.keys.active_key(WORKER_KEY.key_id, WORKER, now) is None
    assert store.keys.active_key(WORKER_KEY.key_id, WORKER, now + timedelta(days=1)) is None
    assert store.keys.active_key(WORKER_KEY.key_id, WORKER) is None  # default: now
    # Before its retirement it was active (history stays answerable).
    assert store.keys.active_key(WORKER_KEY.key_id, WORKER, now - timedelta(seconds=1)) is not None
    assert WORKER_KEY.key_id not in store.keys.worker_trust(now)
    # Retiring again changes nothing; a retired key is never registered again.
    assert store.keys.retire_issuer_key(
        WORKER_KEY.key_id, ADMIN, "again", at=now + timedelta(1)
    ) == (retired)
    with pytest.raises(ValidationError, match="retired"):
        store.keys.register_issuer_key(key_message(WORKER_KEY, WORKER), ADMIN, "revive")


def test_retire_refusals(store: ControlStore) -> None:
    with pytest.raises(NotFound):
        store.keys.retire_issuer_key(WORKER_KEY.key_id, ADMIN, "gone")
    seeded(store)
    with pytest.raises(ValidationError, match="reason"):
        store.keys.retire_issuer_key(WORKER_KEY.key_id, ADMIN, "  ")
    with pytest.raises(ValidationError):
        store.keys.retire_issuer_key("ed25519:sha256:nothex", ADMIN, "r")
    assert store.keys.active_key(WORKER_KEY.key_id, WORKER, T0) is not None


def test_validity_windows(store: ControlStore) -> None:
    start, end = T0 + timedelta(days=1), T0 + timedelta(days=2)
    store.keys.register_issuer_key(
        key_message(ORG_KEY, ORGANIZATION, not_before=start, not_after=end), ADMIN, "", at=T0
    )
    key_id = ORG_KEY.key_id
    assert store.keys.active_key(key_id, ORGANIZATION, start - timedelta(microseconds=1)) is None
    assert store.keys.active_key(key_id, ORGANIZATION, start) is not None  # inclusive start
    assert store.keys.active_key(key_id, ORGANIZATION, end - timedelta(microseconds=1)) is not None
    assert store.keys.active_key(key_id, ORGANIZATION, end) is None  # exclusive end
    # The role must match: an organization key is not a worker key.
    assert store.keys.active_key(key_id, WORKER, start) is None
    with pytest.raises(ValidationError):
        store.keys.active_key(key_id, IssuerKeyRole.ISSUER_KEY_ROLE_UNSPECIFIED, start)
    with pytest.raises(ValidationError, match="timezone"):
        store.keys.active_key(key_id, ORGANIZATION, start.replace(tzinfo=None))
    # Unknown keys are simply not active.
    assert store.keys.active_key(WORKER_KEY.key_id, WORKER, start) is None


def test_worker_trust_holds_active_worker_keys_only(store: ControlStore) -> None:
    later = SigningKey.from_seed(b"\x07" * 32)
    retired = SigningKey.from_seed(b"\x08" * 32)
    seeded(store)
    store.keys.register_issuer_key(
        key_message(later, WORKER, not_before=T0 + timedelta(days=3)), ADMIN, "", at=T0
    )
    store.keys.register_issuer_key(key_message(retired, WORKER), ADMIN, "", at=T0)
    store.keys.retire_issuer_key(retired.key_id, ADMIN, "compromised", at=T0 + timedelta(hours=1))
    now = T0 + timedelta(days=1)
    trust = store.keys.worker_trust(now)
    assert isinstance(trust, TrustSet)
    assert trust.key_ids == {WORKER_KEY.key_id}
    assert store.keys.trust_set(ORGANIZATION, now).key_ids == {ORG_KEY.key_id}
    assert store.keys.worker_trust(T0 + timedelta(days=4)).key_ids == {
        WORKER_KEY.key_id,
        later.key_id,
    }


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


# ---------------------------------------------------------------------- receipts


def test_record_receipts_is_idempotent_by_receipt_id(store: ControlStore) -> None:
    seeded(store)
    envelope = sealed("episode.0001")
    [result] = store.receipts.record_receipts([envelope])
    assert result.receipt_id == "rcpt.episode.0001"
    assert result.recorded
    assert not result.duplicate
    assert result.error is None
    [again] = store.receipts.record_receipts([envelope])
    assert again.recorded
    assert again.duplicate
    assert again.error is None
    stored = get_receipt(store, "rcpt.episode.0001")
    assert stored.envelope == envelope
    assert stored.receipt.episode_id == "episode.0001"
    assert store.receipts.list_receipts().items == [stored]


def test_record_receipts_refuses_items_one_by_one(store: ControlStore) -> None:
    digest = seeded(store)
    good = sealed("episode.0001")
    other_payload = sealed("episode.0001", outcome=WRONG)  # same receipt id, other content
    same_episode = sealed("episode.0001")
    receipt = parse_strict(RewardEvidenceReceipt, same_episode.payload)
    receipt.receipt_id = "rcpt.other.0001"
    same_episode = seal_receipt(receipt, WORKER_KEY)
    unregistered_key = SigningKey.from_seed(b"\x09" * 32)
    foreign = sealed("episode.0003", key=unregistered_key)
    unknown_contract = sealed("episode.0004", contract=contract_version(9))
    wrong_type = SignedEnvelope()
    wrong_type.CopyFrom(sealed("episode.0005"))
    wrong_type.payload_type = REVOCATION_LIST_PAYLOAD_TYPE
    record_contents = SignedEnvelope()
    record_contents.CopyFrom(sealed("episode.0006"))
    record_contents.payload += b"\xf8\x3f\x01"  # a field this schema does not know
    in_batch_twice = sealed("episode.0007")

    results = store.receipts.record_receipts(
        [
            good,
            other_payload,
            same_episode,
            foreign,
            unknown_contract,
            wrong_type,
            record_contents,
            in_batch_twice,
            in_batch_twice,
        ]
    )
    assert [(r.recorded, r.duplicate) for r in results] == [
        (True, False),
        (False, False),
        (False, False),
        (False, False),
        (False, False),
        (False, False),
        (False, False),
        (True, False),
        (True, True),
    ]
    assert isinstance(results[1].error, ValidationError)
    assert "other content" in results[1].error.message
    assert isinstance(results[2].error, DuplicateEpisode)
    assert results[2].error.metadata == {"receipt_id": "rcpt.episode.0001"}
    assert isinstance(results[3].error, SignatureError)
    assert results[3].error.reason == "signature_invalid"
    assert isinstance(results[4].error, NotFound)
    assert isinstance(results[5].error, ValidationError)
    assert results[5].receipt_id == ""
    assert isinstance(results[6].error, ValidationError)
    assert "does not know" in results[6].error.message
    summary = store.receipts.receipt_summary(digest)
    assert summary.total == 2


def test_record_receipts_refuses_envelope_flags(store: ControlStore) -> None:
    seeded(store)
    seal = SignedEnvelope()
    seal.CopyFrom(sealed("episode.0001"))
    seal.execute_seal = True
    flag = SignedEnvelope()
    flag.CopyFrom(sealed("episode.0002"))
    flag.unscored = True
    unsigned = SignedEnvelope(payload_type=RECEIPT_PAYLOAD_TYPE, payload=flag.payload)
    results = store.receipts.record_receipts([seal, flag, unsigned])
    assert [r.recorded for r in results] == [False, False, False]
    assert isinstance(results[2].error, SignatureError)
    assert store.receipts.list_receipts().items == []


def test_concurrent_forwarders_store_each_receipt_once(store: ControlStore) -> None:
    """Overlapping batches from several forwarders at once: every receipt stored exactly once."""
    digest = seeded(store)
    envelopes = [sealed(f"episode.c{n:03d}", policy_update=100 + n % 40) for n in range(40)]
    batches = [envelopes[start : start + 25] for start in (0, 5, 10, 15)] * 2
    with ThreadPoolExecutor(max_workers=8) as pool:
        outcomes = list(pool.map(store.receipts.record_receipts, batches))
    assert all(r.recorded and r.error is None for batch in outcomes for r in batch)
    fresh = [r.receipt_id for batch in outcomes for r in batch if not r.duplicate]
    assert sorted(fresh) == sorted(f"rcpt.episode.c{n:03d}" for n in range(40))
    assert store.receipts.receipt_summary(digest).total == 40


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


def _seed_receipts(store: ControlStore) -> str:
    digest = seeded(store)
    envelopes = [
        sealed("episode.a001", policy_update=100),  # certified
        sealed("episode.a002", policy_update=101),  # certified
        sealed("episode.a003", policy_update=102, outcome=WRONG),  # certified, scalar 0.0
        sealed("episode.a004", policy_update=103, outcome=FAILED),  # unscored, certified
        sealed("episode.a005", policy_update=104, tier=1),  # development only
        sealed("episode.a006", policy_update=200),  # certificate expired: uncertified
        sealed("episode.a007", policy_update=201, outcome=WRONG),  # expired
    ]
    assert all(r.recorded for r in store.receipts.record_receipts(envelopes))
    return digest


def test_list_receipts_pages(store: ControlStore) -> None:
    _seed_receipts(store)
    pages = all_pages(store.receipts.list_receipts, 3)
    assert [len(p.items) for p in pages] == [3, 3, 1]
    ids = [r.receipt.episode_id for p in pages for r in p.items]  # type: ignore[attr-defined]
    assert ids == [f"episode.a00{n}" for n in range(1, 8)]  # by policy update
    filtered = ReceiptFilter(certified=False)
    pages = all_pages(lambda **kw: store.receipts.list_receipts(filtered, **kw), 1)
    assert [len(p.items) for p in pages] == [1, 1, 1]


def test_list_receipts_filters(store: ControlStore) -> None:
    digest = _seed_receipts(store)

    def episodes(**filters: object) -> list[str]:
        page = store.receipts.list_receipts(ReceiptFilter(**filters), page_size=MAX_PAGE_SIZE)  # type: ignore[arg-type]
        return [r.receipt.episode_id for r in page.items]

    assert len(episodes(contract_digest=digest)) == 7
    assert episodes(contract_digest=contract_digest(contract_version(3))) == []
    assert episodes(reward_outcome=WRONG) == ["episode.a003", "episode.a007"]
    assert len(episodes(reward_outcome=RewardOutcome.REWARD_OUTCOME_UNSPECIFIED)) == 7
    # The outcome does not enter `certified` (R-SCORE-4): the unscored a004 is certified.
    assert episodes(certified=True) == [f"episode.a00{n}" for n in range(1, 5)]
    assert episodes(min_policy_update=103, max_policy_update=200) == [
        "episode.a004",
        "episode.a005",
        "episode.a006",
    ]
    assert episodes(min_policy_update=201) == ["episode.a007"]
    assert episodes(reward_outcome=WRONG, certified=False) == ["episode.a007"]
    unscored = store.receipts.list_receipts(ReceiptFilter(reward_outcome=FAILED)).items[0].receipt
    assert not unscored.HasField("scalar_reward")  # never 0.0 in its place
    expired = store.receipts.list_receipts(ReceiptFilter(min_policy_update=200)).items[0].receipt
    assert expired.certificate_state == CertificateState.CERTIFICATE_STATE_EXPIRED

    for bad in (
        {"min_policy_update": 5, "max_policy_update": 4},
        {"min_policy_update": -1},
        {"max_policy_update": 2**53},
        {"reward_outcome": 99},
        {"contract_digest": "sha256:short"},
    ):
        with pytest.raises(ValidationError):
            store.receipts.list_receipts(ReceiptFilter(**bad))


@pytest.mark.parametrize(
    "token",
    [
        "!!!",
        "a",  # not base64
        "YWJj",  # base64 of "abc": not JSON
        base64.urlsafe_b64encode(b"[1,2]").decode().rstrip("="),
        base64.urlsafe_b64encode(json.dumps({"a": [1], "k": "receipts", "q": ""}).encode())
        .decode()
        .rstrip("="),
        "A" * 5000,
        "eyJ=",
    ],
)
def test_malformed_page_token_is_refused(store: ControlStore, token: str) -> None:
    with pytest.raises(ValidationError, match="page_token"):
        store.receipts.list_receipts(page_token=token)


def test_page_tokens_belong_to_their_listing(store: ControlStore) -> None:
    _seed_receipts(store)
    token = store.receipts.list_receipts(page_size=2).next_page_token
    assert token
    with pytest.raises(ValidationError, match="another listing"):
        store.contracts.list_contracts(page_token=token)
    with pytest.raises(ValidationError, match="other filters"):
        store.receipts.list_receipts(ReceiptFilter(certified=True), page_size=2, page_token=token)
    # A well-formed token with a sort key of the wrong type is malformed.
    document = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    document["a"] = ["not-an-int", "rcpt"]
    forged = base64.urlsafe_b64encode(json.dumps(document).encode()).decode().rstrip("=")
    with pytest.raises(ValidationError, match="malformed"):
        store.receipts.list_receipts(page_size=2, page_token=forged)


def test_page_size_bounds(store: ControlStore) -> None:
    for n in range(DEFAULT_PAGE_SIZE + 1):
        store.contracts.register_contract(contract_version(n), None, at=T0 + timedelta(seconds=n))
    assert len(store.contracts.list_contracts().items) == DEFAULT_PAGE_SIZE
    assert len(store.contracts.list_contracts(page_size=10_000).items) == DEFAULT_PAGE_SIZE + 1
    with pytest.raises(ValidationError, match="page_size"):
        store.contracts.list_contracts(page_size=-1)


def test_receipt_summary(store: ControlStore) -> None:
    digest = _seed_receipts(store)
    summary = store.receipts.receipt_summary(digest)
    assert summary.total == 7
    assert dict(summary.counts) == {VERIFIED: 4, WRONG: 2, FAILED: 1}
    assert summary.certified == 4
    assert summary.certified_share == pytest.approx(4 / 7)
    assert summary.unscored_share == pytest.approx(1 / 7)
    other = contract_digest(contract_version(5))
    with pytest.raises(NotFound):
        store.receipts.receipt_summary(other)
    store.contracts.register_contract(contract_version(5), None)
    empty = store.receipts.receipt_summary(other)
    assert (empty.total, empty.certified_share, empty.unscored_share) == (0, 0.0, 0.0)


# ---------------------------------------------------------------------- audit


def test_admin_actions_write_audit_rows(store: ControlStore) -> None:
    seeded(store)  # two key registrations
    certificate = make_certificate()
    store.certificates.record_certificate(
        certificate, "admin:alice", "calibrated on corpus 7", at=T0
    )
    store.revocations.revoke(
        certificate.certificate_id, "corpus leaked", "admin:bob", sign=signer(), at=T0
    )
    store.keys.retire_issuer_key(WORKER_KEY.key_id, "admin", "rotation", at=T0)
    entries = list_audit(store).items
    assert [(e.action, e.actor, e.target, e.reason) for e in entries] == [
        ("issuer_key.register", ADMIN, WORKER_KEY.key_id, "worker"),
        ("issuer_key.register", ADMIN, ORG_KEY.key_id, "org"),
        ("certificate.issue", "admin:alice", certificate.certificate_id, "calibrated on corpus 7"),
        ("certificate.revoke", "admin:bob", certificate.certificate_id, "corpus leaked"),
        ("issuer_key.retire", ADMIN, WORKER_KEY.key_id, "rotation"),
    ]
    assert all(e.at == T0 for e in entries)
    assert entries[0].details == {"role": "worker", "created": True}
    assert entries[3].details == {"list_version": 1, "already_revoked": False}
    assert [e.id for e in entries] == sorted(e.id for e in entries)
    revokes = list_audit(store, action="certificate.revoke").items
    assert [e.actor for e in revokes] == ["admin:bob"]


def test_audit_appends_and_pages(store: ControlStore) -> None:
    for n in range(7):
        entry = audit(
            store,
            "admin",
            "permission.denied",
            f"RevokeCertificate/{n}",
            details={"role": "trainer"},
        )
        assert entry.details == {"role": "trainer"}
    pages = all_pages(lambda **kw: list_audit(store, **kw), 3)
    assert [len(p.items) for p in pages] == [3, 3, 1]
    assert [e.target for p in pages for e in p.items] == [  # type: ignore[attr-defined]
        f"RevokeCertificate/{n}" for n in range(7)
    ]
    with pytest.raises(ValidationError, match="action"):
        audit(store, "admin", "Drop Table", "x")
    with pytest.raises(ValidationError, match="JSON"):
        audit(store, "admin", "x.y", "x", details={"n": float("nan")})
    with pytest.raises(ValidationError, match="actor"):
        audit(store, "Bearer s3cr3t", "x.y", "x")
