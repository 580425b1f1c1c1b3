"""The control plane's store (docs/spec.md §9): a module per aggregate behind :class:`ControlStore`.

* :mod:`.contracts`: registered reward contracts (R-C-1);
* :mod:`.keys`: worker and organization issuer keys, their windows and retirement (R-C-2);
* :mod:`.key_bindings`: approving and unbinding worker keys, making enrollment credentials
  (R-C-10, R-C-11), over :mod:`.key_admission` (a key's admission and bindings inside a
  transaction), :mod:`.bundle_certificates` (the bundle certificates a key registers and their
  acceptance) and :mod:`.enrollments` (one-time enrollment credentials and their use);
* :mod:`.certificates`: recorded certificates with their revocation (R-C-3);
* :mod:`.revocations`: revocations and the signed revocation lists (R-C-4);
* :mod:`.receipts`: the receipt index (R-C-5);
* :mod:`.attestation_scope`: what a reward attestation covers, read in one snapshot (R-C-15);
* :mod:`rewardseal_control.integrity.store` (``revisions``, ``shards``, ``audits``,
  ``decisions``): reward integrity (§12): revisions, signal shards, audits (a state
  machine a runner claims), bundles and decision histories;
* :mod:`.audit_log`: the append-only log every admin action writes in its transaction;
* :mod:`.pagination`, :mod:`.inputs`, :mod:`.tables`: what the aggregates share;
* :mod:`.facade`: :class:`ControlStore`, which opens the database and composes the aggregates.

What the aggregates answer, where a plain value would not do:

* ``revocations.revoke(certificate_id, reason, actor, *, sign, ttl, at)`` returns
  ``(RevocationHead, created)``, not a bare version: the new signed list must be made in the
  same transaction as the revocation, so the revocation publisher
  (:mod:`rewardseal_control.domain.revocation`) passes ``sign`` (its organization key, as a
  :data:`RevocationSigner`) and gets the stored head back (``head.version`` is the version).
  ``publish_revocation_list(sign=..., ttl=..., at=...)`` re-signs the current entries under a
  new version (first list at start-up; periodic re-sign before expiry).
* ``keys.register_issuer_key`` returns ``(IssuerKey, created)``; the certificate method is
  ``certificates.record_certificate(certificate, actor, reason) -> (StoredCertificate, created)``.
* ``list_*`` return :class:`Page` (a NamedTuple ``(items, next_page_token)``: it unpacks as
  ``(items, next_token)``).
* ``receipts.contract_digest`` and ``receipts.issuer_key_id`` are foreign keys:
  ``record_receipts`` refuses, per item, a receipt whose contract is not registered
  (NotFound) or whose issuer key is not registered (SignatureError, ``signature_invalid``).

Rules that hold for every method:

* one method, one transaction (SQLite writers: ``BEGIN IMMEDIATE``; PostgreSQL: row locks and
  ``INSERT ... ON CONFLICT DO NOTHING`` with a re-run when a concurrent writer won a row);
* every admin action (register/retire issuer key, record certificate, revoke) writes its
  audit row in the same transaction as its change (:mod:`.audit_log`);
* inputs are validated here too (ids, digests, key ids, ranges, text without NUL), by core's
  rules where core has them, so nothing malformed reaches the database; only
  :mod:`rewardseal.core.errors` classes leave this package;
* signature verification and certificate/list signing are the domain layer's job
  (:mod:`rewardseal_control.domain`): the store keeps what it is given and hands the domain
  layer what it needs (``keys.active_key``, ``keys.worker_trust``, ``keys.trust_set``);
* page tokens are opaque and bound to their listing and filters (:mod:`.pagination`).
"""

from __future__ import annotations

from rewardseal_control.store.certificates import StoredCertificate
from rewardseal_control.store.facade import ControlStore
from rewardseal_control.store.pagination import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE, Page
from rewardseal_control.store.receipts import (
    ReceiptFilter,
    ReceiptSummary,
    RecordResult,
    StoredReceipt,
)
from rewardseal_control.store.revocations import (
    DEFAULT_LIST_TTL,
    RevocationHead,
    RevocationSigner,
)

__all__ = [
    "DEFAULT_LIST_TTL",
    "DEFAULT_PAGE_SIZE",
    "MAX_PAGE_SIZE",
    "ControlStore",
    "Page",
    "ReceiptFilter",
    "ReceiptSummary",
    "RecordResult",
    "RevocationHead",
    "RevocationSigner",
    "StoredCertificate",
    "StoredReceipt",
]
