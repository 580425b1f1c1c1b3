"""A seeded worker serving gRPC and HTTP (``--http-port``) on its own event loop in a thread,
so that one real server can be shared by a whole test module and called with blocking clients
(httpx and :class:`rewardseal.rpc.worker_client.WorkerClient`)."""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rewardseal.core.signing import TrustSet
from rewardseal.rpc.worker_client import WorkerClient
from rewardseal_worker.app import WorkerApp, start_worker
from rewardseal_worker.settings import resolve_settings

START_TIMEOUT_SECONDS = 60.0


@dataclass
class HttpWorker:
    """A running worker with its HTTP face; ``loop`` runs it in a background thread."""

    app: WorkerApp
    loop: asyncio.AbstractEventLoop
    data_dir: Path

    @property
    def url(self) -> str:
        assert self.app.http is not None
        return f"http://127.0.0.1:{self.app.http.port}"

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.app.port}"

    @property
    def token(self) -> str:
        return self.app.settings.token

    @property
    def digest(self) -> str:
        return self.app.bundle.contract_digest

    @property
    def trust(self) -> TrustSet:
        return TrustSet([self.app.key.public_key])

    @property
    def database(self) -> Path:
        return self.data_dir / "mockmed" / "mockmed.sqlite"

    @property
    def auth(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.token}"}

    def grpc(self) -> WorkerClient:
        """A blocking gRPC client pinned to this worker's key."""
        return WorkerClient(self.target, token=self.token, trust=self.trust, timeout=20.0)

    def run(self, coroutine: Any, timeout: float = 30.0) -> Any:
        """Run ``coroutine`` on the worker's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)


@contextmanager
def http_worker(
    seeded: Path, into: Path, *, contract: str = "mockmed", **settings: Any
) -> Iterator[HttpWorker]:
    """Copy the seeded data dir ``seeded`` to ``into`` and serve it with an HTTP face on free
    ports; ``settings`` go to :func:`resolve_settings`."""
    shutil.copytree(seeded, into)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="http-worker", daemon=True)
    thread.start()
    resolved = resolve_settings(
        data_dir=into,
        contract_dir=into / "contracts" / contract,
        port=0,
        http_port=0,
        env={},
        **settings,
    )
    try:
        app = asyncio.run_coroutine_threadsafe(start_worker(resolved), loop).result(
            START_TIMEOUT_SECONDS
        )
        worker = HttpWorker(app, loop, into)
        try:
            yield worker
        finally:
            worker.run(app.stop())
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()
