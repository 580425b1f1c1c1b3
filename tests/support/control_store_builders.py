"""Builders for the control store's tests: keys, contracts, signed receipts, a list signer.

Shared by the tests of each aggregate (tests/control/test_control_store_*.py); the ``store``
fixture that opens an empty store on each backend is in tests/control/conftest.py.
"""

from __future__ import annotations

import dataclasses

from rewardseal.core.contract import contract_digest
from rewardseal.core.receipts import OpenedReceipt, build_receipt, open_receipt, seal_receipt
from rewardseal.core.signing import (
    REVOCATION_LIST_PAYLOAD_TYPE,
    SigningKey,
    TrustSet,
    sign_envelope,
)
from rewardseal.v1.certificate_pb2 import IssuerKey, RevocationList, RewardCertificate
from rewardseal.v1.contract_pb2 import RewardContract
from rewardseal.v1.enums_pb2 import IssuerKeyRole, RewardOutcome
from rewardseal.v1.receipt_pb2 import SignedEnvelope
from rewardseal_control.store import (
    ControlStore,
    Page,
    RevocationSigner,
)
from rewardseal_kit.mockmed import mockmed_contract
from support.builders import FIXED_TIME, make_certificate, make_facts

WORKER = IssuerKeyRole.ISSUER_KEY_ROLE_WORKER
ORGANIZATION = IssuerKeyRole.ISSUER_KEY_ROLE_ORGANIZATION
WORKER_KEY = SigningKey.from_seed(bytes(range(32)))  # the key support.builders certifies with
ORG_KEY = SigningKey.from_seed(bytes(range(100, 132)))
ADMIN = "admin"
T0 = FIXED_TIME
VERIFIED = RewardOutcome.REWARD_OUTCOME_VERIFIED
WRONG = RewardOutcome.REWARD_OUTCOME_WRONG_EFFECT
FAILED = RewardOutcome.REWARD_OUTCOME_FAILED_PLATFORM


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
    certificate: RewardCertificate | None = None,
    receipt_id: str | None = None,
) -> SignedEnvelope:
    """A signed receipt for one episode (certified at tier 2 inside the certificate window),
    under ``certificate`` (default: ``make_certificate(contract)``), with ``receipt_id``
    (default: the episode's)."""
    contract = contract or mockmed_contract()
    facts = make_facts(outcome, tier=tier, policy_update=policy_update, episode_id=episode)
    if receipt_id is not None:
        facts = dataclasses.replace(facts, receipt_id=receipt_id)
    receipt = build_receipt(
        facts,
        contract=contract,
        certificate=certificate or make_certificate(contract),
        issuer_key_id=key.key_id,
    )
    return seal_receipt(receipt, key)


def opened(*envelopes: SignedEnvelope, keys: tuple[SigningKey, ...] = ()) -> list[OpenedReceipt]:
    """``envelopes`` opened as RecordReceipts opens them before the index takes them, against
    the worker key and ``keys``."""
    trust = TrustSet([WORKER_KEY.public_key, *(key.public_key for key in keys)])
    return [open_receipt(envelope, trust) for envelope in envelopes]


def seeded(store: ControlStore) -> str:
    """Register the MockMed contract and the worker and organization keys; the digest.

    The worker key is admitted for the contract and registers the certificate the receipts of
    :func:`sealed` name as its bundle certificate (R-C-10, R-C-5)."""
    digest, _ = store.contracts.register_contract(
        mockmed_contract(), contract_digest(mockmed_contract())
    )
    store.keys.register_issuer_key(
        key_message(WORKER_KEY, WORKER),
        ADMIN,
        "worker",
        at=T0,
        bind=[digest],
        bundle_certificate=make_certificate(mockmed_contract()),
    )
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


def seed_receipts(store: ControlStore) -> str:
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
    assert all(r.recorded for r in store.receipts.record_receipts(opened(*envelopes)))
    return digest
