"""What the fetcher and the acker wait for: room for more leases, and finished runs to ack.

The worker holds at most `capacity` leases (its threads plus a prefetch);
the fetcher reserves only while there is room, and a thread that finishes
a task makes room at once. Its ack goes to the acker thread, which sends
every ack that came in while its previous batch was on its way in one go:
one round trip through a client's pipeline, or one fsync in a `Queue.batch`.
So the executors never wait for an ack, and the fetcher's reserves and the
acker's batches overlap (the queue's group commit joins their fsyncs).
"""

from __future__ import annotations

import threading

from walqueue.worker.running import Run

__all__ = ["Pending"]


class Pending:
    """Room for leases, and the runs whose acks wait for the acker; one condition for both."""

    def __init__(self, capacity: int) -> None:
        self._free = capacity
        self._acks: list[Run] = []
        self._closed = False
        self._changed = threading.Condition()

    def wait_room(self, stopping: threading.Event) -> int:
        """Block until there is room for a lease or `stopping` is set; the room (0 once stopping)."""
        with self._changed:
            self._changed.wait_for(lambda: self._free > 0 or stopping.is_set())
            return 0 if stopping.is_set() else self._free

    def take(self) -> None:
        with self._changed:
            self._free -= 1

    def give(self) -> None:
        with self._changed:
            self._free += 1
            self._changed.notify_all()

    def queue_ack(self, run: Run) -> None:
        """Leave `run`'s ack (the run is claimed) to the acker."""
        with self._changed:
            self._acks.append(run)
            self._changed.notify_all()

    def next_acks(self) -> list[Run] | None:
        """Block until there are acks to send (all of them), or None once closed and none is left."""
        with self._changed:
            self._changed.wait_for(lambda: bool(self._acks) or self._closed)
            acks, self._acks = self._acks, []
            return acks or None

    def close(self) -> None:
        """No more acks will come: the acker sends what is left, then ends."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def wake(self) -> None:
        with self._changed:
            self._changed.notify_all()
