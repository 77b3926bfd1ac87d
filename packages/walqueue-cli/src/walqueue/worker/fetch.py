"""The fetch role: reserve as many leases as there is room for, hand them out, and wait when nothing is due.

One `reserve` call for all the room there is (the threads plus a
prefetch: by default as many as the threads run in about a tenth of a
second, as measured, so that a worker with slow handlers takes no more
than it starts at once). Through walqueue-serve (a source grouped by
pipeline) it reserves only once half its leases are used, and the acks
waiting then ride in the same round trip (the completer's
`reserve_with_acks`). When nothing is due it blocks in the source's
`wait` until a commit or the next due time (`stats()`'s
`next_available_at` and `next_deadline`), at most `idle_wait` clock
units: an idle worker costs a wake-up per `idle_wait`, never a spin.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from walqueue import Lease, QueueClosed
from walqueue.worker.clock import seconds_until
from walqueue.worker.crew import Crew
from walqueue.worker.report import log
from walqueue.worker.run import Run
from walqueue.worker.settings import WorkerSettings
from walqueue.worker.source import Source

__all__ = ["PREFETCH_THROUGH_A_SERVER", "Fetcher", "Prefetch"]

#: After a failed call to the source (the server is away), the fetcher waits this long, doubling up to the cap.
_BACKOFF_SECONDS = (0.05, 2.0)
#: At most this many leases prefetched per thread when the source is a client of walqueue-serve (docs/DECISIONS.md).
PREFETCH_THROUGH_A_SERVER = 31
#: By default a worker holds only as many leases as its threads run in this long (their mean run time, measured).
_PREFETCH_WINDOW_SECONDS = 0.1


class Prefetch:
    """How many leases to hold: the threads plus the prefetch, or (adaptive) what they run in the window.

    `prefetch=None` adapts: at most one per thread, or 31 through a
    server (`pipelined`), where each reserve is a round trip.
    """

    def __init__(self, concurrency: int, prefetch: int | None, *, pipelined: bool) -> None:
        self.concurrency = concurrency
        self.adaptive = prefetch is None
        self.prefetch = concurrency * (PREFETCH_THROUGH_A_SERVER if pipelined else 1) if prefetch is None else prefetch
        self._mean_run_seconds: float | None = None  # the handlers' mean run time (a moving average)

    def capacity(self) -> int:
        most = self.concurrency + self.prefetch
        if not self.adaptive:
            return most
        mean = self._mean_run_seconds
        if mean is None:  # nothing measured yet: one per thread, as a thread that finishes needs
            return self.concurrency + min(self.prefetch, self.concurrency)
        per_thread = int(_PREFETCH_WINDOW_SECONDS / max(mean, 1e-6))
        return max(self.concurrency, min(most, self.concurrency * per_thread))

    def measured(self, seconds: float) -> None:
        """One handler ran `seconds`: the moving average (a lost update between threads is harmless)."""
        mean = self._mean_run_seconds
        self._mean_run_seconds = seconds if mean is None else mean + (seconds - mean) / 8


@dataclass(eq=False)
class Fetcher:
    """The fetcher thread's body (`run`): reserve, register each run with the keep-alive, hand it to an executor."""

    source: Source
    settings: WorkerSettings
    crew: Crew
    fail_worker: Callable[[BaseException], None]

    def __post_init__(self) -> None:
        #: Through a server the acks ride on the reserves, which wait until half the leases are free.
        self.acks_ride_reserves = self.crew.completer.grouping == "pipeline"
        queues = self.settings.queues
        self._lanes: dict[str, list[str]] = {} if queues is None else {"queues": list(queues)}

    def run(self) -> None:
        stopping, pending = self.crew.signals.stopping, self.crew.pending
        backoff = _BACKOFF_SECONDS[0]
        while True:
            room = pending.wait_room(stopping)
            if room == 0:
                return
            try:
                with self.crew.signals.reserving:
                    if stopping.is_set():
                        return
                    now = self.settings.clock()
                    leases = self._reserve(now, room)
                    for lease in leases:
                        self._dispatch(lease, now)
                if not leases:
                    self._idle()
                backoff = _BACKOFF_SECONDS[0]
            except OSError as error:  # the server is away (the client reconnects on its own for a while)
                if stopping.is_set():
                    return
                log.warning("cannot reach the queue (%s); trying again in %.2f s", error, backoff)
                stopping.wait(backoff)
                backoff = min(backoff * 2, _BACKOFF_SECONDS[1])
            except QueueClosed as error:
                if not stopping.is_set():
                    self.fail_worker(error)
                return
            except Exception as error:  # a bug: stop rather than spin on it
                log.exception("the fetcher failed")
                self.fail_worker(error)
                return

    def _reserve(self, now: int, room: int) -> list[Lease]:
        """Reserve up to `room` leases; through a server, with the acks waiting now, in one round trip."""
        name, lease = self.settings.name, self.settings.lease
        if self.acks_ride_reserves:
            return self.crew.completer.reserve_with_acks(name, now=now, lease_seconds=lease, limit=room, **self._lanes)
        return self.source.reserve(name, now=now, lease_seconds=lease, limit=room, **self._lanes)

    def _dispatch(self, lease: Lease, now: int) -> None:
        """Hand a fresh lease to an idle executor (called with the reserve lock held)."""
        run = Run.start(lease, self.settings.clock, now, self.settings.beat_every, None)  # the timeout: from `begin`
        self.crew.pending.take()
        self.crew.monitor.add(run)
        self.crew.handoff.put(run)

    def _idle(self) -> None:
        """Nothing was due: block until a commit or the next due time, at most `idle_wait`."""
        stats = self.source.stats()
        dues = [time for time in (stats.get("next_available_at"), stats.get("next_deadline")) if time is not None]
        now = self.settings.clock()
        wake_at = min([now + self.settings.idle_wait, *dues])
        if wake_at > now and not self.crew.signals.stopping.is_set():
            self.crew.pending.idle(True)  # no reserve will take the acks of tasks still running: the acker sends them
            self.source.wait(seconds_until(wake_at, now, self.settings.units_per_second))
