"""The keep-alive role (the monitor): one thread per worker that keeps running leases alive and enforces timeouts.

Every running task has a next heartbeat time (every `beat_every` clock
units, by default a third of the lease, so two beats in a row may be late
before the lease is lost) and, with a timeout, a time at which it is taken
back. `tick(now)` does everything due at `now` and returns when the next
thing is due; the thread only sleeps until then. Tests drive `tick` with a
fake clock and no thread at all.

A heartbeat that gets `StaleLease` (the lease expired, was cancelled, or a
later reserve took the task) settles the run as lost: the handler is told
through its context and its result is never acked. A heartbeat whose
answer is lost (the server went away) is simply tried at the next beat.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

from walqueue import StaleLease
from walqueue.worker.clock import Clock, seconds_until
from walqueue.worker.complete import Completer
from walqueue.worker.report import log
from walqueue.worker.run import Run
from walqueue.worker.source import Source

__all__ = ["MAX_SLEEP_SECONDS", "Monitor"]

#: The monitor wakes at least this often (the clock may jump; the summary line is due).
MAX_SLEEP_SECONDS = 5.0


@dataclass(eq=False)
class Monitor:
    """The set of running `Run`s, their heartbeats and their timeouts."""

    completer: Completer
    _: KW_ONLY
    lease: int
    beat_every: int
    on_timeout: Callable[[Run], None]
    timeout_error: Callable[[Run], dict[str, str]]
    #: Where heartbeats go, if not to the completer's source (a client whose calls are bounded: `bounded_client`).
    beats: Source | None = None
    _runs: set[Run] = field(init=False, repr=False, default_factory=set)
    _changed: threading.Condition = field(init=False, repr=False, default_factory=threading.Condition)
    # Wake-ups cost the busy path: `add` wakes the thread only for a run due
    # before the time it sleeps until, `remove` only while someone waits for none.
    _sleeping_until: int | None = field(init=False, repr=False, default=None)
    _draining: bool = field(init=False, repr=False, default=False)

    # -- the registry --------------------------------------------------------------------

    def add(self, run: Run) -> None:
        with self._changed:
            self._runs.add(run)
            self._wake_if_sooner(run)

    def begun(self, run: Run) -> None:
        """`run`'s handler started, so its timeout now counts: wake the thread if that is due sooner."""
        with self._changed:
            self._wake_if_sooner(run)

    def _wake_if_sooner(self, run: Run) -> None:
        first = run.next_beat if run.timeout_at is None else min(run.next_beat, run.timeout_at)
        if self._sleeping_until is None or first < self._sleeping_until:
            self._changed.notify_all()

    def remove(self, run: Run) -> None:
        with self._changed:
            self._runs.discard(run)
            if self._draining:
                self._changed.notify_all()

    def runs(self) -> list[Run]:
        with self._changed:
            return list(self._runs)

    def __len__(self) -> int:
        with self._changed:
            return len(self._runs)

    def wait_empty(self, seconds: float, hurry: threading.Event) -> bool:
        """Block until no run is left (True), `seconds` pass or `hurry` is set (False)."""
        with self._changed:
            self._draining = True
            return self._changed.wait_for(lambda: not self._runs or hurry.is_set(), seconds) and not self._runs

    def wake(self) -> None:
        """Make `wait_empty` and the thread look again (a second signal, a stop)."""
        with self._changed:
            self._changed.notify_all()

    # -- what is due ---------------------------------------------------------------------

    def tick(self, now: int) -> int | None:
        """Send the heartbeats and take back the timed-out runs due at `now`; return the next due time."""
        due: int | None = None
        for run in self.runs():
            if run.settled:
                continue
            if run.timeout_at is not None and run.timeout_at <= now:
                if self.completer.abandon(run, "timed_out", "timeout", self._retry_delay(run), self.timeout_error(run)):
                    self.on_timeout(run)
                continue
            if run.next_beat <= now:
                self.beat(run, now)
            for time in (run.next_beat, run.timeout_at):
                if time is not None and (due is None or time < due):
                    due = time
        return due

    def _retry_delay(self, run: Run) -> int:
        return self.completer.retry.delay(run.job.attempts)

    def beat(self, run: Run, now: int) -> None:
        """Extend the run's lease to ``now + lease``; a lost lease settles it (the handler is told)."""
        with run.lock:
            if run.settled:
                return
            run.next_beat = now + self.beat_every
            try:
                source = self.beats if self.beats is not None else self.completer.source
                run.lease = source.extend(run.lease, now=now, lease_seconds=self.lease)
            except StaleLease as error:
                self.completer.lose(run, error)
            except OSError as error:  # the server is unreachable: the next beat tries again
                log.warning("heartbeat of %s not sent (%s); trying again at the next beat", run.job.id, error)
            else:
                run.context.heartbeats += 1

    def run_forever(
        self, clock: Clock, units_per_second: int, stop: threading.Event, every: Callable[[], float]
    ) -> None:
        """The thread's body: tick and `every()`, then sleep until either is due (woken by `add`), until `stop`."""
        while not stop.is_set():
            now = clock()
            try:
                due = self.tick(now)
            except Exception:  # a bug or a poisoned queue: keep the thread alive for the others
                log.exception("the monitor's tick failed")
                due = None
            sleep = min(MAX_SLEEP_SECONDS, every())  # `every` returns the seconds until it wants to run again
            now = clock()
            if due is not None:
                sleep = min(sleep, seconds_until(due, now, units_per_second))
            with self._changed:
                self._sleeping_until = now + int(sleep * units_per_second)
                if not stop.is_set():
                    self._changed.wait(sleep)
                self._sleeping_until = None
