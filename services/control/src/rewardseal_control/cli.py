"""``rewardseal-control``: run the control plane (``serve``, ``migrate``) and administer it.

Admin commands talk to a running control plane over gRPC (``--target host:port``). They print
tables for people and, with ``--json``, one JSON document for scripts. The bearer token comes
from ``--token``, else ``$REWARDSEAL_CONTROL_ADMIN_TOKEN``, else ``$REWARDSEAL_CONTROL_TOKEN``,
else the token files in ``--data-dir`` (admin first); it is never printed. Over TLS they pin the
control plane's CA with ``--tls-ca`` (and ``--tls-server-name`` when its certificate names
another host than ``--target``), and for mutual TLS present ``--tls-cert`` and ``--tls-key``;
each flag else ``$REWARDSEAL_CONTROL_CLIENT_TLS_CA``, ``_CERT``, ``_KEY``, ``_SERVER_NAME``.
With none of them the channel is plaintext. ``serve --tls-cert --tls-key [--tls-client-ca]``
serves TLS (mutual TLS with a client CA).

Exit status: 0 on success, 1 when the control plane refused the request (or could not be
reached), 2 on a usage or local error (a missing or malformed file, no token, bad settings).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from google.protobuf import json_format
from google.protobuf.message import Message

from rewardseal.control_client import ControlClient
from rewardseal.errors import RewardSealError, ValidationError
from rewardseal.service_settings import make_private_dir, read_token_file
from rewardseal.sqlstore import sqlite_url
from rewardseal.tls import ClientTls
from rewardseal.v1 import control_service_pb2 as pb
from rewardseal.v1.certificate_pb2 import CalibrationSummary, IssuerKey
from rewardseal.v1.enums_pb2 import (
    CalibrationScope,
    CertificateIssuer,
    IssuerKeyRole,
    RewardOutcome,
)
from rewardseal.validation import validate_calibration_summary
from rewardseal_control import db
from rewardseal_control.settings import (
    ADMIN_TOKEN_ENV,
    ADMIN_TOKEN_FILE,
    DB_FILE,
    DEFAULT_HOST,
    DEFAULT_PORT,
    ENV_PREFIX,
    TOKEN_ENV,
    TOKEN_FILE,
    default_data_dir,
    parse_duration,
    resolve_settings,
)

PROG = "rewardseal-control"
TARGET_ENV = f"{ENV_PREFIX}TARGET"
CLIENT_TLS_ENV = f"{ENV_PREFIX}CLIENT_TLS_"
"""Prefix of the admin commands' TLS variables (``CA``, ``CERT``, ``KEY``, ``SERVER_NAME``):
not ``TLS_CERT``, which is the server's own certificate when ``serve`` runs in the same shell."""
EPSILON_KEY = "epsilon"
"""The convenience field of ``calibration.json`` that readers drop unread (R-CAL-4)."""
PAGE_SIZE = 500
"""Items asked for per listing page (control's most)."""
EXIT_REFUSED = 1
EXIT_USAGE = 2

SCOPES: Mapping[str, int] = {
    "synthetic": CalibrationScope.CALIBRATION_SCOPE_SYNTHETIC,
    "production": CalibrationScope.CALIBRATION_SCOPE_PRODUCTION,
}
ISSUERS: Mapping[str, int] = {
    "organization": CertificateIssuer.CERTIFICATE_ISSUER_ORGANIZATION,
    "self_signed": CertificateIssuer.CERTIFICATE_ISSUER_SELF_SIGNED,
}
ROLES: Mapping[str, int] = {
    "worker": IssuerKeyRole.ISSUER_KEY_ROLE_WORKER,
    "organization": IssuerKeyRole.ISSUER_KEY_ROLE_ORGANIZATION,
}


class UsageError(Exception):
    """A local problem with the command line or its files (exit status 2)."""


class Refused(Exception):
    """The control plane answered with an error (exit status 1)."""

    def __init__(self, error: RewardSealError) -> None:
        super().__init__(error.message)
        self.error = error


# ---------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = argparse.ArgumentParser(
        prog=PROG, description="rewardseal control plane: serve it, migrate it, administer it."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="serve ControlPlaneService over gRPC")
    _store_options(serve)
    serve.add_argument("--host", help=f"listen address (default {DEFAULT_HOST})")
    serve.add_argument("--port", type=int, help=f"listen port (default {DEFAULT_PORT}; 0: free)")
    serve.add_argument(
        "--revocation-ttl", help="lifetime of each signed revocation list (e.g. 24h, 30m)"
    )
    serve.add_argument("--reflection", action="store_true", help="enable gRPC reflection")
    serve.add_argument(
        "--tls-cert",
        type=Path,
        help=f"serve TLS with this PEM certificate chain (or ${ENV_PREFIX}TLS_CERT)",
    )
    serve.add_argument(
        "--tls-key", type=Path, help=f"its PEM private key (or ${ENV_PREFIX}TLS_KEY)"
    )
    serve.add_argument(
        "--tls-client-ca",
        type=Path,
        help=f"require client certificates issued by this PEM CA: mutual TLS "
        f"(or ${ENV_PREFIX}TLS_CLIENT_CA)",
    )
    serve.add_argument(
        "--ready-file", type=Path, help="write the banner as JSON here once serving (for scripts)"
    )

    migrate = commands.add_parser("migrate", help="apply the database migrations and exit")
    _store_options(migrate)
    migrate.add_argument("--revision", default="head", help="target revision (default head)")

    client = argparse.ArgumentParser(add_help=False)
    client.add_argument(
        "--target", help=f"control plane host:port (default ${TARGET_ENV} or 127.0.0.1:8791)"
    )
    client.add_argument("--token", help="bearer token (default: environment or --data-dir)")
    client.add_argument("--data-dir", type=Path, help="read the token files from here")
    client.add_argument("--json", action="store_true", help="print JSON instead of a table")
    client.add_argument("--timeout", type=float, default=30.0, help="seconds per call")
    client.add_argument(
        "--tls-ca",
        type=Path,
        help=f"dial TLS, trusting this PEM CA for the server (or ${CLIENT_TLS_ENV}CA)",
    )
    client.add_argument(
        "--tls-cert",
        type=Path,
        help=f"client certificate for mutual TLS, PEM (or ${CLIENT_TLS_ENV}CERT)",
    )
    client.add_argument(
        "--tls-key", type=Path, help=f"its PEM private key (or ${CLIENT_TLS_ENV}KEY)"
    )
    client.add_argument(
        "--tls-server-name",
        help=f"the name the server's certificate must carry when it is not the --target host "
        f"(or ${CLIENT_TLS_ENV}SERVER_NAME)",
    )

    contracts = _group(commands, "contracts", "the contract registry")
    contracts.add_parser("list", parents=[client], help="list registered contracts")

    keys = _group(commands, "keys", "the issuer key registry")
    keys_list = keys.add_parser("list", parents=[client], help="list issuer keys")
    keys_list.add_argument("--role", choices=sorted(ROLES), help="only keys of this role")
    keys_register = keys.add_parser("register", parents=[client], help="register a public key")
    keys_register.add_argument("--public-key", required=True, help="raw Ed25519 key, 64 hex")
    keys_register.add_argument("--role", choices=sorted(ROLES), required=True)
    keys_register.add_argument("--name", default="", help="display name")
    keys_register.add_argument("--reason", default="", help="why (audit log)")
    keys_retire = keys.add_parser("retire", parents=[client], help="retire a key")
    keys_retire.add_argument("key_id", metavar="KEY_ID")
    keys_retire.add_argument("--reason", required=True, help="why (audit log)")

    certificates = _group(commands, "certificates", "certificates and revocation")
    issue = certificates.add_parser(
        "issue", parents=[client], help="issue a certificate from a calibration summary"
    )
    issue.add_argument("--contract", required=True, metavar="DIGEST", help="contract digest")
    issue.add_argument("--calibration", required=True, type=Path, help="calibration.json")
    issue.add_argument("--scope", choices=sorted(SCOPES), default="synthetic")
    issue.add_argument("--issuer", choices=sorted(ISSUERS), default="organization")
    issue.add_argument("--key-id", default="", help="issuer key id (default: the service's key)")
    issue.add_argument("--issued-at-update", type=int, default=0, metavar="N")
    issue.add_argument(
        "--expiry", type=int, default=0, metavar="N", help="policy updates (default: max allowed)"
    )
    issue.add_argument("--certificate-id", default="", help="default: minted by the server")
    issue.add_argument("--reason", default="", help="why (audit log)")
    issue.add_argument("--out", type=Path, help="also write the certificate JSON here")
    certificates_list = certificates.add_parser("list", parents=[client], help="list")
    certificates_list.add_argument("--contract", metavar="DIGEST", help="only this contract")
    revoke = certificates.add_parser("revoke", parents=[client], help="revoke a certificate")
    revoke.add_argument("certificate_id", metavar="ID")
    revoke.add_argument("--reason", required=True, help="why (audit log and revocation list)")

    receipts = _group(commands, "receipts", "the privacy-safe receipt index")
    summary = receipts.add_parser("summary", parents=[client], help="per-contract counts")
    summary.add_argument("--contract", metavar="DIGEST", help="one contract (default: all)")

    revocations = _group(commands, "revocations", "the signed revocation list")
    revocations.add_parser("show", parents=[client], help="print the current list")
    return parser


def _group(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], name: str, what: str
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    group = commands.add_parser(name, help=what)
    return group.add_subparsers(dest="action", required=True, metavar="ACTION")


def _store_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, help="keys, tokens and the default database")
    parser.add_argument("--db-url", help="database URL (default SQLite in the data dir)")


# ---------------------------------------------------------------------- serve / migrate


async def _serve(args: argparse.Namespace, out: TextIO) -> int:
    from rewardseal.serving import serve_until_signalled, write_ready_file
    from rewardseal_control.app import start_control

    settings = resolve_settings(
        data_dir=args.data_dir,
        db_url=args.db_url,
        host=args.host,
        port=args.port,
        revocation_ttl=parse_duration(args.revocation_ttl) if args.revocation_ttl else None,
        reflection=args.reflection,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
    )
    app = await start_control(settings)
    banner = app.banner()
    print(_banner_text(banner), file=out, flush=True)
    if args.ready_file:
        write_ready_file(args.ready_file, banner)
    await serve_until_signalled(app.stop)
    return 0


def _banner_text(banner: Mapping[str, Any]) -> str:
    from rewardseal.serving import TRANSPORT_TEXT

    return "\n".join(
        [
            f"{PROG} serving on {banner['target']}",
            f"  transport         {TRANSPORT_TEXT[banner['transport']]}",
            f"  organization key  {banner['organization_key_id']}",
            # What a worker pins (rewardseal-worker serve --trust-org-key); public, not secret.
            f"  organization pub  {banner['organization_public_key']}",
            f"  database          {banner['db_url']}",
            f"  admin token       {banner['admin_token_source']}",
            f"  client token      {banner['token_source']}",
            f"  worker token      {banner['worker_token_source']}",
            f"  data dir          {banner['data_dir']}",
        ]
    )


def _migrate(args: argparse.Namespace, out: TextIO) -> int:
    data_dir = (args.data_dir or default_data_dir(os.environ)).expanduser().resolve()
    url = args.db_url or os.environ.get(f"{ENV_PREFIX}DB_URL")
    if not url:
        make_private_dir(data_dir)
        url = sqlite_url(data_dir / DB_FILE)
    db.upgrade(url, args.revision)
    print(f"control store at revision {db.current_revision(url)}", file=out)
    return 0


# ---------------------------------------------------------------------- admin client


@contextlib.contextmanager
def _remote() -> Iterator[None]:
    """Calls to the control plane: its refusal (or absence) is exit status 1, not a local
    error (exit status 2) such as a file that is not a calibration summary."""
    try:
        yield
    except RewardSealError as error:
        raise Refused(error) from None


def _token(args: argparse.Namespace) -> str:
    if args.token:
        return str(args.token)
    for name in (ADMIN_TOKEN_ENV, TOKEN_ENV):
        if os.environ.get(name):
            return os.environ[name]
    data_dir = (args.data_dir or default_data_dir(os.environ)).expanduser()
    for file_name in (ADMIN_TOKEN_FILE, TOKEN_FILE):
        try:
            return read_token_file(data_dir / file_name)
        except FileNotFoundError:
            continue
    raise UsageError(
        f"no token: pass --token, set {ADMIN_TOKEN_ENV} or {TOKEN_ENV}, or point --data-dir "
        "at the control plane's data directory"
    )


def client_tls(args: argparse.Namespace) -> ClientTls | None:
    """The admin commands' TLS from ``--tls-*``, else ``$REWARDSEAL_CONTROL_CLIENT_TLS_*``;
    None (plaintext) when none is set.

    Raises:
        UsageError: a client certificate without its key, or the reverse.
        ValidationError: a file that cannot be read or is not PEM.
    """

    def pick(flag: object, name: str) -> str | None:
        if flag is not None:
            return str(flag)
        return os.environ.get(f"{CLIENT_TLS_ENV}{name}") or None

    ca, cert, key = pick(args.tls_ca, "CA"), pick(args.tls_cert, "CERT"), pick(args.tls_key, "KEY")
    server_name = pick(args.tls_server_name, "SERVER_NAME")
    if (cert is None) != (key is None):
        given, missing = ("--tls-cert", "KEY") if key is None else ("--tls-key", "CERT")
        raise UsageError(
            f"{given} needs --tls-{missing.lower()} (or ${CLIENT_TLS_ENV}{missing}) as well"
        )
    if ca is None and cert is None and server_name is None:
        return None
    return ClientTls.from_files(ca=ca, cert=cert, key=key, server_name=server_name)


def _target(args: argparse.Namespace) -> str:
    return str(args.target or os.environ.get(TARGET_ENV) or f"{DEFAULT_HOST}:{DEFAULT_PORT}")


def _message_json(message: Message) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def _print_json(document: Any, out: TextIO) -> None:
    print(json.dumps(document, indent=2, sort_keys=True), file=out)


def _print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], out: TextIO) -> None:
    cells = [[str(cell) for cell in row] for row in rows]
    widths = [max([len(h), *(len(row[i]) for row in cells)]) for i, h in enumerate(headers)]
    for row in [list(headers), *cells]:
        print(
            "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip(), file=out
        )
    if not rows:
        print("(none)", file=out)


def _time(message: Message, field: str) -> str:
    if not message.HasField(field):
        return "-"
    stamp = getattr(message, field)
    return str(stamp.ToJsonString())


def _enum_short(enum: Any, value: int, prefix: str) -> str:
    try:
        return str(enum.Name(value)).removeprefix(prefix)
    except ValueError:
        return str(value)


def _contracts_list(client: ControlClient, args: argparse.Namespace, out: TextIO) -> int:
    with _remote():
        contracts = client.list_contracts()
    if args.json:
        _print_json({"contracts": [_message_json(c) for c in contracts]}, out)
        return 0
    _print_table(
        ("DIGEST", "CONTRACT ID", "VERSION", "REGISTERED AT"),
        [
            (
                c.reward_contract_digest,
                c.contract.contract_id,
                c.contract.contract_version,
                _time(c, "registered_at"),
            )
            for c in contracts
        ],
        out,
    )
    return 0


def _key_rows(keys: Sequence[IssuerKey]) -> list[tuple[str, ...]]:
    return [
        (
            k.key_id,
            _enum_short(IssuerKeyRole, k.role, "ISSUER_KEY_ROLE_"),
            "retired" if k.retired else "active",
            _time(k, "not_before"),
            _time(k, "not_after"),
            k.display_name or "-",
        )
        for k in keys
    ]


_KEY_HEADERS = ("KEY ID", "ROLE", "STATE", "NOT BEFORE", "NOT AFTER", "NAME")


def _keys_list(client: ControlClient, args: argparse.Namespace, out: TextIO) -> int:
    role = ROLES[args.role] if args.role else 0
    with _remote():
        keys = client.list_issuer_keys(role=role)  # type: ignore[arg-type]
    if args.json:
        _print_json({"keys": [_message_json(k) for k in keys]}, out)
        return 0
    _print_table(_KEY_HEADERS, _key_rows(keys), out)
    return 0


def _keys_register(client: ControlClient, args: argparse.Namespace, out: TextIO) -> int:
    try:
        public_key = bytes.fromhex(args.public_key)
    except ValueError:
        raise UsageError("--public-key must be hex") from None
    key = IssuerKey(
        public_key=public_key,
        role=ROLES[args.role],  # type: ignore[arg-type]
        display_name=args.name,
    )
    with _remote():
        registered = client.register_issuer_key(key, reason=args.reason)
    return _print_key(registered, args, out)


def _keys_retire(client: ControlClient, args: argparse.Namespace, out: TextIO) -> int:
    with _remote():
        retired = client.retire_issuer_key(args.key_id, reason=args.reason)
    return _print_key(retired, args, out)


def _print_key(key: IssuerKey, args: argparse.Namespace, out: TextIO) -> int:
    if args.json:
        _print_json({"key": _message_json(key)}, out)
    else:
        _print_table(_KEY_HEADERS, _key_rows([key]), out)
    return 0


def read_calibration(path: Path) -> CalibrationSummary:
    """Parse ``calibration.json`` (the worker writes it); its ``epsilon`` is dropped unread.

    Raises:
        UsageError: the file is missing or not JSON.
        ValidationError: it is not a valid calibration summary.
    """
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(document, dict):
        raise ValidationError(f"{path}: a calibration summary is a JSON object")
    # R-CAL-4: the control plane recomputes epsilon; sending the file's value would only
    # suggest it mattered.
    body = {name: value for name, value in document.items() if name != EPSILON_KEY}
    summary = CalibrationSummary()
    try:
        json_format.ParseDict(body, summary)
    except json_format.ParseError as exc:
        raise ValidationError(f"{path}: not a calibration summary ({exc})") from None
    validate_calibration_summary(summary)
    return summary


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
    with _remote():
        response = client.issue_certificate(request)
    certificate = response.certificate
    if args.out:
        text = json_format.MessageToJson(certificate, preserving_proto_field_name=True)
        args.out.write_text(text + "\n")
    if args.json:
        _print_json(
            {
                "certificate": _message_json(certificate),
                "certificate_digest": response.certificate_digest,
            },
            out,
        )
        return 0
    last = certificate.issued_at_policy_update + certificate.expiry_policy_updates - 1
    _print_table(
        ("FIELD", "VALUE"),
        [
            ("certificate_id", certificate.certificate_id),
            ("certificate_digest", response.certificate_digest),
            ("reward_contract_digest", certificate.reward_contract_digest),
            ("epsilon", f"{certificate.epsilon:.6g} (recomputed from the counts)"),
            ("delta", f"{certificate.delta:g}"),
            ("threshold", f"{certificate.threshold:g}"),
            (
                "scope",
                _enum_short(CalibrationScope, certificate.calibration_scope, "CALIBRATION_SCOPE_"),
            ),
            ("issuer", _enum_short(CertificateIssuer, certificate.issuer, "CERTIFICATE_ISSUER_")),
            ("issuer_key_id", certificate.issuer_key_id),
            ("current for updates", f"{certificate.issued_at_policy_update} .. {last}"),
            ("issued_at", _time(certificate, "issued_at")),
        ],
        out,
    )
    return 0


def _certificates_list(client: ControlClient, args: argparse.Namespace, out: TextIO) -> int:
    with _remote():
        certificates = client.list_certificates(reward_contract_digest=args.contract or "")
    if args.json:
        _print_json({"certificates": [_message_json(c) for c in certificates]}, out)
        return 0
    _print_table(
        ("CERTIFICATE ID", "CONTRACT", "EPSILON", "SCOPE", "ISSUER", "UPDATES"),
        [
            (
                c.certificate_id,
                c.reward_contract_digest,
                f"{c.epsilon:.6g}",
                _enum_short(CalibrationScope, c.calibration_scope, "CALIBRATION_SCOPE_"),
                _enum_short(CertificateIssuer, c.issuer, "CERTIFICATE_ISSUER_"),
                f"{c.issued_at_policy_update}+{c.expiry_policy_updates}",
            )
            for c in certificates
        ],
        out,
    )
    return 0


def _certificates_revoke(client: ControlClient, args: argparse.Namespace, out: TextIO) -> int:
    with _remote():
        response = client.revoke_certificate(args.certificate_id, reason=args.reason)
    if args.json:
        _print_json(
            {
                "certificate_id": args.certificate_id,
                "revocation_list_version": response.version,
                "revocation_list": _message_json(response.revocation_list),
            },
            out,
        )
        return 0
    print(f"revoked {args.certificate_id}; revocation list version {response.version}", file=out)
    return 0


def _summary_document(summary: pb.GetReceiptSummaryResponse) -> dict[str, Any]:
    return {
        "reward_contract_digest": summary.reward_contract_digest,
        "total": summary.total,
        "counts": {
            _enum_short(RewardOutcome, c.reward_outcome, "REWARD_OUTCOME_"): c.count
            for c in summary.counts
        },
        "certified_share": summary.certified_share,
        "unscored_share": summary.unscored_share,
    }


def _receipts_summary(client: ControlClient, args: argparse.Namespace, out: TextIO) -> int:
    with _remote():
        if args.contract:
            digests = [args.contract]
        else:
            digests = [c.reward_contract_digest for c in client.contracts()]
        summaries = [_summary_document(client.receipt_summary(d)) for d in digests]
    if args.json:
        _print_json({"summaries": summaries}, out)
        return 0
    _print_table(
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
    from rewardseal.v1.certificate_pb2 import RevocationList

    with _remote():
        envelope = client.get_revocation_list()
    # Shown for people, not acted on: a follower verifies the signature (RevocationFollower).
    revocation_list = RevocationList.FromString(envelope.payload)
    if args.json:
        _print_json(
            {
                "revocation_list": _message_json(revocation_list),
                "envelope": _message_json(envelope),
            },
            out,
        )
        return 0
    print(
        f"revocation list version {revocation_list.version}, issued "
        f"{_time(revocation_list, 'issued_at')}, expires {_time(revocation_list, 'expires_at')}, "
        f"signed by {revocation_list.issuer_key_id}",
        file=out,
    )
    _print_table(
        ("CERTIFICATE ID", "REVOKED AT", "REASON"),
        [(e.certificate_id, _time(e, "revoked_at"), e.reason) for e in revocation_list.entries],
        out,
    )
    return 0


_Handler = Callable[[ControlClient, argparse.Namespace, TextIO], int]
_ADMIN_COMMANDS: Mapping[tuple[str, str], _Handler] = {
    ("contracts", "list"): _contracts_list,
    ("keys", "list"): _keys_list,
    ("keys", "register"): _keys_register,
    ("keys", "retire"): _keys_retire,
    ("certificates", "issue"): _certificates_issue,
    ("certificates", "list"): _certificates_list,
    ("certificates", "revoke"): _certificates_revoke,
    ("receipts", "summary"): _receipts_summary,
    ("revocations", "show"): _revocations_show,
}


def _run_admin(args: argparse.Namespace, out: TextIO) -> int:
    handler = _ADMIN_COMMANDS[(args.command, args.action)]
    token = _token(args)
    tls = client_tls(args)
    # No retries: a person sees the refusal at once and decides.
    with ControlClient(
        _target(args), token=token, timeout=args.timeout, retries=0, page_size=PAGE_SIZE, tls=tls
    ) as client:
        return handler(client, args, out)


# ---------------------------------------------------------------------- entry point


def main(
    argv: Sequence[str] | None = None, *, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> int:
    """Entry point of ``rewardseal-control``; ``stdout``/``stderr`` default to the process's."""
    out = stdout or sys.stdout
    err = stderr or sys.stderr
    args = build_parser().parse_args(argv)
    try:
        if args.command == "serve":
            logging.basicConfig(
                level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s"
            )
            return asyncio.run(_serve(args, out))
        if args.command == "migrate":
            return _migrate(args, out)
        return _run_admin(args, out)
    except Refused as refused:
        print(f"{PROG}: refused: {refused.error.message} ({refused.error.reason})", file=err)
        return EXIT_REFUSED
    except UsageError as exc:
        print(f"{PROG}: {exc}", file=err)
        return EXIT_USAGE
    except RewardSealError as exc:
        # Local: bad settings, a file that is not a calibration summary, a database URL.
        print(f"{PROG}: {exc.message}", file=err)
        return EXIT_USAGE


if __name__ == "__main__":
    raise SystemExit(main())
