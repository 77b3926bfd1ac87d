"""What the worker counts and logs: one line per task outcome, and a summary line now and then.

Every outcome goes through `Report.outcome`, which bumps one counter and
logs one line on the ``walqueue.worker`` logger; the fields are also set on
the log record (``event``, ``lifecycle``: the engine's event name, see
`LIFECYCLE`, ``task``, ``attempt``, ``ms`` and, for failures, ``error`` and
``delay``), so ``--log-json`` writes them as JSON without parsing the message:
with the engine's `JsonLinesFormatter`, one format for the worker's lines and
the queue's lifecycle events.
`Worker.stats()` returns `Report.snapshot()`: the same counters.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from walqueue.engine.events import ACK, DEATH, GIVE_BACK, RELEASE

__all__ = ["LIFECYCLE", "OUTCOMES", "Report", "log"]

log = logging.getLogger("walqueue.worker")

#: The outcomes of one handler run (each has a counter of the same name in `stats()`):
#: completed: acked; retried: failed, released for a later attempt; dead: failed for good (out of
#: attempts, `Permanent`, unknown kind); lost: the lease was lost, the result discarded;
#: timed_out: overran its timeout, lease released; interrupted: released at shutdown; returned: a
#: prefetched lease given back before its handler started, its attempt restored (not a handler run).
OUTCOMES = ("completed", "retried", "dead", "lost", "timed_out", "interrupted", "returned")
#: The engine's lifecycle event (walqueue.engine.events) that each outcome committed, set as the line's
#: ``lifecycle`` field, so the worker's lines and the queue's event stream join on one name: a release that
#: was the last attempt is ``dead`` (the queue logs its release, then its death). `lost` has none: the
#: worker committed nothing (the expiry or cancel that took the lease is the queue's own event).
LIFECYCLE: Final = {
    "completed": ACK,
    "retried": RELEASE,
    "dead": DEATH,
    "timed_out": RELEASE,
    "interrupted": RELEASE,
    "returned": GIVE_BACK,
}
_LEVELS = {"completed": logging.INFO, "retried": logging.WARNING, "dead": logging.ERROR}


class Report:
    """Thread-safe counters of outcomes, plus the number of handlers running now."""

    def __init__(self, worker: str) -> None:
        self.worker = worker
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(OUTCOMES, 0)
        self._started = time.monotonic()
        self._last_summary = (self._started, 0)
        #: Where summaries go instead of the log (a supervisor's child: `summaries.send_summary`), if anywhere.
        self.sink: Callable[[dict[str, Any]], None] | None = None

    def outcome(self, event: str, task: str, attempt: int, ms: int, message: str, **extra: Any) -> None:
        """Count `event` for one run (it has ended) and log its line."""
        with self._lock:
            self._counts[event] += 1
        level = _LEVELS.get(event, logging.WARNING)
        if not log.isEnabledFor(level):
            return  # the busy path: no record built for a line nobody reads
        fields = {"event": event, "task": task, "attempt": attempt, "ms": ms, "worker": self.worker, **extra}
        lifecycle = LIFECYCLE.get(event)
        if lifecycle is not None:
            fields["lifecycle"] = lifecycle
        log.log(
            level,
            "%s %s (attempt %d, %d ms)%s",
            event,
            task,
            attempt,
            ms,
            f": {message}" if message else "",
            extra=fields,
        )

    def snapshot(self, running: int) -> dict[str, Any]:
        """Each outcome's counter, `processed` (their sum), `running` (given), `rate` (processed per second so far)."""
        with self._lock:
            counts: dict[str, Any] = dict(self._counts)
        processed = sum(count for name, count in counts.items() if name != "returned")  # handler runs
        elapsed = max(time.monotonic() - self._started, 1e-9)
        return {**counts, "processed": processed, "running": running, "rate": round(processed / elapsed, 1)}

    def summary(self, running: int) -> None:
        """Log one summary line; its rate is over the time since the previous summary."""
        stats = self.snapshot(running)
        if self.sink is not None:  # the supervisor logs one line for all its processes
            self.sink(stats)
            return
        now = time.monotonic()
        with self._lock:
            since, processed_then = self._last_summary
            self._last_summary = (now, stats["processed"])
        rate = (stats["processed"] - processed_then) / max(now - since, 1e-9)
        fields = {key: stats[key] for key in ("processed", *OUTCOMES, "running")}
        log.info(
            "summary: processed %d, completed %d, retried %d, dead %d, leases lost %d, timed out %d, "
            "running %d, %.1f tasks/s",
            stats["processed"],
            stats["completed"],
            stats["retried"],
            stats["dead"],
            stats["lost"],
            stats["timed_out"],
            stats["running"],
            rate,
            extra={"event": "summary", "worker": self.worker, "rate": round(rate, 1), "counts": fields},
        )
