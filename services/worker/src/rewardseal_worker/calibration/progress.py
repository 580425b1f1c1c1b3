"""Calibration progress: the callback type and a text progress bar for a terminal."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["ProgressCallback", "text_progress"]

ProgressCallback = Callable[[int, int], None]
"""Called as ``progress(done, total)`` after every trial (gold and fault trials together)."""


def text_progress(
    stream: TextIO,
    *,
    label: str = "calibrating",
    width: int = 30,
    min_interval: float = 0.1,
    clock: Callable[[], float] = time.monotonic,
) -> ProgressCallback:
    """A progress callback that redraws ``calibrating [#####.....] 150/300`` on ``stream``.

    The line is redrawn in place with ``\\r`` at most every ``min_interval`` seconds (the first
    and the last call always draw) and ends with a newline when ``done == total``.
    """
    last: list[float | None] = [None]

    def draw(done: int, total: int) -> None:
        now = clock()
        finished = total > 0 and done >= total
        previous = last[0]
        if not finished and previous is not None and now - previous < min_interval:
            return
        last[0] = now
        filled = width if total <= 0 else min(width, width * max(done, 0) // total)
        bar = "#" * filled + "." * (width - filled)
        stream.write(f"\r{label} [{bar}] {done}/{total}")
        if finished:
            stream.write("\n")
        stream.flush()

    return draw
