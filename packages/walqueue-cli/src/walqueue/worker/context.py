"""What a handler is given: the `Job` (the task) and its `Context` (time left, lease lost, check).

The context is how the worker talks to a running handler, which it cannot
interrupt (a Python thread cannot be killed): it sets `lost` when the task
is no longer this handler's to finish, and a handler that runs long calls
`context.check()` between steps, which raises `LeaseLost` from then on.
Why it was lost is in `context.reason`: "lease lost" (an extend found the
lease expired, cancelled or taken again), "timeout", or "shutdown" (the
grace period is over). Its result is discarded in every case.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from walqueue import Lease
from walqueue.worker.clock import Clock
from walqueue.worker.errors import LeaseLost

__all__ = ["Context", "Job"]


@dataclass(frozen=True)
class Job:
    """The task a handler runs: its id, a copy of its payload, and which attempt this is (1 for the first).

    `lease` is the token the worker holds (for logging or an operator's
    tools); the worker acks or releases it, never the handler.
    """

    id: str
    payload: dict[str, Any]
    attempts: int
    lease: Lease

    @classmethod
    def from_lease(cls, lease: Lease) -> Job:
        return cls(lease.task_id, lease.payload, lease.attempts, lease)


class Context:
    """A running handler's view of its task: `time_left()`, `lost` / `lease_lost`, `check()`, `reason`, `heartbeats`."""

    def __init__(self, clock: Clock, deadline: int | None) -> None:
        self._clock = clock
        self._deadline = deadline  # the timeout's end, in clock units (None: no timeout)
        self._lock = threading.Lock()
        self.lost = threading.Event()  #: set once the task is no longer this handler's (wait on it, or poll)
        self.reason: str | None = None
        self.heartbeats = 0  #: how many times the worker has extended this task's lease so far

    @property
    def lease_lost(self) -> bool:
        """True once the result will be discarded (lease lost, timed out, or shut down)."""
        return self.lost.is_set()

    def time_left(self) -> int | None:
        """Clock units until the handler's timeout or the end of the shutdown grace (None: no limit yet)."""
        with self._lock:
            deadline = self._deadline
        return None if deadline is None else max(0, deadline - self._clock())

    def check(self) -> None:
        """Raise `LeaseLost` if the task is no longer this handler's; call it between the steps of long work."""
        if self.lost.is_set():
            raise LeaseLost(f"the task is no longer this worker's ({self.reason})")

    # -- the worker's side -------------------------------------------------------------

    def lose(self, reason: str) -> bool:
        """Mark the task lost for `reason`; only the first reason counts. Returns whether this call did it."""
        with self._lock:
            if self.lost.is_set():
                return False
            self.reason = reason
            self.lost.set()
            return True

    def restart_deadline(self, deadline: int | None) -> None:
        """The handler starts now: `time_left` counts down to `deadline` (None: no timeout)."""
        with self._lock:
            self._deadline = deadline

    def shorten(self, deadline: int) -> None:
        """Bring the deadline `time_left` counts down to forward to `deadline` (the end of the grace)."""
        with self._lock:
            if self._deadline is None or deadline < self._deadline:
                self._deadline = deadline
