"""What a reward attestation covers (R-C-15), read from the index in ONE snapshot: the receipts
in scope with their stored envelope bytes, the certificates they name (with their revocation)
and the newest signed revocation list.

The scope is every receipt whose contract is one of the given digests, whose policy checkpoint
id is one of the given ids (any id when none is given) and whose policy update lies in
``first..last`` (inclusive). Receipts come back ordered by receipt id: the Merkle leaf order
(docs/spec.md §14).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.engine import Connection

from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt, SignedEnvelope
from rewardseal_control.store import tables
from rewardseal_control.store.certificates import StoredCertificate, certificates_in
from rewardseal_control.store.contracts import require_contract
from rewardseal_control.store.revocations import read_head
from rewardseal_server.sqlstore import StoreEngine

__all__ = ["AttestationScope", "AttestationScopes", "ScopedReceipt"]

_receipts = tables.receipts


@dataclass(frozen=True)
class ScopedReceipt:
    """One receipt in scope: its id, the envelope bytes as stored (what the Merkle leaf's
    envelope digest is taken over) and the signed receipt they carry."""

    receipt_id: str
    envelope: bytes
    receipt: RewardEvidenceReceipt


@dataclass(frozen=True)
class AttestationScope:
    """The receipts in scope (ordered by receipt id), the certificates they name by id, and the
    newest signed revocation list (None before control published one)."""

    receipts: tuple[ScopedReceipt, ...]
    certificates: Mapping[str, StoredCertificate]
    revocation_list: SignedEnvelope | None


class AttestationScopes:
    """Reads :class:`AttestationScope` s (validation of the selector is the domain layer's)."""

    def __init__(self, db: StoreEngine) -> None:
        """Work on ``db`` (owned by the :class:`~rewardseal_control.store.ControlStore`)."""
        self._db = db

    def read(
        self,
        contract_digests: Sequence[str],
        checkpoint_ids: Sequence[str],
        first: int,
        last: int,
    ) -> AttestationScope:
        """The scope of one attestation, in one snapshot.

        Raises:
            NotFound: one of ``contract_digests`` is not registered.
        """
        conditions = [
            _receipts.c.contract_digest.in_(list(contract_digests)),
            _receipts.c.policy_update >= first,
            _receipts.c.policy_update <= last,
        ]
        if checkpoint_ids:
            conditions.append(_receipts.c.policy_checkpoint_id.in_(list(checkpoint_ids)))
        statement = (
            select(_receipts.c.receipt_id, _receipts.c.envelope)
            .where(*conditions)
            .order_by(_receipts.c.receipt_id)
        )

        def work(conn: Connection) -> AttestationScope:
            for digest in contract_digests:
                require_contract(conn, digest)
            scoped = []
            for receipt_id, stored in conn.execute(statement):
                envelope = bytes(stored)
                payload = SignedEnvelope.FromString(envelope).payload
                scoped.append(
                    ScopedReceipt(receipt_id, envelope, RewardEvidenceReceipt.FromString(payload))
                )
            # The database's collation may not be code point order: the leaf order is Python's.
            scoped.sort(key=lambda item: item.receipt_id)
            named = [s.receipt.certificate_id for s in scoped if s.receipt.certificate_id]
            head = read_head(conn)
            return AttestationScope(
                receipts=tuple(scoped),
                certificates=certificates_in(conn, named),
                revocation_list=None if head is None else head.envelope,
            )

        return self._db.read(work, snapshot=True)
