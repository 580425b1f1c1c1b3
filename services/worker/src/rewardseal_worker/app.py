"""Wire a worker from settings: key, optional MockMed seed, bundle, store, reader, server."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rewardseal.core.errors import SystemOfRecordUnavailable, ValidationError
from rewardseal.core.signing import SigningKey, TrustSet
from rewardseal_server.metrics import MetricsEndpoint, serve_metrics
from rewardseal_server.serving import (
    RunningServer,
    address,
    check_port_free,
    is_loopback,
    transport,
)
from rewardseal_worker.batch_plan import BatchPlan
from rewardseal_worker.bundle import ContractBundle, load_bundle
from rewardseal_worker.control_link import ControlLink
from rewardseal_worker.data_dir_lock import DataDirLock, lock_data_dir
from rewardseal_worker.engine import Scorer
from rewardseal_worker.health_watch import HealthWatch
from rewardseal_worker.metrics import WorkerMetrics
from rewardseal_worker.oracles.base import OracleReader, OracleUnavailable
from rewardseal_worker.oracles.probe import probe_reader
from rewardseal_worker.oracles.registry import make_reader
from rewardseal_worker.server import start_worker_server
from rewardseal_worker.settings import WorkerSettings
from rewardseal_worker.store import WorkerStore

_log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from rewardseal_server.embedded_http import RunningHttpServer

    # Seeding MockMed is a demo feature that needs rewardseal-mockmed (its seeding, its contract
    # and the ExtraDup replay): imported only to seed, so a worker without the extra still serves.
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
    health_watch: HealthWatch | None = None
    metrics: MetricsEndpoint | None = None
    http: RunningHttpServer | None = None
    """The HTTP/JSON face (``--http-port``), on this process's event loop; None without it."""
    data_dir_lock: DataDirLock | None = None
    """The data dir's lock (R-W-15) when this worker holds it; released last by :meth:`stop`."""

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
        if self.data_dir_lock is not None:
            self.data_dir_lock.release()


def prepare_worker(
    settings: WorkerSettings, *, progress: Callable[[int, int], None] | None = None
) -> tuple[SigningKey, SeedResult | None]:
    """The work a start does once per host, before any server: the worker key (created 0600 on
    first start) and, with ``seed_mockmed``, the MockMed seed (under the data dir's seed lock).

    Raises:
        ValidationError: ``seed_mockmed`` is set but rewardseal-mockmed is not installed, or
            seeding refused (see :func:`rewardseal_worker.seed.seed_mockmed`); or it is not set
            and there is no bundle to serve.
    """
    # What can be refused is refused before the key is made (nothing written for a bad start).
    if not settings.seed_mockmed:
        if not settings.contract_dir.exists():
            raise ValidationError(
                f"no contract bundle at {settings.contract_dir}: pass --contract DIR (a bundle "
                "directory), or --seed-mockmed to write the synthetic MockMed bundles into the "
                "data dir first"
            )
        return SigningKey.load_or_create(settings.key_path), None
    try:
        from rewardseal_worker.seed import seed_mockmed
    except ModuleNotFoundError as exc:
        if exc.name is None or not exc.name.startswith("rewardseal_mockmed"):
            raise
        raise ValidationError(
            "--seed-mockmed needs the rewardseal-mockmed distribution "
            "(pip install 'rewardseal-worker[mockmed]')"
        ) from None
    key = SigningKey.load_or_create(settings.key_path)
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
    exclusive: bool = False,
) -> WorkerApp:
    """Build and start the worker described by ``settings``.

    ``exclusive``: hold the data dir's lock for the worker's life (R-W-15,
    :mod:`rewardseal_worker.data_dir_lock`), taken right after the ports are probed and before
    any other work; ``rewardseal-worker serve`` asks for it, library callers may.

    ``shared_port`` and ``primary`` are for the processes of ``serve --processes N``
    (:mod:`rewardseal_worker.supervisor`): ``shared_port`` binds with SO_REUSEPORT, next to the
    other processes of the same worker (the supervisor checked that no other program holds the
    port); only the ``primary`` process registers with control and forwards the outbox.
    ``process_index``: this process's place among them; its metrics port is
    ``metrics_port + process_index`` (each process counts its own calls).

    Raises:
        CannotListen: the port is in use by another process or cannot be bound.
        DataDirInUse: ``exclusive`` and another worker holds the data dir.
        SystemOfRecordUnavailable: the SoR does not answer the start-up probe (R-W-16).
        ValidationError: ``seed_mockmed`` is set but rewardseal-mockmed is not installed, or
            seeding refused (see :func:`rewardseal_worker.seed.seed_mockmed`).
    """
    if not shared_port:
        # Before seeding and calibrating (minutes): a taken port is refused at once.
        check_port_free(settings.host, settings.port)
        if settings.http_port is not None:
            check_port_free(settings.host, settings.http_port, flag="--http-port")
        if settings.metrics_port:
            metrics_port = settings.metrics_port + process_index
            check_port_free(settings.host, metrics_port, flag="--metrics-port")
    held = lock_data_dir(settings.data_dir, settings.db_url) if exclusive else None
    try:
        app = await _start(settings, progress, shared_port, primary, process_index)
    except BaseException:
        if held is not None:
            held.release()
        raise
    app.data_dir_lock = held
    return app


def probe_system_of_record(reader: OracleReader, bundle: ContractBundle) -> None:
    """The start-up probe of the SoR (R-W-16, :mod:`rewardseal_worker.oracles.probe`). Blocking.

    Raises:
        SystemOfRecordUnavailable: it did not answer; the one line says which oracle and why.
    """
    try:
        probe_reader(reader, bundle.contract.oracle.identity_keys)
    except OracleUnavailable as exc:
        failure = str(exc)
    else:
        return
    # Raised outside the handler: the SoR's error is no cause the CLI should read as the
    # receipt store's (a missing SQLite file would suggest --db-url).
    raise SystemOfRecordUnavailable(
        f"the system of record does not answer ({reader.kind} oracle of {bundle.path}: "
        f"{failure}); every episode would be failed_platform: start it, or fix the oracle "
        "recipe or the variable it names, then start the worker again"
    )


async def _start(
    settings: WorkerSettings,
    progress: Callable[[int, int], None] | None,
    shared_port: bool,
    primary: bool,
    process_index: int,
) -> WorkerApp:
    """:func:`start_worker` once its ports are probed and its data dir is held."""
    key, seeded = prepare_worker(settings, progress=progress)
    # A self-signed certificate verifies against the worker's own key.
    bundle = load_bundle(settings.contract_dir, trust=TrustSet([key.public_key]))
    reader = make_reader(bundle.recipe, bundle.path)
    try:
        await asyncio.to_thread(probe_system_of_record, reader, bundle)
        # Not migrated here (R-W-17): a schema not at the newest revision is refused in one line
        # naming `rewardseal-worker migrate`; a fresh database is created at it.
        store = WorkerStore(
            settings.db_url, outbox=settings.control_target is not None, migrate=False
        )
    except BaseException:
        reader.close()
        raise
    scorer = Scorer(
        bundle=bundle,
        store=store,
        reader=reader,
        key=key,
        episode_ttl_seconds=settings.episode_ttl_seconds,
        max_policy_update_jump=settings.max_policy_update_jump,
        max_policy_lag=settings.max_policy_lag,
        # Where batches run is the serving layer's choice, from what it opened: the store's
        # dialect and whether the oracle is a file on this host (rewardseal_worker.batch_plan).
        plan=BatchPlan.for_store(
            store.dialect, local_reader=reader.local, inline_batch=settings.inline_batch
        ),
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
        keys = bundle.contract.oracle.identity_keys
        watch = HealthWatch(
            {"store": store.ping, "system of record": lambda: probe_reader(reader, keys)},
            running,
            interval=settings.health_interval_seconds,
        )
        http = None
        if settings.http_port is not None:
            http = await _start_http(settings, scorer, running, watch, shared_port=shared_port)
    except BaseException:
        # The port is taken (or the start was cancelled): release what was opened for it.
        if control is not None:
            await control.stop()
        reader.close()
        store.close()
        raise
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
    settings: WorkerSettings,
    scorer: Scorer,
    grpc: RunningServer,
    watch: HealthWatch,
    *,
    shared_port: bool,
) -> RunningHttpServer:
    """The HTTP face over ``scorer`` (docs/http.md); stops the gRPC server if it cannot start."""
    # Imported here: FastAPI and uvicorn load only for a worker that serves HTTP.
    from rewardseal_server.embedded_http import start_http_server
    from rewardseal_worker.http.routes import create_app

    assert settings.http_port is not None
    try:
        http = await start_http_server(
            create_app(
                scorer,
                token=settings.token,
                serving=lambda: grpc.serving,
                reason=lambda: watch.reason,
            ),
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
