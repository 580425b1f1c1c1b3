"""``rewardseal attest verify``: check a checkpoint's reward attestation (docs/spec.md R-A-4).

    rewardseal attest verify FILE --org-key KEY [--checkpoint DIR] [--receipts FILE]
                             [--revocations FILE ...] [--json]

``FILE`` is the DSSE envelope of the attestation (``reward-attestation.dsse.json``);
``--org-key`` the organization's Ed25519 public key (hex, base64, a file holding either, or
control's ready file); ``--checkpoint`` the directory whose files the attestation names (by
default the one ``FILE`` lies in); ``--receipts`` a receipts file (one JSON object per line,
``{"receipt_id", "envelope"}``) that must reproduce the predicate's Merkle root and tally;
``--revocations`` a signed revocation list (any form ``receipt show`` reads), which must not
revoke a certificate the attestation reports current.

Exit status: 0 verified; 1 verification failed (one line naming the reason: bad_signature,
subject_mismatch, merkle_mismatch, certificate_revoked or malformed); 2 a usage error or an
input that cannot be read.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rewardseal.cli.receipt import EXIT_FAILED, EXIT_OK, EXIT_USAGE, UsageError, decode_envelope
from rewardseal.core import strict_json
from rewardseal.core.attestation import (
    VerifiedAttestation,
    read_receipts_jsonl,
    verify_attestation,
)
from rewardseal.core.errors import AttestationError, RewardSealError
from rewardseal.core.public_keys import parse_public_key
from rewardseal.core.signing import TrustSet
from rewardseal.v1.receipt_pb2 import SignedEnvelope

__all__ = ["add_arguments", "run"]

_PROG = "rewardseal attest verify"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``attest verify``."""
    parser.add_argument("attestation", type=Path, help="the attestation's DSSE JSON file")
    parser.add_argument(
        "--org-key",
        action="append",
        required=True,
        help="the organization's public key: hex, base64, a file holding it or control's "
        "ready file (repeatable)",
    )
    parser.add_argument(
        "--checkpoint", type=Path, help="the checkpoint directory (default: FILE's directory)"
    )
    parser.add_argument("--receipts", type=Path, help="a receipts file (JSON lines)")
    parser.add_argument(
        "--revocations",
        type=Path,
        action="append",
        help="a signed revocation list (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print the verified statement")


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {what} {path}: {exc.strerror}") from None


def _inputs(
    args: argparse.Namespace,
) -> tuple[Any, TrustSet, Path, list[tuple[str, bytes]] | None, list[SignedEnvelope] | None]:
    """Everything the command reads, or UsageError (exit 2)."""
    try:
        keys = TrustSet(
            parse_public_key(value, flag="--org-key", banner_fields=("organization_public_key",))
            for value in args.org_key
        )
    except RewardSealError as exc:
        raise UsageError(exc.message) from None
    checkpoint = args.checkpoint or args.attestation.parent
    if not checkpoint.is_dir():
        raise UsageError(f"checkpoint {checkpoint} is not a directory")
    raw = _read(args.attestation, "the attestation")
    try:
        document = strict_json.loads(raw)
    except (ValueError, RecursionError):
        document = None  # verify_attestation says why (malformed): the file was readable
    receipts = None
    if args.receipts is not None:
        text = _read(args.receipts, "the receipts file").decode("utf-8", errors="replace")
        try:
            receipts = read_receipts_jsonl(text)
        except AttestationError as exc:
            raise UsageError(exc.message) from None
    revocations = None
    if args.revocations:
        revocations = []
        for path in args.revocations:
            try:
                revocations.append(decode_envelope(_read(path, "the revocation list")))
            except RewardSealError as exc:
                raise UsageError(f"revocation list {path}: {exc.message}") from None
    return document, keys, checkpoint, receipts, revocations


def _summary(verified: VerifiedAttestation, checkpoint: Path) -> str:
    predicate = verified.predicate
    tally = predicate.receipts
    return (
        f"verified: {len(verified.subjects)} file(s) of {checkpoint}, signed by "
        f"{', '.join(verified.key_ids)}; policy updates {predicate.policy_update_first}.."
        f"{predicate.policy_update_last}, {tally.total} receipt(s), certified share "
        f"{tally.certified_share}, Merkle root {predicate.merkle.root}; "
        f"checked: {', '.join(verified.checks)}"
    )


def run(args: argparse.Namespace) -> int:
    """Run ``attest verify``; the exit status."""
    try:
        document, keys, checkpoint, receipts, revocations = _inputs(args)
    except UsageError as exc:
        print(f"{_PROG}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if document is None:
        print(f"{_PROG}: malformed: {args.attestation} is not JSON", file=sys.stderr)
        return EXIT_FAILED
    try:
        verified = verify_attestation(
            document,
            checkpoint=checkpoint,
            org_keys=keys,
            receipts=receipts,
            revocations=revocations,
        )
    except AttestationError as exc:
        print(f"{_PROG}: {exc.reason}: {exc.message}", file=sys.stderr)
        return EXIT_FAILED
    if args.json:
        print(json.dumps(verified.statement, indent=2, sort_keys=True))
    else:
        print(_summary(verified, checkpoint))
    return EXIT_OK
