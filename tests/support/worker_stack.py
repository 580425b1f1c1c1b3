"""A seeded MockMed worker for tests: the seeded data dir (made once, copied per test), a real
server on port 0 and a client pinned to its key. Fixtures are registered by tests/conftest.py."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from rewardseal.core.signing import SigningKey, TrustSet
from rewardseal.rpc.worker_client import AsyncWorkerClient
from rewardseal_worker.app import WorkerApp, start_worker
from rewardseal_worker.seed import seed_mockmed
from rewardseal_worker.settings import KEY_FILE, resolve_settings


@pytest.fixture(scope="session")
def seeded_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data dir seeded once per session: SoR, bundles, 300-trial calibration, certificate."""
    data_dir = tmp_path_factory.mktemp("seeded") / "data"
    key = SigningKey.load_or_create(data_dir / KEY_FILE)
    seed_mockmed(data_dir, key=key, trials=300)
    return data_dir


@pytest.fixture
def data_dir(seeded_template: Path, tmp_path: Path) -> Path:
    """A private copy of the seeded data dir (keys keep their 0600 mode)."""
    target = tmp_path / "data"
    shutil.copytree(seeded_template, target)
    return target


@dataclass
class RunningStack:
    """A started worker and a client pinned to its key."""

    app: WorkerApp
    client: AsyncWorkerClient
    data_dir: Path

    @property
    def digest(self) -> str:
        return self.app.bundle.contract_digest

    @property
    def database(self) -> Path:
        return self.data_dir / "mockmed" / "mockmed.sqlite"

    @property
    def screen(self) -> Path:
        return self.data_dir / "mockmed" / "screen.json"

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.app.port}"

    @property
    def token(self) -> str:
        return self.app.settings.token

    @property
    def trust(self) -> TrustSet:
        return TrustSet([self.app.key.public_key])


async def start_stack(
    data_dir: Path,
    *,
    contract: str = "mockmed",
    db_url: str | None = None,
    max_policy_lag: int | str | None = None,
    env: Mapping[str, str] | None = None,
) -> RunningStack:
    """Start a worker on a free port over ``data_dir`` and a client pinned to its key.

    ``max_policy_lag`` is the ``--max-policy-lag`` flag (None: ``env``'s, else the default);
    ``env`` stands in for the environment (none of the process's is read)."""
    settings = resolve_settings(
        data_dir=data_dir,
        contract_dir=data_dir / "contracts" / contract,
        port=0,
        db_url=db_url,
        max_policy_lag=max_policy_lag,
        env=dict(env or {}),
    )
    app = await start_worker(settings)
    client = AsyncWorkerClient(
        f"127.0.0.1:{app.port}",
        token=settings.token,
        trust=TrustSet([app.key.public_key]),
        timeout=20.0,
    )
    return RunningStack(app=app, client=client, data_dir=data_dir)


async def stop_stack(stack: RunningStack) -> None:
    """Close the client, then stop the worker."""
    await stack.client.close()
    await stack.app.stop()
