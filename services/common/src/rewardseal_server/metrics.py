"""Prometheus metrics shared by the rewardseal services: one registry per server, RPC counts and
latencies by method and code, values read at scrape time, and the ``/metrics`` HTTP endpoint.

What lives here, once:

* :class:`ServiceMetrics`: a registry of its own per server instance (never the process-global
  default, so several servers in one process, as in the tests, never collide), with the RPC
  counter and latency histogram every service has. Each service adds its own metrics to
  :attr:`ServiceMetrics.registry`.
* :class:`RpcMetricsInterceptor`: a ``grpc.aio`` server interceptor that counts every call and
  observes its latency by service, method and gRPC status code (refusals of the auth
  interceptor included, when this one is outermost).
* :class:`ScrapeGauges`: gauges whose values a callback computes when Prometheus scrapes (a
  queue depth read from the store, the age of a revocation list), so nothing polls in between.
* :func:`serve_metrics`: ``/metrics`` over prometheus_client's own HTTP server, in a daemon
  thread: scrape-time callbacks (store reads included) never run on the event loop.

With ``serve --processes N`` each process is a server of its own with its own registry and its
own metrics port (see the worker's settings): counters are never shared between processes.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from threading import Thread
from typing import Any, TypeAlias
from wsgiref.simple_server import WSGIServer

import grpc
from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rewardseal.v1.enums_pb2 import RewardOutcome
from rewardseal_server.serving import address, cannot_listen

__all__ = [
    "LATENCY_BUCKETS",
    "MetricsEndpoint",
    "RpcMetricsInterceptor",
    "ScrapeGauges",
    "ServiceMetrics",
    "receipt_labels",
    "serve_metrics",
]

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Seconds: a scoring call takes milliseconds; a watch stream lasts as long as its client."""

_Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"


def receipt_labels(outcome: int, certified: bool) -> tuple[str, str]:
    """The ``(outcome, certified)`` labels of a receipt: ``("VERIFIED", "true")``; the number
    for an outcome this build does not know."""
    try:
        name = RewardOutcome.Name(outcome).removeprefix("REWARD_OUTCOME_")  # type: ignore[arg-type]
    except ValueError:
        name = str(outcome)
    return name, "true" if certified else "false"


class ServiceMetrics:
    """The metrics of one server instance, in a registry of its own.

    ``namespace`` prefixes every name (``rewardseal_worker``, ``rewardseal_control``).
    """

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.registry = CollectorRegistry(auto_describe=True)
        self.rpc_requests = Counter(
            "rpc_requests",
            "RPCs handled, by service, method and gRPC status code.",
            ("service", "method", "code"),
            namespace=namespace,
            registry=self.registry,
        )
        self.rpc_latency = Histogram(
            "rpc_duration_seconds",
            "Time from the call reaching the server to its last answer, by service, method and "
            "gRPC status code.",
            ("service", "method", "code"),
            namespace=namespace,
            registry=self.registry,
            buckets=LATENCY_BUCKETS,
        )

    def interceptor(self) -> RpcMetricsInterceptor:
        """The server interceptor that feeds :attr:`rpc_requests` and :attr:`rpc_latency`."""
        return RpcMetricsInterceptor(self)

    def observe_rpc(self, method: str, code: grpc.StatusCode, seconds: float) -> None:
        """Count one finished call of ``/package.Service/Method`` and its latency."""
        service, _, name = method.lstrip("/").rpartition("/")
        labels = (service.rpartition(".")[2] or "-", name, code.name)
        self.rpc_requests.labels(*labels).inc()
        self.rpc_latency.labels(*labels).observe(seconds)


def _code_of(
    context: grpc.aio.ServicerContext[Any, Any], failed: BaseException | None
) -> grpc.StatusCode:
    """The status code a call ended with: what the servicer set or aborted with; OK when it
    returned without one; CANCELLED when the client went away; UNKNOWN for any other error."""
    code: object = context.code()
    if code is not None:
        # grpc.aio may hand back the code as a StatusCode or as its cygrpc integer.
        if isinstance(code, grpc.StatusCode):
            return code
        return next((c for c in grpc.StatusCode if c.value[0] == code), grpc.StatusCode.UNKNOWN)
    if failed is None:
        return grpc.StatusCode.OK
    if isinstance(failed, (GeneratorExit, asyncio.CancelledError)):
        return grpc.StatusCode.CANCELLED
    return grpc.StatusCode.UNKNOWN


class RpcMetricsInterceptor(grpc.aio.ServerInterceptor):
    """Counts and times every call by service, method and status code.

    Put it first (outermost) so that calls another interceptor refuses (a missing token:
    UNAUTHENTICATED) are counted too. Methods no servicer serves (UNIMPLEMENTED from gRPC
    itself) are not seen by interceptors and are not counted.
    """

    def __init__(self, metrics: ServiceMetrics) -> None:
        self._metrics = metrics

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[_Handler | None]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> _Handler | None:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        return _timed(handler, handler_call_details.method, self._metrics.observe_rpc)


def _timed(
    handler: _Handler, method: str, observe: Callable[[str, grpc.StatusCode, float], None]
) -> _Handler:
    """``handler`` with its behaviour timed; the behaviour keeps its form (coroutine function or
    async generator function) because grpc.aio dispatches on it."""
    field = {
        (False, False): "unary_unary",
        (False, True): "unary_stream",
        (True, False): "stream_unary",
        (True, True): "stream_stream",
    }[(handler.request_streaming, handler.response_streaming)]
    behavior = getattr(handler, field)
    wrapped: Callable[..., Any]
    if inspect.isasyncgenfunction(behavior):

        async def wrapped(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            started = time.perf_counter()
            failed: BaseException | None = None
            try:
                async for answer in behavior(request, context):
                    yield answer
            except BaseException as exc:
                failed = exc
                raise
            finally:
                observe(method, _code_of(context, failed), time.perf_counter() - started)

    elif inspect.iscoroutinefunction(behavior):

        async def wrapped(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            started = time.perf_counter()
            failed: BaseException | None = None
            try:
                return await behavior(request, context)
            except BaseException as exc:
                failed = exc
                raise
            finally:
                observe(method, _code_of(context, failed), time.perf_counter() - started)

    else:  # a synchronous behaviour: none of ours; left untimed rather than timed wrongly
        return handler
    replaced: _Handler = handler._replace(**{field: wrapped})  # type: ignore[attr-defined]
    return replaced


Sample = tuple[Sequence[str], float]
"""One value of a scrape-time gauge: its label values and the value."""


@dataclass(frozen=True)
class ScrapeGauges(Collector):
    """A gauge family whose samples ``read`` returns at each scrape (nothing in between).

    ``read`` runs in the metrics server's thread: it may read the store, and must not touch
    event-loop state that is not safe to read from another thread. When it raises, the family
    is left out of that scrape (the scrape itself still answers).
    """

    name: str
    documentation: str
    labels: Sequence[str]
    read: Callable[[], Iterable[Sample]]

    def collect(self) -> Iterable[Metric]:
        try:
            samples = list(self.read())
        except Exception:  # a failed read must not fail the whole scrape
            return []
        family = GaugeMetricFamily(self.name, self.documentation, labels=list(self.labels))
        for label_values, value in samples:
            family.add_metric(list(label_values), value)
        return [family]

    def describe(self) -> Iterable[Metric]:
        # Described without reading: registering must not call the store.
        return [GaugeMetricFamily(self.name, self.documentation, labels=list(self.labels))]


@dataclass
class MetricsEndpoint:
    """A running ``/metrics`` HTTP server."""

    host: str
    port: int
    server: WSGIServer
    thread: Thread

    @property
    def url(self) -> str:
        """``http://host:port/metrics``."""
        return f"http://{address(self.host, self.port)}/metrics"

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve_metrics(
    registry: CollectorRegistry, *, host: str, port: int, flag: str = "--metrics-port"
) -> MetricsEndpoint:
    """Serve ``registry`` as ``/metrics`` on ``host:port`` (0 picks a free port) from a daemon
    thread.

    Raises:
        CannotListen: the port is in use or the address cannot be bound.
    """
    try:
        server, thread = start_http_server(port, addr=host.strip("[]"), registry=registry)
    except OSError as exc:
        raise cannot_listen(host, port, exc, flag=flag) from None
    return MetricsEndpoint(host=host, port=int(server.server_port), server=server, thread=thread)
