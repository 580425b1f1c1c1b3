"""Who the console counts a sign-in against (R-H-21): the socket peer, unless it is a trusted
proxy, and then the rightmost hop of X-Forwarded-For that no trusted proxy wrote."""

from __future__ import annotations

import pytest

from rewardseal_control.console.peers import (
    Peer,
    TrustedProxies,
    parse_trusted_proxies,
    throttle_key,
)

PROXIES = TrustedProxies(parse_trusted_proxies(["127.0.0.1", "10.0.0.0/8"], source="test"))


def test_without_trusted_proxies_the_socket_peer_is_the_client() -> None:
    nobody = TrustedProxies()
    assert not nobody
    assert nobody.peer("127.0.0.1", ["203.0.113.9"]) == Peer("127.0.0.1")
    assert nobody.peer(None, ["203.0.113.9"]) == Peer("unknown")
    # A trusted list does not make a header from any other peer count.
    assert PROXIES.peer("192.0.2.1", ["203.0.113.9"]) == Peer("192.0.2.1")


@pytest.mark.parametrize(
    ("headers", "client"),
    [
        ([], "127.0.0.1"),
        (["203.0.113.9"], "203.0.113.9"),
        (["198.51.100.1, 203.0.113.9"], "203.0.113.9"),  # the client wrote the first hop
        (["198.51.100.1, 203.0.113.9, 10.2.3.4"], "203.0.113.9"),  # a second trusted proxy
        (["198.51.100.1", "203.0.113.9,10.2.3.4"], "203.0.113.9"),  # two header lines
        (["10.9.9.9, 10.2.3.4"], "10.9.9.9"),  # every hop trusted: the farthest one
        (["203.0.113.9, not-an-address"], "127.0.0.1"),  # a bad hop stops at the last trusted
        (["not-an-address, 10.2.3.4"], "10.2.3.4"),
        (["[2001:db8::1]"], "2001:db8::1"),
        (["::ffff:203.0.113.9"], "203.0.113.9"),
    ],
)
def test_a_trusted_proxy_names_the_rightmost_untrusted_hop(headers: list[str], client: str) -> None:
    peer = PROXIES.peer("127.0.0.1", headers)
    assert peer.client == client
    assert str(peer) == (client if client == "127.0.0.1" else f"{client} via 127.0.0.1")


def test_ipv6_clients_are_counted_per_64() -> None:
    assert throttle_key("2001:db8:1:2:aaaa::1") == throttle_key("2001:db8:1:2:bbbb::7")
    assert throttle_key("2001:db8:1:2::1") == "2001:db8:1:2::/64"
    assert throttle_key("2001:db8:1:3::1") != throttle_key("2001:db8:1:2::1")
    assert throttle_key("203.0.113.9") == "203.0.113.9"
    assert throttle_key("::ffff:203.0.113.9") == "203.0.113.9"
    assert throttle_key("unknown") == "unknown"
