"""Admin commands' connection: the token, TLS and target they dial, and the dispatch."""

from __future__ import annotations

import argparse
import os
from typing import TextIO, TypeVar

from rewardseal.rpc.control_client import ControlClient
from rewardseal.rpc.integrity_client import IntegrityClient
from rewardseal.rpc.tls import ClientTls
from rewardseal_control.cli.commands import ADMIN_COMMANDS
from rewardseal_control.cli.common import CLIENT_TLS_ENV, PAGE_SIZE, TARGET_ENV, UsageError
from rewardseal_control.cli.views import VIEW_COMMANDS
from rewardseal_control.settings import (
    ADMIN_TOKEN_ENV,
    ADMIN_TOKEN_FILE,
    DEFAULT_HOST,
    DEFAULT_PORT,
    TOKEN_ENV,
    TOKEN_FILE,
    default_data_dir,
)
from rewardseal_server.service_settings import read_token_file

_Client = TypeVar("_Client", ControlClient, IntegrityClient)


def bearer_token(args: argparse.Namespace) -> str:
    """``--token``, else the admin or client token variable, else the data dir's token files
    (admin first).

    Raises:
        UsageError: none of them is there.
    """
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


def target(args: argparse.Namespace) -> str:
    """``--target``, else ``$REWARDSEAL_CONTROL_TARGET``, else the default host and port."""
    return str(args.target or os.environ.get(TARGET_ENV) or f"{DEFAULT_HOST}:{DEFAULT_PORT}")


def connect(args: argparse.Namespace, client: type[_Client]) -> _Client:
    """A ``ControlClient`` or ``IntegrityClient`` to the control plane ``args`` name, with their
    token, TLS and deadline.

    Raises:
        UsageError: no token; ValidationError: unreadable TLS files.
    """
    token = bearer_token(args)
    tls = client_tls(args)
    # No retries: a person sees the refusal at once and decides.
    return client(
        target(args), token=token, timeout=args.timeout, retries=0, page_size=PAGE_SIZE, tls=tls
    )


def run_admin(args: argparse.Namespace, out: TextIO) -> int:
    """Run the admin command ``args`` names against the control plane; its exit status."""
    handler = {**ADMIN_COMMANDS, **VIEW_COMMANDS}[(args.command, args.action)]
    with connect(args, ControlClient) as client:
        return handler(client, args, out)
