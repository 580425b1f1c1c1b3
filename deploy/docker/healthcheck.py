#!/usr/bin/env python3
"""Container health check shipped in the rewardseal images as ``rewardseal-healthcheck``.

    rewardseal-healthcheck grpc 127.0.0.1:8790            grpc.health.v1 Check: SERVING?
    rewardseal-healthcheck grpc 127.0.0.1:8791 --service rewardseal.v1.ControlPlaneService
    rewardseal-healthcheck http http://127.0.0.1:8792/healthz   HTTP 200?

No grpc_health_probe binary is needed: the worker and control images already hold grpcio and
grpcio-health-checking, and the HTTP mode uses only the standard library (the MockMed image).
The health service needs no bearer token. Exit status 0 when healthy, 1 otherwise, with one line
on stderr that says why. Kubernetes does not need this script: its ``grpc`` probe speaks
grpc.health.v1 itself (deploy/k8s).
"""

from __future__ import annotations

import argparse
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence

HEALTHY = 0
UNHEALTHY = 1


def check_grpc(target: str, service: str, timeout: float) -> str | None:
    """None when ``target`` answers SERVING for ``service``, else why not."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as exc:
            return f"{target}: {exc.code().name}: {exc.details()}"
    if response.status != health_pb2.HealthCheckResponse.SERVING:
        name = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
        return f"{target}: {service or 'server'} is {name}"
    return None


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
    http_mode = modes.add_parser("http", help="HTTP GET, healthy on 200")
    http_mode.add_argument("url")
    args = parser.parse_args(argv)
    if args.mode == "grpc":
        problem = check_grpc(args.target, args.service, args.timeout)
    else:
        problem = check_http(args.url, args.timeout)
    if problem is not None:
        print(f"unhealthy: {problem}", file=sys.stderr)
        return UNHEALTHY
    return HEALTHY


if __name__ == "__main__":
    raise SystemExit(main())
