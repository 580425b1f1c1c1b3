"""Wire the control plane from settings: migrations, store, organization key, server."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.engine import make_url

from rewardseal.core.clock import utc_now
from rewardseal.core.errors import NotFound
from rewardseal.core.signing import SigningKey
from rewardseal.v1.certificate_pb2 import IssuerKey
from rewardseal.v1.enums_pb2 import IssuerKeyRole
from rewardseal_control.metrics import ControlMetrics
from rewardseal_control.server import start_control_server
from rewardseal_control.service import ControlPlaneServicer
from rewardseal_control.settings import (
    ORGANIZATION_KEY_NAME,
    WORKER_ENROLLMENT_ENV,
    ControlSettings,
)
from rewardseal_control.store import ControlStore
from rewardseal_server.embedded_http import RunningHttpServer
from rewardseal_server.metrics import MetricsEndpoint, serve_metrics
from rewardseal_server.serving import RunningServer, check_port_free, transport

_log = logging.getLogger(__name__)

SYSTEM_ACTOR = "control.startup"
"""Who the audit log names for what the service does to itself on start."""


def ensure_organization_key(
    store: ControlStore, key: SigningKey, *, at: datetime | None = None
) -> IssuerKey:
    """Register the service's own organization key if it is absent; return its registry entry.

    A key that is registered already is left exactly as it is: in particular a key an admin
    retired stays retired across restarts (it must not silently come back into service).
    """
    try:
        entry = store.keys.get_issuer_key(key.key_id)
    except NotFound:
        entry, created = store.keys.register_issuer_key(
            IssuerKey(
                public_key=key.public_key,
                role=IssuerKeyRole.ISSUER_KEY_ROLE_ORGANIZATION,
                display_name=ORGANIZATION_KEY_NAME,
            ),
            SYSTEM_ACTOR,
            "the control plane registers its own organization key on first start",
            at=at or utc_now(),
        )
        if created:
            _log.info("registered the organization key %s", key.key_id)
        return entry
    if entry.retired:
        _log.warning("organization key %s is retired: no certificate can be issued", key.key_id)
    elif entry.role != IssuerKeyRole.ISSUER_KEY_ROLE_ORGANIZATION:
        _log.warning("key %s is registered, but not as an ORGANIZATION key", key.key_id)
    return entry


def ensure_worker_enrollment(
    store: ControlStore, credential: str, *, accept_bundle_certificate: bool = False
) -> None:
    """Arm the operator's bootstrap enrollment credential once (R-C-11): stored as an "any
    contract" enrollment if control never saw it; a used or expired one stays what it is.
    ``accept_bundle_certificate`` (see ``settings.WORKER_ENROLLMENT_ACCEPTS_ENV``): it also
    accepts the bundle certificate the enrolled key registers with."""
    enrollment = store.bindings.ensure_enrollment(
        credential,
        SYSTEM_ACTOR,
        f"the worker enrollment credential from ${WORKER_ENROLLMENT_ENV}",
        accept_bundle_certificate=accept_bundle_certificate,
    )
    if enrollment is not None:
        _log.info(
            "armed enrollment %s from %s: the first worker key that presents it is admitted "
            "for the contract it registers%s (until %s)",
            enrollment.enrollment_id,
            WORKER_ENROLLMENT_ENV,
            ", and its bundle certificate is listed (revoke it like any certificate)"
            if accept_bundle_certificate
            else "",
            enrollment.expires_at.isoformat(),
        )


@dataclass
class ControlApp:
    """A running control plane and the parts it was built from."""

    settings: ControlSettings
    key: SigningKey
    store: ControlStore
    servicer: ControlPlaneServicer
    running: RunningServer
    metrics: MetricsEndpoint | None = None

    @property
    def port(self) -> int:
        """The port the server listens on."""
        return self.running.port

    @property
    def target(self) -> str:
        """``host:port`` to dial."""
        return f"{self.settings.host}:{self.port}"

    console: RunningHttpServer | None = None
    """The operator console (``--http-port``), served in the same event loop; None when off."""

    def banner(self) -> dict[str, Any]:
        """What an operator or a script needs to call this control plane.

        Tokens are never printed: the banner names the files (or variables) they come from.
        """
        return {
            "host": self.settings.host,
            "port": self.port,
            "target": self.target,
            "transport": transport(self.settings.tls),
            "console_url": self.console.url if self.console is not None else None,
            "organization_key_id": self.key.key_id,
            "organization_public_key": self.key.public_key.hex(),
            "data_dir": str(self.settings.data_dir),
            "db_url": make_url(self.settings.db_url).render_as_string(hide_password=True),
            "admin_token_source": self.settings.admin_token_source,
            "token_source": self.settings.token_source,
            "worker_token_source": self.settings.worker_token_source,
            "revocation_ttl_seconds": self.settings.revocation_ttl.total_seconds(),
            "metrics_url": self.metrics.url if self.metrics is not None else None,
        }

    async def stop(self) -> None:
        """Stop serving, then close the store."""
        if self.console is not None:
            await self.console.stop()
        await self.running.stop()
        if self.metrics is not None:
            self.metrics.stop()
        self.store.close()


async def start_control(settings: ControlSettings) -> ControlApp:
    """Build and start the control plane described by ``settings``.

    Migrations run first (``ControlStore`` applies them, serialized against other replicas), then
    the organization key is loaded (created 0600 on first start) and registered if absent.

    Raises:
        CannotListen: the port is in use by another process or cannot be bound.
    """
    # Before migrating: a second control plane on a taken port is refused at once, each port
    # under the flag that chose it (R-W-11).
    check_port_free(settings.host, settings.port)
    if settings.http_port is not None:
        check_port_free(settings.host, settings.http_port, flag="--http-port")
    if settings.metrics_port:
        check_port_free(settings.host, settings.metrics_port, flag="--metrics-port")
    key = SigningKey.load_or_create(settings.key_path)
    store = await asyncio.to_thread(ControlStore, settings.db_url)
    try:
        await asyncio.to_thread(ensure_organization_key, store, key)
        if settings.worker_enrollment is not None:
            await asyncio.to_thread(
                ensure_worker_enrollment,
                store,
                settings.worker_enrollment,
                accept_bundle_certificate=settings.worker_enrollment_accepts_bundle_certificate,
            )
        servicer = ControlPlaneServicer(store, key, revocation_ttl=settings.revocation_ttl)
        metrics = ControlMetrics() if settings.metrics_port is not None else None
        if metrics is not None:
            metrics.watch(servicer)
        running = await start_control_server(
            servicer,
            admin_token=settings.admin_token,
            token=settings.token,
            worker_token=settings.worker_token,
            host=settings.host,
            port=settings.port,
            reflection=settings.reflection,
            tls=settings.tls,
            interceptors=(metrics.interceptor(),) if metrics is not None else (),
        )
    except BaseException:
        store.close()
        raise
    app = ControlApp(settings, key, store, servicer, running)
    if metrics is not None and settings.metrics_port is not None:
        try:
            app.metrics = serve_metrics(
                metrics.registry, host=settings.host, port=settings.metrics_port
            )
        except BaseException:
            await app.stop()
            raise
    if settings.http_port is not None:
        # Imported only when on: FastAPI and Jinja2 cost start-up time a plain control never uses.
        from rewardseal_control.console.server import start_console

        try:
            app.console = await start_console(
                servicer,
                host=settings.host,
                port=settings.http_port,
                tls=settings.tls,
                trusted_proxies=settings.console_trusted_proxies,
            )
        except BaseException:
            await app.stop()
            raise
    return app
