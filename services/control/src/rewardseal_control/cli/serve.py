"""``serve`` and ``migrate``: run the control plane, or bring its database to a revision."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import Any, TextIO

from rewardseal_control import db
from rewardseal_control.cli.common import PROG
from rewardseal_control.settings import (
    DB_FILE,
    ENV_PREFIX,
    default_data_dir,
    parse_duration,
    resolve_settings,
)
from rewardseal_server.service_settings import make_private_dir
from rewardseal_server.sqlstore import sqlite_url


async def serve(args: argparse.Namespace, out: TextIO) -> int:
    from rewardseal_control.app import start_control
    from rewardseal_server.serving import serve_until_signalled, write_ready_file

    settings = resolve_settings(
        data_dir=args.data_dir,
        db_url=args.db_url,
        host=args.host,
        port=args.port,
        revocation_ttl=parse_duration(args.revocation_ttl) if args.revocation_ttl else None,
        reflection=args.reflection,
        http_port=args.http_port,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
        metrics_port=args.metrics_port,
        console_trusted_proxies=args.console_trusted_proxy,
    )
    app = await start_control(settings)
    banner = app.banner()
    print(banner_text(banner), file=out, flush=True)
    if args.ready_file:
        write_ready_file(args.ready_file, banner)
    await serve_until_signalled(app.stop)
    return 0


def banner_text(banner: Mapping[str, Any]) -> str:
    from rewardseal_server.serving import TRANSPORT_TEXT

    return "\n".join(
        [
            f"{PROG} serving on {banner['target']}",
            f"  transport         {TRANSPORT_TEXT[banner['transport']]}",
            f"  console           {banner['console_url'] or 'off (--http-port)'}",
            f"  organization key  {banner['organization_key_id']}",
            # What a worker pins (rewardseal-worker serve --trust-org-key); public, not secret.
            f"  organization pub  {banner['organization_public_key']}",
            f"  database          {banner['db_url']}",
            f"  admin token       {banner['admin_token_source']}",
            f"  client token      {banner['token_source']}",
            f"  worker token      {banner['worker_token_source']}",
            f"  data dir          {banner['data_dir']}",
            *(
                [f"  metrics           {banner['metrics_url']}"]
                if banner.get("metrics_url")
                else []
            ),
        ]
    )


def migrate(args: argparse.Namespace, out: TextIO) -> int:
    data_dir = (args.data_dir or default_data_dir(os.environ)).expanduser().resolve()
    url = args.db_url or os.environ.get(f"{ENV_PREFIX}DB_URL")
    if not url:
        make_private_dir(data_dir)
        url = sqlite_url(data_dir / DB_FILE)
    db.upgrade(url, args.revision)
    print(f"control store at revision {db.current_revision(url)}", file=out)
    return 0
