"""The reward predicate (R-A-2): what an attestation says about the rewards that trained a
checkpoint, field by field as docs/spec.md §14 documents it, read strictly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from rewardseal.core.attestation.reading import (
    array,
    decimal,
    digest_field,
    exact_object,
    fail,
    integer,
    rfc3339,
    string,
    strings,
    time_text,
)
from rewardseal.core.digest import is_digest
from rewardseal.core.errors import preview
from rewardseal.core.receipts import scope_word
from rewardseal.core.revocation import entry_scope, revoking_entry
from rewardseal.v1.certificate_pb2 import RevocationList, RewardCertificate
from rewardseal.v1.enums_pb2 import CertificateIssuer

MERKLE_ALGORITHM: Final = "rfc9162-sha256"
LEAF_RULE: Final = (
    "leaf = RFC 8785 JSON {envelope_digest, receipt_id} of each receipt, receipts sorted by "
    "receipt_id; envelope_digest = 'sha256:' + hex SHA-256 of the SignedEnvelope's protobuf "
    "bytes; leaf hash SHA-256(0x00 || leaf), node hash SHA-256(0x01 || left || right)"
)
"""How the Merkle leaves are made (written into every predicate, so a reader need not guess)."""
CERTIFICATE_STATES: Final = frozenset({"current", "expired", "revoked", "not_yet_valid"})


def share_text(part: int, whole: int) -> str:
    """``part / whole`` as the decimal text a predicate carries: six decimals, ``"0.000000"``
    for an empty whole (text, not a JSON number: every reader then sees the same value)."""
    return f"{(part / whole) if whole else 0.0:.6f}"


_SCOPE_FIELDS: Final = (
    "calibration_scope",
    "issuer",
    "checker_configuration_digest",
    "calibration_corpus_digest",
    "threshold",
    "issued_at_policy_update",
    "expiry_policy_updates",
)
_REVOCATION_FIELDS: Final = ("list_version", "scope", "revoked_at", "reason")


@dataclass(frozen=True)
class CertificateUse:
    """A certificate that backed receipts in the attested range (R-A-2).

    ``scope`` holds the certificate's calibration scope and issuer (words), its checker
    configuration and calibration corpus digests, its threshold (text) and its validity window
    (``issued_at_policy_update``, ``expiry_policy_updates``); :func:`certificate_use` fills it
    from the certificate. ``state`` is its state at the range's last update; ``revocations``
    every signed revocation list entry that revokes it (``list_version``, ``scope``:
    certificate/contract/checker, ``revoked_at``, ``reason``).
    """

    certificate_id: str
    contract_digest: str
    epsilon: str
    delta: str
    scope: dict[str, Any]
    state: str
    revocations: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The JSON object of the predicate's ``certificates`` array."""
        return {
            "certificate_id": self.certificate_id,
            "contract_digest": self.contract_digest,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "scope": dict(self.scope),
            "state": self.state,
            "revocations": [dict(entry) for entry in self.revocations],
        }

    @classmethod
    def from_json(cls, doc: object, where: str = "certificate") -> CertificateUse:
        """Read one strictly (raises AttestationError ``malformed``)."""
        doc = exact_object(
            doc,
            (
                "certificate_id",
                "contract_digest",
                "epsilon",
                "delta",
                "scope",
                "state",
                "revocations",
            ),
            where,
        )
        scope = exact_object(doc["scope"], _SCOPE_FIELDS, f"{where}.scope")
        for name in ("calibration_scope", "issuer"):
            string(scope, name, f"{where}.scope")
        for name in ("checker_configuration_digest", "calibration_corpus_digest"):
            digest_field(scope, name, f"{where}.scope")
        string(scope, "threshold", f"{where}.scope")
        for name in ("issued_at_policy_update", "expiry_policy_updates"):
            integer(scope, name, f"{where}.scope")
        state = string(doc, "state", where)
        if state not in CERTIFICATE_STATES:
            raise fail(
                "malformed",
                f"{where}.state {preview(state)} is one of {', '.join(sorted(CERTIFICATE_STATES))}",
            )
        revocations = []
        for position, entry in enumerate(array(doc, "revocations", where)):
            at = f"{where}.revocations[{position}]"
            entry = exact_object(entry, _REVOCATION_FIELDS, at)
            integer(entry, "list_version", at)
            if string(entry, "scope", at) not in ("certificate", "contract", "checker"):
                raise fail("malformed", f"{at}.scope is certificate, contract or checker")
            rfc3339(entry, "revoked_at", at)
            string(entry, "reason", at)
            revocations.append(dict(entry))
        return cls(
            certificate_id=string(doc, "certificate_id", where),
            contract_digest=digest_field(doc, "contract_digest", where),
            epsilon=decimal(doc, "epsilon", where),
            delta=decimal(doc, "delta", where),
            scope=dict(scope),
            state=state,
            revocations=revocations,
        )

    def as_certificate(self) -> RewardCertificate:
        """The fields a revocation entry can name (id, contract, checker configuration), as a
        certificate for :func:`rewardseal.core.revocation.revoking_entry`."""
        return RewardCertificate(
            certificate_id=self.certificate_id,
            reward_contract_digest=self.contract_digest,
            checker_configuration_digest=str(self.scope["checker_configuration_digest"]),
        )


def certificate_use(
    certificate: RewardCertificate,
    *,
    state: str,
    revocation_lists: Iterable[RevocationList] = (),
) -> CertificateUse:
    """The predicate's entry for ``certificate`` in ``state`` (its state at the range's last
    update), with every entry of ``revocation_lists`` (verified lists) that revokes it."""
    revocations = []
    for revocation_list in revocation_lists:
        entry = revoking_entry(revocation_list, certificate)
        if entry is not None:
            revocations.append(
                {
                    "list_version": revocation_list.version,
                    "scope": entry_scope(entry)[0],
                    "revoked_at": time_text(entry.revoked_at),
                    "reason": entry.reason,
                }
            )
    return CertificateUse(
        certificate_id=certificate.certificate_id,
        contract_digest=certificate.reward_contract_digest,
        epsilon=repr(float(certificate.epsilon)),
        delta=repr(float(certificate.delta)),
        scope={
            "calibration_scope": scope_word(certificate.calibration_scope),
            "issuer": CertificateIssuer.Name(certificate.issuer)
            .removeprefix("CERTIFICATE_ISSUER_")
            .lower(),
            "checker_configuration_digest": certificate.checker_configuration_digest,
            "calibration_corpus_digest": certificate.calibration_corpus_digest,
            "threshold": repr(float(certificate.threshold)),
            "issued_at_policy_update": certificate.issued_at_policy_update,
            "expiry_policy_updates": certificate.expiry_policy_updates,
        },
        state=state,
        revocations=revocations,
    )


@dataclass(frozen=True)
class ReceiptTally:
    """The receipts the Merkle root commits to, counted: ``total``, ``by_outcome`` (outcome
    word -> count, every receipt once), ``certified`` (receipts with certified=true),
    ``certified_share`` (:func:`share_text` of certified over total) and ``unscored`` (receipts
    whose outcome carries no scalar: dropped by the trainer, never paid 0)."""

    total: int
    by_outcome: dict[str, int]
    certified: int
    certified_share: str
    unscored: int

    def to_json(self) -> dict[str, Any]:
        """The predicate's ``receipts`` object."""
        return {
            "total": self.total,
            "by_outcome": dict(sorted(self.by_outcome.items())),
            "certified": self.certified,
            "certified_share": self.certified_share,
            "unscored": self.unscored,
        }

    @classmethod
    def from_json(cls, doc: object, where: str = "receipts") -> ReceiptTally:
        """Read one strictly (raises AttestationError ``malformed``)."""
        doc = exact_object(
            doc, ("total", "by_outcome", "certified", "certified_share", "unscored"), where
        )
        counts = doc["by_outcome"]
        if not isinstance(counts, Mapping):
            raise fail("malformed", f"{where}.by_outcome is a JSON object")
        by_outcome = {str(name): integer(counts, name, f"{where}.by_outcome") for name in counts}
        tally = cls(
            total=integer(doc, "total", where),
            by_outcome=by_outcome,
            certified=integer(doc, "certified", where),
            certified_share=decimal(doc, "certified_share", where),
            unscored=integer(doc, "unscored", where),
        )
        # The counts must agree with one another: a tally that cannot be true is malformed,
        # whether or not the receipts are at hand to recount.
        if sum(by_outcome.values()) != tally.total:
            raise fail("malformed", f"{where}.by_outcome does not sum to total")
        if tally.certified > tally.total or tally.unscored > tally.total:
            raise fail("malformed", f"{where}: certified or unscored exceeds total")
        if tally.certified_share != share_text(tally.certified, tally.total):
            raise fail(
                "malformed",
                f"{where}.certified_share is not {share_text(tally.certified, tally.total)} "
                "(certified / total, six decimals)",
            )
        return tally


@dataclass(frozen=True)
class MerkleCommitment:
    """The Merkle root over the receipts (R-A-3): ``algorithm`` (:data:`MERKLE_ALGORITHM`),
    ``root`` (lowercase hex), ``size`` (leaves) and ``leaf_rule`` (:data:`LEAF_RULE`)."""

    root: str
    size: int
    algorithm: str = MERKLE_ALGORITHM
    leaf_rule: str = LEAF_RULE

    def to_json(self) -> dict[str, Any]:
        """The predicate's ``merkle`` object."""
        return {
            "algorithm": self.algorithm,
            "root": self.root,
            "size": self.size,
            "leaf_rule": self.leaf_rule,
        }

    @classmethod
    def from_json(cls, doc: object, where: str = "merkle") -> MerkleCommitment:
        """Read one strictly (raises AttestationError ``malformed``): this version knows one
        algorithm and one leaf rule."""
        doc = exact_object(doc, ("algorithm", "root", "size", "leaf_rule"), where)
        if doc["algorithm"] != MERKLE_ALGORITHM or doc["leaf_rule"] != LEAF_RULE:
            raise fail("malformed", f"{where} names another algorithm or leaf rule")
        root = string(doc, "root", where)
        if len(root) != 64 or root.strip("0123456789abcdef"):
            raise fail("malformed", f"{where}.root is 64 lowercase hex digits")
        return cls(root=root, size=integer(doc, "size", where))


_AUDIT_FIELDS: Final = ("audit_id", "boundary", "decision", "reason")
_PREDICATE_FIELDS: Final = (
    "policy_checkpoint_ids",
    "policy_update_first",
    "policy_update_last",
    "contract_digests",
    "certificates",
    "receipts",
    "merkle",
    "integrity_audits",
    "issued_at",
    "issuer_key_id",
    "organization",
    "control_url",
)


@dataclass(frozen=True)
class RewardPredicate:
    """The predicate of :data:`PREDICATE_TYPE` (R-A-2); docs/spec.md §14 documents each field.

    ``integrity_audits`` entries are ``{audit_id, boundary, decision, reason}``: the decision in
    force at each audited boundary of the range. ``organization`` and ``control_url`` may be
    empty.
    """

    policy_checkpoint_ids: list[str]
    policy_update_first: int
    policy_update_last: int
    contract_digests: list[str]
    certificates: list[CertificateUse]
    receipts: ReceiptTally
    merkle: MerkleCommitment
    integrity_audits: list[dict[str, Any]]
    issued_at: str
    issuer_key_id: str
    organization: str = ""
    control_url: str = ""

    def to_json(self) -> dict[str, Any]:
        """The predicate as the statement's ``predicate`` object."""
        return {
            "policy_checkpoint_ids": list(self.policy_checkpoint_ids),
            "policy_update_first": self.policy_update_first,
            "policy_update_last": self.policy_update_last,
            "contract_digests": list(self.contract_digests),
            "certificates": [use.to_json() for use in self.certificates],
            "receipts": self.receipts.to_json(),
            "merkle": self.merkle.to_json(),
            "integrity_audits": [dict(audit) for audit in self.integrity_audits],
            "issued_at": self.issued_at,
            "issuer_key_id": self.issuer_key_id,
            "organization": self.organization,
            "control_url": self.control_url,
        }

    @classmethod
    def from_json(cls, doc: object) -> RewardPredicate:
        """Read a predicate strictly: every field present, no other, each of its type.

        Raises:
            AttestationError: ``malformed``, naming the first field that is wrong.
        """
        where = "predicate"
        doc = exact_object(doc, _PREDICATE_FIELDS, where)
        first = integer(doc, "policy_update_first", where)
        last = integer(doc, "policy_update_last", where)
        if last < first:
            raise fail("malformed", f"{where}: policy_update_last is below policy_update_first")
        digests = strings(doc, "contract_digests", where)
        if not all(is_digest(value) for value in digests):
            raise fail("malformed", f"{where}.contract_digests holds sha256: digests")
        tally = ReceiptTally.from_json(doc["receipts"], f"{where}.receipts")
        merkle = MerkleCommitment.from_json(doc["merkle"], f"{where}.merkle")
        if merkle.size != tally.total:
            raise fail("malformed", f"{where}.merkle.size is not receipts.total")
        audits = []
        for position, audit in enumerate(array(doc, "integrity_audits", where)):
            at = f"{where}.integrity_audits[{position}]"
            audit = exact_object(audit, _AUDIT_FIELDS, at)
            string(audit, "audit_id", at)
            integer(audit, "boundary", at)
            string(audit, "decision", at)
            string(audit, "reason", at, empty=True)
            audits.append(dict(audit))
        return cls(
            policy_checkpoint_ids=strings(doc, "policy_checkpoint_ids", where),
            policy_update_first=first,
            policy_update_last=last,
            contract_digests=digests,
            certificates=[
                CertificateUse.from_json(use, f"{where}.certificates[{n}]")
                for n, use in enumerate(array(doc, "certificates", where))
            ],
            receipts=tally,
            merkle=merkle,
            integrity_audits=audits,
            issued_at=rfc3339(doc, "issued_at", where),
            issuer_key_id=string(doc, "issuer_key_id", where),
            organization=string(doc, "organization", where, empty=True),
            control_url=string(doc, "control_url", where, empty=True),
        )
