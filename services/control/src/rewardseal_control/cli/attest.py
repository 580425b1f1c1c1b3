"""``rewardseal-control attest``: a reward attestation for a checkpoint directory (R-C-15).

The command hashes the checkpoint's files here (the in-toto subjects,
:func:`rewardseal.core.attestation.checkpoint_subjects`), asks control to attest the receipts
of the scope (AttestCheckpoint) and writes the signed DSSE JSON to ``--out`` (or stdout);
``--receipts-out`` also writes the scope's receipts (their stored envelopes, in Merkle leaf
order, JSON lines: :func:`rewardseal.core.attestation.receipts_jsonl`) for
``rewardseal attest verify --receipts``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from rewardseal.core import attestation
from rewardseal.core.errors import RewardSealError
from rewardseal.rpc.control_client import AttestationScope, ControlClient
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt, SignedEnvelope
from rewardseal_control.cli.common import UsageError, remote

__all__ = ["add_attest_command", "attest_checkpoint"]


def add_attest_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    client: argparse.ArgumentParser,
) -> None:
    """``attest``: sign a reward attestation for a checkpoint (trainer or admin credential)."""
    attest = commands.add_parser(
        "attest",
        parents=[client],
        help="sign a reward attestation (in-toto, DSSE) for a checkpoint directory",
    )
    attest.set_defaults(action="checkpoint")
    attest.add_argument(
        "--checkpoint", type=Path, required=True, metavar="DIR", help="the checkpoint directory"
    )
    attest.add_argument(
        "--contract",
        action="append",
        required=True,
        metavar="DIGEST",
        help="a contract whose receipts trained it (repeatable)",
    )
    attest.add_argument(
        "--checkpoint-id",
        action="append",
        default=[],
        metavar="ID",
        help="a policy checkpoint id the trainer scored under (repeatable; default: any)",
    )
    attest.add_argument(
        "--first", type=int, default=0, metavar="N", help="first policy update (default 0)"
    )
    attest.add_argument(
        "--last", type=int, required=True, metavar="N", help="last policy update (inclusive)"
    )
    attest.add_argument(
        "--integrity-run", default="", metavar="RUN_ID", help="name its integrity decisions"
    )
    attest.add_argument(
        "--out",
        type=Path,
        metavar="FILE",
        help=f"write the DSSE JSON here (e.g. DIR/{attestation.ATTESTATION_FILE}; default stdout)",
    )
    attest.add_argument(
        "--receipts-out",
        type=Path,
        metavar="FILE",
        help="also write the scope's receipts here (for `rewardseal attest verify --receipts`)",
    )


def attest_checkpoint(client: ControlClient, args: argparse.Namespace, out: TextIO) -> int:
    """Hash the checkpoint, have control attest it, write what it answered."""
    directory: Path = args.checkpoint
    if not directory.is_dir():
        raise UsageError(f"--checkpoint {directory} is not a directory")
    try:
        subjects = attestation.checkpoint_subjects(directory)
    except (OSError, RewardSealError) as exc:
        raise UsageError(f"cannot hash checkpoint {directory}: {exc}") from None
    scope = AttestationScope(
        contracts=args.contract,
        first=args.first,
        last=args.last,
        checkpoint_ids=args.checkpoint_id,
        integrity_run_id=args.integrity_run,
    )
    with remote():
        answer = client.attest_checkpoint(
            scope, subjects, include_receipts=args.receipts_out is not None
        )
    document = answer.attestation_json
    if args.out is None:
        sys.stdout.flush()
        out.write(document.decode())
    else:
        _write(args.out, document)
    if args.receipts_out is not None:
        pairs = _receipt_pairs(answer.receipts)
        _write(args.receipts_out, attestation.receipts_jsonl(pairs).encode())
    if args.out is not None:
        print(
            f"attested {len(subjects)} file(s) of {directory} over {answer.receipt_count} "
            f"receipt(s), Merkle root {answer.merkle_root}: {args.out}",
            file=out,
        )
    return 0


def _receipt_pairs(envelopes: Sequence[SignedEnvelope]) -> list[tuple[str, bytes]]:
    """``(receipt id, envelope bytes as control stores them)`` per answered receipt: control
    stores the deterministic serialization, which a parse and re-serialization reproduces."""
    return [
        (
            RewardEvidenceReceipt.FromString(envelope.payload).receipt_id,
            envelope.SerializeToString(deterministic=True),
        )
        for envelope in envelopes
    ]


def _write(path: Path, data: bytes) -> None:
    try:
        path.write_bytes(data)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
