"""Running ``rewardseal-control`` in-process against a control plane on this event loop."""

from __future__ import annotations

import asyncio
import io

from rewardseal_control.cli import main
from support.control import ADMIN_TOKEN, ControlStack


async def cli(
    stack: ControlStack, *argv: str, token: str | None = ADMIN_TOKEN
) -> tuple[int, str, str]:
    """Run ``rewardseal-control argv --target ... --token ...`` in a thread (the server runs on
    this event loop); (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    arguments = [*argv, "--target", stack.target]
    if token is not None:
        arguments += ["--token", token]
    code = await asyncio.to_thread(main, arguments, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def table_rows(text: str) -> list[list[str]]:
    """Each line of a printed table split on whitespace."""
    return [line.split() for line in text.strip().splitlines()]
