"""rewardseal: certified, verifiable rewards for reinforcement learning of agents.

The curated public API of the client distribution. Each name is imported on first use, so
``import rewardseal`` stays cheap and ``rewardseal.core`` never pulls gRPC in::

    from rewardseal import WorkerClient, WorkerConnection, open_receipt

The layout, by audience (docs: docs/internals.md "Layout"):

- :mod:`rewardseal.core` — the pure rules (contracts, digests, signing, validation, scoring,
  receipts, certificates, calibration arithmetic, judging, integrity maths, the errors);
  imports no gRPC and no trainer.
- :mod:`rewardseal.rpc` — the only package that imports gRPC: one transport, the status mapping,
  client TLS, and the worker, control-plane and reward-integrity clients.
- :mod:`rewardseal.trainers` — the trainer adapters (TRL, verl, the OpenAI-grader shape, reward
  integrity on the trainer's side); each imports its framework lazily.
- :mod:`rewardseal.cli` — the ``rewardseal`` command line (``receipt show|verify``).
- :mod:`rewardseal.v1` — the generated protobuf messages and stubs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rewardseal.core.errors import (
        Code,
        DuplicateEpisode,
        NotFound,
        PermissionDenied,
        ReceiptMismatch,
        RewardSealError,
        SignatureError,
        Unauthenticated,
        Unavailable,
        Unscored,
        ValidationError,
    )
    from rewardseal.core.receipts import OpenedReceipt, is_unscored, open_receipt
    from rewardseal.core.signing import SigningKey, TrustSet
    from rewardseal.rpc.connection import WorkerConnection
    from rewardseal.rpc.control_client import AsyncControlClient, ControlClient
    from rewardseal.rpc.integrity_client import AsyncIntegrityClient, IntegrityClient
    from rewardseal.rpc.tls import ClientTls
    from rewardseal.rpc.worker_client import AsyncWorkerClient, WorkerClient, make_descriptor

_EXPORTS: dict[str, str] = {
    # the clients
    "WorkerClient": "rewardseal.rpc.worker_client",
    "AsyncWorkerClient": "rewardseal.rpc.worker_client",
    "make_descriptor": "rewardseal.rpc.worker_client",
    "WorkerConnection": "rewardseal.rpc.connection",
    "ControlClient": "rewardseal.rpc.control_client",
    "AsyncControlClient": "rewardseal.rpc.control_client",
    "IntegrityClient": "rewardseal.rpc.integrity_client",
    "AsyncIntegrityClient": "rewardseal.rpc.integrity_client",
    "ClientTls": "rewardseal.rpc.tls",
    # receipts and trust
    "open_receipt": "rewardseal.core.receipts",
    "OpenedReceipt": "rewardseal.core.receipts",
    "is_unscored": "rewardseal.core.receipts",
    "TrustSet": "rewardseal.core.signing",
    "SigningKey": "rewardseal.core.signing",
    # the errors a trainer handles
    "Code": "rewardseal.core.errors",
    "RewardSealError": "rewardseal.core.errors",
    "ValidationError": "rewardseal.core.errors",
    "DuplicateEpisode": "rewardseal.core.errors",
    "NotFound": "rewardseal.core.errors",
    "PermissionDenied": "rewardseal.core.errors",
    "ReceiptMismatch": "rewardseal.core.errors",
    "SignatureError": "rewardseal.core.errors",
    "Unauthenticated": "rewardseal.core.errors",
    "Unavailable": "rewardseal.core.errors",
    "Unscored": "rewardseal.core.errors",
}

__all__ = [
    "AsyncControlClient",
    "AsyncIntegrityClient",
    "AsyncWorkerClient",
    "ClientTls",
    "Code",
    "ControlClient",
    "DuplicateEpisode",
    "IntegrityClient",
    "NotFound",
    "OpenedReceipt",
    "PermissionDenied",
    "ReceiptMismatch",
    "RewardSealError",
    "SignatureError",
    "SigningKey",
    "TrustSet",
    "Unauthenticated",
    "Unavailable",
    "Unscored",
    "ValidationError",
    "WorkerClient",
    "WorkerConnection",
    "is_unscored",
    "make_descriptor",
    "open_receipt",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rewardseal' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this hook
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
