"""The ``rewardseal-control`` command line: every command, flag and default."""

from __future__ import annotations

import argparse
from pathlib import Path

from rewardseal_control.cli.attest import add_attest_command
from rewardseal_control.cli.common import (
    CLIENT_TLS_ENV,
    ISSUERS,
    PROG,
    ROLES,
    SCOPES,
    TARGET_ENV,
)
from rewardseal_control.cli.views_parser import (
    OPTION_ENV,
    add_audit_command,
    add_certificate_show,
    add_serve_observability,
    add_state_option,
)
from rewardseal_control.integrity.cli.parser import add_integrity_commands
from rewardseal_control.settings import (
    CONSOLE_TRUSTED_PROXIES_ENV,
    CONSOLE_TRUSTED_PROXY_FLAG,
    DEFAULT_HOST,
    DEFAULT_PORT,
    ENV_PREFIX,
)
from rewardseal_server.cli_help import add_version, style_help


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = argparse.ArgumentParser(
        prog=PROG, description="rewardseal control plane: serve it, migrate it, administer it."
    )
    add_version(parser, "rewardseal-control")
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
        "--http-port",
        type=int,
        help=f"also serve the operator console over HTTP(S) on this port (0: free; or "
        f"${ENV_PREFIX}HTTP_PORT; default off); plain HTTP on loopback only",
    )
    serve.add_argument(
        CONSOLE_TRUSTED_PROXY_FLAG,
        action="append",
        metavar="ADDRESS_OR_CIDR",
        help=f"a reverse proxy in front of the console whose X-Forwarded-For names the client "
        f"(repeatable; or ${CONSOLE_TRUSTED_PROXIES_ENV}, comma-separated); default none: the "
        "connection's peer is the client, whatever a header says",
    )
    serve.add_argument(
        "--ready-file", type=Path, help="write the banner as JSON here once serving (for scripts)"
    )
    add_serve_observability(serve)

    migrate = commands.add_parser("migrate", help="apply the database migrations and exit")
    _store_options(migrate)
    migrate.add_argument("--revision", default="head", help="target revision (default head)")

    client = argparse.ArgumentParser(add_help=False)
    client.add_argument(
        "--target", help=f"control plane host:port (default ${TARGET_ENV} or 127.0.0.1:8791)"
    )
    client.add_argument(
        "--token",
        help=f"bearer token (default: ${ENV_PREFIX}ADMIN_TOKEN, else ${ENV_PREFIX}TOKEN, else "
        "the token files in --data-dir)",
    )
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
    contracts_register = contracts.add_parser(
        "register",
        parents=[client],
        help="register the contract of a bundle directory, so a certificate can be issued for "
        "it before any worker joins (R-C-14)",
    )
    contracts_register.add_argument(
        "bundle",
        type=Path,
        metavar="BUNDLE_DIR",
        help="the bundle directory (contract.json and the documents it binds by digest)",
    )

    keys = _group(commands, "keys", "the issuer key registry")
    keys_list = keys.add_parser("list", parents=[client], help="list issuer keys")
    keys_list.add_argument("--role", choices=sorted(ROLES), help="only keys of this role")
    keys_register = keys.add_parser("register", parents=[client], help="register a public key")
    keys_register.add_argument(
        "--public-key",
        required=True,
        metavar="KEY_OR_FILE",
        help="the Ed25519 public key: 64 hex, base64 (as Health shows it), or a file holding "
        "one, or a worker's or control's ready file (JSON)",
    )
    keys_register.add_argument("--role", choices=sorted(ROLES), required=True)
    keys_register.add_argument("--name", default="", help="display name")
    keys_register.add_argument("--reason", default="", help="why (audit log)")
    keys_register.add_argument(
        "--contract",
        action="append",
        default=[],
        metavar="DIGEST",
        help="a WORKER key: admit it for this contract at once (repeatable)",
    )
    keys_retire = keys.add_parser("retire", parents=[client], help="retire a key")
    keys_retire.add_argument("key_id", metavar="KEY_ID")
    keys_retire.add_argument("--reason", required=True, help="why (audit log)")
    keys_approve = keys.add_parser(
        "approve",
        parents=[client],
        help="admit a registered WORKER key for contracts: its receipts enter the index",
    )
    keys_approve.add_argument("key_id", metavar="KEY_ID")
    keys_approve.add_argument(
        "--contract", action="append", required=True, metavar="DIGEST", help="(repeatable)"
    )
    keys_approve.add_argument("--reason", default="", help="why (audit log)")
    keys_approve.add_argument(
        "--accept-bundle-certificate",
        action="store_true",
        help="also accept the bundle certificates the key registered for these contracts: "
        "control lists them (revocable like any certificate) and the linked worker certifies "
        "under them",
    )
    keys_unbind = keys.add_parser(
        "unbind", parents=[client], help="stop a WORKER key signing receipts for contracts"
    )
    keys_unbind.add_argument("key_id", metavar="KEY_ID")
    keys_unbind.add_argument(
        "--contract", action="append", required=True, metavar="DIGEST", help="(repeatable)"
    )
    keys_unbind.add_argument("--reason", required=True, help="why (audit log)")
    keys_enroll = keys.add_parser(
        "enroll",
        parents=[client],
        help="a one-time enrollment credential for one worker (printed once)",
    )
    enroll_for = keys_enroll.add_mutually_exclusive_group(required=True)
    enroll_for.add_argument(
        "--contract", action="append", metavar="DIGEST", help="bind the key to it (repeatable)"
    )
    enroll_for.add_argument(
        "--any-contract",
        action="store_true",
        help="bind the key to the contracts the worker names when it registers",
    )
    keys_enroll.add_argument(
        "--ttl", default="24h", help="how long it may be used (e.g. 24h, 30m; default 24h)"
    )
    keys_enroll.add_argument("--reason", default="", help="why (audit log)")
    keys_enroll.add_argument(
        "--accept-bundle-certificate",
        action="store_true",
        help="accept the bundle certificate the enrolled key registers with: control lists "
        "it (revocable like any certificate) and the linked worker certifies under it",
    )

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
    certificates_list = certificates.add_parser(
        "list", parents=[client], help="list certificates with their state"
    )
    certificates_list.add_argument("--contract", metavar="DIGEST", help="only this contract")
    add_state_option(certificates_list)
    add_certificate_show(certificates, client)
    revoke = certificates.add_parser(
        "revoke",
        parents=[client],
        help="revoke a certificate, or every certificate of a contract or checker configuration",
    )
    revoke.add_argument(
        "certificate_id", metavar="ID", nargs="?", help="the certificate (or give one of:)"
    )
    revoke.add_argument(
        "--contract",
        metavar="DIGEST",
        help="every certificate of this contract, issued before or after (permanent)",
    )
    revoke.add_argument(
        "--checker",
        metavar="DIGEST",
        help="every certificate of this checker configuration digest, issued before or after "
        "(permanent)",
    )
    revoke.add_argument("--reason", required=True, help="why (audit log and revocation list)")

    receipts = _group(commands, "receipts", "the privacy-safe receipt index")
    summary = receipts.add_parser("summary", parents=[client], help="per-contract counts")
    summary.add_argument("--contract", metavar="DIGEST", help="one contract (default: all)")

    revocations = _group(commands, "revocations", "the signed revocation list")
    revocations.add_parser("show", parents=[client], help="print the current list")

    add_attest_command(commands, client)
    add_integrity_commands(commands, client)
    add_audit_command(commands, client)
    style_help(parser, OPTION_ENV)
    return parser


def _group(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], name: str, what: str
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    group = commands.add_parser(name, help=what)
    return group.add_subparsers(dest="action", required=True, metavar="ACTION")


def _store_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, help="keys, tokens and the default database")
    parser.add_argument("--db-url", help="database URL (default SQLite in the data dir)")
