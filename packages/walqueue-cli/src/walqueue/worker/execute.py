"""The execute role: an executor thread takes a run from the hand-off, runs the handler, and hands its outcome on.

It decides nothing about the outcome: a raise goes to the completer's
`fail`, a return to its `finished` (an ack now, queued for a batch, or an
App's `complete`). It times the handler (the fetcher's adaptive prefetch
learns from it), refuses an awaitable that a plain handler returned, and
leaves at once in a process the handler forked. Then it makes room for
the next lease.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from walqueue.worker.crew import Crew
from walqueue.worker.fetch import Prefetch
from walqueue.worker.forks import leave_if_forked
from walqueue.worker.report import log
from walqueue.worker.router import Handler
from walqueue.worker.run import Run
from walqueue.worker.settings import WorkerSettings
from walqueue.worker.sync_only import refuse_awaitable

__all__ = ["Executor"]


@dataclass(eq=False, kw_only=True)
class Executor:
    """What every executor thread runs (`run`); one object for all of them (each run carries its own state)."""

    #: This worker's process (made at `start`): one a handler forked is not this worker (`leave_if_forked`).
    pid: int = field(default_factory=os.getpid)
    handler: Handler
    settings: WorkerSettings
    crew: Crew
    prefetch: Prefetch

    def run(self) -> None:
        while True:
            run = self.crew.handoff.get()
            if run is None:
                return
            try:
                queued = self._execute(run)
            except Exception:  # a bug in recording the outcome: this thread must live on for the next task
                log.exception(
                    "recording the outcome of %s failed; its lease will run out and it runs again", run.job.id
                )
                queued = False
            with run.lock:
                run.finished = True
                replaced = run.abandoned
            if not queued:
                self.crew.monitor.remove(run)
            if replaced:
                return  # a new executor took this one's place when its handler timed out
            self.crew.pending.give(self.prefetch.capacity() if self.prefetch.adaptive else None)

    def _execute(self, run: Run) -> bool:
        """Run the handler and hand its outcome to the completer; True if its ack waits in a batch."""
        clock = self.settings.clock
        with run.lock:
            if run.settled:  # given back at shutdown before it started
                return False
            run.begin(clock(), self.settings.timeout)
        if self.settings.timeout is not None:
            self.crew.monitor.begun(run)
        began = time.monotonic()
        try:
            outcome = self.handler(run.job, run.context)
            refuse_awaitable(outcome)  # a plain handler that returned a coroutine: never acked unrun
        except BaseException as error:  # noqa: BLE001 - every failure of a handler is the task's, not the worker's
            leave_if_forked(self.pid, run.job.id, error)
            run.end(clock())
            self.prefetch.measured(time.monotonic() - began)
            self.crew.completer.fail(run, error)
            return False
        leave_if_forked(self.pid, run.job.id, None)
        run.end(clock())
        self.prefetch.measured(time.monotonic() - began)
        return self.crew.completer.finished(run, outcome)
