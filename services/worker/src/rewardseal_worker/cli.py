"""``rewardseal-worker``: run the reward worker (``serve``) and migrate its store (``migrate``);
author, check and calibrate a contract bundle (``contract``, ``calibrate``); list and retry the
receipts control refused for good (``outbox dead-letter``)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import Any

from rewardseal.core.accepting import CertificateInUse
from rewardseal_server.cli_failures import EXIT_USAGE, run_cli
from rewardseal_server.cli_help import add_version, style_help
from rewardseal_server.logs import add_logging_options, configure_logging, resolve_logging
from rewardseal_server.serving import TRANSPORT_TEXT, serve_until_signalled, write_ready_file
from rewardseal_worker.app import WorkerApp, start_worker
from rewardseal_worker.authoring.commands import add_contract_commands
from rewardseal_worker.authoring.entry import add_calibrate_command, run_authoring_command
from rewardseal_worker.calibration import text_progress
from rewardseal_worker.control_link import CertificateChange, certificate_name
from rewardseal_worker.migrate_command import add_migrate_command, run_migrate_command
from rewardseal_worker.outbox_commands import add_outbox_commands, run_outbox_command
from rewardseal_worker.settings import (
    DEFAULT_MAX_POLICY_LAG,
    ENV_BY_OPTION,
    ENV_PREFIX,
    WorkerSettings,
    resolve_settings,
)
from rewardseal_worker.supervisor import ChildCommand, Supervisor, exit_with_supervisor


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = argparse.ArgumentParser(prog="rewardseal-worker", description=__doc__)
    add_version(parser, "rewardseal-worker")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve RewardWorkerService over gRPC")
    _add_serve_options(serve)
    add_migrate_command(commands)
    add_contract_commands(commands)
    add_calibrate_command(commands)
    add_outbox_commands(commands)
    style_help(parser, ENV_BY_OPTION)
    return parser


def _add_serve_options(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--seed-mockmed",
        action="store_true",
        help="write the MockMed SoR, bundles, calibration and certificate first",
    )
    serve.add_argument("--contract", type=Path, help="contract bundle directory to serve")
    serve.add_argument("--data-dir", type=Path, help="keys, token, store and seeded files")
    serve.add_argument("--host", help="listen address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="listen port (0 picks a free one)")
    serve.add_argument("--db-url", help="receipt store URL (default SQLite in the data dir)")
    serve.add_argument("--calibration-trials", type=int, help="trials for --seed-mockmed")
    serve.add_argument("--reflection", action="store_true", help="enable gRPC reflection")
    serve.add_argument(
        "--tls-cert",
        type=Path,
        help="serve TLS with this PEM certificate chain (or REWARDSEAL_WORKER_TLS_CERT)",
    )
    serve.add_argument(
        "--tls-key", type=Path, help="its PEM private key (or REWARDSEAL_WORKER_TLS_KEY)"
    )
    serve.add_argument(
        "--tls-client-ca",
        type=Path,
        help="require client certificates issued by this PEM CA: mutual TLS "
        "(or REWARDSEAL_WORKER_TLS_CLIENT_CA)",
    )
    serve.add_argument(
        "--control",
        metavar="HOST:PORT",
        help="control plane to register with, follow revocations from and forward receipts to "
        "(its worker credential in REWARDSEAL_WORKER_CONTROL_TOKEN; needs --trust-org-key)",
    )
    serve.add_argument(
        "--trust-org-key",
        action="append",
        default=[],
        metavar="HEX_OR_FILE",
        help="pin an organization public key (64 hex, or a file holding it, or control's ready "
        "file): only certificates and revocation lists it signed count; repeatable "
        "(or REWARDSEAL_WORKER_TRUST_ORG_KEYS, comma-separated)",
    )
    serve.add_argument(
        "--control-tls-ca",
        type=Path,
        help="dial control over TLS, pinning this PEM CA (or REWARDSEAL_WORKER_CONTROL_TLS_CA)",
    )
    serve.add_argument(
        "--control-tls-cert",
        type=Path,
        help="client certificate for mutual TLS to control (or REWARDSEAL_WORKER_CONTROL_TLS_CERT)",
    )
    serve.add_argument(
        "--control-tls-key",
        type=Path,
        help="its PEM private key (or REWARDSEAL_WORKER_CONTROL_TLS_KEY)",
    )
    serve.add_argument(
        "--control-tls-server-name",
        help="the name control's certificate must carry when it is not the dialled host "
        "(or REWARDSEAL_WORKER_CONTROL_TLS_SERVER_NAME)",
    )
    serve.add_argument(
        "--ready-file", type=Path, help="write the banner as JSON here once serving (for scripts)"
    )
    serve.add_argument(
        "--processes",
        type=int,
        help="server processes sharing the port (SO_REUSEPORT, this mode only) and the store "
        "(default 1; or REWARDSEAL_WORKER_PROCESSES)",
    )
    serve.add_argument(
        "--metrics-port",
        type=int,
        help="serve Prometheus /metrics on this port (0: a free one; off when unset); with "
        "--processes N, process i serves on this port + i",
    )
    serve.add_argument(
        "--max-policy-lag",
        metavar="N",
        help="score an episode up to N policy updates below the contract's highest (async "
        f"trainers score step k after step k+1; default {DEFAULT_MAX_POLICY_LAG}, 0: never "
        "below the highest; docs/spec.md R-W-7)",
    )
    add_logging_options(serve, ENV_PREFIX)
    serve.add_argument(
        "--http-port",
        type=int,
        help="also serve the HTTP/JSON face on this port (0 picks a free one; docs/http.md; "
        "or REWARDSEAL_WORKER_HTTP_PORT); off by default",
    )
    # Internal: set by the supervisor of --processes N on each of its children.
    serve.add_argument("--supervised-by", type=int, help=argparse.SUPPRESS)
    serve.add_argument("--process-index", type=int, default=0, help=argparse.SUPPRESS)


_NOT_PASSED_TO_CHILDREN = frozenset(
    {
        "seed_mockmed",  # done once, by the supervisor
        "calibration_trials",
        "processes",
        "port",  # the supervisor's (a free one for 0)
        "http_port",  # likewise
        "ready_file",  # each child writes its own; the supervisor writes the one asked for
        "supervised_by",
        "process_index",
    }
)


def _child_command(args: argparse.Namespace) -> ChildCommand:
    """The argv of each child of ``serve --processes N``: this command's own options, passed
    through unchanged, but for those only the supervisor acts on."""
    serve = argparse.ArgumentParser(add_help=False)
    _add_serve_options(serve)
    passed: list[str] = []
    for action in serve._actions:
        if action.dest in _NOT_PASSED_TO_CHILDREN or not action.option_strings:
            continue
        value = getattr(args, action.dest, None)
        flag = action.option_strings[0]
        if action.nargs == 0:
            passed += [flag] if value else []
        elif isinstance(value, list):
            for item in value:
                passed += [flag, str(item)]
        elif value is not None:
            passed += [flag, str(value)]
    supervisor = os.getpid()

    def command(index: int, port: int, ready: Path, http_port: int | None) -> list[str]:
        http = [] if http_port is None else ["--http-port", str(http_port)]
        return [
            sys.executable,
            "-m",
            "rewardseal_worker.cli",
            "serve",
            *passed,
            "--port",
            str(port),
            "--ready-file",
            str(ready),
            "--supervised-by",
            str(supervisor),
            "--process-index",
            str(index),
            *http,
        ]

    return command


def _banner_text(info: dict[str, Any]) -> str:
    lines = [
        f"rewardseal-worker serving on {info['host']}:{info['port']}",
        f"  transport        {TRANSPORT_TEXT[info['transport']]}",
        f"  contract digest  {info['contract_digest']}  (tier {info['oracle_tier']})",
        f"  worker key id    {info['key_id']}",
        f"  certificate      {info['certificate_id'] or 'none'}",
        f"  token            {info['token']}",
        f"  data dir         {info['data_dir']}",
    ]
    urls = [url for url in info.get("metrics_urls", [info.get("metrics_url")]) if url]
    if urls:
        lines.append(f"  metrics          {', '.join(urls)}")
    if info.get("http_port") is not None:
        lines.append(f"  http             {info['host']}:{info['http_port']}  (docs/http.md)")
    if info["processes"] > 1:
        pids = ", ".join(str(pid) for pid in info["pids"])
        lines.append(f"  processes        {info['processes']} sharing the port (pids {pids})")
    return "\n".join(lines)


def _announce_change(app: WorkerApp, ready_file: Path | None, who: str = "") -> CertificateChange:
    """Print the new certificate (as the banner names it) and rewrite the ready file, so a
    script reading either always sees the certificate the worker scores under. ``who``: the
    process, when several serve (each follows control and says so)."""

    def announce(old: CertificateInUse, new: CertificateInUse, why: str) -> None:
        print(
            f"  certificate      {certificate_name(old)} -> {certificate_name(new)}  ({why}){who}",
            flush=True,
        )
        if ready_file is not None:
            write_ready_file(ready_file, app.banner())

    return announce


async def _serve(args: argparse.Namespace) -> int:
    settings = resolve_settings(
        data_dir=args.data_dir,
        contract_dir=args.contract,
        host=args.host,
        port=args.port,
        db_url=args.db_url,
        seed_mockmed=args.seed_mockmed,
        calibration_trials=args.calibration_trials,
        reflection=args.reflection,
        control_target=args.control,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
        trust_org_keys=args.trust_org_key,
        control_tls_ca=args.control_tls_ca,
        control_tls_cert=args.control_tls_cert,
        control_tls_key=args.control_tls_key,
        control_tls_server_name=args.control_tls_server_name,
        # A child serves alone: the count is its supervisor's business.
        processes=1 if args.supervised_by is not None else args.processes,
        metrics_port=args.metrics_port,
        http_port=args.http_port,
        max_policy_lag=args.max_policy_lag,
    )
    if args.supervised_by is not None:
        return await _serve_as_child(args, settings)
    if settings.processes > 1:
        return await _supervise(args, settings)
    app = await start_worker(settings, progress=text_progress(sys.stderr), exclusive=True)
    print(_banner_text(app.banner()), flush=True)
    if args.ready_file:
        write_ready_file(args.ready_file, app.banner())
    if app.control is not None:
        app.control.on_certificate_change = _announce_change(app, args.ready_file)
    await serve_until_signalled(app.stop)
    return 0


async def _supervise(args: argparse.Namespace, settings: WorkerSettings) -> int:
    """``--processes N`` above 1: see :mod:`rewardseal_worker.supervisor`."""

    def announce(banner: dict[str, Any], change: str | None) -> None:
        text = _banner_text(banner) if change is None else f"  process          {change}"
        print(text, flush=True)

    supervisor = Supervisor(
        settings, _child_command(args), announce=announce, ready_file=args.ready_file
    )
    return await supervisor.run(progress=text_progress(sys.stderr))


async def _serve_as_child(args: argparse.Namespace, settings: WorkerSettings) -> int:
    """One of the N processes: serve on the shared port, say ready in the supervisor's file,
    stop on SIGTERM or when the supervisor is gone."""
    index = args.process_index
    app = await start_worker(settings, shared_port=True, primary=index == 0, process_index=index)
    if args.ready_file:
        write_ready_file(args.ready_file, app.banner())
    if app.control is not None:
        app.control.on_certificate_change = _announce_change(
            app, None, f"  [process {index}, pid {os.getpid()}]"
        )
    orphaned = asyncio.create_task(exit_with_supervisor(args.supervised_by))
    try:
        await serve_until_signalled(app.stop)
    finally:
        orphaned.cancel()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``rewardseal-worker``."""
    args = build_parser().parse_args(argv)
    if args.command == "outbox":
        return run_outbox_command(args)
    if args.command == "migrate":
        return run_migrate_command(args)
    if args.command != "serve":
        return run_authoring_command(args)
    who = "" if args.supervised_by is None else f"process {args.process_index}"
    try:
        level, log_format = resolve_logging(args.log_level, args.log_format, os.environ, ENV_PREFIX)
    except ValueError as exc:
        print(f"rewardseal-worker: {exc}", file=sys.stderr)
        return EXIT_USAGE
    configure_logging(level, log_format, process=who)
    # One line per failure, exit 2 (settings) or 1 (runtime): rewardseal_server.cli_failures.
    return run_cli(
        "rewardseal-worker",
        lambda: asyncio.run(_serve(args)),
        err=sys.stderr,
        db_env="REWARDSEAL_WORKER_DB_URL",
    )


if __name__ == "__main__":
    raise SystemExit(main())
