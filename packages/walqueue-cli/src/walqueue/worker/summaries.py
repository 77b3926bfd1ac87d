"""One summary line for a fleet: the supervisor adds up what each worker process sends it.

With ``--processes P``, a summary line per process (each with its own
partial rate) is four lines to add up by hand. Instead each child writes
its counters (`Report.snapshot`, cumulative since it started) as one JSON
line to a pipe the supervisor gave it (``--summary-fd``, hidden), every
``--summary`` seconds and once when it stops; the supervisor keeps the
latest line of every process it ever started (a restarted child begins at
zero, the dead one's last counts are kept) and logs one combined line:
the counters summed, ``running`` of the live ones, and the rate over the
time since its previous line. A line is under 512 bytes, so the writes of
several children never interleave (POSIX: writes to a pipe up to PIPE_BUF
are atomic).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import stat
import threading
import time
from typing import Any

from walqueue.worker.report import OUTCOMES, log

__all__ = ["OPTION", "Summaries", "add_summary_fd_argument", "send_summary"]

#: The hidden option that carries the write end of the supervisor's summary pipe to a child.
OPTION = "--summary-fd"


def _pipe_end(text: str) -> int:
    try:
        fd = int(text)
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            return fd
    except (ValueError, OSError):
        pass
    raise argparse.ArgumentTypeError(f"expected the descriptor of an open pipe, not {text!r}")


def add_summary_fd_argument(parser: argparse.ArgumentParser) -> None:
    """Add the hidden ``--summary-fd FD`` option (set by the supervisor for its children)."""
    parser.add_argument(OPTION, dest="summary_fd", type=_pipe_end, metavar="FD", help=argparse.SUPPRESS)


def send_summary(fd: int, stats: dict[str, Any]) -> None:
    """Write one child's counters to the supervisor's pipe (a gone supervisor is no error of the worker's)."""
    line = json.dumps({"pid": os.getpid(), **{key: stats[key] for key in (*OUTCOMES, "processed", "running")}})
    try:
        os.write(fd, line.encode() + b"\n")
    except OSError:
        pass


class Summaries:
    """The latest counters of each child, by pid; `log()` writes their sum as one line."""

    def __init__(self, read_fd: int) -> None:
        self.read_fd = read_fd
        self.latest: dict[int, dict[str, int]] = {}
        self._buffer = b""
        self._last = (time.monotonic(), 0)
        self._lock = threading.Lock()

    def read(self, timeout: float) -> None:
        """Take in the lines that arrive within `timeout` seconds (all of them that are already there)."""
        try:
            readable, _, _ = select.select([self.read_fd], [], [], timeout)
        except (OSError, ValueError):  # closed at the end of the stop
            return
        if not readable:
            return
        with self._lock:  # the supervisor's last read, at its stop, may meet its reader thread's
            try:
                self._buffer += os.read(self.read_fd, 65536)
            except OSError:
                return
            *lines, self._buffer = self._buffer.split(b"\n")
            for line in lines:
                try:
                    counts = json.loads(line)
                    self.latest[int(counts.pop("pid"))] = {key: int(value) for key, value in counts.items()}
                except (ValueError, KeyError, TypeError):
                    continue  # not a line of ours: ignored

    def log(self, live: set[int]) -> None:
        """One line: every counter summed over every process seen, `running` over the `live` ones, the rate."""
        with self._lock:
            totals = dict.fromkeys((*OUTCOMES, "processed"), 0)
            running = 0
            seen = len(self.latest)
            for pid, counts in self.latest.items():
                for key in totals:
                    totals[key] += counts.get(key, 0)
                running += counts.get("running", 0) if pid in live else 0
        now = time.monotonic()
        since, processed_then = self._last
        self._last = (now, totals["processed"])
        rate = (totals["processed"] - processed_then) / max(now - since, 1e-9)
        log.info(
            "summary of %d process(es): processed %d, completed %d, retried %d, dead %d, leases lost %d, "
            "timed out %d, running %d, %.1f tasks/s",
            seen,
            totals["processed"],
            totals["completed"],
            totals["retried"],
            totals["dead"],
            totals["lost"],
            totals["timed_out"],
            running,
            rate,
            extra={"event": "summary", "rate": round(rate, 1), "counts": {**totals, "running": running}},
        )
