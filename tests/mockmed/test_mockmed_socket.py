"""MockMed's listening socket: every accepted connection sends without Nagle's delay.

asyncio turns TCP_NODELAY on only for sockets whose protocol number says TCP; a socket made with
protocol 0 kept Nagle on, and every keep-alive response then waited for the client's delayed ACK
(about 40 ms a request, which made the rest oracle and the policy's writes 20x slower).
"""

from __future__ import annotations

import asyncio
import socket

from rewardseal_mockmed.server import bind_socket


async def test_accepted_connections_have_tcp_nodelay() -> None:
    listener = bind_socket("127.0.0.1", 0)
    assert listener.proto == socket.IPPROTO_TCP
    seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        seen.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    server = await asyncio.start_server(accepted, sock=listener)
    try:
        port = listener.getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(seen, 10) != 0
        writer.close()
    finally:
        server.close()
        await server.wait_closed()
