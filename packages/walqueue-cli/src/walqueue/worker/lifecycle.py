"""The lifecycle role: the stop signals, the shutdown in order, and what a timed-out handler costs the worker.

`stop()` sets the signals; the lifecycle thread then shuts down in order:
no more reserves at once, unstarted leases given back, running handlers
get `grace` clock units to finish, then their leases are released (so
another worker takes them now rather than when the lease runs out), the
acks still waiting are sent, and the worker is done, holding no lease. A
second `stop(now=True)` cuts the grace short.

Threads cannot be killed: a handler that overruns its timeout keeps
running in its thread, but its lease is released and whatever it does
afterwards is discarded. A replacement executor takes its place
(`on_timeout`), so a stuck handler does not shrink the pool. With
processes (`supervisor.py`, `hard_timeout`), a timeout is hard: the
process releases its other tasks and exits, and a new one is started.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from typing import Any

from walqueue.worker.clock import seconds_until
from walqueue.worker.crew import Crew
from walqueue.worker.report import log
from walqueue.worker.run import Run
from walqueue.worker.settings import WorkerSettings

__all__ = ["EXIT_HARD_TIMEOUT", "Lifecycle"]

#: The exit status of a worker process that ended itself because a handler overran a hard timeout.
EXIT_HARD_TIMEOUT = 75
#: How long a stopping worker waits for its last batch of acks (a server that stopped answering).
_ACKER_JOIN_SECONDS = 60.0


@dataclass(eq=False)
class Lifecycle:
    """Stop and shutdown (`stop`, `shutdown`: the lifecycle thread's body), and the timeouts' consequences."""

    settings: WorkerSettings
    crew: Crew
    _: KW_ONLY
    spawn_executor: Callable[[], object]
    bounded: Any  # through a server: a client whose calls give up in time (`bounded_client`)
    on_done: Callable[[], None]
    acker: threading.Thread | None = None

    def stop(self, *, now: bool = False) -> None:
        """Stop reserving at once; running handlers get the grace, then are released (`now`: no grace)."""
        self.crew.signals.stopping.set()
        if now:
            self.crew.signals.hurry.set()
        self.crew.signals.stop_requested.set()
        self.crew.pending.wake()
        self.crew.monitor.wake()

    def shutdown(self) -> None:
        """Wait for `stop`, then: no more reserves, the grace, release what still runs, close."""
        self.crew.signals.stop_requested.wait()
        with self.crew.signals.reserving:  # a reserve under way has handed out its leases when this returns
            pass
        if self.bounded is not None:  # from now on each call is tried once: nobody restarts a server mid-stop
            self.bounded.reconnect_seconds = 0.0
            self.crew.completer.source = self.bounded
        for run in self.crew.monitor.runs():
            if self.crew.completer.withdraw(run):  # prefetched, never started: given back now, not after the grace
                self.crew.monitor.remove(run)
        started = self.settings.clock()
        grace_end = started + self.settings.grace
        for run in self.crew.monitor.runs():
            run.context.shorten(grace_end)
        if not self.crew.signals.hurry.is_set():
            log.info(
                "worker %s stopping: %d task(s) running, grace %d",
                self.settings.name,
                len(self.crew.monitor),
                self.settings.grace,
            )
            units = self.settings.units_per_second
            self.crew.monitor.wait_empty(seconds_until(grace_end, started, units), self.crew.signals.hurry)
        error = {"type": "Shutdown", "message": "the worker stopped before the handler finished"}
        for run in self.crew.monitor.runs():
            if not self.crew.completer.withdraw(run):  # never started (handed out meanwhile): its attempt restored
                self.crew.completer.abandon(run, "interrupted", "shutdown", 0, error)
        self.crew.pending.close()  # the acker sends the acks still queued, then ends
        if self.acker is not None:
            self.acker.join(_ACKER_JOIN_SECONDS)
        self._finish()

    def _finish(self) -> None:
        self.crew.signals.monitor_stop.set()
        self.crew.monitor.wake()
        for _ in range(self.settings.concurrency):
            self.crew.handoff.put(None)
        if self.bounded is not None:
            self.bounded.close()
        self.on_done()

    def on_timeout(self, run: Run) -> None:
        """The keep-alive took back a timed-out run: free its slot (a new executor), or end the process (hard)."""
        if self.settings.hard_timeout:
            self._exit_hard(run)
        with run.lock:
            if run.finished:
                return  # its executor is already back in the pool
            run.abandoned = True
        if not self.crew.signals.stopping.is_set():
            self.spawn_executor()
        self.crew.pending.give()

    def _exit_hard(self, run: Run) -> None:
        """A hard timeout: release every other running task, then end this process at once."""
        log.error("%s overran its hard timeout: the process exits and its supervisor starts a new one", run.job.id)
        error = {"type": "WorkerRestart", "message": f"the worker process restarted after {run.job.id} timed out"}
        for other in self.crew.monitor.runs():
            if not self.crew.completer.withdraw(other, "restart"):  # unstarted: given back, its attempt restored
                self.crew.completer.abandon(other, "interrupted", "restart", 0, error)
        for handler in logging.getLogger().handlers + logging.getLogger("walqueue").handlers:
            handler.flush()
        os._exit(EXIT_HARD_TIMEOUT)

    def timeout_error(self, run: Run) -> dict[str, str]:
        """The error a timed-out run is released with."""
        timeout = self.settings.timeout
        return {"type": "Timeout", "message": f"the handler ran longer than its timeout ({timeout} clock units)"}
