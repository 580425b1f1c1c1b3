"""Who is signing in: the connection's peer, or the client a trusted proxy names (R-H-21).

Every server runs with uvicorn's proxy headers off (:mod:`rewardseal_server.uvicorn_config`),
so ``request.client`` is the socket peer and nothing a client writes in a header moves it. Behind
a reverse proxy every client has the proxy's address; an operator who wants the real one names
the proxy (``serve --console-trusted-proxy 10.0.0.5`` or a network such as ``10.0.0.0/24``,
``$REWARDSEAL_CONTROL_CONSOLE_TRUSTED_PROXIES``), and only then, and only on connections *from*
that proxy, is ``X-Forwarded-For`` read: from the right, skipping hops that are themselves
trusted proxies, the first other address is the client. An entry that is not an address stops
the walk at the last trusted hop (what the client wrote is never believed).

:func:`throttle_key` is the key the sign-in limit counts on: the address itself, or for IPv6 its
/64 network (one host commonly holds a whole /64, and could otherwise try from a fresh address
every time).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from rewardseal.core.errors import ValidationError

__all__ = [
    "FORWARDED_FOR",
    "IPV6_THROTTLE_PREFIX",
    "Network",
    "Peer",
    "TrustedProxies",
    "parse_trusted_proxies",
    "throttle_key",
]

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
IPV6_THROTTLE_PREFIX: Final = 64
"""IPv6 clients are counted per network of this prefix length."""
FORWARDED_FOR: Final = "x-forwarded-for"


@dataclass(frozen=True)
class Peer:
    """The client a request comes from, and the trusted proxy that named it (if any)."""

    client: str
    via: str | None = None

    def __str__(self) -> str:
        """How log lines name it: ``127.0.0.1``, or ``203.0.113.7 via 10.0.0.5``."""
        return self.client if self.via is None else f"{self.client} via {self.via}"


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        parsed = ipaddress.ip_address(text.strip().removeprefix("[").removesuffix("]"))
    except ValueError:
        return None
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is not None:
        return parsed.ipv4_mapped
    return parsed


def parse_trusted_proxies(entries: Iterable[str], *, source: str) -> tuple[Network, ...]:
    """The networks ``entries`` name (an address is a network of one); ``source`` names the
    flag or variable in the error.

    Raises:
        ValidationError: an entry is neither an address nor a network in CIDR notation (host
            bits set, as in ``10.0.0.1/8``, count as a typo), or it is a ``/0`` network (that
            would believe every client's ``X-Forwarded-For``: the hole this setting closes).
    """
    networks: list[Network] = []
    for entry in entries:
        text = entry.strip()
        if not text:
            continue
        try:
            network = ipaddress.ip_network(text, strict=True)
        except ValueError:
            raise ValidationError(
                f"{source}: {text!r} is not an IP address or network (e.g. 127.0.0.1, "
                "10.0.0.0/24, ::1)"
            ) from None
        if network.prefixlen == 0:
            raise ValidationError(
                f"{source}: {text!r} would trust every client's X-Forwarded-For; name the "
                "proxy's own address or network"
            )
        networks.append(network)
    return tuple(networks)


class TrustedProxies:
    """The proxies whose ``X-Forwarded-For`` is believed (none by default: the peer is the
    client)."""

    def __init__(self, networks: Sequence[Network] = ()) -> None:
        self._networks = tuple(networks)

    def __bool__(self) -> bool:
        return bool(self._networks)

    def _trusted(self, address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        return any(address in network for network in self._networks)

    def peer(self, socket_peer: str | None, forwarded_for: Sequence[str] = ()) -> Peer:
        """The client of a request whose connection comes from ``socket_peer`` and which
        carries the ``X-Forwarded-For`` header values ``forwarded_for`` (in order)."""
        peer = socket_peer or "unknown"
        current = _address(peer)
        if current is None or not self._trusted(current):
            return Peer(peer)
        hops = [hop for value in forwarded_for for hop in value.split(",") if hop.strip()]
        for hop in reversed(hops):
            address = _address(hop)
            if address is None:
                break  # written by the client: stop at the last hop a trusted proxy added
            if not self._trusted(address):
                return Peer(str(address), via=peer)
            current = address
        return Peer(str(current), via=peer) if str(current) != peer else Peer(peer)


def throttle_key(client: str) -> str:
    """What the sign-in limit counts ``client`` under: the address, or its IPv6 /64."""
    address = _address(client)
    if address is None:
        return client
    if isinstance(address, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((address, IPV6_THROTTLE_PREFIX), strict=False))
    return str(address)
