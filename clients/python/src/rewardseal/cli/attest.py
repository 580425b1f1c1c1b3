"""``rewardseal attest verify|prove``: check a checkpoint's reward attestation (docs/spec.md
R-A-4) and prove one receipt's inclusion in it (R-A-3).

    rewardseal attest verify FILE --org-key KEY [--checkpoint DIR | --no-checkpoint]
                             [--receipts FILE] [--revocations FILE ...]
                             [--proof PROOF [--receipt RECEIPT]] [--json]
    rewardseal attest prove  FILE --org-key KEY --receipts FILE --receipt-id ID

``FILE`` is the attestation's DSSE envelope (``reward-attestation.dsse.json``); ``--org-key`` the
organization's Ed25519 public key (hex, base64, a file holding either, or control's ready file);
``--checkpoint`` the directory whose files the attestation names (by default the one ``FILE``
lies in; ``--no-checkpoint`` checks the signature and predicate only); ``--receipts`` a receipts
file (one JSON object per line, ``{"receipt_id", "envelope"}``) that must reproduce the
predicate's Merkle root and tally; ``--revocations`` a signed revocation list (any form
``receipt show`` reads), which must not revoke a certificate the attestation reports current;
``--proof`` an inclusion proof ``attest prove`` printed, checked against the attested root (and
against ``--receipt``, the receipt's envelope in any form ``receipt show`` reads).

``prove`` verifies the attestation with the receipts (as ``verify --receipts --no-checkpoint``
does) and prints the proof of one receipt: someone who holds only that receipt, the proof and the
attestation can then check that the receipt is one of those the checkpoint was trained on.

Exit status: 0 verified (or proof printed); 1 verification failed (one line naming the reason:
bad_signature, subject_mismatch, merkle_mismatch, certificate_revoked or malformed); 2 a usage
error or an input that cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rewardseal.cli.receipt import EXIT_FAILED, EXIT_OK, EXIT_USAGE, UsageError, decode_envelope
from rewardseal.core import strict_json
from rewardseal.core.attestation import (
    VerifiedAttestation,
    read_receipts_jsonl,
    receipt_proof,
    verify_attestation,
)
from rewardseal.core.errors import AttestationError, RewardSealError
from rewardseal.core.public_keys import parse_public_key
from rewardseal.core.signing import TrustSet
from rewardseal.v1.receipt_pb2 import SignedEnvelope

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser, *, prove: bool) -> None:
    """The options of ``attest verify`` (``prove=False``) or ``attest prove``."""
    parser.add_argument(
        "attestation", type=Path, metavar="FILE", help="the attestation's DSSE JSON file"
    )
    parser.add_argument(
        "--org-key",
        action="append",
        metavar="KEY",
        required=True,
        help="the organization's public key: hex, base64, a file holding it or control's "
        "ready file (repeatable)",
    )
    parser.add_argument(
        "--receipts",
        type=Path,
        metavar="FILE",
        required=prove,
        help="a receipts file (JSON lines)",
    )
    if prove:
        parser.add_argument("--receipt-id", required=True, help="the receipt to prove")
        return
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--checkpoint",
        type=Path,
        metavar="DIR",
        help="the checkpoint directory (default: FILE's directory)",
    )
    where.add_argument(
        "--no-checkpoint", action="store_true", help="do not check the checkpoint's files"
    )
    parser.add_argument(
        "--revocations", type=Path, action="append", help="a signed revocation list (repeatable)"
    )
    parser.add_argument("--proof", type=Path, help="an inclusion proof (attest prove's output)")
    parser.add_argument("--receipt", type=Path, help="the receipt the --proof is for")
    parser.add_argument("--json", action="store_true", help="print the verified statement")


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {what} {path}: {exc.strerror}") from None


def _envelope(path: Path, what: str) -> SignedEnvelope:
    try:
        return decode_envelope(_read(path, what))
    except RewardSealError as exc:
        raise UsageError(f"{what} {path}: {exc.message}") from None


@dataclass
class _Inputs:
    """What the command read; ``document`` is None when the attestation is not JSON."""

    document: Any
    keys: TrustSet
    checkpoint: Path | None = None
    receipts: list[tuple[str, bytes]] | None = None
    revocations: list[SignedEnvelope] | None = None
    proofs: list[tuple[Any, bytes | None]] | None = None


def _inputs(args: argparse.Namespace, *, prove: bool) -> _Inputs:
    """Everything the command reads, or UsageError (exit 2)."""
    try:
        keys = TrustSet(
            parse_public_key(value, flag="--org-key", banner_fields=("organization_public_key",))
            for value in args.org_key
        )
    except RewardSealError as exc:
        raise UsageError(exc.message) from None
    raw = _read(args.attestation, "the attestation")
    try:
        document = strict_json.loads(raw)
    except (ValueError, RecursionError):
        document = None  # readable but not JSON: a failed verification (malformed), not usage
    inputs = _Inputs(document, keys)
    if args.receipts is not None:
        text = _read(args.receipts, "the receipts file").decode("utf-8", errors="replace")
        try:
            inputs.receipts = read_receipts_jsonl(text)
        except AttestationError as exc:
            raise UsageError(exc.message) from None
    if prove:
        if args.receipt_id not in {rid for rid, _ in inputs.receipts or []}:
            raise UsageError(f"receipt {args.receipt_id!r} is not in {args.receipts}")
        return inputs
    if not args.no_checkpoint:
        inputs.checkpoint = args.checkpoint or args.attestation.parent
        if not inputs.checkpoint.is_dir():
            raise UsageError(f"checkpoint {inputs.checkpoint} is not a directory")
    if args.revocations:
        inputs.revocations = [_envelope(p, "the revocation list") for p in args.revocations]
    if args.receipt is not None and args.proof is None:
        raise UsageError("--receipt goes with --proof")
    if args.proof is not None:
        try:
            proof = strict_json.loads(_read(args.proof, "the proof"))
        except (ValueError, RecursionError):
            raise UsageError(f"the proof {args.proof} is not JSON") from None
        envelope = None
        if args.receipt is not None:
            envelope = _envelope(args.receipt, "the receipt").SerializeToString()
        inputs.proofs = [(proof, envelope)]
    return inputs


def _summary(verified: VerifiedAttestation, checkpoint: Path | None) -> str:
    predicate = verified.predicate
    tally = predicate.receipts
    files = f"{len(verified.subjects)} file(s)" + (f" of {checkpoint}" if checkpoint else "")
    return (
        f"verified: {files}, signed by {', '.join(verified.key_ids)}; policy updates "
        f"{predicate.policy_update_first}..{predicate.policy_update_last}, {tally.total} "
        f"receipt(s), certified share {tally.certified_share}, Merkle root "
        f"{predicate.merkle.root}; checked: {', '.join(verified.checks)}"
    )


def run(args: argparse.Namespace) -> int:
    """Run ``attest verify`` or ``attest prove``; the exit status."""
    prove = args.action == "prove"
    prog = f"rewardseal attest {args.action}"
    try:
        inputs = _inputs(args, prove=prove)
    except UsageError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if inputs.document is None:
        print(f"{prog}: malformed: {args.attestation} is not JSON", file=sys.stderr)
        return EXIT_FAILED
    try:
        verified = verify_attestation(
            inputs.document,
            checkpoint=inputs.checkpoint,
            org_keys=inputs.keys,
            receipts=inputs.receipts,
            revocations=inputs.revocations,
            proofs=inputs.proofs,
        )
        if prove:
            proof = receipt_proof(inputs.receipts or [], args.receipt_id)
    except AttestationError as exc:
        print(f"{prog}: {exc.reason}: {exc.message}", file=sys.stderr)
        return EXIT_FAILED
    except OSError as exc:  # a checkpoint file that cannot be read: an input, not a verdict
        print(f"{prog}: cannot read {exc.filename}: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE
    if prove:
        print(json.dumps(proof, indent=2))
    elif args.json:
        print(json.dumps(verified.statement, indent=2, sort_keys=True))
    else:
        print(_summary(verified, inputs.checkpoint))
    return EXIT_OK
