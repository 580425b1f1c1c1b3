"""The call rules every client of the package follows, in one place: deadlines, message sizes,
which failures are resent and how long to wait, and the paging rule.

:mod:`rewardseal.rpc.aio.transport` (and its generated blocking twin) moves the messages and asks
these rules what to do; the clients' protocols (:mod:`rewardseal.rpc.worker_protocol`,
:mod:`rewardseal.rpc.control_protocol`, :mod:`rewardseal.rpc.integrity_protocol`) build on
:class:`CallRules` and name their service's resendable RPCs. Nothing here does I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

import grpc

from rewardseal.core.errors import ValidationError
from rewardseal.rpc.tls import ClientTls

__all__ = [
    "DEFAULT_RETRIES",
    "Attempts",
    "DEFAULT_TIMEOUT_SECONDS",
    "MAX_MESSAGE_BYTES",
    "CallRules",
    "Listing",
    "PagedRules",
    "message_size_options",
    "one_channel_source",
    "retry_backoff",
]

_log = logging.getLogger(__name__)

_Item = TypeVar("_Item")

DEFAULT_TIMEOUT_SECONDS = 10.0
"""The deadline of each unary call, in seconds."""
DEFAULT_RETRIES = 3
"""At most this many resends of a resendable call answered UNAVAILABLE."""
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
"""The gRPC send and receive cap of the clients' channels and the services' servers."""


def message_size_options() -> list[tuple[str, int]]:
    """The gRPC send/receive caps (:data:`MAX_MESSAGE_BYTES`): clients' channels and the
    services' servers use the same ones."""
    return [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ]


def retry_backoff(attempt: int) -> float:
    """Seconds before resend number ``attempt`` of a call answered UNAVAILABLE (exponential,
    capped at 1 s); the worker and control clients wait alike."""
    return float(min(0.05 * 2**attempt, 1.0))


def one_channel_source(channel: object, tls: ClientTls | None) -> None:
    """Refuse a ready channel together with TLS settings: the channel would silently win.

    Raises:
        ValidationError: both are given.
    """
    if channel is not None and tls is not None:
        raise ValidationError("give a channel or tls settings, not both")


class CallRules:
    """Credentials, the deadline and the retry rule of one service's clients."""

    IDEMPOTENT: ClassVar[frozenset[str]] = frozenset()
    """The RPCs a resend on UNAVAILABLE cannot do twice (each service names its own)."""

    def __init__(self, token: str, timeout: float, retries: int) -> None:
        """Raises ValidationError for an empty token."""
        if not token:
            raise ValidationError("a bearer token is required")
        self.metadata = (("authorization", f"Bearer {token}"),)
        self.timeout = timeout
        self.retries = retries

    def retry_delay(self, rpc: str, error: grpc.RpcError, attempt: int) -> float | None:
        """Seconds to wait before sending ``rpc`` again after ``error`` ended attempt
        ``attempt`` (0: the first send); None: do not retry.

        Only UNAVAILABLE is resent (the call may not have arrived), only for the RPCs in
        :attr:`IDEMPOTENT`, and at most :attr:`retries` times.
        """
        code = getattr(error, "code", lambda: None)()
        if code != grpc.StatusCode.UNAVAILABLE or rpc not in self.IDEMPOTENT:
            return None
        if attempt >= self.retries:
            return None
        return retry_backoff(attempt)


@dataclass
class Attempts:
    """How many times one logical call was sent (1 = no retry); the transport counts them for
    a caller that asks (the worker client recovers a resent score's duplicate)."""

    count: int = 0


@dataclass
class Listing(Generic[_Item]):
    """One paginated listing being read: the request for its next page and how to read one.

    ``max_pages`` bounds a page-token loop that never ends (a broken or hostile control
    plane): after that many pages the listing stops with a warning and what was read stands.
    """

    rpc: str
    """The stub attribute that serves the listing (``ListContracts``, ...)."""
    request: Any
    """The request for the next page; its ``page_token`` moves as pages arrive."""
    items: Callable[[Any], Iterable[_Item]]
    max_pages: int | None
    pages: int = 0

    def after(self, page: Any) -> Any | None:
        """The request for the page after ``page``; None when ``page`` was the last one."""
        self.pages += 1
        token = page.next_page_token
        if not token:
            return None
        if self.max_pages is not None and self.pages >= self.max_pages:
            _log.warning(
                "control's %s listing did not end after %d pages; using what was read",
                self.rpc,
                self.pages,
            )
            return None
        self.request.page_token = token
        return self.request


class PagedRules(CallRules):
    """:class:`CallRules` plus the paging rule: the control plane's services list in pages."""

    def __init__(
        self,
        token: str,
        timeout: float,
        retries: int,
        page_size: int,
        max_pages: int | None,
        channel: object,
        tls: ClientTls | None,
    ) -> None:
        """Raises ValidationError for an empty token, or a ready channel given with TLS."""
        super().__init__(token, timeout, retries)
        one_channel_source(channel, tls)
        self.page_size = page_size
        self.max_pages = max_pages

    def listing(
        self,
        rpc: str,
        request: Any,
        items: Callable[[Any], Iterable[_Item]],
        page_size: int | None,
    ) -> Listing[_Item]:
        """A listing of ``rpc`` from its first page (``page_size`` None: the client's)."""
        request.page_size = self.page_size if page_size is None else page_size
        return Listing(rpc, request, items, self.max_pages)
