"""What the fetcher and the acker wait for: room for more leases, and finished runs to ack.

The worker holds at most `capacity` leases (its threads plus a prefetch;
`give` may change it as the worker learns how long its handlers take). The
fetcher reserves once one is free (a `Queue` in this process), or half of
them (`halve`: through walqueue-serve, where every reserve is a round
trip, so that each one brings several leases while the threads still have
work in hand), and a thread that finishes a task makes room at once.
Its ack waits here. Through a server the fetcher takes every waiting ack
with it, in the same round trip as its next reserve; the acker thread
sends the acks nobody took: at once while the fetcher has nothing to
reserve (idle), else after a short linger, bounded far inside the lease
(a claimed run gets no more heartbeats). In process the acker sends at
once every ack that came in while its previous batch was on its way (one
fsync in a `Queue.batch`). So the executors never wait for an ack.
"""

from __future__ import annotations

import threading
import time

from walqueue.worker.run import Run

__all__ = ["Pending"]


class Pending:
    """Room for leases, and the runs whose acks wait for the acker or the fetcher; one condition for all."""

    def __init__(self, capacity: int, *, halve: bool = False) -> None:
        self._capacity = capacity
        self._held = 0
        self._halve = halve
        self._acks: list[Run] = []
        self._closed = False
        self._fetcher_idle = True  # until the fetcher is about to reserve, no reserve will take an ack
        self._changed = threading.Condition()

    def _roomy(self) -> bool:
        room = self._capacity - self._held
        return room >= max(1, self._capacity // 2) if self._halve else room >= 1

    def wait_room(self, stopping: threading.Event) -> int:
        """Block until there is room enough to reserve, or `stopping` is set; the room (0 once stopping).

        From here until `idle` the acker counts on the fetcher's next reserve to take the acks.
        """
        with self._changed:
            self._fetcher_idle = False
            self._changed.wait_for(lambda: self._roomy() or stopping.is_set())
            return 0 if stopping.is_set() else self._capacity - self._held

    def idle(self, idle: bool) -> None:
        """The fetcher found nothing due and waits for a commit (True), or is back (False): acks go at once."""
        with self._changed:
            self._fetcher_idle = idle
            if idle:
                self._changed.notify_all()

    def take(self) -> None:
        with self._changed:
            self._held += 1

    def give(self, capacity: int | None = None) -> None:
        """A lease is done with (its ack may still wait); `capacity`: the new bound on leases held, if any."""
        with self._changed:
            self._held -= 1
            if capacity is not None:
                self._capacity = capacity
            self._changed.notify_all()

    def queue_ack(self, run: Run) -> None:
        """Leave `run`'s ack (the run is claimed) to the acker, or to the fetcher's next reserve."""
        with self._changed:
            self._acks.append(run)
            self._changed.notify_all()

    def take_acks(self) -> list[Run]:
        """Every ack waiting now (the fetcher sends them with its reserve); never blocks."""
        with self._changed:
            acks, self._acks = self._acks, []
            if acks:
                self._changed.notify_all()
            return acks

    def next_acks(self, linger: float = 0.0) -> list[Run] | None:
        """Block until there are acks to send (all of them), or None once closed and none is left.

        With `linger` (seconds), acks that came in while the fetcher is
        about to reserve wait that long for it to take them first.
        """
        with self._changed:
            while True:
                self._changed.wait_for(lambda: bool(self._acks) or self._closed)
                if linger > 0 and not self._closed and not self._fetcher_idle:
                    deadline = time.monotonic() + linger
                    self._changed.wait_for(
                        lambda: not self._acks or self._closed or self._fetcher_idle,
                        max(0.0, deadline - time.monotonic()),
                    )
                acks, self._acks = self._acks, []
                if acks or self._closed:
                    return acks or None

    def close(self) -> None:
        """No more acks will come: the acker sends what is left, then ends."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def wake(self) -> None:
        with self._changed:
            self._changed.notify_all()
