"""Wire a worker from settings: key, optional MockMed seed, bundle, store, reader, server."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rewardseal.errors import ValidationError
from rewardseal.signing import SigningKey, TrustSet
from rewardseal_server.metrics import MetricsEndpoint, serve_metrics
from rewardseal_server.serving import (
    RunningServer,
    address,
    check_port_free,
    is_loopback,
    transport,
)
from rewardseal_worker.bundle import ContractBundle, load_bundle
from rewardseal_worker.control_link import ControlLink
from rewardseal_worker.engine import Scorer
from rewardseal_worker.health_watch import StoreHealthWatch
from rewardseal_worker.metrics import WorkerMetrics
from rewardseal_worker.oracles.base import OracleReader
from rewardseal_worker.oracles.registry import make_reader
from rewardseal_worker.server import start_worker_server
from rewardseal_worker.settings import WorkerSettings
from rewardseal_worker.store import WorkerStore

_log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from rewardseal_server.embedded_http import RunningHttpServer

    # Seeding MockMed is a demo feature that needs rewardseal-mockmed and the kit: imported only
    # to seed (the import contracts allow the worker's kit imports on this path alone).
    from rewardseal_worker.seed import SeedResult


@dataclass
class WorkerApp:
    """A running worker and the parts it was built from."""

    settings: WorkerSettings
    key: SigningKey
    bundle: ContractBundle
    store: WorkerStore
    reader: OracleReader
    scorer: Scorer
    running: RunningServer
    seeded: SeedResult | None
    control: ControlLink | None = None
    health_watch: StoreHealthWatch | None = None
    metrics: MetricsEndpoint | None = None
    http: RunningHttpServer | None = None
    """The HTTP/JSON face (``--http-port``), on this process's event loop; None without it."""

    @property
    def port(self) -> int:
        """The port the server listens on."""
        return self.running.port

    def banner(self) -> dict[str, Any]:
        """What an operator or a script needs to call this worker."""
        certificate = self.scorer.certificate
        return {
            "host": self.settings.host,
            "port": self.port,
            "transport": transport(self.settings.tls),
            "token": self.settings.token,
            "contract_digest": self.bundle.contract_digest,
            "oracle_tier": self.bundle.tier,
            "key_id": self.key.key_id,
            "public_key": self.key.public_key.hex(),
            "certificate_id": certificate.certificate_id if certificate else None,
            "trusted_organization_keys": [k.hex() for k in self.settings.trust_org_keys],
            "data_dir": str(self.settings.data_dir),
            "contract_dir": str(self.bundle.path),
            "processes": 1,
            "pids": [os.getpid()],
            "metrics_url": self.metrics.url if self.metrics is not None else None,
            "http_port": self.http.port if self.http is not None else None,
        }

    async def stop(self) -> None:
        """Stop serving, then release the control link, the reader and the store."""
        if self.health_watch is not None:
            await self.health_watch.stop()
        if self.http is not None:
            await self.http.stop()
        await self.running.stop()
        if self.metrics is not None:
            self.metrics.stop()
        if self.control is not None:
            await self.control.stop()
        self.reader.close()
        self.store.close()


def prepare_worker(
    settings: WorkerSettings, *, progress: Callable[[int, int], None] | None = None
) -> tuple[SigningKey, SeedResult | None]:
    """The work a start does once per host, before any server: the worker key (created 0600 on
    first start) and, with ``seed_mockmed``, the MockMed seed (under the data dir's seed lock).

    Raises:
        ValidationError: ``seed_mockmed`` is set but rewardseal-mockmed or rewardseal-kit is not
            installed, or seeding refused (see :func:`rewardseal_worker.seed.seed_mockmed`); or
            it is not set and there is no bundle to serve.
    """
    key = SigningKey.load_or_create(settings.key_path)
    if not settings.seed_mockmed:
        if not settings.contract_dir.exists():
            raise ValidationError(
                f"no contract bundle at {settings.contract_dir}: pass --contract DIR (a bundle "
                "directory), or --seed-mockmed to write the synthetic MockMed bundles into the "
                "data dir first"
            )
        return key, None
    try:
        from rewardseal_worker.seed import seed_mockmed
    except ModuleNotFoundError as exc:
        if exc.name is None or not exc.name.startswith(("rewardseal_mockmed", "rewardseal_kit")):
            raise
        raise ValidationError(
            "--seed-mockmed needs the rewardseal-mockmed and rewardseal-kit distributions "
            "(pip install 'rewardseal-worker[mockmed]')"
        ) from None
    seeded = seed_mockmed(
        settings.data_dir, key=key, trials=settings.calibration_trials, progress=progress
    )
    return key, seeded


async def start_worker(
    settings: WorkerSettings,
    *,
    progress: Callable[[int, int], None] | None = None,
    shared_port: bool = False,
    primary: bool = True,
    process_index: int = 0,
) -> WorkerApp:
    """Build and start the worker described by ``settings``.

    ``shared_port`` and ``primary`` are for the processes of ``serve --processes N``
    (:mod:`rewardseal_worker.supervisor`): ``shared_port`` binds with SO_REUSEPORT, next to the
    other processes of the same worker (the supervisor checked that no other program holds the
    port); only the ``primary`` process registers with control and forwards the outbox.
    ``process_index``: this process's place among them; its metrics port is
    ``metrics_port + process_index`` (each process counts its own calls).

    Raises:
        CannotListen: the port is in use by another process or cannot be bound.
        ValidationError: ``seed_mockmed`` is set but rewardseal-mockmed or rewardseal-kit is not
            installed, or seeding refused (see :func:`rewardseal_worker.seed.seed_mockmed`).
    """
    if not shared_port:
        # Before seeding and calibrating (minutes): a taken port is refused at once.
        check_port_free(settings.host, settings.port)
        if settings.http_port is not None:
            check_port_free(settings.host, settings.http_port)
    key, seeded = prepare_worker(settings, progress=progress)
    # A self-signed certificate verifies against the worker's own key.
    bundle = load_bundle(settings.contract_dir, trust=TrustSet([key.public_key]))
    store = WorkerStore(settings.db_url, outbox=settings.control_target is not None)
    reader = make_reader(bundle.recipe, bundle.path)
    scorer = Scorer(
        bundle=bundle,
        store=store,
        reader=reader,
        key=key,
        episode_ttl_seconds=settings.episode_ttl_seconds,
        max_policy_update_jump=settings.max_policy_update_jump,
        inline_batch=settings.inline_batch,
    )
    control = None
    if settings.control_target is not None and settings.control_token is not None:
        control = ControlLink(
            target=settings.control_target,
            token=settings.control_token,
            key=key,
            bundle=bundle,
            store=store,
            scorer=scorer,
            # Pinned by the operator: control's own registry never decides whom to trust.
            trust=TrustSet(settings.trust_org_keys),
            tls=settings.control_tls,
            poll_interval=settings.certificate_poll_seconds,
            enrollment=settings.control_enrollment or "",
        )
        # From here on the certificate is vouched for only by a fresh revocation list.
        scorer.revoked = control.revocation
        scorer.on_commit = control.notify
        control.start(primary=primary)
    metrics = WorkerMetrics() if settings.metrics_port is not None else None
    if metrics is not None:
        metrics.watch(scorer, store, control)
    try:
        running = await start_worker_server(
            scorer,
            token=settings.token,
            host=settings.host,
            port=settings.port,
            reflection=settings.reflection,
            tls=settings.tls,
            shared_port=shared_port,
            interceptors=(metrics.interceptor(),) if metrics is not None else (),
        )
        http = None
        if settings.http_port is not None:
            http = await _start_http(settings, scorer, running, shared_port=shared_port)
    except BaseException:
        # The port is taken (or the start was cancelled): release what was opened for it.
        if control is not None:
            await control.stop()
        reader.close()
        store.close()
        raise
    watch = StoreHealthWatch(store.ping, running, interval=settings.health_interval_seconds)
    watch.start()
    app = WorkerApp(
        settings, key, bundle, store, reader, scorer, running, seeded, control, watch, http=http
    )
    if metrics is not None and settings.metrics_port is not None:
        port = settings.metrics_port + process_index if settings.metrics_port else 0
        try:
            app.metrics = serve_metrics(metrics.registry, host=settings.host, port=port)
        except BaseException:
            await app.stop()
            raise
    # The start as one event for log pipelines (the banner on stdout is for people).
    _log.info(
        "serving contract %s (tier %d) on %s:%d under certificate %s; http %s; metrics %s",
        bundle.contract_digest,
        bundle.tier,
        settings.host,
        app.port,
        app.banner()["certificate_id"] or "none",
        app.http.port if app.http is not None else "off",
        app.metrics.url if app.metrics is not None else "off",
    )
    return app


async def _start_http(
    settings: WorkerSettings, scorer: Scorer, grpc: RunningServer, *, shared_port: bool
) -> RunningHttpServer:
    """The HTTP face over ``scorer`` (docs/http.md); stops the gRPC server if it cannot start."""
    # Imported here: FastAPI and uvicorn load only for a worker that serves HTTP.
    from rewardseal_server.embedded_http import start_http_server
    from rewardseal_worker.http.routes import create_app

    assert settings.http_port is not None
    try:
        http = await start_http_server(
            create_app(scorer, token=settings.token, serving=lambda: grpc.serving),
            host=settings.host,
            port=settings.http_port,
            tls=settings.tls,
            name="http-face",
            reuse_port=shared_port,
            # A worker stops quickly: a trainer retries a call cut short (episode ids make
            # that safe), while a long grace would hold a rolling restart.
            grace_seconds=1,
        )
    except BaseException:
        await grpc.stop()
        raise
    if settings.tls is None and not is_loopback(settings.host):
        _log.warning(
            "HTTP face on %s without TLS: bearer tokens and receipts cross the network in "
            "plaintext (configure a TLS certificate and key)",
            address(settings.host, http.port),
        )
    return http
