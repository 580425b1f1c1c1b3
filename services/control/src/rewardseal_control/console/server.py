"""Start the console beside the control plane's gRPC server, in the same event loop."""

from __future__ import annotations

from rewardseal.core.errors import ValidationError
from rewardseal_control.console.app import create_console_app
from rewardseal_control.console.peers import Network, TrustedProxies
from rewardseal_control.service import ControlPlaneServicer
from rewardseal_server.embedded_http import RunningHttpServer, start_http_server
from rewardseal_server.serving import is_loopback
from rewardseal_server.tls import ServerTls

__all__ = ["start_console"]


async def start_console(
    servicer: ControlPlaneServicer,
    *,
    host: str,
    port: int,
    tls: ServerTls | None = None,
    trusted_proxies: tuple[Network, ...] = (),
) -> RunningHttpServer:
    """Serve the console for ``servicer`` on ``host:port`` (0: a free port).

    With ``tls`` (control's own certificate) it serves HTTPS, and asks browsers for a client
    certificate when control requires one. Without TLS it serves loopback addresses only: a
    sign-in sends a bearer token, which must never cross a network in plaintext. The socket
    peer is the client; ``trusted_proxies`` (``--console-trusted-proxy``) name the proxies whose
    ``X-Forwarded-For`` is read instead, on their connections only.

    Raises:
        ValidationError: plain HTTP on an address other machines can reach.
        CannotListen: ``host:port`` cannot be bound.
    """
    if tls is None and not is_loopback(host):
        raise ValidationError(
            f"the console serves plain HTTP on loopback addresses only, not {host}: "
            "configure control's TLS certificate and key (--tls-cert, --tls-key)"
        )
    app = create_console_app(servicer, trusted_proxies=TrustedProxies(trusted_proxies))
    return await start_http_server(app, host=host, port=port, tls=tls, name="console")
