#!/usr/bin/env python3
"""Container health check shipped in the rewardseal images as ``rewardseal-healthcheck``.

    rewardseal-healthcheck grpc 127.0.0.1:8790            grpc.health.v1 Check: SERVING?
    rewardseal-healthcheck grpc 127.0.0.1:8791 --service rewardseal.v1.ControlPlaneService
    rewardseal-healthcheck grpc 127.0.0.1:8790 --tls-ca ca.pem [--tls-cert c.pem --tls-key c.key]
    rewardseal-healthcheck http http://127.0.0.1:8792/healthz   HTTP 200?

No grpc_health_probe binary is needed: the worker and control images already hold grpcio and
grpcio-health-checking, and the HTTP mode uses only the standard library (the MockMed image).
The health service needs no bearer token; a server started with ``--tls-*`` is checked over TLS
(with its own client certificate under mutual TLS: the handshake comes before any method).
Exit status 0 when healthy, 1 otherwise, with one line on stderr that says why. Kubernetes does
not need this script: its ``grpc`` probe speaks grpc.health.v1 itself (deploy/k8s).
"""

from __future__ import annotations

import argparse
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence

HEALTHY = 0
UNHEALTHY = 1


def check_grpc(
    target: str,
    service: str,
    timeout: float,
    *,
    tls_ca: str | None = None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
) -> str | None:
    """None when ``target`` answers SERVING for ``service``, else why not.

    With ``tls_ca`` the check dials TLS pinned to that CA (plus the client certificate and key
    for a mutual-TLS server); a TLS server never answers a plaintext check.
    """
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    if tls_ca is None:
        channel = grpc.insecure_channel(target)
    else:
        try:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(tls_ca),
                private_key=_read(tls_key) if tls_key else None,
                certificate_chain=_read(tls_cert) if tls_cert else None,
            )
        except OSError as exc:
            return f"{target}: cannot read TLS file: {exc}"
        channel = grpc.secure_channel(target, credentials)
    with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as exc:
            return f"{target}: {exc.code().name}: {exc.details()}"
    if response.status != health_pb2.HealthCheckResponse.SERVING:
        name = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
        return f"{target}: {service or 'server'} is {name}"
    return None


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def check_http(url: str, timeout: float) -> str | None:
    """None when ``url`` answers 200, else why not."""
    if not url.startswith(("http://", "https://")):
        return f"{url}: not an http(s) URL"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            status = int(response.status)
    except urllib.error.HTTPError as exc:
        status = exc.code
    except (OSError, ValueError) as exc:
        return f"{url}: {exc}"
    return None if status == 200 else f"{url}: HTTP {status}"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    parser = argparse.ArgumentParser(prog="rewardseal-healthcheck", description=__doc__)
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds (default 3)")
    modes = parser.add_subparsers(dest="mode", required=True)
    grpc_mode = modes.add_parser("grpc", help="grpc.health.v1 Check")
    grpc_mode.add_argument("target", help="host:port")
    grpc_mode.add_argument("--service", default="", help="service name (default: the server)")
    grpc_mode.add_argument("--tls-ca", help="PEM CA the server's TLS certificate must chain to")
    grpc_mode.add_argument("--tls-cert", help="client certificate (mutual TLS)")
    grpc_mode.add_argument("--tls-key", help="client private key (mutual TLS)")
    http_mode = modes.add_parser("http", help="HTTP GET, healthy on 200")
    http_mode.add_argument("url")
    args = parser.parse_args(argv)
    if args.mode == "grpc":
        if (args.tls_cert is None) != (args.tls_key is None):
            parser.error("--tls-cert and --tls-key go together")
        if args.tls_cert is not None and args.tls_ca is None:
            parser.error("--tls-cert needs --tls-ca")
        problem = check_grpc(
            args.target,
            args.service,
            args.timeout,
            tls_ca=args.tls_ca,
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
        )
    else:
        problem = check_http(args.url, args.timeout)
    if problem is not None:
        print(f"unhealthy: {problem}", file=sys.stderr)
        return UNHEALTHY
    return HEALTHY


if __name__ == "__main__":
    raise SystemExit(main())
