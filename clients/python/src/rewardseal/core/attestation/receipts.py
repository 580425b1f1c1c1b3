"""The attested receipts (R-A-3): their Merkle leaves, tally and commitment, the receipts file
``attest verify --receipts`` reads, and one receipt's inclusion proof.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

from rewardseal.core import strict_json
from rewardseal.core.attestation.merkle import inclusion_proof, merkle_root, verify_inclusion
from rewardseal.core.attestation.predicate import MerkleCommitment, ReceiptTally, share_text
from rewardseal.core.attestation.reading import (
    digest_field,
    exact_object,
    fail,
    integer,
    string,
    strings,
)
from rewardseal.core.digest import canonical_json, digest_bytes
from rewardseal.core.errors import RewardSealError, preview
from rewardseal.core.receipts import is_unscored, outcome_word
from rewardseal.core.validation import parse_strict
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt, SignedEnvelope


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
            raise fail("malformed", f"receipt {preview(after[0])} is listed twice")
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
            raise fail("malformed", f"{at} is not JSON: {exc}") from None
        entry = exact_object(entry, ("envelope", "receipt_id"), at)
        encoded = string(entry, "envelope", at)
        try:
            raw = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise fail("malformed", f"{at}.envelope is not base64") from None
        pairs.append((string(entry, "receipt_id", at), raw))
    return pairs


def _open_stored_receipt(receipt_id: str, envelope_bytes: bytes) -> RewardEvidenceReceipt:
    """The receipt in a stored envelope; its id must be ``receipt_id``.

    Not signature-checked here: the organization signs the Merkle root over these exact bytes,
    so bytes that hash to a committed leaf are the ones it attested.
    """
    try:
        envelope = parse_strict(SignedEnvelope, envelope_bytes)
        receipt = parse_strict(RewardEvidenceReceipt, envelope.payload)
    except RewardSealError as exc:
        raise fail("malformed", f"receipt {preview(receipt_id)}: {exc.message}") from None
    if receipt.receipt_id != receipt_id:
        raise fail(
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


_PROOF_FIELDS: Final = ("receipt_id", "envelope_digest", "index", "size", "root", "proof")


def receipt_proof(receipts: Iterable[tuple[str, bytes]], receipt_id: str) -> dict[str, Any]:
    """The proof that ``receipt_id`` is one of ``receipts`` (the attested set): a JSON object
    ``{receipt_id, envelope_digest, index, size, root, proof}`` that whoever holds only that
    receipt and the attestation checks with :func:`check_receipt_proof` (R-A-3).

    Raises:
        AttestationError: ``malformed``, when ``receipt_id`` is not among ``receipts`` (or an
            id repeats).
    """
    ordered = _sorted_receipts(receipts)
    ids = [rid for rid, _ in ordered]
    if receipt_id not in ids:
        raise fail("malformed", f"receipt {preview(receipt_id)} is not among the receipts")
    index = ids.index(receipt_id)
    leaves = [receipt_leaf(rid, envelope_digest(raw)) for rid, raw in ordered]
    return {
        "receipt_id": receipt_id,
        "envelope_digest": envelope_digest(ordered[index][1]),
        "index": index,
        "size": len(leaves),
        "root": merkle_root(leaves),
        "proof": inclusion_proof(leaves, index),
    }


def check_receipt_proof(
    merkle: MerkleCommitment, proof: Mapping[str, Any], envelope_bytes: bytes | None = None
) -> str:
    """Check a :func:`receipt_proof` against an attestation's (verified) Merkle commitment and,
    when given, the receipt's envelope bytes; the receipt id it proves.

    Raises:
        AttestationError: ``malformed`` for a proof that is not such an object,
            ``merkle_mismatch`` when it does not lead to the attested root and size or the
            envelope is not the one it names.
    """
    where = "the inclusion proof"
    doc = exact_object(proof, _PROOF_FIELDS, where)
    receipt_id = string(doc, "receipt_id", where)
    digest = digest_field(doc, "envelope_digest", where)
    path = strings(doc, "proof", where)
    index, size = integer(doc, "index", where), integer(doc, "size", where)
    if (size, doc["root"]) != (merkle.size, merkle.root):
        raise fail("merkle_mismatch", f"{where} is for another tree than the attested one")
    if envelope_bytes is not None:
        if envelope_digest(envelope_bytes) != digest:
            raise fail("merkle_mismatch", f"the receipt's envelope is not the one {where} names")
        _open_stored_receipt(receipt_id, envelope_bytes)
    if not verify_inclusion(receipt_leaf(receipt_id, digest), index, size, path, merkle.root):
        raise fail(
            "merkle_mismatch",
            f"receipt {preview(receipt_id)} is not in the attested Merkle tree at {index}",
        )
    return receipt_id
