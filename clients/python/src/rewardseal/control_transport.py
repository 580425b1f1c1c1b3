"""How the control plane's clients move messages, once for each transport.

:class:`BlockingTransport` and :class:`AsyncTransport` own a channel (plaintext, TLS, or a
ready one) and a stub, and do the three things every call needs: a unary call with the client's
deadline, bearer token and retry rule; a listing read through its last page; a server stream
read to its end. Every failure becomes a :mod:`rewardseal.core.errors` error
(:func:`rewardseal.rpc.status.from_rpc_error`). :mod:`rewardseal.rpc.control_client` and
:mod:`rewardseal.rpc.integrity_client` subclass them with their service's stub and
:class:`~rewardseal.rpc.control_protocol.CallRules`, so none has its own constructor or call loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Generator, Iterator
from typing import Any, ClassVar, Generic, Self, TypeVar, cast

import grpc

from rewardseal.rpc.control_protocol import CallRules, Listing
from rewardseal.rpc.status import from_rpc_error
from rewardseal.rpc.tls import ClientTls, aio_channel
from rewardseal.rpc.tls import channel as tls_channel
from rewardseal.rpc.worker_client import (
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_SECONDS,
    message_size_options,
)

__all__ = ["AsyncTransport", "BlockingTransport"]

_Item = TypeVar("_Item")
_Rules = TypeVar("_Rules", bound=CallRules)


class BlockingTransport(Generic[_Rules]):
    """A blocking channel and stub with the call, listing and stream loops; a client names its
    service's stub (``STUB``) and rules (``RULES``)."""

    STUB: ClassVar[type[Any]]
    RULES: ClassVar[type[CallRules]]

    def __init__(
        self,
        target: str,
        *,
        token: str,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        retries: int = DEFAULT_RETRIES,
        page_size: int = 0,
        max_pages: int | None = None,
        channel: grpc.Channel | None = None,
        tls: ClientTls | None = None,
    ) -> None:
        """``timeout``: the deadline of each call, in seconds; ``retries``: at most this many
        resends of an idempotent call answered UNAVAILABLE; ``page_size``: items asked for per
        page (0: control's default, 50; it sends at most 500); ``max_pages``: stop a listing
        after this many pages (None: read to the end); ``tls`` makes the channel TLS; a ready
        ``channel`` is used as given, so the two cannot be combined (ValidationError, as is an
        empty token)."""
        rules = self.RULES(token, timeout, retries, page_size, max_pages, channel, tls)
        self._protocol = cast(_Rules, rules)
        self._channel = channel or tls_channel(target, tls, message_size_options())
        self._stub = self.STUB(self._channel)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()

    def _call(self, rpc: str, request: Any) -> Any:
        attempt = 0
        while True:
            try:
                method = getattr(self._stub, rpc)
                return method(
                    request, timeout=self._protocol.timeout, metadata=self._protocol.metadata
                )
            except grpc.RpcError as exc:
                delay = self._protocol.retry_delay(rpc, exc, attempt)
                if delay is None:
                    raise from_rpc_error(exc) from None
                time.sleep(delay)
                attempt += 1

    def _read(self, listing: Listing[_Item]) -> Iterator[_Item]:
        request = listing.request
        while request is not None:
            page = self._call(listing.rpc, request)
            yield from listing.items(page)
            request = listing.after(page)

    def _stream(
        self, rpc: str, request: Any, deadline: float | None = None
    ) -> Generator[Any, None, None]:
        """Each message of the server stream ``rpc``. No deadline unless ``deadline`` (seconds)
        is given: a stream is meant to stay open while the caller reads. Never retried."""
        call = getattr(self._stub, rpc)(request, timeout=deadline, metadata=self._protocol.metadata)
        try:
            yield from call
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None
        finally:
            call.cancel()  # a no-op once the stream ended; stops it when we stopped reading


class AsyncTransport(Generic[_Rules]):
    """An asyncio channel and stub with the call, listing and stream loops; a client names its
    service's stub (``STUB``) and rules (``RULES``)."""

    STUB: ClassVar[type[Any]]
    RULES: ClassVar[type[CallRules]]

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
        """The settings of :class:`BlockingTransport`; ``channel`` is an asyncio channel."""
        rules = self.RULES(token, timeout, retries, page_size, max_pages, channel, tls)
        self._protocol = cast(_Rules, rules)
        self._channel = channel or aio_channel(target, tls, message_size_options())
        self._stub = self.STUB(self._channel)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the channel."""
        await self._channel.close()

    async def _call(self, rpc: str, request: Any) -> Any:
        attempt = 0
        while True:
            try:
                method: Callable[..., Awaitable[Any]] = getattr(self._stub, rpc)
                return await method(
                    request, timeout=self._protocol.timeout, metadata=self._protocol.metadata
                )
            except grpc.RpcError as exc:
                delay = self._protocol.retry_delay(rpc, exc, attempt)
                if delay is None:
                    raise from_rpc_error(exc) from None
                await asyncio.sleep(delay)
                attempt += 1

    async def _read(self, listing: Listing[_Item]) -> AsyncIterator[_Item]:
        request = listing.request
        while request is not None:
            page = await self._call(listing.rpc, request)
            for item in listing.items(page):
                yield item
            request = listing.after(page)

    async def _stream(
        self, rpc: str, request: Any, deadline: float | None = None
    ) -> AsyncGenerator[Any, None]:
        """Each message of the server stream ``rpc``; see :meth:`BlockingTransport._stream`."""
        call = getattr(self._stub, rpc)(request, timeout=deadline, metadata=self._protocol.metadata)
        try:
            async for message in call:
                yield message
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None
        finally:
            call.cancel()  # a no-op once the stream ended; stops it when we stopped reading
