"""The command-line options of the operator views (:mod:`.views`) and of ``serve``'s metrics
and logs, added to the parser by :func:`rewardseal_control.cli.parser.build_parser`."""

from __future__ import annotations

import argparse

from rewardseal_control.cli.common import CLIENT_TLS_ENV, TARGET_ENV
from rewardseal_control.settings import ENV_PREFIX
from rewardseal_server.logs import add_logging_options, logging_env

OPTION_ENV = {
    "data_dir": f"{ENV_PREFIX}DATA_DIR",
    "db_url": f"{ENV_PREFIX}DB_URL",
    "host": f"{ENV_PREFIX}HOST",
    "port": f"{ENV_PREFIX}PORT",
    "revocation_ttl": f"{ENV_PREFIX}REVOCATION_TTL",
    "metrics_port": f"{ENV_PREFIX}METRICS_PORT",
    "target": TARGET_ENV,
    "tls_ca": f"{CLIENT_TLS_ENV}CA",
    "tls_server_name": f"{CLIENT_TLS_ENV}SERVER_NAME",
    **logging_env(ENV_PREFIX),
}
"""The environment variable each option falls back to, for the help (an option whose help
names its variable already, such as the TLS files, keeps its own words)."""


def add_serve_observability(serve: argparse.ArgumentParser) -> None:
    """``serve --metrics-port``, ``--log-level`` and ``--log-format``."""
    serve.add_argument(
        "--metrics-port",
        type=int,
        help="serve Prometheus /metrics on this port (0: a free one; off when unset)",
    )
    add_logging_options(serve, ENV_PREFIX)


def add_state_option(parser: argparse.ArgumentParser) -> None:
    """``--at-update N``: the policy update a certificate's state is told at."""
    parser.add_argument(
        "--at-update",
        type=int,
        metavar="N",
        help="tell the state at this policy update (default: the contract's highest policy "
        "update among control's receipts, 0 before any)",
    )


def add_certificate_show(
    certificates: argparse._SubParsersAction[argparse.ArgumentParser],
    client: argparse.ArgumentParser,
) -> None:
    """``certificates show ID``."""
    show = certificates.add_parser(
        "show", parents=[client], help="one certificate, every field, and its state"
    )
    show.add_argument("certificate_id", metavar="ID")
    add_state_option(show)


def add_audit_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    client: argparse.ArgumentParser,
) -> None:
    """``audit``: the audit log (admin credential)."""
    audit = commands.add_parser(
        "audit",
        parents=[client],
        help="the audit log: who issued, revoked, registered, retired what and when (admin)",
    )
    audit.set_defaults(action="list")
    audit.add_argument(
        "--action",
        dest="audit_action",
        metavar="ACTION",
        help="only this action (e.g. certificate.revoke, issuer_key.register)",
    )
    audit.add_argument(
        "--page-size",
        type=int,
        metavar="N",
        help="read one page of at most N entries (1..500) and print the token of the next",
    )
    audit.add_argument("--page-token", metavar="TOKEN", help="read the page this token names")
