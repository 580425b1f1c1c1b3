"""The in-toto statement of a checkpoint, its DSSE envelope and its verification (R-A-1, R-A-4)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from rewardseal.core import strict_json
from rewardseal.core.attestation.predicate import RewardPredicate
from rewardseal.core.attestation.reading import (
    exact_object,
    fail,
    string,
    time_text,
)
from rewardseal.core.attestation.receipts import check_receipt_proof, receipt_commitment
from rewardseal.core.digest import canonical_json
from rewardseal.core.dsse import dsse_envelope_for, from_dsse_json
from rewardseal.core.errors import RewardSealError, SignatureError, preview
from rewardseal.core.revocation import open_revocation_list, revoking_entry
from rewardseal.core.signing import SigningKey, TrustSet
from rewardseal.v1.receipt_pb2 import SignedEnvelope

STATEMENT_TYPE: Final = "https://in-toto.io/Statement/v1"
STATEMENT_PAYLOAD_TYPE: Final = "application/vnd.in-toto+json"
PREDICATE_TYPE: Final = "https://rewardseal.dev/reward-attestation/v1"
ATTESTATION_FILE: Final = "reward-attestation.dsse.json"
"""The attestation's file name in a checkpoint directory; never one of its own subjects."""
_CHUNK: Final = 1 << 20


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
        raise fail("malformed", f"checkpoint {root} is not a directory")
    subjects: list[dict[str, Any]] = []
    for here, dirs, files in os.walk(root, followlinks=False):
        for name in [*dirs, *files]:
            path = Path(here) / name
            mode = path.lstat().st_mode
            relative = path.relative_to(root).as_posix()
            if stat.S_ISDIR(mode):
                continue
            if not stat.S_ISREG(mode):
                raise fail(
                    "malformed",
                    f"checkpoint file {relative} is not a regular file (a link or a device); "
                    "attestations cover regular files only",
                )
            if relative == ATTESTATION_FILE:
                continue
            subjects.append({"name": relative, "digest": {"sha256": _file_sha256(path)}})
    subjects.sort(key=lambda subject: str(subject["name"]))
    return subjects


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
    try:
        tmp.write_text(json.dumps(dict(envelope), indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, target)
    finally:
        # A leftover temporary file would be an extra, unattested file of the checkpoint.
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    return target


@dataclass(frozen=True)
class VerifiedAttestation:
    """An attestation that passed :func:`verify_attestation`: its statement, predicate and
    subjects, the organization key ids that signed it, and which checks ran (``signature``
    always; ``subjects``, ``merkle``, ``revocations``, ``inclusion`` when their inputs were
    given)."""

    statement: dict[str, Any]
    predicate: RewardPredicate
    subjects: list[dict[str, Any]]
    key_ids: tuple[str, ...]
    checks: tuple[str, ...]


def _subjects(statement: Mapping[str, Any]) -> list[dict[str, Any]]:
    listed = statement["subject"]
    if not isinstance(listed, list):
        raise fail("malformed", "statement.subject is a JSON array")
    subjects: list[dict[str, Any]] = []
    seen: set[str] = set()
    for position, subject in enumerate(listed):
        at = f"statement.subject[{position}]"
        subject = exact_object(subject, ("name", "digest"), at)
        name = string(subject, "name", at)
        if name in seen:
            raise fail("malformed", f"{at} names {preview(name)} a second time")
        seen.add(name)
        digest = exact_object(subject["digest"], ("sha256",), f"{at}.digest")
        value = string(digest, "sha256", f"{at}.digest")
        if len(value) != 64 or value.strip("0123456789abcdef"):
            raise fail("malformed", f"{at}.digest.sha256 is 64 lowercase hex digits")
        subjects.append({"name": name, "digest": {"sha256": value}})
    return subjects


def _check_subjects(attested: list[dict[str, Any]], directory: Path) -> None:
    """Step 5: the checkpoint holds exactly the attested files, byte for byte."""
    want = {s["name"]: s["digest"]["sha256"] for s in attested}
    have = {s["name"]: s["digest"]["sha256"] for s in checkpoint_subjects(directory)}
    for name in sorted(want.keys() | have.keys()):
        # preview(): a file name may hold anything, a newline included; the answer is one line.
        shown = preview(name, quoted=False) if name.isprintable() else preview(name)
        if name not in have:
            raise fail("subject_mismatch", f"attested file {shown} is missing from {directory}")
        if name not in want:
            raise fail("subject_mismatch", f"file {shown} in {directory} is not attested")
        if want[name] != have[name]:
            raise fail(
                "subject_mismatch", f"file {shown} changed: its sha256 is not the attested one"
            )


def _check_receipts(predicate: RewardPredicate, receipts: Sequence[tuple[str, bytes]]) -> None:
    """Step 6: the given receipts reproduce the predicate's root, size and tally."""
    tally, merkle = receipt_commitment(receipts)
    if merkle.size != predicate.merkle.size:
        raise fail(
            "merkle_mismatch",
            f"{merkle.size} receipts given; the attestation commits to {predicate.merkle.size}",
        )
    if merkle.root != predicate.merkle.root:
        raise fail("merkle_mismatch", "the given receipts do not reproduce the Merkle root")
    if tally != predicate.receipts:
        raise fail("merkle_mismatch", "the given receipts do not reproduce the receipt tally")


def _check_revocations(
    predicate: RewardPredicate, revocations: Sequence[SignedEnvelope], org_keys: TrustSet
) -> None:
    """Step 7: no certificate reported current is revoked by a given signed list."""
    for envelope in revocations:
        try:
            revocation_list = open_revocation_list(envelope, org_keys)
        except SignatureError as exc:
            raise fail(
                "bad_signature",
                f"the revocation list does not verify under the organization key: {exc.message}",
            ) from None
        except RewardSealError as exc:
            raise fail("malformed", f"the revocation list: {exc.message}") from None
        for use in predicate.certificates:
            if use.state != "current":
                continue
            entry = revoking_entry(revocation_list, use.as_certificate())
            if entry is not None:
                raise fail(
                    "certificate_revoked",
                    f"certificate {use.certificate_id} is reported current, but revocation list "
                    f"version {revocation_list.version} revokes it "
                    f"(at {time_text(entry.revoked_at)}: {preview(entry.reason)})",
                )


def verify_attestation(
    doc: Mapping[str, Any],
    *,
    checkpoint: Path | None,
    org_keys: TrustSet,
    receipts: Sequence[tuple[str, bytes]] | None = None,
    revocations: Sequence[SignedEnvelope] | None = None,
    proofs: Sequence[tuple[Mapping[str, Any], bytes | None]] | None = None,
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
       revokes a certificate the predicate reports current [certificate_revoked];
    8. with ``proofs`` (:func:`receipt_proof` documents, each with the receipt's envelope bytes
       or None): each leads to the attested root and size, and names that envelope
       [merkle_mismatch].
    """
    try:  # step 1
        envelope = from_dsse_json(doc)
    except RewardSealError as exc:
        raise fail("malformed", f"the attestation is not a DSSE envelope: {exc.message}") from None
    if envelope.payload_type != STATEMENT_PAYLOAD_TYPE:
        raise fail(
            "malformed",
            f"payload type {preview(envelope.payload_type)} is not {STATEMENT_PAYLOAD_TYPE}",
        )
    try:  # step 2
        verified = org_keys.verify(envelope, payload_type=STATEMENT_PAYLOAD_TYPE)
    except RewardSealError as exc:
        raise fail(
            "bad_signature", f"no organization key signed the attestation: {exc.message}"
        ) from None
    try:  # step 3
        statement = strict_json.loads(verified.payload)
    except (ValueError, RecursionError) as exc:
        raise fail("malformed", f"the statement is not JSON: {exc}") from None
    statement = dict(
        exact_object(statement, ("_type", "subject", "predicateType", "predicate"), "statement")
    )
    if canonical_json(statement) != verified.payload:
        raise fail("malformed", "the statement is not in RFC 8785 canonical form")
    if statement["_type"] != STATEMENT_TYPE:
        raise fail(
            "malformed", f"statement _type {preview(statement['_type'])} is not {STATEMENT_TYPE}"
        )
    if statement["predicateType"] != PREDICATE_TYPE:
        raise fail(
            "malformed",
            f"predicateType {preview(statement['predicateType'])} is not {PREDICATE_TYPE} "
            "(another version needs another verifier)",
        )
    subjects = _subjects(statement)
    predicate = RewardPredicate.from_json(statement["predicate"])
    if predicate.issuer_key_id not in verified.key_ids:  # step 4
        raise fail("bad_signature", "the predicate's issuer_key_id did not sign the attestation")
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
    if proofs is not None:  # step 8
        for proof, envelope_bytes in proofs:
            check_receipt_proof(predicate.merkle, proof, envelope_bytes)
        checks.append("inclusion")
    return VerifiedAttestation(
        statement=statement,
        predicate=predicate,
        subjects=subjects,
        key_ids=verified.key_ids,
        checks=tuple(checks),
    )
