"""``rewardseal receipt dsse``: print a rewardseal signed message as its DSSE v1 JSON envelope.

    rewardseal receipt dsse [FILE | - | --base64 TEXT] [--index N]

The input is a receipt or revocation list envelope in any form ``receipt show`` reads (protobuf
bytes, their base64, JSON: grpcurl output or the envelope alone), or a certificate as proto3 JSON
(a bundle's ``certificate.json``, or grpcurl output of GetCertificate/IssueCertificate with a
``certificate`` member). The output is ``{"payloadType", "payload", "signatures": [{"keyid",
"sig"}]}``, base64 as DSSE says, verifiable by any DSSE v1 tool with the signer's Ed25519 key
(docs/spec.md R-SIG-3). Nothing is re-signed: the signature printed is the one the file holds,
and this command does not check it (``receipt verify`` does).

Exit status: 0 printed; 1 the input holds no convertible envelope or certificate; 2 a usage
error or an unreadable file.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from google.protobuf import json_format

from rewardseal.cli.receipt import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    UsageError,
    decode_envelope,
    read_input,
)
from rewardseal.core import strict_json
from rewardseal.core.dsse import certificate_to_dsse_json, to_dsse_json
from rewardseal.core.errors import RewardSealError, ValidationError
from rewardseal.v1.certificate_pb2 import RewardCertificate

__all__ = ["add_arguments", "dsse_document", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``receipt dsse``."""
    parser.add_argument("input", nargs="?", default="-", help="the file; - or nothing: stdin")
    parser.add_argument("--base64", help="an envelope's protobuf bytes as base64 text")
    parser.add_argument(
        "--index", type=int, help="which envelope of a JSON batch (ScoreEpisodes output), from 0"
    )


def _certificate_fields(document: Any) -> dict[str, Any] | None:
    """The certificate a JSON document is (or holds under ``certificate``), or None."""
    if not isinstance(document, dict):
        return None
    for candidate in (document, document.get("certificate")):
        if (
            isinstance(candidate, dict)
            and "signature" in candidate
            and ("certificate_id" in candidate or "certificateId" in candidate)
        ):
            return candidate
    return None


def dsse_document(data: bytes, *, index: int | None = None) -> dict[str, Any]:
    """The DSSE v1 JSON envelope of the certificate or envelope ``data`` holds.

    Raises:
        ValidationError: ``data`` holds neither, or one with no DSSE form.
    """
    stripped = data.strip()
    if stripped.startswith(b"{"):
        try:
            document = strict_json.loads(stripped)
        except (ValueError, RecursionError) as exc:
            raise ValidationError(f"the input is not JSON: {exc}") from None
        fields = _certificate_fields(document)
        if fields is not None:
            if index is not None:
                raise ValidationError("--index picks an envelope of a batch, not a certificate")
            certificate = RewardCertificate()
            try:
                json_format.ParseDict(fields, certificate)
            except json_format.ParseError as exc:
                raise ValidationError(f"the certificate does not parse: {exc}") from None
            return certificate_to_dsse_json(certificate)
    return to_dsse_json(decode_envelope(data, index=index))


def run(args: argparse.Namespace) -> int:
    """Run ``receipt dsse``; the exit status."""
    try:
        data = read_input(args)
    except UsageError as exc:
        print(f"rewardseal receipt dsse: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        document = dsse_document(data, index=args.index)
    except RewardSealError as exc:
        print(f"rewardseal receipt dsse: cannot convert: {exc.message}", file=sys.stderr)
        return EXIT_FAILED
    print(json.dumps(document, indent=2))
    return EXIT_OK
