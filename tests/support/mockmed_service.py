"""A running MockMed service for tests: the real uvicorn server on a free loopback port.

``running_mockmed(db_url, tmp_path)`` starts :class:`rewardseal_mockmed.server.MockMedServer`
in a background thread and yields a :class:`RunningMockMed` with the URL, both tokens and an
httpx client that already carries the client token.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from rewardseal_mockmed.server import MockMedServer
from rewardseal_mockmed.settings import MockMedSettings


@dataclass
class RunningMockMed:
    """A started MockMed and clients for it."""

    server: MockMedServer
    client: httpx.Client
    """Carries the client token."""
    token: str
    admin_token: str | None
    screen_file: Path | None

    @property
    def url(self) -> str:
        return self.server.url

    def admin(self) -> httpx.Client:
        """A new client carrying the admin token (close it after use)."""
        assert self.admin_token is not None
        return httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {self.admin_token}"},
            timeout=10.0,
        )

    def set_fault(self, mode: str, delay_seconds: float | None = None) -> dict[str, Any]:
        """Switch the fault mode; return the switch's answer."""
        body: dict[str, Any] = {"mode": mode}
        if delay_seconds is not None:
            body["delay_seconds"] = delay_seconds
        with self.admin() as admin:
            response = admin.post("/admin/faults", json=body)
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result


@contextlib.contextmanager
def running_mockmed(
    db_url: str,
    tmp_path: Path,
    *,
    admin: bool = True,
    seed_rows: int = 0,
    screen_file: bool = True,
    screen_path: Path | None = None,
    read_token: str | None = None,
) -> Iterator[RunningMockMed]:
    """Serve MockMed over ``db_url`` on 127.0.0.1, a free port, until the block ends.

    ``screen_path`` puts the screen dump at that file (e.g. a seeded data dir's, which a tier-0
    worker reads) instead of one in ``tmp_path``; ``read_token`` adds the read-only token.
    """
    token = secrets.token_urlsafe(24)
    admin_token = secrets.token_urlsafe(24) if admin else None
    screen = (screen_path or tmp_path / "mockmed-screen.json") if screen_file else None
    settings = MockMedSettings(
        db_url=db_url,
        token=token,
        admin_token=admin_token,
        host="127.0.0.1",
        port=0,
        screen_file=screen,
        seed_rows=seed_rows,
        token_source="test",
        admin_token_source="test" if admin else "",
        read_token=read_token,
        read_token_source="test" if read_token is not None else "",
    )
    with (
        MockMedServer(settings) as server,
        httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=10.0
        ) as client,
    ):
        yield RunningMockMed(server, client, token, admin_token, screen)
