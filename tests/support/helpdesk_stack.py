"""The helpdesk example for tests: a seeded helpdesk on PostgreSQL, its read-only role, a worker
serving one of its bundles, and one rollout of a scripted policy through the HelpdeskActor."""

from __future__ import annotations

import asyncio
import json
import secrets
import shutil
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from helpdesk.actor import HelpdeskActor
from helpdesk.bundles import API_TOKEN_ENV, API_URL_ENV, READER_URL_ENV
from helpdesk.policies import report_for
from helpdesk.server import HelpdeskServer
from helpdesk.store import Task
from rewardseal.core.signing import TrustSet
from rewardseal.rpc.worker_client import WorkerClient, make_descriptor
from rewardseal.rpc.worker_protocol import VerifiedReceipt
from rewardseal_worker.app import WorkerApp, start_worker
from rewardseal_worker.settings import resolve_settings
from support.postgres import PostgresServer

BUNDLES = Path(__file__).resolve().parents[2] / "examples" / "helpdesk" / "bundles"
READER_ROLE = "helpdesk_reader"
CHECKPOINT = "policy_checkpoint_helpdesk_0"
SEED_CUSTOMERS = 12


@dataclass
class Helpdesk:
    """A running, seeded helpdesk and how to reach it."""

    server: HelpdeskServer
    token: str
    owner_url: str
    reader_url: str

    @property
    def url(self) -> str:
        return self.server.url

    def environ(self) -> dict[str, str]:
        """The variables the example's recipes name."""
        return {READER_URL_ENV: self.reader_url, API_URL_ENV: self.url, API_TOKEN_ENV: self.token}

    def actor(self, *, sandbox: bool = False) -> HelpdeskActor:
        return HelpdeskActor(self.url, self.token, sandbox=sandbox)


@contextmanager
def running_helpdesk(postgres: PostgresServer) -> Iterator[Helpdesk]:
    """A helpdesk on a fresh PostgreSQL database, seeded, with its reader role granted."""
    name = postgres.fresh_database()
    owner_url = postgres.url(name)
    token = secrets.token_urlsafe(24)
    server = HelpdeskServer(owner_url, token=token, seed_customers=SEED_CUSTOMERS)
    server.store.grant_reader(READER_ROLE)
    reader_url = owner_url.replace("://postgres@", f"://{READER_ROLE}@")
    try:
        with server:
            yield Helpdesk(server, token, owner_url, reader_url)
    finally:
        postgres.discard_database(name)


class ThreadedWorker:
    """A worker serving one bundle on port 0, its event loop in a thread; blocking clients."""

    def __init__(self, bundle: Path, data_dir: Path) -> None:
        settings = resolve_settings(data_dir=data_dir, contract_dir=bundle, port=0, env={})
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.app: WorkerApp = asyncio.run_coroutine_threadsafe(
            start_worker(settings), self._loop
        ).result(60)

    @property
    def digest(self) -> str:
        return self.app.bundle.contract_digest

    def evidence(self, episode_id: str) -> dict[str, Any]:
        """The evidence document the worker kept for an episode (never sent anywhere)."""
        stored = self.app.store.receipt_by_episode(episode_id)
        assert stored is not None, episode_id
        document: dict[str, Any] = json.loads(stored.evidence)
        return document

    def client(self) -> WorkerClient:
        return WorkerClient(
            f"127.0.0.1:{self.app.port}",
            token=self.app.settings.token,
            trust=TrustSet([self.app.key.public_key]),
            timeout=20.0,
        )

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.app.stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@contextmanager
def serving_bundle(
    kind: str, helpdesk: Helpdesk, tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ThreadedWorker]:
    """A worker serving a copy of the checked-in ``kind`` bundle over ``helpdesk``."""
    bundle = tmp / "contracts" / kind
    shutil.copytree(BUNDLES / kind, bundle)
    for name, value in helpdesk.environ().items():
        monkeypatch.setenv(name, value)
    worker = ThreadedWorker(bundle, tmp / "data")
    try:
        yield worker
    finally:
        worker.stop()


def play(
    client: WorkerClient,
    digest: str,
    actor: HelpdeskActor,
    policy: str,
    task: Task,
    episode_id: str,
    *,
    update: int = 0,
) -> tuple[VerifiedReceipt, Mapping[str, str]]:
    """One rollout as a trainer adapter runs it: identity, begin (the baseline read), the
    policy's report carried out by the actor, score. Returns the receipt and the identity."""
    identity = actor.identity_for(task.identity, episode_id)
    client.begin(episode_id, digest, identity)
    signal = actor.act(report_for(policy, task), identity, task.identity, episode_id)
    descriptor = make_descriptor(
        episode_id=episode_id,
        policy_checkpoint_id=CHECKPOINT,
        policy_update=update,
        reward_contract_digest=digest,
        oracle_identity=identity,
        runtime_signal=signal,
    )
    return client.score(descriptor), identity
