"""Progress of long work on a store: on a terminal for the commands, in the log for the library.

Opening, checking or salvaging a store of millions of tasks reads hundreds of
megabytes; without a sign of life that looks like a hang. `Progress` counts
bytes done against a known total and, at most every `interval` seconds,
either rewrites one status line on a terminal (`walqueue-fsck`, salvage) or
logs one INFO record (the engine while it opens a large store). Nothing is
shown for work that ends before `delay` seconds, so small stores stay quiet,
and nothing at all when the stream is not a terminal and no logger is given.

`update()` is cheap enough to call once per frame: it reads the clock only
after another `step` bytes are done.

Example (what recovery can do while it replays the WAL)::

    progress = Progress.to_log(logging.getLogger("walqueue"), f"opening {path}", total=wal_bytes)
    for frame in frames:
        ...
        progress.update(frame_end)
    progress.finish()
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["Progress"]

_MIB = 2**20


class Progress:
    """Bytes done of `total`, shown on a terminal stream or logged, at most every `interval` seconds.

    Build one with `Progress.to_terminal` or `Progress.to_log` (either may be
    silent); call `update(done)` with the bytes done so far and `finish()`
    at the end (it clears a terminal line, or logs the last record if any was
    logged). `clock` is for tests.
    """

    def __init__(
        self,
        label: str,
        total: int,
        *,
        emit: Callable[[str, bool], None] | None,
        delay: float = 1.0,
        interval: float = 1.0,
        step: int = _MIB,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.total = max(total, 0)
        self._emit = emit
        self._clock = clock
        self._interval = interval
        self._step = max(step, 1)
        self._next_bytes = self._step
        self._start = clock()
        self._next_time = self._start + delay
        self._shown = False
        self.done = 0

    @classmethod
    def to_terminal(
        cls,
        label: str,
        total: int,
        stream: TextIO | None = None,
        *,
        delay: float = 1.0,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> Progress:
        """Progress on `stream` (default stderr) if it is a terminal; silent otherwise."""
        target = sys.stderr if stream is None else stream
        try:
            tty = target.isatty()
        except (AttributeError, ValueError):
            tty = False

        def emit(text: str, final: bool) -> None:
            try:
                target.write("\r\x1b[K" + ("" if final else text))
                target.flush()
            except (OSError, ValueError):
                pass

        return cls(label, total, emit=emit if tty else None, delay=delay, interval=interval, clock=clock)

    @classmethod
    def to_log(
        cls,
        logger: logging.Logger,
        label: str,
        total: int,
        *,
        delay: float = 2.0,
        interval: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> Progress:
        """Progress as INFO records of `logger` (silent while INFO is disabled for it)."""

        def emit(text: str, final: bool) -> None:
            logger.info("%s", text)

        enabled = logger.isEnabledFor(logging.INFO)
        return cls(label, total, emit=emit if enabled else None, delay=delay, interval=interval, clock=clock)

    def restart(self, label: str, total: int) -> None:
        """Start over for the next stage of the work (a new label and total; the display stays as set up)."""
        self.label = label
        self.total = max(total, 0)
        self.done = 0
        self._next_bytes = self._step

    def text(self) -> str:
        """The status line for the bytes done so far, e.g. ``checking /q: 42% (84 of 200 MiB, 3 s)``."""
        seconds = int(self._clock() - self._start)
        if self.total:
            percent = min(100, self.done * 100 // self.total)
            return f"{self.label}: {percent}% ({self.done // _MIB} of {self.total // _MIB} MiB, {seconds} s)"
        return f"{self.label}: {self.done // _MIB} MiB ({seconds} s)"

    def update(self, done: int) -> None:
        """Record that `done` bytes are done; show or log a line if one is due."""
        self.done = done
        if self._emit is None or done < self._next_bytes:
            return
        self._next_bytes = done + self._step
        now = self._clock()
        if now < self._next_time:
            return
        self._next_time = now + self._interval
        self._shown = True
        self._emit(self.text(), False)

    def advance(self, amount: int) -> None:
        """Add `amount` bytes to what is done (see `update`)."""
        self.update(self.done + amount)

    def finish(self) -> None:
        """End the display: clear the terminal line, or log the final figure, if anything was shown."""
        if self._emit is not None and self._shown:
            self.done = max(self.done, self.total)
            self._emit(self.text(), True)
            self._shown = False
