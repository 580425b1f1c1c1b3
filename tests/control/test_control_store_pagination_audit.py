"""ControlStore listings and audit log on SQLite and PostgreSQL: page tokens bound to their
listing and filters, page-size bounds, audit rows of admin actions."""

from __future__ import annotations

import base64
import json
from datetime import timedelta

import pytest
from support.builders import make_certificate
from support.control_store import audit, list_audit
from support.control_store_builders import (
    ADMIN,
    ORG_KEY,
    T0,
    WORKER_KEY,
    all_pages,
    contract_version,
    seed_receipts,
    seeded,
    signer,
)

from rewardseal.core.errors import (
    ValidationError,
)
from rewardseal_control.store import (
    DEFAULT_PAGE_SIZE,
    ControlStore,
    ReceiptFilter,
)

# ---------------------------------------------------------------------- pagination


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
    seed_receipts(store)
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
    # seeded() admits the worker key for MockMed with its bundle certificate (R-C-10).
    assert entries[0].details == {
        "role": "worker",
        "created": True,
        "bound": [make_certificate().reward_contract_digest],
        "bundle_certificate": make_certificate().certificate_id,
    }
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
