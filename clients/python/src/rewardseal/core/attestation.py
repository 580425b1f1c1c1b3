"""Reward attestations: which rewards trained a checkpoint, under which certificates (§14).

An attestation is an in-toto Statement v1 (R-A-1) in a DSSE envelope signed by control's
organization key: its subjects are a checkpoint directory's files (name and SHA-256), its
predicate (:class:`RewardPredicate`, R-A-2) binds the policy checkpoints and updates, the
contracts, the certificates used and their state, the receipts' tally and an RFC 9162 Merkle
root over them (R-A-3), and the integrity audits' decisions in force. :func:`verify_attestation`
checks one (R-A-4). Everything here is pure but for reading the checkpoint's files.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import itertools
import json
import os
import secrets
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from rewardseal.core import strict_json
from rewardseal.core.digest import canonical_json, digest_bytes, is_digest
from rewardseal.core.dsse import dsse_envelope_for, from_dsse_json
from rewardseal.core.errors import AttestationError, RewardSealError, preview
from rewardseal.core.receipts import is_unscored, outcome_word, scope_word
from rewardseal.core.revocation import entry_scope, open_revocation_list, revoking_entry
from rewardseal.core.signing import SigningKey, TrustSet
from rewardseal.core.validation import parse_strict
from rewardseal.v1.certificate_pb2 import RevocationList, RewardCertificate
from rewardseal.v1.enums_pb2 import CertificateIssuer
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt, SignedEnvelope

__all__ = [
    "ATTESTATION_FILE",
    "LEAF_RULE",
    "MERKLE_ALGORITHM",
    "PREDICATE_TYPE",
    "STATEMENT_PAYLOAD_TYPE",
    "STATEMENT_TYPE",
    "CertificateUse",
    "MerkleCommitment",
    "ReceiptTally",
    "RewardPredicate",
    "VerifiedAttestation",
    "build_statement",
    "certificate_use",
    "checkpoint_subjects",
    "envelope_digest",
    "inclusion_proof",
    "merkle_root",
    "receipt_commitment",
    "receipt_leaf",
    "receipt_leaves",
    "read_receipts_jsonl",
    "receipts_jsonl",
    "share_text",
    "sign_attestation",
    "verify_attestation",
    "verify_inclusion",
    "write_attestation",
]

STATEMENT_TYPE: Final = "https://in-toto.io/Statement/v1"
STATEMENT_PAYLOAD_TYPE: Final = "application/vnd.in-toto+json"
PREDICATE_TYPE: Final = "https://rewardseal.dev/reward-attestation/v1"
ATTESTATION_FILE: Final = "reward-attestation.dsse.json"
"""The attestation's file name in a checkpoint directory; never one of its own subjects."""
MERKLE_ALGORITHM: Final = "rfc9162-sha256"
LEAF_RULE: Final = (
    "leaf = RFC 8785 JSON {envelope_digest, receipt_id} of each receipt, receipts sorted by "
    "receipt_id; envelope_digest = 'sha256:' + hex SHA-256 of the SignedEnvelope's protobuf "
    "bytes; leaf hash SHA-256(0x00 || leaf), node hash SHA-256(0x01 || left || right)"
)
"""How the Merkle leaves are made (written into every predicate, so a reader need not guess)."""
CERTIFICATE_STATES: Final = frozenset({"current", "expired", "revoked", "not_yet_valid"})
_CHUNK: Final = 1 << 20


def _fail(reason: str, message: str) -> AttestationError:
    return AttestationError(message, reason=reason)


# --- subjects -------------------------------------------------------------------------------


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def checkpoint_subjects(directory: Path) -> list[dict[str, Any]]:
    """The in-toto subjects of a checkpoint directory: every regular file under it (its
    relative POSIX path as ``name``, ``{"sha256": hex}`` as ``digest``), sorted by name; the
    top-level :data:`ATTESTATION_FILE` is left out (R-A-1).

    Raises:
        AttestationError: ``malformed``, when ``directory`` is not a directory or holds a
            symbolic link or anything else that is not a file or directory (its content could
            change without any attested file changing).
    """
    root = Path(directory)
    if not root.is_dir():
        raise _fail("malformed", f"checkpoint {root} is not a directory")
    subjects: list[dict[str, Any]] = []
    for here, dirs, files in os.walk(root, followlinks=False):
        for name in [*dirs, *files]:
            path = Path(here) / name
            mode = path.lstat().st_mode
            relative = path.relative_to(root).as_posix()
            if stat.S_ISDIR(mode):
                continue
            if not stat.S_ISREG(mode):
                raise _fail(
                    "malformed",
                    f"checkpoint file {relative} is not a regular file (a link or a device); "
                    "attestations cover regular files only",
                )
            if relative == ATTESTATION_FILE:
                continue
            subjects.append({"name": relative, "digest": {"sha256": _file_sha256(path)}})
    subjects.sort(key=lambda subject: str(subject["name"]))
    return subjects


# --- the Merkle tree (RFC 9162 §2.1) --------------------------------------------------------


def _leaf_hash(leaf: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + leaf).digest()


def _node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(size: int) -> int:
    """The largest power of two below ``size`` (``size`` > 1): where RFC 9162 splits a tree."""
    return 1 << ((size - 1).bit_length() - 1)


def _tree_hash(hashes: Sequence[bytes]) -> bytes:
    """MTH over leaf hashes (RFC 9162 §2.1.1); ``hashes`` is not empty."""
    if len(hashes) == 1:
        return hashes[0]
    k = _split(len(hashes))
    return _node_hash(_tree_hash(hashes[:k]), _tree_hash(hashes[k:]))


def merkle_root(leaves: Sequence[bytes]) -> str:
    """The RFC 9162 Merkle tree hash of ``leaves`` in their order, as lowercase hex; the hash of
    the empty string for no leaves."""
    if not leaves:
        return hashlib.sha256(b"").hexdigest()
    return _tree_hash([_leaf_hash(bytes(leaf)) for leaf in leaves]).hex()


def _path(hashes: Sequence[bytes], index: int) -> list[bytes]:
    if len(hashes) == 1:
        return []
    k = _split(len(hashes))
    if index < k:
        return [*_path(hashes[:k], index), _tree_hash(hashes[k:])]
    return [*_path(hashes[k:], index - k), _tree_hash(hashes[:k])]


def inclusion_proof(leaves: Sequence[bytes], index: int) -> list[str]:
    """The RFC 9162 inclusion path (§2.1.3.1) of ``leaves[index]``, each hash lowercase hex,
    from the leaf's sibling up.

    Raises:
        IndexError: ``index`` is outside ``0 .. len(leaves) - 1``.
    """
    if not 0 <= index < len(leaves):
        raise IndexError(f"leaf {index} is outside a tree of {len(leaves)}")
    return [node.hex() for node in _path([_leaf_hash(bytes(leaf)) for leaf in leaves], index)]


def verify_inclusion(leaf: bytes, index: int, size: int, proof: Sequence[str], root: str) -> bool:
    """Whether ``proof`` shows ``leaf`` at ``index`` in the tree of ``size`` leaves whose hash is
    ``root`` (RFC 9162 §2.1.3.2, step by step). A malformed hash gives False."""
    if not 0 <= index < size:  # step 1
        return False
    try:
        path = [bytes.fromhex(node) for node in proof]
        expected = bytes.fromhex(root)
    except (TypeError, ValueError):
        return False
    if any(len(node) != hashlib.sha256().digest_size for node in path):
        return False
    fn, sn = index, size - 1  # step 2
    result = _leaf_hash(bytes(leaf))  # step 3
    for node in path:  # step 4
        if sn == 0:  # 4a
            return False
        if fn & 1 or fn == sn:  # 4b
            result = _node_hash(node, result)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            result = _node_hash(result, node)
        fn >>= 1  # 4c
        sn >>= 1
    return sn == 0 and secrets.compare_digest(result, expected)  # step 5


def envelope_digest(envelope_bytes: bytes) -> str:
    """``sha256:`` + hex of a receipt's stored SignedEnvelope protobuf bytes."""
    return digest_bytes(bytes(envelope_bytes))


def receipt_leaf(receipt_id: str, envelope_digest: str) -> bytes:
    """One receipt's Merkle leaf: the RFC 8785 JSON of its id and envelope digest (R-A-3)."""
    return canonical_json({"envelope_digest": envelope_digest, "receipt_id": receipt_id})


def _sorted_receipts(receipts: Iterable[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    ordered = sorted(((str(rid), bytes(raw)) for rid, raw in receipts), key=lambda r: r[0])
    for before, after in itertools.pairwise(ordered):
        if before[0] == after[0]:
            raise _fail("malformed", f"receipt {preview(after[0])} is listed twice")
    return ordered


def receipt_leaves(receipts: Iterable[tuple[str, bytes]]) -> list[bytes]:
    """The Merkle leaves of ``(receipt_id, envelope bytes)`` pairs, in tree order (sorted by
    receipt id).

    Raises:
        AttestationError: ``malformed``, when a receipt id repeats.
    """
    return [receipt_leaf(rid, envelope_digest(raw)) for rid, raw in _sorted_receipts(receipts)]


def receipts_jsonl(receipts: Iterable[tuple[str, bytes]]) -> str:
    """``(receipt_id, stored envelope bytes)`` pairs as the receipts file ``attest verify
    --receipts`` reads: one JSON object per line, ``{"envelope": <standard base64 of the
    SignedEnvelope protobuf bytes>, "receipt_id": ...}``, sorted by receipt id."""
    lines = [
        json.dumps(
            {"envelope": base64.standard_b64encode(raw).decode("ascii"), "receipt_id": rid},
            sort_keys=True,
        )
        for rid, raw in _sorted_receipts(receipts)
    ]
    return "".join(line + "\n" for line in lines)


def read_receipts_jsonl(text: str) -> list[tuple[str, bytes]]:
    """The pairs a receipts file (:func:`receipts_jsonl`) holds; blank lines are skipped.

    Raises:
        AttestationError: ``malformed``, naming the first line that is not such an object.
    """
    pairs: list[tuple[str, bytes]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        at = f"receipts line {number}"
        try:
            entry = strict_json.loads(line)
        except (ValueError, RecursionError) as exc:
            raise _fail("malformed", f"{at} is not JSON: {exc}") from None
        entry = _where(entry, ("envelope", "receipt_id"), at)
        encoded = _str(entry, "envelope", at)
        try:
            raw = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise _fail("malformed", f"{at}.envelope is not base64") from None
        pairs.append((_str(entry, "receipt_id", at), raw))
    return pairs


# --- the predicate --------------------------------------------------------------------------


def share_text(part: int, whole: int) -> str:
    """``part / whole`` as the decimal text a predicate carries: six decimals, ``"0.000000"``
    for an empty whole (text, not a JSON number: every reader then sees the same value)."""
    return f"{(part / whole) if whole else 0.0:.6f}"


def _where(doc: object, fields: Sequence[str], where: str) -> Mapping[str, Any]:
    """``doc`` as an object with exactly ``fields`` (no fewer, no others)."""
    if not isinstance(doc, Mapping):
        raise _fail("malformed", f"{where} is a JSON object, not {type(doc).__name__}")
    unknown = sorted(str(key) for key in doc if key not in fields)
    if unknown:
        raise _fail("malformed", f"{where} has an unknown field {preview(unknown[0])}")
    missing = [name for name in fields if name not in doc]
    if missing:
        raise _fail("malformed", f"{where} lacks {missing[0]!r}")
    return doc


def _str(doc: Mapping[str, Any], name: str, where: str, *, empty: bool = False) -> str:
    value = doc[name]
    if not isinstance(value, str) or (not empty and not value):
        raise _fail("malformed", f"{where}.{name} is a non-empty string")
    return value


def _int(doc: Mapping[str, Any], name: str, where: str) -> int:
    value = doc[name]
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2**53 - 1:
        raise _fail("malformed", f"{where}.{name} is an integer in 0 .. 2^53-1")
    return value


def _list(doc: Mapping[str, Any], name: str, where: str) -> list[Any]:
    value = doc[name]
    if not isinstance(value, list):
        raise _fail("malformed", f"{where}.{name} is a JSON array")
    return value


def _strs(doc: Mapping[str, Any], name: str, where: str) -> list[str]:
    values = _list(doc, name, where)
    if not all(isinstance(value, str) and value for value in values):
        raise _fail("malformed", f"{where}.{name} holds non-empty strings")
    return list(values)


def _digest(doc: Mapping[str, Any], name: str, where: str) -> str:
    value = _str(doc, name, where)
    if not is_digest(value):
        raise _fail("malformed", f"{where}.{name} is 'sha256:' and 64 lowercase hex digits")
    return value


def _decimal(doc: Mapping[str, Any], name: str, where: str) -> str:
    value = _str(doc, name, where)
    try:
        number = float(value)
    except ValueError:
        number = float("nan")
    if not 0.0 <= number <= 1.0:
        raise _fail("malformed", f"{where}.{name} is a decimal in 0 .. 1, as text")
    return value


def _time(doc: Mapping[str, Any], name: str, where: str) -> str:
    value = _str(doc, name, where)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        parsed = None
    if parsed is None or parsed.tzinfo is None or "T" not in value:
        raise _fail("malformed", f"{where}.{name} is an RFC 3339 time with an offset")
    return value


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
        doc = _where(
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
        scope = _where(doc["scope"], _SCOPE_FIELDS, f"{where}.scope")
        for name in ("calibration_scope", "issuer"):
            _str(scope, name, f"{where}.scope")
        for name in ("checker_configuration_digest", "calibration_corpus_digest"):
            _digest(scope, name, f"{where}.scope")
        _str(scope, "threshold", f"{where}.scope")
        for name in ("issued_at_policy_update", "expiry_policy_updates"):
            _int(scope, name, f"{where}.scope")
        state = _str(doc, "state", where)
        if state not in CERTIFICATE_STATES:
            raise _fail(
                "malformed",
                f"{where}.state {preview(state)} is one of {', '.join(sorted(CERTIFICATE_STATES))}",
            )
        revocations = []
        for position, entry in enumerate(_list(doc, "revocations", where)):
            at = f"{where}.revocations[{position}]"
            entry = _where(entry, _REVOCATION_FIELDS, at)
            _int(entry, "list_version", at)
            if _str(entry, "scope", at) not in ("certificate", "contract", "checker"):
                raise _fail("malformed", f"{at}.scope is certificate, contract or checker")
            _time(entry, "revoked_at", at)
            _str(entry, "reason", at)
            revocations.append(dict(entry))
        return cls(
            certificate_id=_str(doc, "certificate_id", where),
            contract_digest=_digest(doc, "contract_digest", where),
            epsilon=_decimal(doc, "epsilon", where),
            delta=_decimal(doc, "delta", where),
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


def _time_text(message: Any) -> str:
    return str(message.ToJsonString())


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
                    "revoked_at": _time_text(entry.revoked_at),
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
        doc = _where(
            doc, ("total", "by_outcome", "certified", "certified_share", "unscored"), where
        )
        counts = doc["by_outcome"]
        if not isinstance(counts, Mapping):
            raise _fail("malformed", f"{where}.by_outcome is a JSON object")
        by_outcome = {str(name): _int(counts, name, f"{where}.by_outcome") for name in counts}
        return cls(
            total=_int(doc, "total", where),
            by_outcome=by_outcome,
            certified=_int(doc, "certified", where),
            certified_share=_decimal(doc, "certified_share", where),
            unscored=_int(doc, "unscored", where),
        )


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
        doc = _where(doc, ("algorithm", "root", "size", "leaf_rule"), where)
        if doc["algorithm"] != MERKLE_ALGORITHM or doc["leaf_rule"] != LEAF_RULE:
            raise _fail("malformed", f"{where} names another algorithm or leaf rule")
        root = _str(doc, "root", where)
        if len(root) != 64 or root.strip("0123456789abcdef"):
            raise _fail("malformed", f"{where}.root is 64 lowercase hex digits")
        return cls(root=root, size=_int(doc, "size", where))


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
        doc = _where(doc, _PREDICATE_FIELDS, where)
        first = _int(doc, "policy_update_first", where)
        last = _int(doc, "policy_update_last", where)
        if last < first:
            raise _fail("malformed", f"{where}: policy_update_last is below policy_update_first")
        digests = _strs(doc, "contract_digests", where)
        if not all(is_digest(value) for value in digests):
            raise _fail("malformed", f"{where}.contract_digests holds sha256: digests")
        audits = []
        for position, audit in enumerate(_list(doc, "integrity_audits", where)):
            at = f"{where}.integrity_audits[{position}]"
            audit = _where(audit, _AUDIT_FIELDS, at)
            _str(audit, "audit_id", at)
            _int(audit, "boundary", at)
            _str(audit, "decision", at)
            _str(audit, "reason", at, empty=True)
            audits.append(dict(audit))
        return cls(
            policy_checkpoint_ids=_strs(doc, "policy_checkpoint_ids", where),
            policy_update_first=first,
            policy_update_last=last,
            contract_digests=digests,
            certificates=[
                CertificateUse.from_json(use, f"{where}.certificates[{n}]")
                for n, use in enumerate(_list(doc, "certificates", where))
            ],
            receipts=ReceiptTally.from_json(doc["receipts"], f"{where}.receipts"),
            merkle=MerkleCommitment.from_json(doc["merkle"], f"{where}.merkle"),
            integrity_audits=audits,
            issued_at=_time(doc, "issued_at", where),
            issuer_key_id=_str(doc, "issuer_key_id", where),
            organization=_str(doc, "organization", where, empty=True),
            control_url=_str(doc, "control_url", where, empty=True),
        )


def _open_stored_receipt(receipt_id: str, envelope_bytes: bytes) -> RewardEvidenceReceipt:
    """The receipt in a stored envelope; its id must be ``receipt_id``.

    Not signature-checked here: the organization signs the Merkle root over these exact bytes,
    so bytes that hash to a committed leaf are the ones it attested.
    """
    try:
        envelope = parse_strict(SignedEnvelope, envelope_bytes)
        receipt = parse_strict(RewardEvidenceReceipt, envelope.payload)
    except RewardSealError as exc:
        raise _fail("malformed", f"receipt {preview(receipt_id)}: {exc.message}") from None
    if receipt.receipt_id != receipt_id:
        raise _fail(
            "malformed",
            f"receipt {preview(receipt_id)}'s envelope holds receipt {preview(receipt.receipt_id)}",
        )
    return receipt


def receipt_commitment(
    receipts: Iterable[tuple[str, bytes]],
) -> tuple[ReceiptTally, MerkleCommitment]:
    """The tally and Merkle commitment of ``(receipt_id, stored SignedEnvelope bytes)`` pairs:
    what the signer puts in the predicate and what the verifier recomputes (R-A-3).

    Raises:
        AttestationError: ``malformed``, for a repeated id or an envelope that does not hold a
            receipt of its id.
    """
    ordered = _sorted_receipts(receipts)
    by_outcome: dict[str, int] = {}
    certified = unscored = 0
    for receipt_id, raw in ordered:
        receipt = _open_stored_receipt(receipt_id, raw)
        word = outcome_word(receipt.reward_outcome)
        by_outcome[word] = by_outcome.get(word, 0) + 1
        certified += bool(receipt.certified)
        unscored += is_unscored(receipt)
    leaves = [receipt_leaf(rid, envelope_digest(raw)) for rid, raw in ordered]
    tally = ReceiptTally(
        total=len(ordered),
        by_outcome=dict(sorted(by_outcome.items())),
        certified=certified,
        certified_share=share_text(certified, len(ordered)),
        unscored=unscored,
    )
    return tally, MerkleCommitment(root=merkle_root(leaves), size=len(leaves))


# --- the statement and its envelope ---------------------------------------------------------


def build_statement(subjects: list[dict[str, Any]], predicate: RewardPredicate) -> dict[str, Any]:
    """The in-toto Statement v1 of ``subjects`` (:func:`checkpoint_subjects`) and
    ``predicate`` (R-A-1)."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [dict(subject) for subject in subjects],
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate.to_json(),
    }


def sign_attestation(statement: Mapping[str, Any], key: SigningKey) -> dict[str, Any]:
    """The DSSE v1 JSON envelope of ``statement``: its RFC 8785 bytes, signed by ``key`` (the
    organization key) as :data:`STATEMENT_PAYLOAD_TYPE` (R-A-1)."""
    return dsse_envelope_for(STATEMENT_PAYLOAD_TYPE, canonical_json(dict(statement)), key)


def write_attestation(directory: Path, envelope: Mapping[str, Any]) -> Path:
    """Write ``envelope`` as ``directory/ATTESTATION_FILE`` (indented JSON), atomically: a
    reader sees the old file or the whole new one. Returns the path."""
    target = Path(directory) / ATTESTATION_FILE
    tmp = target.with_name(f".{ATTESTATION_FILE}.{secrets.token_hex(8)}.tmp")
    tmp.write_text(json.dumps(dict(envelope), indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, target)
    return target


@dataclass(frozen=True)
class VerifiedAttestation:
    """An attestation that passed :func:`verify_attestation`: its statement, predicate and
    subjects, the organization key ids that signed it, and which checks ran (``signature``
    always; ``subjects``, ``merkle``, ``revocations`` when their inputs were given)."""

    statement: dict[str, Any]
    predicate: RewardPredicate
    subjects: list[dict[str, Any]]
    key_ids: tuple[str, ...]
    checks: tuple[str, ...]


def _subjects(statement: Mapping[str, Any]) -> list[dict[str, Any]]:
    listed = statement["subject"]
    if not isinstance(listed, list):
        raise _fail("malformed", "statement.subject is a JSON array")
    subjects = []
    for position, subject in enumerate(listed):
        at = f"statement.subject[{position}]"
        subject = _where(subject, ("name", "digest"), at)
        _str(subject, "name", at)
        digest = _where(subject["digest"], ("sha256",), f"{at}.digest")
        value = _str(digest, "sha256", f"{at}.digest")
        if len(value) != 64 or value.strip("0123456789abcdef"):
            raise _fail("malformed", f"{at}.digest.sha256 is 64 lowercase hex digits")
        subjects.append({"name": subject["name"], "digest": {"sha256": value}})
    return subjects


def _check_subjects(attested: list[dict[str, Any]], directory: Path) -> None:
    """Step 5: the checkpoint holds exactly the attested files, byte for byte."""
    want = {s["name"]: s["digest"]["sha256"] for s in attested}
    have = {s["name"]: s["digest"]["sha256"] for s in checkpoint_subjects(directory)}
    for name in sorted(want.keys() | have.keys()):
        if name not in have:
            raise _fail("subject_mismatch", f"attested file {name} is missing from {directory}")
        if name not in want:
            raise _fail("subject_mismatch", f"file {name} in {directory} is not attested")
        if want[name] != have[name]:
            raise _fail(
                "subject_mismatch", f"file {name} changed: its sha256 is not the attested one"
            )


def _check_receipts(predicate: RewardPredicate, receipts: Sequence[tuple[str, bytes]]) -> None:
    """Step 6: the given receipts reproduce the predicate's root, size and tally."""
    tally, merkle = receipt_commitment(receipts)
    if merkle.size != predicate.merkle.size:
        raise _fail(
            "merkle_mismatch",
            f"{merkle.size} receipts given; the attestation commits to {predicate.merkle.size}",
        )
    if merkle.root != predicate.merkle.root:
        raise _fail("merkle_mismatch", "the given receipts do not reproduce the Merkle root")
    if tally != predicate.receipts:
        raise _fail("merkle_mismatch", "the given receipts do not reproduce the receipt tally")


def _check_revocations(
    predicate: RewardPredicate, revocations: Sequence[SignedEnvelope], org_keys: TrustSet
) -> None:
    """Step 7: no certificate reported current is revoked by a given signed list."""
    for envelope in revocations:
        try:
            revocation_list = open_revocation_list(envelope, org_keys)
        except RewardSealError as exc:
            raise _fail(
                "bad_signature",
                f"the revocation list does not verify under the organization key: {exc.message}",
            ) from None
        for use in predicate.certificates:
            if use.state != "current":
                continue
            entry = revoking_entry(revocation_list, use.as_certificate())
            if entry is not None:
                raise _fail(
                    "certificate_revoked",
                    f"certificate {use.certificate_id} is reported current, but revocation list "
                    f"version {revocation_list.version} revokes it "
                    f"(at {_time_text(entry.revoked_at)}: {preview(entry.reason)})",
                )


def verify_attestation(
    doc: Mapping[str, Any],
    *,
    checkpoint: Path | None,
    org_keys: TrustSet,
    receipts: Sequence[tuple[str, bytes]] | None = None,
    revocations: Sequence[SignedEnvelope] | None = None,
) -> VerifiedAttestation:
    """Verify a reward attestation (R-A-4).

    Steps (each failure raises :class:`AttestationError` with the reason in brackets):
    1. ``doc`` is a DSSE v1 envelope of :data:`STATEMENT_PAYLOAD_TYPE` [malformed];
    2. a key of ``org_keys`` signed ``pae(payloadType, payload)`` [bad_signature];
    3. the payload is RFC 8785 JSON of an in-toto Statement v1 of :data:`PREDICATE_TYPE` whose
       predicate reads strictly [malformed];
    4. the predicate's ``issuer_key_id`` is a key that signed [bad_signature];
    5. with ``checkpoint``: its files are exactly the subjects [subject_mismatch];
    6. with ``receipts`` (``(receipt_id, stored envelope bytes)``): they reproduce the Merkle
       root, size and tally [merkle_mismatch];
    7. with ``revocations`` (signed lists, verified under ``org_keys`` [bad_signature]): none
       revokes a certificate the predicate reports current [certificate_revoked].
    """
    try:  # step 1
        envelope = from_dsse_json(doc)
    except RewardSealError as exc:
        raise _fail("malformed", f"the attestation is not a DSSE envelope: {exc.message}") from None
    if envelope.payload_type != STATEMENT_PAYLOAD_TYPE:
        raise _fail(
            "malformed",
            f"payload type {preview(envelope.payload_type)} is not {STATEMENT_PAYLOAD_TYPE}",
        )
    try:  # step 2
        verified = org_keys.verify(envelope, payload_type=STATEMENT_PAYLOAD_TYPE)
    except RewardSealError as exc:
        raise _fail(
            "bad_signature", f"no organization key signed the attestation: {exc.message}"
        ) from None
    try:  # step 3
        statement = strict_json.loads(verified.payload)
    except (ValueError, RecursionError) as exc:
        raise _fail("malformed", f"the statement is not JSON: {exc}") from None
    statement = dict(
        _where(statement, ("_type", "subject", "predicateType", "predicate"), "statement")
    )
    if canonical_json(statement) != verified.payload:
        raise _fail("malformed", "the statement is not in RFC 8785 canonical form")
    if statement["_type"] != STATEMENT_TYPE:
        raise _fail(
            "malformed", f"statement _type {preview(statement['_type'])} is not {STATEMENT_TYPE}"
        )
    if statement["predicateType"] != PREDICATE_TYPE:
        raise _fail(
            "malformed",
            f"predicateType {preview(statement['predicateType'])} is not {PREDICATE_TYPE} "
            "(another version needs another verifier)",
        )
    subjects = _subjects(statement)
    predicate = RewardPredicate.from_json(statement["predicate"])
    if predicate.issuer_key_id not in verified.key_ids:  # step 4
        raise _fail("bad_signature", "the predicate's issuer_key_id did not sign the attestation")
    checks = ["signature"]
    if checkpoint is not None:  # step 5
        _check_subjects(subjects, Path(checkpoint))
        checks.append("subjects")
    if receipts is not None:  # step 6
        _check_receipts(predicate, receipts)
        checks.append("merkle")
    if revocations is not None:  # step 7
        _check_revocations(predicate, revocations, org_keys)
        checks.append("revocations")
    return VerifiedAttestation(
        statement=statement,
        predicate=predicate,
        subjects=subjects,
        key_ids=verified.key_ids,
        checks=tuple(checks),
    )
