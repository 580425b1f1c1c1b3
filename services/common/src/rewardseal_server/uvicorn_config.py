"""The one place a uvicorn configuration is made: every HTTP server of this project gets it.

uvicorn by default rewrites the client address (and the scheme) of every request from the
``X-Forwarded-For`` / ``X-Forwarded-Proto`` headers when the connection comes from an address in
``FORWARDED_ALLOW_IPS`` (default: loopback). Every plaintext console and MockMed client *is* on
loopback, so any of them could claim to be anyone: a sign-in limit counted per address counted
whatever address the client wrote (issue 24, finding 5). Here proxy headers are off for every
server (R-H-20): the address of the connection's peer is the client. A service that must read a
forwarded address behind a proxy it trusts does so itself, from that proxy's connections only
(the console's ``--console-trusted-proxy``, :mod:`rewardseal_control.console.peers`).

Used by :mod:`rewardseal_server.http_serving` (MockMed, the helpdesk example) and
:mod:`rewardseal_server.embedded_http` (the worker's HTTP face, the control console).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import uvicorn

__all__ = ["uvicorn_config"]


def uvicorn_config(app: Any, **options: Any) -> uvicorn.Config:
    """A :class:`uvicorn.Config` for ``app``: ``options`` plus the settings no server may change.

    Proxy headers are off (the socket peer is the client, whatever ``X-Forwarded-For`` says and
    whatever ``$FORWARDED_ALLOW_IPS`` holds) and uvicorn sends no ``Server`` header.

    Raises:
        TypeError: ``options`` names ``proxy_headers``, ``forwarded_allow_ips`` or
            ``server_header`` (they are fixed here, for every server).
    """
    import uvicorn  # here: importing this module costs nothing to a process without HTTP

    fixed = {"proxy_headers", "forwarded_allow_ips", "server_header"}
    if fixed & options.keys():
        raise TypeError(f"{sorted(fixed & options.keys())} are fixed for every server")
    return uvicorn.Config(app, proxy_headers=False, server_header=False, **options)
