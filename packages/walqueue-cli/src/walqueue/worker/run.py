"""`Run`: one leased task handed to the worker, from its reserve to its settling, and the lock its roles share.

Three roles may want to end the same run: the executor when the handler
returns or raises, the keep-alive (monitor.py) when a heartbeat finds the
lease gone or the timeout passes, and the lifecycle when the grace period
is over. Each ends it through the completer (complete.py), which takes the
run's lock and settles it once (`settled`); heartbeats take the same lock,
so no extend runs concurrently with, or after, the ack.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from walqueue import Lease
from walqueue.worker.clock import Clock
from walqueue.worker.context import Context, Job

__all__ = ["Run"]


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
