"""The views operators reach for: a certificate and its state, every certificate's state, the
audit log, and key registration from whatever form of the key is at hand.

A certificate's state comes from the one rule
(:func:`rewardseal.core.certificates.certificate_state`) at a policy update: ``--at-update N``, else
the highest policy update among the contract's receipts in control's index (where training is, as
far as control knows; 0 before any), and revoked when control's signed revocation list names it.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from rewardseal.core.certificates import certificate_state
from rewardseal.core.errors import ValidationError
from rewardseal.core.public_keys import parse_public_key
from rewardseal.rpc.control_client import ControlClient
from rewardseal.v1 import control_service_pb2 as pb
from rewardseal.v1.certificate_pb2 import IssuerKey, RevocationList, RewardCertificate
from rewardseal.v1.enums_pb2 import CalibrationScope, CertificateIssuer, CertificateState
from rewardseal_control.cli.certificate_fields import certificate_fields, updates_text
from rewardseal_control.cli.commands import _print_key
from rewardseal_control.cli.common import ROLES, UsageError, remote
from rewardseal_control.cli.output import (
    enum_short,
    message_json,
    print_json,
    print_table,
    time_text,
)

STATE_WORDS: Mapping[int, str] = {
    CertificateState.CERTIFICATE_STATE_CURRENT: "current",
    CertificateState.CERTIFICATE_STATE_EXPIRED: "expired",
    CertificateState.CERTIFICATE_STATE_REVOKED: "revoked",
    CertificateState.CERTIFICATE_STATE_NOT_YET_VALID: "not yet valid",
    CertificateState.CERTIFICATE_STATE_ABSENT: "absent",
}
"""How the state column words each state."""
KEY_BANNER_FIELDS = ("public_key", "organization_public_key")
"""Where a ready file carries a key: the worker's banner, then control's."""


def state_word(certificate: RewardCertificate, at_update: int, *, revoked: bool) -> str:
    """The certificate's state at ``at_update`` in the state column's words."""
    return STATE_WORDS[certificate_state(certificate, at_update, revoked=revoked)]


def _revoked_ids(client: ControlClient) -> set[str]:
    # Shown for people, not acted on: a worker verifies the list's signature itself.
    listed = RevocationList.FromString(client.get_revocation_list().payload)
    return {entry.certificate_id for entry in listed.entries}


def _training_update(client: ControlClient, digest: str, flag: int | None) -> int:
    """``--at-update``, else the contract's highest recorded policy update, else 0."""
    if flag is not None:
        return flag
    summary = client.receipt_summary(digest)
    return summary.highest_policy_update if summary.HasField("highest_policy_update") else 0


def _check_at_update(args: argparse.Namespace) -> None:
    if args.at_update is not None and args.at_update < 0:
        raise UsageError("--at-update must not be negative")


def certificates_list(client: ControlClient, args: argparse.Namespace, out: TextIO) -> int:
    """``certificates list``: every certificate with its state."""
    _check_at_update(args)
    with remote():
        certificates = client.list_certificates(reward_contract_digest=args.contract or "")
        revoked = _revoked_ids(client)
        at: dict[str, int] = {}
        for digest in sorted({c.reward_contract_digest for c in certificates}):
            at[digest] = _training_update(client, digest, args.at_update)
    rows = [
        (
            c,
            state_word(c, at[c.reward_contract_digest], revoked=c.certificate_id in revoked),
            at[c.reward_contract_digest],
        )
        for c in certificates
    ]
    if args.json:
        # The certificates as before (each parses as a RewardCertificate), their states beside.
        print_json(
            {
                "certificates": [message_json(c) for c, _, _ in rows],
                "states": {
                    c.certificate_id: {"state": state, "at_policy_update": update}
                    for c, state, update in rows
                },
            },
            out,
        )
        return 0
    print_table(
        (
            "CERTIFICATE ID",
            "STATE",
            "AT UPDATE",
            "CONTRACT",
            "EPSILON",
            "SCOPE",
            "ISSUER",
            "UPDATES",
        ),
        [
            (
                c.certificate_id,
                state,
                update,
                c.reward_contract_digest,
                f"{c.epsilon:.6g}",
                enum_short(CalibrationScope, c.calibration_scope, "CALIBRATION_SCOPE_"),
                enum_short(CertificateIssuer, c.issuer, "CERTIFICATE_ISSUER_"),
                updates_text(c),
            )
            for c, state, update in rows
        ],
        out,
    )
    return 0


def certificates_show(client: ControlClient, args: argparse.Namespace, out: TextIO) -> int:
    """``certificates show ID``: one certificate, every field, and its state."""
    _check_at_update(args)
    with remote():
        answer = client.get_certificate(args.certificate_id)
        certificate = answer.certificate
        update = _training_update(client, certificate.reward_contract_digest, args.at_update)
    state = state_word(certificate, update, revoked=answer.revoked)
    if args.json:
        print_json(
            {
                "certificate": message_json(certificate),
                "certificate_digest": answer.certificate_digest,
                "revoked": answer.revoked,
                "state": state,
                "state_at_policy_update": update,
            },
            out,
        )
        return 0
    print_table(
        ("FIELD", "VALUE"),
        certificate_fields(
            certificate, answer.certificate_digest, state=f"{state} (at policy update {update})"
        ),
        out,
    )
    return 0


def _audit_pages(
    client: ControlClient, args: argparse.Namespace
) -> tuple[list[pb.AuditLogEntry], str]:
    """The entries asked for and the token of the page after them ("" at the end): one page
    with ``--page-size``/``--page-token``, else every page."""
    one_page = args.page_size is not None or bool(args.page_token)
    token = args.page_token or ""
    entries: list[pb.AuditLogEntry] = []
    while True:
        page = client.audit_log_page(
            action=args.audit_action or "", page_size=args.page_size or 0, page_token=token
        )
        entries.extend(page.entries)
        token = page.next_page_token
        if one_page or not token:
            return entries, token


def _details(entry: pb.AuditLogEntry) -> str:
    try:
        details = json.loads(entry.details_json or "{}")
    except ValueError:
        return entry.details_json
    if not isinstance(details, dict):
        return entry.details_json
    return " ".join(f"{key}={value}" for key, value in sorted(details.items())) or "-"


def audit(client: ControlClient, args: argparse.Namespace, out: TextIO) -> int:
    """``audit``: who did what, to what, why and when, oldest first."""
    if args.page_size is not None and not 1 <= args.page_size <= 500:
        raise UsageError("--page-size must be from 1 to 500")
    with remote():
        entries, next_token = _audit_pages(client, args)
    if args.json:
        document: dict[str, Any] = {
            "entries": [
                {**message_json(e, defaults=True), "details": json.loads(e.details_json or "{}")}
                for e in entries
            ],
            "next_page_token": next_token,
        }
        print_json(document, out)
        return 0
    print_table(
        ("ID", "AT", "ACTOR", "ACTION", "TARGET", "REASON", "DETAILS"),
        [
            (
                e.id,
                time_text(e, "at"),
                e.actor,
                e.action,
                e.target,
                e.reason or "-",
                _details(e),
            )
            for e in entries
        ],
        out,
    )
    if next_token:
        print(f"more: --page-token {next_token}", file=out)
    return 0


def keys_register(client: ControlClient, args: argparse.Namespace, out: TextIO) -> int:
    """``keys register``: the key as hex, base64 or a ready file (the worker's or control's)."""
    try:
        public_key = parse_public_key(
            args.public_key, flag="--public-key", banner_fields=KEY_BANNER_FIELDS
        )
    except ValidationError as exc:
        raise UsageError(exc.message) from None
    key = IssuerKey(
        public_key=public_key,
        role=ROLES[args.role],  # type: ignore[arg-type]
        display_name=args.name,
    )
    with remote():
        registered = client.register_issuer_key(key, reason=args.reason, contracts=args.contract)
    return _print_key(registered, args, out)


_Handler = Callable[[ControlClient, argparse.Namespace, TextIO], int]
VIEW_COMMANDS: Mapping[tuple[str, str], _Handler] = {
    ("certificates", "list"): certificates_list,
    ("certificates", "show"): certificates_show,
    ("audit", "list"): audit,
    ("keys", "register"): keys_register,
}
