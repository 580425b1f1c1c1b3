"""``rewardseal receipt show|verify``: read a receipt envelope and say what it states.

    rewardseal receipt show   [FILE | - | --base64 TEXT] [--index N] [--json]
    rewardseal receipt verify [FILE | - | --base64 TEXT] (--key KEY... | --ready-file PATH)
                              [--index N] [--json]

The envelope is read from a file, from standard input (``-`` or no argument) or from
``--base64``, in any of the forms it travels in: the protobuf bytes of a ``SignedEnvelope``, the
same bytes as base64 text, or JSON (``grpcurl`` output of ``ScoreEpisode``, ``GetReceipt`` or
``ScoreEpisodes``, or the envelope alone; bytes fields in base64, as protobuf's JSON mapping
writes them). A JSON document that holds several envelopes (a batch) needs ``--index``.

``verify`` checks the envelope with the rule every reader uses (:func:`rewardseal.core.receipts.
open_receipt`: a trusted key signed the exact payload bytes, the receipt parses strictly and
passes every validation rule, names a key that signed it, and its envelope flags agree); the key
is ``--key`` (hex or base64 text, or a file holding 32 raw bytes, hex or base64, or a worker's
ready file) or ``--ready-file``. ``show`` decodes the payload without checking the signature and
says so. Both print the receipt as JSON, then in words whether it is certified, its calibration
scope, its certificate's state and its findings, why the outcome is what it is (R-MSG-12;
``--json``: one JSON document with both).

Exit status: 0 when the envelope decoded (``show``) or verified (``verify``); 1 when it does not
decode or verify; 2 for a usage error (bad flags, an input or key that cannot be read).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from google.protobuf import json_format

from rewardseal.core.errors import RewardSealError, ValidationError
from rewardseal.core.judging.receipt_findings import FAULT_OF_CODE
from rewardseal.core.receipts import is_unscored, open_receipt, outcome_word
from rewardseal.core.signing import RECEIPT_PAYLOAD_TYPE, TrustSet
from rewardseal.core.validation import parse_strict
from rewardseal.rpc.connection import decode_public_key, read_public_key
from rewardseal.v1.enums_pb2 import CalibrationScope, CertificateState
from rewardseal.v1.receipt_pb2 import RewardEvidenceReceipt, SignedEnvelope

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "UsageError",
    "add_arguments",
    "decode_envelope",
    "describe",
    "read_input",
    "run",
]

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2

# What calibration measured (docs/spec.md §6): trials of the contract's fault families
# (R-CAL-3), written into a sandbox copy of the system of record (R-CAL-5), counted into the
# summary whose corpus digest the receipt names. PRODUCTION scope adds who signed and that the
# summary was marked held out (R-MSG-5); neither scope is a measurement on live traffic or on the
# organization's records, and the words must not say so.
_MEASURED: Final = (
    "the bound was measured on calibration trials: faults of the fault families named in the "
    "calibration summary (corpus {corpus}), written into a sandbox copy of the system of record"
)
_SCOPE_WORDS: Final = {
    CalibrationScope.CALIBRATION_SCOPE_SYNTHETIC: (
        "synthetic: " + _MEASURED + ", held out or not (the summary says); it bounds those "
        "fault families only and says nothing about live traffic"
    ),
    CalibrationScope.CALIBRATION_SCOPE_PRODUCTION: (
        "production: an organization-issued certificate; " + _MEASURED + ", held out from "
        "everything the checker was tuned on; it bounds those fault families only, not live "
        "traffic or the organization's own records"
    ),
}
_STATE_WORDS: Final = {
    CertificateState.CERTIFICATE_STATE_ABSENT: "absent: the worker had no certificate",
    CertificateState.CERTIFICATE_STATE_NOT_YET_VALID: (
        "not yet valid: the certificate's window had not begun at this policy update"
    ),
    CertificateState.CERTIFICATE_STATE_CURRENT: (
        "current: the certificate held at this policy update"
    ),
    CertificateState.CERTIFICATE_STATE_EXPIRED: (
        "expired: the policy had moved past the certificate's window"
    ),
    CertificateState.CERTIFICATE_STATE_REVOKED: "revoked: control withdrew the certificate",
}


class UsageError(Exception):
    """The command line or an input it names cannot be used (exit status 2)."""


def add_arguments(parser: argparse.ArgumentParser, *, verify: bool) -> None:
    """The options of ``receipt show`` (``verify=False``) or ``receipt verify``."""
    parser.add_argument(
        "input", nargs="?", default="-", help="the envelope's file; - or nothing: stdin"
    )
    parser.add_argument("--base64", help="the envelope's protobuf bytes as base64 text")
    parser.add_argument(
        "--index", type=int, help="which envelope of a JSON batch (ScoreEpisodes output), from 0"
    )
    parser.add_argument(
        "--json", action="store_true", help="print one JSON document (receipt and words)"
    )
    if verify:
        keys = parser.add_mutually_exclusive_group(required=True)
        keys.add_argument(
            "--key",
            action="append",
            help="a trusted worker public key: hex, base64, or a file holding it (repeatable)",
        )
        keys.add_argument("--ready-file", type=Path, help="the worker's ready file (its key)")


def read_input(args: argparse.Namespace) -> bytes:
    """The bytes the envelope is read from: ``args.base64``, else the file ``args.input``, or
    standard input for ``-``.

    Raises:
        UsageError: both are given, or the file cannot be read.
    """
    if args.base64 is not None:
        if args.input != "-":
            raise UsageError("give a file or --base64, not both")
        return str(args.base64).encode("ascii", errors="replace")
    if args.input == "-":
        data: bytes = sys.stdin.buffer.read()
        return data
    try:
        return Path(args.input).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {args.input}: {exc.strerror}") from None


def _json_envelopes(node: Any) -> Iterator[Any]:
    """Every object in a decoded JSON document that looks like a SignedEnvelope, in order."""
    if isinstance(node, dict):
        if ("payloadType" in node or "payload_type" in node) and "payload" in node:
            yield node
            return
        for value in node.values():
            yield from _json_envelopes(value)
    elif isinstance(node, list):
        for value in node:
            yield from _json_envelopes(value)


def _from_json(text: str, index: int | None) -> SignedEnvelope:
    """The envelope in a JSON document (protobuf's JSON mapping), picked by ``index``."""
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ValidationError(f"the input is not JSON: {exc}") from None
    found = list(_json_envelopes(document))
    if not found:
        raise ValidationError("the JSON holds no envelope (an object with payloadType, payload)")
    if index is None and len(found) > 1:
        raise ValidationError(f"the JSON holds {len(found)} envelopes; pick one with --index")
    chosen = index if index is not None else 0
    if not 0 <= chosen < len(found):
        raise ValidationError(f"--index {chosen} is outside 0..{len(found) - 1}")
    envelope = SignedEnvelope()
    try:
        json_format.ParseDict(found[chosen], envelope)
    except json_format.ParseError as exc:
        raise ValidationError(f"the JSON envelope does not parse: {exc}") from None
    return envelope


def _base64_bytes(data: bytes) -> bytes | None:
    """``data`` decoded as (url-safe) base64 text, or None when it is not base64 text."""
    text = b"".join(data.split())
    try:
        return base64.b64decode(text + b"=" * (-len(text) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        try:
            return base64.b64decode(text + b"=" * (-len(text) % 4), validate=True)
        except (binascii.Error, ValueError):
            return None


def decode_envelope(data: bytes, *, index: int | None = None) -> SignedEnvelope:
    """The envelope ``data`` holds: JSON, base64 text of the protobuf bytes, or those bytes.

    Raises:
        ValidationError: ``data`` is none of these, or ``index`` does not fit.
    """
    stripped = data.strip()
    if stripped.startswith(b"{"):
        return _from_json(stripped.decode("utf-8", errors="replace"), index)
    if index is not None:
        raise ValidationError("--index picks an envelope of a JSON batch; this input is not JSON")
    decoded = _base64_bytes(stripped) if stripped else None
    return parse_strict(SignedEnvelope, decoded if decoded is not None else data)


def _trust(args: argparse.Namespace) -> TrustSet:
    """The keys ``--key`` or ``--ready-file`` name."""
    try:
        if args.ready_file is not None:
            return TrustSet([read_public_key(args.ready_file)])
        keys = []
        for given in args.key:
            path = Path(given)
            keys.append(
                read_public_key(path) if path.exists() else decode_public_key(given, "--key")
            )
        return TrustSet(keys)
    except RewardSealError as exc:
        raise UsageError(exc.message) from None


def describe(receipt: RewardEvidenceReceipt) -> dict[str, str]:
    """What a receipt says, in words: outcome and reward, certified, scope and state."""
    outcome = outcome_word(receipt.reward_outcome)  # the Python view's word (OpenedReceipt)
    if is_unscored(receipt):
        reward = "unscored: no scalar; drop the sample, never pay it 0"
    else:
        reward = f"{receipt.scalar_reward:g}"
    if receipt.certified:
        certified = f"yes: backed by certificate {receipt.certificate_id}"
    else:
        why = ", ".join(receipt.certification_refusals) or "no reason given"
        certified = f"no ({why})"
        if receipt.development_only:
            certified += "; marked development only"
    scope = _SCOPE_WORDS.get(receipt.calibration_scope, "unspecified: no calibration scope").format(
        corpus=receipt.calibration_corpus_digest or "not named"
    )
    state = _STATE_WORDS.get(receipt.certificate_state, "unspecified")
    return {
        "outcome": outcome,
        "reward": reward,
        "certified": certified,
        "scope": scope,
        "certificate_state": state,
        "tier": str(receipt.oracle_tier),
        "findings": _findings_words(receipt),
    }


def _findings_words(receipt: RewardEvidenceReceipt) -> str:
    """The findings as ``effect: code (fields)``, ``; ``-separated (``none`` when there are
    none). ``show`` has not validated the receipt, so an unknown code is said, not refused."""
    words: list[str] = []
    for finding in receipt.findings:
        fault = FAULT_OF_CODE.get(finding.code)
        code = fault.value if fault is not None else f"unknown code {finding.code}"
        text = f"{finding.effect or 'the episode'}: {code}"
        if finding.fields:
            text += f" ({', '.join(finding.fields)})"
        words.append(text)
    return "; ".join(words) or "none"


def _print(receipt: RewardEvidenceReceipt, signature: str, as_json: bool) -> None:
    """The receipt as JSON, then the words (or one JSON document with both)."""
    fields = json_format.MessageToDict(receipt, preserving_proto_field_name=True)
    words = {"signature": signature, **describe(receipt)}
    if as_json:
        print(json.dumps({"receipt": fields, "summary": words}, indent=2, sort_keys=True))
        return
    print(json.dumps(fields, indent=2, sort_keys=True))
    print()
    for key, text in words.items():
        print(f"{key.replace('_', ' ')}: {text}")


def run(args: argparse.Namespace, *, verify: bool) -> int:
    """Run ``receipt show`` or ``receipt verify``; the exit status."""
    try:
        trust = _trust(args) if verify else None
        data = read_input(args)
    except UsageError as exc:
        print(f"rewardseal receipt: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        envelope = decode_envelope(data, index=args.index)
        if trust is not None:
            receipt = open_receipt(envelope, trust).receipt
            signature = f"verified: signed by {receipt.issuer_key_id}"
        else:
            if envelope.payload_type != RECEIPT_PAYLOAD_TYPE:
                raise ValidationError(f"payload type {envelope.payload_type!r} is not a receipt")
            receipt = parse_strict(RewardEvidenceReceipt, envelope.payload)
            signature = "NOT CHECKED (show decodes only; run receipt verify with the worker's key)"
    except RewardSealError as exc:
        what = "verification failed" if verify else "cannot decode the envelope"
        print(f"rewardseal receipt: {what}: {exc.message}", file=sys.stderr)
        return EXIT_FAILED
    _print(receipt, signature, args.json)
    return EXIT_OK
