"""Calibration progress: the callback type, and a progress report that suits where it goes.

On a terminal, a bar redrawn in place (``calibrating [#####.....] 150/300``). Anywhere else (a
log file, a container's output, a pipe) plain lines, one every few seconds, with no carriage
returns, and the last line once (``calibrating: 300/300 trials, done``). When one callback
reports several calibrations in a row (``--seed-mockmed`` calibrates two bundles), each after
the first is numbered, so no line repeats another.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

__all__ = ["ProgressCallback", "text_progress"]

ProgressCallback = Callable[[int, int], None]
"""Called as ``progress(done, total)`` after every trial (gold and fault trials together)."""


@dataclass
class _State:
    last_draw: float | None = None
    last_done: int | None = None
    finished: bool = False
    run: int = 1


def text_progress(
    stream: TextIO,
    *,
    label: str = "calibrating",
    width: int = 30,
    min_interval: float = 0.1,
    log_interval: float = 5.0,
    clock: Callable[[], float] = time.monotonic,
    terminal: bool | None = None,
) -> ProgressCallback:
    """A progress callback writing to ``stream``: a bar redrawn in place with ``\\r`` (at most
    every ``min_interval`` seconds) when ``stream`` is a terminal, else a plain line at most
    every ``log_interval`` seconds. The first and the last report of a run always show, the
    last one once, ending its line. ``terminal`` overrides ``stream.isatty()``.
    """
    on_terminal = stream.isatty() if terminal is None else terminal
    state = _State()

    def report(done: int, total: int) -> None:
        if state.last_done is not None and done < state.last_done:
            # Counting from the start again: the next calibration of the same callback.
            state.run += 1
            state.finished = False
            state.last_draw = None
        state.last_done = done
        finished = total > 0 and done >= total
        if state.finished:
            return  # the last line of this run is out already
        now = clock()
        interval = min_interval if on_terminal else log_interval
        if not finished and state.last_draw is not None and now - state.last_draw < interval:
            return
        state.last_draw = now
        state.finished = finished
        name = label if state.run == 1 else f"{label} ({state.run})"
        if on_terminal:
            filled = width if total <= 0 else min(width, width * max(done, 0) // total)
            bar = "#" * filled + "." * (width - filled)
            stream.write(f"\r{name} [{bar}] {done}/{total}" + ("\n" if finished else ""))
        else:
            stream.write(f"{name}: {done}/{total} trials{', done' if finished else ''}\n")
        stream.flush()

    return report
