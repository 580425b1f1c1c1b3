"""The admin commands, one handler each: ask the control plane, print the answer."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

from google.protobuf import json_format

from rewardseal.core.bundle_files import read_sealed_contract
from rewardseal.core.calibration import read_calibration
from rewardseal.core.errors import ValidationError
from rewardseal.rpc.control_client import ControlClient
from rewardseal.v1 import control_service_pb2 as pb
from rewardseal.v1.certificate_pb2 import IssuerKey, RevocationEntry, RevocationList
from rewardseal.v1.enums_pb2 import (
    IssuerKeyRole,
    RewardOutcome,
)
from rewardseal_control.cli.attest import attest_checkpoint
from rewardseal_control.cli.certificate_fields import certificate_fields
from rewardseal_control.cli.common import ISSUERS, ROLES, SCOPES, UsageError, remote
from rewardseal_control.cli.output import (
    enum_short,
    message_json,
    print_json,
    print_table,
    time_text,
)
from rewardseal_control.settings import parse_duration


def _contracts_list(client: ControlClient, args: argparse.Namespace, out: TextIO) -> int:
    with remote():
        contracts = client.list_contracts()
    if args.json:
        print_json({"contracts": [message_json(c) for c in contracts]}, out)
        return 0
    print_table(
        ("DIGEST", "CONTRACT ID", "VERSION", "REGISTERED AT"),
        [
            (
                c.reward_contract_digest,
                c.contract.contract_id,
                c.contract.contract_version,
                time_text(c, "registered_at"),
            )
            for c in contracts
        ],
        out,
    )
    return 0


def _contracts_register(client: ControlClient, args: argparse.Namespace, out: TextIO) -> int:
    # The bundle is read as the worker reads it (rewardseal.core.bundle_files): a contract whose
    # documents do not match its digests is a local error (exit 2), never sent.
    sealed = read_sealed_contract(args.bundle)
    with remote():
        answer = client.register_contract(sealed.contract, sealed.digest)
    contract = sealed.contract
    if args.json:
        print_json(
            {
                "reward_contract_digest": answer.reward_contract_digest,
                "created": answer.created,
                "contract_id": contract.contract_id,
                "contract_version": contract.contract_version,
            },
            out,
        )
        return 0
    what = "registered" if answer.created else "already registered"
    print(
        f"{what}: contract {contract.contract_id} {contract.contract_version} "
        f"{answer.reward_contract_digest}; issue its certificate with `certificates issue "
        f"--contract {answer.reward_contract_digest} --calibration CALIBRATION.json`",
        file=out,
    )
    return 0


def _key_rows(keys: Sequence[IssuerKey]) -> list[tuple[str, ...]]:
    return [
        (
            k.key_id,
            enum_short(IssuerKeyRole, k.role, "ISSUER_KEY_ROLE_"),
            "retired" if k.retired else "active",
            time_text(k, "not_before"),
            time_text(k, "not_after"),
            k.display_name or "-",
        )
        for k in keys
    ]


_KEY_HEADERS = ("KEY ID", "ROLE", "STATE", "NOT BEFORE", "NOT AFTER", "NAME")


def _keys_list(client: ControlClient, args: argparse.Namespace, out: TextIO) -> int:
    role = ROLES[args.role] if args.role else 0
    with remote():
        keys = client.list_issuer_keys(role=role)  # type: ignore[arg-type]
    if args.json:
        print_json({"keys": [message_json(k) for k in keys]}, out)
        return 0
    print_table(_KEY_HEADERS, _key_rows(keys), out)
    return 0


def _keys_retire(client: ControlClient, args: argparse.Namespace, out: TextIO) -> int:
    with remote():
        retired = client.retire_issuer_key(args.key_id, reason=args.reason)
    return _print_key(retired, args, out)


def _keys_approve(client: ControlClient, args: argparse.Namespace, out: TextIO) -> int:
    with remote():
        answer = client.approve_issuer_key(
            args.key_id,
            args.contract,
            reason=args.reason,
            accept_bundle_certificate=args.accept_bundle_certificate,
        )
    return _print_admission(
        answer.key, answer.admission, args, out, accepted=answer.accepted_certificate_ids
    )


def _keys_unbind(client: ControlClient, args: argparse.Namespace, out: TextIO) -> int:
    with remote():
        answer = client.unbind_issuer_key(args.key_id, args.contract, reason=args.reason)
    return _print_admission(answer.key, answer.admission, args, out)


def _print_admission(
    key: IssuerKey,
    admission: pb.KeyAdmission,
    args: argparse.Namespace,
    out: TextIO,
    *,
    accepted: Sequence[str] = (),
) -> int:
    if args.json:
        answer: dict[str, object] = {"key": message_json(key), "admission": message_json(admission)}
        if accepted:
            answer["accepted_certificate_ids"] = list(accepted)
        print_json(answer, out)
        return 0
    bound = ", ".join(admission.reward_contract_digests) or "no contract"
    state = "admitted" if admission.admitted else "not admitted"
    print(f"{key.key_id}: {state}; signs receipts for {bound}", file=out)
    for certificate_id in accepted:
        print(
            f"accepted bundle certificate {certificate_id}: listed by control; revoke it like "
            f"any certificate (certificates revoke {certificate_id} --reason ...)",
            file=out,
        )
    return 0


def _keys_enroll(client: ControlClient, args: argparse.Namespace, out: TextIO) -> int:
    try:
        ttl = parse_duration(args.ttl)
    except ValidationError as exc:
        raise UsageError(f"--ttl: {exc.message}") from None
    with remote():
        answer = client.create_enrollment(
            args.contract or (),
            ttl_seconds=int(ttl.total_seconds()),
            reason=args.reason,
            any_contract=args.any_contract,
            accept_bundle_certificate=args.accept_bundle_certificate,
        )
    if args.json:
        print_json(message_json(answer), out)
        return 0
    # The one time the credential is shown: control keeps only its hash.
    print(answer.enrollment_credential, file=out)
    print(
        f"enrollment {answer.enrollment_id}, single use, expires "
        f"{time_text(answer, 'expires_at')}: give it to one worker as "
        "REWARDSEAL_WORKER_CONTROL_ENROLLMENT_TOKEN; it is not shown again"
        + (
            "; the bundle certificate the key registers with is accepted (listed by control)"
            if args.accept_bundle_certificate
            else ""
        ),
        file=out,
    )
    return 0


def _print_key(key: IssuerKey, args: argparse.Namespace, out: TextIO) -> int:
    if args.json:
        print_json({"key": message_json(key)}, out)
    else:
        print_table(_KEY_HEADERS, _key_rows([key]), out)
    return 0


def _certificates_issue(client: ControlClient, args: argparse.Namespace, out: TextIO) -> int:
    if args.issued_at_update < 0 or args.expiry < 0:
        raise UsageError("--issued-at-update and --expiry must not be negative")
    request = pb.IssueCertificateRequest(
        reward_contract_digest=args.contract,
        calibration=read_calibration(args.calibration),
        calibration_scope=SCOPES[args.scope],  # type: ignore[arg-type]
        issuer=ISSUERS[args.issuer],  # type: ignore[arg-type]
        issuer_key_id=args.key_id,
        issued_at_policy_update=args.issued_at_update,
        expiry_policy_updates=args.expiry,
        certificate_id=args.certificate_id,
        reason=args.reason,
    )
    with remote():
        response = client.issue_certificate(request)
    certificate = response.certificate
    if args.out:
        text = json_format.MessageToJson(certificate, preserving_proto_field_name=True)
        args.out.write_text(text + "\n")
    if args.json:
        print_json(
            {
                "certificate": message_json(certificate),
                "certificate_digest": response.certificate_digest,
            },
            out,
        )
        return 0
    print_table(
        ("FIELD", "VALUE"),
        certificate_fields(
            certificate, response.certificate_digest, epsilon_note=" (recomputed from the counts)"
        ),
        out,
    )
    return 0


def _certificates_revoke(client: ControlClient, args: argparse.Namespace, out: TextIO) -> int:
    named = [v for v in (args.certificate_id, args.contract, args.checker) if v]
    if len(named) != 1:
        raise UsageError("give exactly one of ID, --contract DIGEST and --checker DIGEST")
    with remote():
        if args.certificate_id:
            response = client.revoke_certificate(args.certificate_id, reason=args.reason)
        else:
            response = client.revoke_every_certificate(
                reason=args.reason, contract=args.contract or "", checker=args.checker or ""
            )
    if args.certificate_id:
        target = {"certificate_id": args.certificate_id}
        what = args.certificate_id
    elif args.contract:
        target = {"reward_contract_digest": args.contract}
        what = f"every certificate of contract {args.contract}"
    else:
        target = {"checker_configuration_digest": args.checker}
        what = f"every certificate of checker configuration {args.checker}"
    if args.json:
        print_json(
            {
                **target,
                "revocation_list_version": response.version,
                "revocation_list": message_json(response.revocation_list),
            },
            out,
        )
        return 0
    print(f"revoked {what}; revocation list version {response.version}", file=out)
    return 0


def _summary_document(summary: pb.GetReceiptSummaryResponse) -> dict[str, Any]:
    return {
        "reward_contract_digest": summary.reward_contract_digest,
        "total": summary.total,
        "counts": {
            enum_short(RewardOutcome, c.reward_outcome, "REWARD_OUTCOME_"): c.count
            for c in summary.counts
        },
        "certified_share": summary.certified_share,
        "unscored_share": summary.unscored_share,
    }


def _receipts_summary(client: ControlClient, args: argparse.Namespace, out: TextIO) -> int:
    with remote():
        if args.contract:
            digests = [args.contract]
        else:
            digests = [c.reward_contract_digest for c in client.contracts()]
        summaries = [_summary_document(client.receipt_summary(d)) for d in digests]
    if args.json:
        print_json({"summaries": summaries}, out)
        return 0
    print_table(
        ("CONTRACT", "TOTAL", "CERTIFIED", "UNSCORED", "OUTCOMES"),
        [
            (
                s["reward_contract_digest"],
                s["total"],
                f"{s['certified_share']:.1%}",
                f"{s['unscored_share']:.1%}",
                " ".join(f"{name}={count}" for name, count in s["counts"].items()) or "-",
            )
            for s in summaries
        ],
        out,
    )
    return 0


def _revocations_show(client: ControlClient, args: argparse.Namespace, out: TextIO) -> int:
    with remote():
        envelope = client.get_revocation_list()
    # Shown for people, not acted on: a follower verifies the signature (RevocationFollower).
    revocation_list = RevocationList.FromString(envelope.payload)
    if args.json:
        print_json(
            {
                "revocation_list": message_json(revocation_list),
                "envelope": message_json(envelope),
            },
            out,
        )
        return 0
    issued, expires = (
        time_text(revocation_list, "issued_at"),
        time_text(revocation_list, "expires_at"),
    )
    print(
        f"revocation list version {revocation_list.version}, issued {issued}, expires {expires}, "
        f"signed by {revocation_list.issuer_key_id}",
        file=out,
    )
    print_table(
        ("REVOKES", "REVOKED AT", "REASON"),
        [(_revokes(e), time_text(e, "revoked_at"), e.reason) for e in revocation_list.entries],
        out,
    )
    return 0


def _revokes(entry: RevocationEntry) -> str:
    """What one entry revokes, for people: a certificate id, or a whole contract or checker."""
    if entry.reward_contract_digest:
        return f"contract {entry.reward_contract_digest}"
    if entry.checker_configuration_digest:
        return f"checker {entry.checker_configuration_digest}"
    return entry.certificate_id


_Handler = Callable[[ControlClient, argparse.Namespace, TextIO], int]
ADMIN_COMMANDS: Mapping[tuple[str, str], _Handler] = {
    ("contracts", "list"): _contracts_list,
    ("contracts", "register"): _contracts_register,
    ("keys", "list"): _keys_list,
    ("keys", "retire"): _keys_retire,
    ("keys", "approve"): _keys_approve,
    ("keys", "unbind"): _keys_unbind,
    ("keys", "enroll"): _keys_enroll,
    ("certificates", "issue"): _certificates_issue,
    ("certificates", "revoke"): _certificates_revoke,
    ("receipts", "summary"): _receipts_summary,
    ("revocations", "show"): _revocations_show,
    ("attest", "checkpoint"): attest_checkpoint,
}
