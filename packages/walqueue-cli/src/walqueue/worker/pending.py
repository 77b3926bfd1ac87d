"""What the fetcher waits for: room for more leases, or acks to send.

The worker holds at most `capacity` leases (its threads plus a prefetch);
the fetcher reserves only while there is room. A handler that returns is
acked by the fetcher's next batch, together with the next reserve (one
round trip through the server, one fsync on a queue), rather than by its
own call. Only while the fetcher is busy, though: when it is blocked in the
source's `wait` (nothing due) or the worker is stopping, an executor acks
by itself, so no ack ever waits for a wake-up.
"""

from __future__ import annotations

import threading

from walqueue.worker.running import Run

__all__ = ["Pending"]


class Pending:
    """Room for leases, and the runs whose acks wait for the fetcher; one condition for both."""

    def __init__(self, capacity: int) -> None:
        self._free = capacity
        self._acks: list[Run] = []
        self._fetcher_waiting = False  # blocked in the source's wait: executors ack by themselves
        self._changed = threading.Condition()

    def next_batch(self, stopping: threading.Event) -> tuple[list[Run], int]:
        """Block until there are acks to send or room for leases; the acks, and the room (0 once stopping).

        Returns ``([], 0)`` only when stopping and no ack is left: the fetcher's end.
        """
        with self._changed:
            self._changed.wait_for(lambda: bool(self._acks) or self._free > 0 or stopping.is_set())
            acks, self._acks = self._acks, []
            return acks, 0 if stopping.is_set() else self._free

    def queue_ack(self, run: Run, stopping: threading.Event) -> bool:
        """Leave `run`'s ack to the fetcher; False when the executor must send it itself (see the module)."""
        with self._changed:
            if self._fetcher_waiting or stopping.is_set():
                return False
            self._acks.append(run)
            self._changed.notify_all()
            return True

    def begin_waiting(self) -> bool:
        """The fetcher is about to block in the source's wait; False if acks came in meanwhile (do not wait)."""
        with self._changed:
            if self._acks:
                return False
            self._fetcher_waiting = True
            return True

    def end_waiting(self) -> None:
        with self._changed:
            self._fetcher_waiting = False

    def take(self) -> None:
        with self._changed:
            self._free -= 1

    def give(self) -> None:
        with self._changed:
            self._free += 1
            self._changed.notify_all()

    def wake(self) -> None:
        with self._changed:
            self._changed.notify_all()
