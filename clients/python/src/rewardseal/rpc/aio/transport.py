"""How every client of the package moves messages: the call, listing and stream loops, once.

:class:`AsyncTransport` owns a channel (plaintext, TLS, or a ready one) and a stub, and does the
three things every call needs: a unary call with the client's deadline, bearer token and retry
rule; a listing read through its last page; a stream read to its end. The rules it follows
(deadline, which failures are resent and how long to wait, message sizes, paging) are its
protocol's (:mod:`rewardseal.rpc.call_rules`); every failure becomes a
:mod:`rewardseal.core.errors` error (:func:`rewardseal.rpc.status.from_rpc_error`). The blocking
twin, ``BlockingTransport``, is generated from this module (:mod:`rewardseal.rpc.aio`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, ClassVar, Generic, Self, TypeVar, cast

import grpc

from rewardseal.rpc.call_rules import (
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_SECONDS,
    Attempts,
    CallRules,
    Listing,
    PagedRules,
    message_size_options,
)
from rewardseal.rpc.status import from_rpc_error
from rewardseal.rpc.tls import ClientTls, aio_channel

__all__ = ["AsyncTransport"]

_Item = TypeVar("_Item")
_Rules = TypeVar("_Rules", bound=CallRules)


class AsyncTransport(Generic[_Rules]):
    """A channel and stub with the call, listing and stream loops; a client names its service's
    stub (``STUB``) and, for the control plane's services, its rules (``RULES``)."""

    STUB: ClassVar[type[Any]]
    RULES: ClassVar[type[PagedRules]]

    def __init__(
        self,
        target: str,
        *,
        token: str,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        retries: int = DEFAULT_RETRIES,
        page_size: int = 0,
        max_pages: int | None = None,
        channel: grpc.aio.Channel | None = None,
        tls: ClientTls | None = None,
    ) -> None:
        """The control plane's clients: ``timeout``: the deadline of each call, in seconds;
        ``retries``: at most this many resends of an idempotent call answered UNAVAILABLE;
        ``page_size``: items asked for per page (0: control's default, 50; it sends at most
        500); ``max_pages``: stop a listing after this many pages (None: read to the end);
        ``tls`` makes the channel TLS; a ready ``channel`` is used as given, so the two cannot
        be combined (ValidationError, as is an empty token)."""
        rules = self.RULES(token, timeout, retries, page_size, max_pages, channel, tls)
        self._open(target, cast(_Rules, rules), channel, tls)

    def _open(
        self, target: str, rules: _Rules, channel: grpc.aio.Channel | None, tls: ClientTls | None
    ) -> None:
        """Take ``rules`` and ``channel`` (or dial ``target``) and make the stub."""
        self._protocol = rules
        self._channel = channel or aio_channel(target, tls, message_size_options())
        self._stub = self.STUB(self._channel)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the channel."""
        await self._channel.close()

    async def _call(
        self, rpc: str, request: Any, *, auth: bool = True, attempts: Attempts | None = None
    ) -> Any:
        """The answer of the unary ``rpc``, resent while the rules say so (``attempts``, when
        given, counts the sends); ``auth`` False sends no bearer token."""
        method = getattr(self._stub, rpc)
        metadata = self._protocol.metadata if auth else None
        attempt = 0
        while True:
            if attempts is not None:
                attempts.count = attempt + 1
            try:
                return await method(request, timeout=self._protocol.timeout, metadata=metadata)
            except grpc.RpcError as exc:
                delay = self._protocol.retry_delay(rpc, exc, attempt)
                if delay is None:
                    raise from_rpc_error(exc) from None
                await asyncio.sleep(delay)
                attempt += 1

    async def _read(self, listing: Listing[_Item]) -> AsyncIterator[_Item]:
        """Each item of ``listing``, page after page, each page one :meth:`_call`."""
        request = listing.request
        while request is not None:
            page = await self._call(listing.rpc, request)
            for item in listing.items(page):
                yield item
            request = listing.after(page)

    async def _stream(
        self, rpc: str, request: Any, deadline: float | None = None
    ) -> AsyncGenerator[Any, None]:
        """Each message of the stream ``rpc`` (``request`` is a message, or the requests of a
        bidirectional stream). No deadline unless ``deadline`` (seconds) is given: a stream is
        meant to stay open while the caller reads. Never retried."""
        call = getattr(self._stub, rpc)(request, timeout=deadline, metadata=self._protocol.metadata)
        try:
            async for message in call:
                yield message
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None
        finally:
            call.cancel()  # a no-op once the stream ended; stops it when we stopped reading
