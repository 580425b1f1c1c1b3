"""Python clients for the reward worker, sync and asyncio (R-T-5).

Both clients attach the bearer token, put a deadline on every call, retry only on UNAVAILABLE,
verify every receipt's signature against the pinned worker key, and check that the receipt
answers the request it came back for (its episode, checkpoint, policy update and contract, or
the receipt id asked for: :func:`rewardseal.core.receipts.check_receipt_answers`) before handing it
out. A signature alone proves who wrote a receipt, not which request it answers. Channels are
plaintext or, given a :class:`~rewardseal.rpc.tls.ClientTls`, TLS. Begins can be batched
(``begin_many``) or travel on the scoring stream with the descriptors.

The client is written once, for asyncio (:mod:`rewardseal.rpc.aio.worker`); the blocking
:class:`WorkerClient` is generated from it (:mod:`rewardseal.rpc.blocking.worker`). Request
building and answer checking live in :mod:`rewardseal.rpc.worker_protocol`, the call rules
(deadline, resends, message sizes) in :mod:`rewardseal.rpc.call_rules`, the call loops in
:mod:`rewardseal.rpc.aio.transport`. This module names both clients and what they take and give.
"""

from rewardseal.rpc.aio.worker import AsyncWorkerClient
from rewardseal.rpc.blocking.worker import WorkerClient
from rewardseal.rpc.call_rules import (
    DEFAULT_RETRIES,
    DEFAULT_TIMEOUT_SECONDS,
    MAX_MESSAGE_BYTES,
    message_size_options,
    retry_backoff,
)
from rewardseal.rpc.connection import WorkerConnection
from rewardseal.rpc.worker_protocol import (
    BeginOrError,
    ReceiptOrError,
    StreamEntry,
    StreamItem,
    VerifiedReceipt,
    make_begin,
    make_descriptor,
)

__all__ = [
    "DEFAULT_RETRIES",
    "DEFAULT_TIMEOUT_SECONDS",
    "MAX_MESSAGE_BYTES",
    "AsyncWorkerClient",
    "BeginOrError",
    "ReceiptOrError",
    "StreamEntry",
    "StreamItem",
    "VerifiedReceipt",
    "WorkerClient",
    "WorkerConnection",
    "make_begin",
    "make_descriptor",
    "message_size_options",
    "retry_backoff",
]
