"""One handler run (`Run`) and how it ends (`Settler`): ack, retry, dead, lost, timed out, interrupted.

Three threads may want to end the same run: the executor when the handler
returns or raises, the monitor when a heartbeat finds the lease gone or the
timeout passes, and the shutdown when the grace period is over. Each takes
the run's lock and only the first one settles it (`settled`); the others
find it settled and do nothing, so a task is acked or released at most once
by this worker, and a result that arrives after its lease was lost, timed
out or released is discarded instead of acked. Heartbeats take the same
lock, so no extend runs concurrently with, or after, the ack.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from walqueue import Lease, StaleLease
from walqueue.engine.validate import MAX_INT
from walqueue.worker.clock import MILLISECONDS, Clock
from walqueue.worker.context import Context, Job
from walqueue.worker.errors import Permanent, Retry
from walqueue.worker.report import Report, log
from walqueue.worker.retry import RetryPolicy
from walqueue.worker.source import Source, error_of, fail, give_back, release_failed, with_traceback

__all__ = ["Run", "Settler", "describe_delay"]


def describe_delay(units: int, units_per_second: int) -> str:
    """A delay in clock units as a person reads it: ``747 ms``, ``12.5 s``, ``10 min``, ``2 h``, ``3 d``."""
    seconds = units / units_per_second
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


@dataclass(eq=False)
class Run:
    """A leased task handed to an executor: the latest token, the context, and the times the monitor keeps."""

    lease: Lease
    job: Job
    context: Context
    started: int
    next_beat: int
    timeout_at: int | None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    settled: bool = False  # acked, released, failed or lost: nothing more may be sent for this lease
    finished: bool = False  # the handler has returned (or raised)
    abandoned: bool = False  # timed out: its executor was replaced, and exits when the handler returns
    begun: bool = False  # its handler has started (a prefetched lease waits in the hand-off until then)
    ended: int | None = None  # when its handler returned or raised (clock units): its logged time ends there

    @classmethod
    def start(cls, lease: Lease, clock: Clock, now: int, beat_every: int, timeout: int | None) -> Run:
        """A run of a lease reserved at `now`: first beat after `beat_every`, taken back after `timeout`."""
        timeout_at = None if timeout is None else now + timeout
        return cls(lease, Job.from_lease(lease), Context(clock, timeout_at), now, now + beat_every, timeout_at)

    def begin(self, now: int, timeout: int | None) -> None:
        """The handler starts now (a prefetched lease may have waited): its time and its timeout count from here."""
        self.begun = True
        self.started = now
        self.timeout_at = None if timeout is None else now + timeout
        self.context.restart_deadline(self.timeout_at)

    def end(self, now: int) -> None:
        """The handler returned or raised now: its logged duration stops here, whenever its ack is sent."""
        self.ended = now


class Settler:
    """Ends runs: the only code that acks, releases or fails a lease (and then counts and logs the outcome)."""

    def __init__(
        self, source: Source, clock: Clock, retry: RetryPolicy, report: Report, units_per_second: int = MILLISECONDS
    ) -> None:
        self.source = source
        self.clock = clock
        self.retry = retry
        self.report = report
        self.units_per_second = units_per_second

    def _elapsed(self, run: Run) -> int:
        """The handler's own time in milliseconds: until it returned (not the wait for a batched ack), or now."""
        end = run.ended if run.ended is not None else self.clock()
        return max(0, end - run.started) * 1000 // self.units_per_second

    def _record(self, run: Run, event: str, message: str = "", **extra: Any) -> None:
        self.report.outcome(event, run.job.id, run.job.attempts, self._elapsed(run), message, **extra)

    def succeed(self, run: Run) -> None:
        """The handler returned: ack, unless the run was settled meanwhile (then the result is discarded)."""
        if not self.claim(run):
            return
        try:
            self.source.ack(run.lease, now=self.clock())
        except (StaleLease, OSError) as error:
            self.acked(run, error)
        else:
            self.acked(run, None)

    def claim(self, run: Run) -> bool:
        """Settle a run whose handler returned, for an ack sent now or in the fetcher's next batch.

        False (and the result is discarded) if it was settled meanwhile. A
        claimed run gets no more heartbeats; its ack follows at once.
        """
        with run.lock:
            if run.settled:
                log.debug("result of %s discarded: %s", run.job.id, run.context.reason)
                return False
            run.settled = True
            return True

    def acked(self, run: Run, error: BaseException | None) -> None:
        """Count and log the ack of a claimed run: done, or `error` (`StaleLease`, a lost answer)."""
        if error is None:
            self._record(run, "completed")
        elif isinstance(error, StaleLease):
            run.context.lose("lease lost")
            self._record(run, "lost", f"finished, but the lease was lost before the ack: {error}")
        else:  # the server went away: the ack may or may not have happened
            self._record(run, "lost", f"the ack's answer was lost ({error}); the task may run again")

    def fail(self, run: Run, error: BaseException) -> None:
        """The handler raised `error`: dead at once (`Permanent`), or released for a retry after a delay."""
        with run.lock:
            if run.settled:
                log.debug("failure of %s discarded (%r): %s", run.job.id, error, run.context.reason)
                return
            run.settled = True
            stored = with_traceback(error_of(error), error)
            if "traceback" in stored:  # the failure's whole story, logged where it happened
                log.info("task %s attempt %d raised:\n%s", run.job.id, run.job.attempts, stored["traceback"])
            if isinstance(error, Permanent):
                self._send(run, "dead", lambda now: fail(self.source, run.lease, now=now, error=stored), stored)
                return
            if isinstance(error, Retry) and error.delay is not None:
                delay = error.delay
            elif type(chosen := getattr(error, "walqueue_retry_delay", None)) is int:  # a task's own policy (app.py)
                delay = chosen
            else:
                delay = self.retry.delay(run.job.attempts)
            self._release(run, "retried", delay, stored)

    def abandon(self, run: Run, event: str, reason: str, delay: int, error: dict[str, str]) -> bool:
        """Take the task back from a handler still running (timeout, shutdown): tell it, then release.

        Returns False when the run was already settled (nothing done).
        """
        with run.lock:
            if run.settled:
                return False
            run.settled = True
            run.context.lose(reason)
            self._release(run, event, delay, error)
            return True

    def withdraw(self, run: Run, reason: str = "shutdown") -> bool:
        """Give back a prefetched lease whose handler never started: at once, its attempt restored, no error.

        `give_back` undoes the lease, so a task is never dead without a run
        that used its last attempt, and its last error stays its last run's.
        """
        with run.lock:
            if run.settled or run.begun:
                return False
            run.settled = True
            run.context.lose(reason)
            try:
                give_back(self.source, run.lease, now=self.clock())
            except (StaleLease, OSError) as error:
                self._record(run, "lost", f"not started; giving it back failed ({error})")
            else:
                self._record(run, "returned", f"not started: given back at {reason}, its attempt restored")
            return True

    def lose(self, run: Run, error: BaseException) -> None:
        """A heartbeat found the lease gone (called with the run's lock held): tell the handler, log it."""
        run.settled = True
        run.context.lose("lease lost")
        self._record(run, "lost", f"the lease was lost while the handler ran ({error}); its result will be discarded")

    def _release(self, run: Run, event: str, delay: int, error: dict[str, str]) -> None:
        now = self.clock()
        delay = max(0, min(delay, MAX_INT - now))  # a retry beyond the largest time waits until it

        def release(now: int) -> None:
            release_failed(self.source, run.lease, now=now, delay=min(delay, MAX_INT - now), error=error)

        self._send(run, event, release, error, delay=delay)

    def _send(self, run: Run, event: str, call: Any, error: dict[str, str], delay: int | None = None) -> None:
        try:
            call(self.clock())
        except StaleLease as stale:
            run.context.lose("lease lost")
            self._record(run, "lost", f"{error['type']}: {error['message']}; then the lease was lost ({stale})")
            return
        except OSError as lost:
            self._record(run, "lost", f"{error['type']}: {error['message']}; the answer was lost ({lost})")
            return
        if event == "retried" and self._release_buried(run):
            event = "dead"  # that was its last attempt
        extra: dict[str, Any] = {"error": error}
        message = f"{error['type']}: {error['message']}"
        if delay is not None and event != "dead":
            extra["delay"] = delay
            message += f"; next attempt in {describe_delay(delay, self.units_per_second)}"
        self._record(run, event, message, **extra)

    def _release_buried(self, run: Run) -> bool:
        """Whether this very release made the task dead (its last attempt).

        Dead with this lease's generation: a task retried, leased again by
        another thread and buried by that one's release has a later one.
        """
        try:
            task = self.source.get(run.lease.task_id)
        except Exception:  # noqa: BLE001 - only the log line's word depends on it
            return False
        return task is not None and task.status == "dead" and task.generation == run.lease.generation
