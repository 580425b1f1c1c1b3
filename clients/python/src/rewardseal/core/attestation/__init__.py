"""Reward attestations: which rewards trained a checkpoint, under which certificates (§14).

An attestation is an in-toto Statement v1 (R-A-1) in a DSSE envelope signed by control's
organization key: its subjects are a checkpoint directory's files (name and SHA-256), its
predicate (:class:`RewardPredicate`, R-A-2) binds the policy checkpoints and updates, the
contracts, the certificates used and their state, the receipts' tally and an RFC 9162 Merkle
root over them (R-A-3), and the integrity audits' decisions in force. :func:`verify_attestation`
checks one (R-A-4). Everything here is pure but for reading the checkpoint's files.

The parts: :mod:`.statement` (subjects, signing, verification), :mod:`.predicate` (the
predicate's fields), :mod:`.receipts` (leaves, tally, receipts file, inclusion proofs of one
receipt), :mod:`.merkle` (the RFC 9162 tree) and :mod:`.reading` (strict JSON readers).
"""

from __future__ import annotations

from rewardseal.core.attestation.merkle import inclusion_proof, merkle_root, verify_inclusion
from rewardseal.core.attestation.predicate import (
    CERTIFICATE_STATES,
    LEAF_RULE,
    MERKLE_ALGORITHM,
    CertificateUse,
    MerkleCommitment,
    ReceiptTally,
    RewardPredicate,
    certificate_use,
    share_text,
)
from rewardseal.core.attestation.receipts import (
    check_receipt_proof,
    envelope_digest,
    read_receipts_jsonl,
    receipt_commitment,
    receipt_leaf,
    receipt_leaves,
    receipt_proof,
    receipts_jsonl,
)
from rewardseal.core.attestation.statement import (
    ATTESTATION_FILE,
    PREDICATE_TYPE,
    STATEMENT_PAYLOAD_TYPE,
    STATEMENT_TYPE,
    VerifiedAttestation,
    build_statement,
    checkpoint_subjects,
    sign_attestation,
    verify_attestation,
    write_attestation,
)

__all__ = [
    "ATTESTATION_FILE",
    "CERTIFICATE_STATES",
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
    "check_receipt_proof",
    "checkpoint_subjects",
    "envelope_digest",
    "inclusion_proof",
    "merkle_root",
    "read_receipts_jsonl",
    "receipt_commitment",
    "receipt_leaf",
    "receipt_leaves",
    "receipt_proof",
    "receipts_jsonl",
    "share_text",
    "sign_attestation",
    "verify_attestation",
    "verify_inclusion",
    "write_attestation",
]
