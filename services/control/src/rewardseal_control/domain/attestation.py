"""Reward attestations for model checkpoints (R-C-15, docs/spec.md §14, docs/provenance.md).

A trainer names the checkpoint's files (the in-toto subjects it hashed) and the scope of the
rewards that trained it: contract digests, policy checkpoint ids (any when none is named) and a
policy update range. Control, the holder of the receipt index and of the organization key, then:

1. checks the order (every field; subjects: at least one, each name a unique relative path,
   each digest 64 lowercase hex digits, else ``invalid_subject``);
2. reads the scope in one snapshot (:mod:`rewardseal_control.store.attestation_scope`): the
   receipts, the certificates they name with their revocations, the revocation list version;
   an empty scope is refused (``nothing_to_attest``): an attestation of no reward says nothing;
3. computes the tally (counts by outcome, certified and unscored) and the Merkle root over one
   leaf per receipt, ``receipt_leaf(receipt_id, envelope_digest(stored envelope bytes))``, the
   leaves ordered by receipt id (code point order);
4. reads, when an integrity run is named, the decision in force for each boundary of the range
   (:func:`rewardseal.core.integrity.run_gate`, the gate's own rule);
5. builds the :class:`~rewardseal.core.attestation.RewardPredicate` and the in-toto Statement and
   signs it with the organization key in a DSSE envelope.

Nothing is stored: the attestation is a signed reading of the index at ``issued_at``, and the
same scope read again (with no new receipt) gives the same root and tally.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Final

from rewardseal.core import attestation
from rewardseal.core.attestation import CertificateUse, RewardPredicate
from rewardseal.core.certificates import schedule_state, state_name
from rewardseal.core.errors import InvalidSubject, NothingToAttest, ValidationError
from rewardseal.core.integrity import run_gate
from rewardseal.core.revocation import open_revocation_list
from rewardseal.core.signing import TrustSet
from rewardseal.core.validation import check_policy_update_field, validate_digest, validate_id
from rewardseal.v1.certificate_pb2 import RevocationList
from rewardseal_control.domain.parts import DomainPart
from rewardseal_control.store import StoredCertificate
from rewardseal_control.store.attestation_scope import AttestationScope, ScopedReceipt

__all__ = [
    "MAX_SELECTORS",
    "MAX_SUBJECTS",
    "AttestationOrder",
    "CheckpointAttesting",
    "IssuedAttestation",
    "check_subjects",
]

_log = logging.getLogger("rewardseal_control.domain")

MAX_SUBJECTS: Final = 100_000
"""The most files one attested checkpoint may list."""
MAX_SELECTORS: Final = 64
"""The most contract digests, and the most policy checkpoint ids, one order may name."""
MAX_NAME_LENGTH: Final = 4096
_SHA256_HEX = re.compile(r"^[0-9a-f]{64}\Z")


@dataclass(frozen=True)
class AttestationOrder:
    """What a trainer asks control to attest: the checkpoint's files as ``(name, sha256 hex)``
    and the scope of the rewards that trained it (see the module docstring)."""

    contract_digests: Sequence[str]
    checkpoint_ids: Sequence[str]
    policy_update_first: int
    policy_update_last: int
    subjects: Sequence[tuple[str, str]]
    integrity_run_id: str = ""


@dataclass(frozen=True)
class IssuedAttestation:
    """A signed attestation: ``document`` is the DSSE JSON of the statement (what the trainer
    writes to :data:`~rewardseal.core.attestation.ATTESTATION_FILE`); ``receipts`` the scope's
    receipts in leaf order (for a verifier that recomputes the root)."""

    document: Mapping[str, Any]
    predicate: RewardPredicate
    receipts: tuple[ScopedReceipt, ...]

    def document_bytes(self) -> bytes:
        """The DSSE JSON as UTF-8 text, indented, with a final newline."""
        return (json.dumps(self.document, indent=2, sort_keys=True) + "\n").encode()


def check_subjects(subjects: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    """The in-toto subjects of ``subjects`` (``(name, sha256 hex)`` pairs), sorted by name.

    Raises:
        InvalidSubject: none, too many, an empty, absolute, ``..``-climbing, over-long or
            repeated name, or a digest that is not 64 lowercase hex digits.
    """
    if not subjects:
        raise InvalidSubject("subjects must name at least one file of the checkpoint")
    if len(subjects) > MAX_SUBJECTS:
        raise InvalidSubject(f"at most {MAX_SUBJECTS} subjects per attestation")
    seen: set[str] = set()
    for name, digest in subjects:
        where = {"subject": name[:200] if isinstance(name, str) else ""}
        if not isinstance(name, str) or not name or len(name) > MAX_NAME_LENGTH:
            raise InvalidSubject(
                f"a subject name must be 1-{MAX_NAME_LENGTH} characters", metadata=where
            )
        parts = name.split("/")
        if name.startswith("/") or "\\" in name or "\0" in name or ".." in parts or "" in parts:
            raise InvalidSubject(
                f"subject {name!r} is not a relative '/'-separated path inside the checkpoint",
                metadata=where,
            )
        if name in seen:
            raise InvalidSubject(f"subject {name!r} is named twice", metadata=where)
        seen.add(name)
        if not isinstance(digest, str) or not _SHA256_HEX.match(digest):
            raise InvalidSubject(
                f"subject {name!r}: sha256 must be 64 lowercase hex digits", metadata=where
            )
    return [
        {"name": name, "digest": {"sha256": digest}}
        for name, digest in sorted(subjects, key=lambda pair: pair[0])
    ]


class CheckpointAttesting(DomainPart):
    """Issues reward attestations signed by ``key`` (the organization key that signs this
    control plane's certificates and revocation lists, so trainers already pin it, R-C-8)."""

    async def attest(self, order: AttestationOrder) -> IssuedAttestation:
        """Check ``order``, read its scope, build and sign the attestation.

        Raises:
            ValidationError: a malformed field (digest, id, range, run id).
            InvalidSubject: unusable subjects.
            NotFound: a contract that is not registered.
            NothingToAttest: no receipt in scope.
        """
        contracts, checkpoints, first, last = _check_scope(order)
        subjects = check_subjects(order.subjects)
        run_id = order.integrity_run_id
        if run_id:
            validate_id(run_id, "integrity_run_id")
        scope: AttestationScope = await asyncio.to_thread(
            self._store.attestation_scopes.read, contracts, checkpoints, first, last
        )
        if not scope.receipts:
            raise NothingToAttest(
                f"no receipt of contract(s) {', '.join(contracts)}"
                + (f" under checkpoint id(s) {', '.join(checkpoints)}" if checkpoints else "")
                + f" with a policy update in {first}..{last} is in the receipt index",
                metadata={"policy_update_first": str(first), "policy_update_last": str(last)},
            )
        audits = await self._integrity_decisions(run_id, first, last) if run_id else []
        # Parsing every receipt in scope, the Merkle tree and the signature are CPU work that
        # grows with the scope: off the event loop, like the store read.
        document, predicate = await asyncio.to_thread(
            self._sign, scope, subjects, audits, first, last, self._clock()
        )
        _log.info(
            "attested %d file(s) for %d receipt(s) of %s, policy updates %d..%d (root %s)",
            len(subjects),
            len(scope.receipts),
            ", ".join(contracts),
            first,
            last,
            predicate.merkle.root,
        )
        return IssuedAttestation(document, predicate, scope.receipts)

    def _sign(
        self,
        scope: AttestationScope,
        subjects: list[dict[str, Any]],
        audits: list[dict[str, Any]],
        first: int,
        last: int,
        now: datetime,
    ) -> tuple[dict[str, Any], RewardPredicate]:
        """The predicate of ``scope`` and the signed DSSE document of its statement."""
        revocation_lists = []
        if scope.revocation_list is not None:
            # Control's own head, signed by this key: opened (verified, then parsed) like any.
            trust = TrustSet([self._key.public_key])
            revocation_lists.append(open_revocation_list(scope.revocation_list, trust))
        predicate = _predicate(scope, revocation_lists, audits, first, last, now, self._key.key_id)
        statement = attestation.build_statement(subjects, predicate)
        return attestation.sign_attestation(statement, self._key), predicate

    async def _integrity_decisions(
        self, run_id: str, first: int, last: int
    ) -> list[dict[str, Any]]:
        """The decision in force for each boundary of ``first..last`` of the run (R-I-10:
        ``decision`` is its action, ``reason`` its reasons), and ``pending`` for a boundary
        of the range whose audits are all still queued or running."""
        standings = await asyncio.to_thread(self._store.integrity_audits.standings, run_id)
        gate = run_gate(standings)
        entries: list[dict[str, Any]] = []
        for found in gate.boundaries:
            if first <= found.boundary <= last:
                reasons = [] if found.decision is None else list(found.decision.reasons)
                if found.decision is None:
                    reasons = [f"the audit ended {found.state} without a decision"]
                entries.append(
                    {
                        "audit_id": found.audit_id,
                        "boundary": found.boundary,
                        "decision": found.action,
                        "reason": "; ".join(reasons),
                    }
                )
        for boundary in gate.pending:
            if first <= boundary <= last:
                latest = [s for s in standings if s.boundary == boundary][-1]
                entries.append(
                    {
                        "audit_id": latest.audit_id,
                        "boundary": boundary,
                        "decision": "pending",
                        "reason": f"the audit is {latest.state}",
                    }
                )
        return sorted(entries, key=lambda entry: int(entry["boundary"]))


def _check_scope(order: AttestationOrder) -> tuple[list[str], list[str], int, int]:
    """The order's contracts and checkpoint ids (distinct, sorted) and its range, checked."""
    if not order.contract_digests:
        raise ValidationError("reward_contract_digests must name at least one contract")
    for values, name in (
        (order.contract_digests, "reward_contract_digests"),
        (order.checkpoint_ids, "policy_checkpoint_ids"),
    ):
        if len(values) > MAX_SELECTORS:
            raise ValidationError(f"at most {MAX_SELECTORS} {name} per attestation")
    contracts = sorted(
        {validate_digest(d, "reward_contract_digest") for d in order.contract_digests}
    )
    checkpoints = sorted({validate_id(c, "policy_checkpoint_id") for c in order.checkpoint_ids})
    first, last = order.policy_update_first, order.policy_update_last
    check_policy_update_field(first, "policy_update_first")
    check_policy_update_field(last, "policy_update_last")
    if first > last:
        raise ValidationError(
            f"policy_update_first ({first}) must not exceed policy_update_last ({last})"
        )
    return contracts, checkpoints, first, last


def _predicate(
    scope: AttestationScope,
    revocation_lists: Sequence[RevocationList],
    audits: list[dict[str, Any]],
    first: int,
    last: int,
    now: datetime,
    key_id: str,
) -> RewardPredicate:
    receipts = [item.receipt for item in scope.receipts]
    # The same function the verifier recomputes them with (R-A-3): leaves in receipt-id order.
    tally, merkle = attestation.receipt_commitment(
        (item.receipt_id, item.envelope) for item in scope.receipts
    )
    named = sorted({r.certificate_id for r in receipts if r.certificate_id})
    return RewardPredicate(
        policy_checkpoint_ids=sorted({r.policy_checkpoint_id for r in receipts}),
        policy_update_first=first,
        policy_update_last=last,
        contract_digests=sorted({r.reward_contract_digest for r in receipts}),
        certificates=[
            _certificate_use(scope.certificates[certificate_id], last, revocation_lists)
            for certificate_id in named
            if certificate_id in scope.certificates
        ],
        receipts=tally,
        merkle=merkle,
        integrity_audits=audits,
        issued_at=now.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        issuer_key_id=key_id,
    )


def _certificate_use(
    stored: StoredCertificate, last: int, revocation_lists: Sequence[RevocationList]
) -> CertificateUse:
    """The certificate's entry: ``revoked`` once control revoked it (by name, contract or
    checker configuration; a revocation is permanent), otherwise its schedule state at the
    range's last update (the receipts say, each, the state they were scored under)."""
    use = attestation.certificate_use(
        stored.certificate, state="current", revocation_lists=revocation_lists
    )
    if stored.revoked or use.revocations:
        state = "revoked"
    else:
        state = state_name(schedule_state(stored.certificate, last)).lower()
    return replace(use, state=state)
