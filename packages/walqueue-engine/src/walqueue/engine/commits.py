"""The wake-ups of `Queue.wait`: a thread blocks until a later transaction is durable.

A waiter waits for a transaction that is durable, not merely written, so
that a woken thread that reads the queue sees what woke it (and no read
ever shows what a power cut could take away). A committing call announces
its transactions on its way out (`announce`), holding no lock, and only
when somebody waits (`watchers`): the usual call, with no waiter, pays one
attribute test.

`wake` is the only code that takes this condition while holding another
lock (the queue's, when it closes). A `close()` from a signal handler that
interrupted a waiting thread never takes the queue's lock (see
`CallGuard.close`): it only wakes that very thread, through the re-entrant
condition that thread may hold at that moment.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from walqueue.engine.durability import Durability
from walqueue.engine.types import QueueClosed

__all__ = ["CommitNotices"]


class CommitNotices:
    """Threads waiting for a transaction later than the one they saw to become durable."""

    __slots__ = ("watchers", "_durability", "_condition", "_announced")

    def __init__(self, durability: Durability) -> None:
        self._durability = durability
        #: Threads in `wait`: only then does a commit notify.
        self.watchers = 0
        self._condition = threading.Condition(threading.RLock())
        self._announced = durability.durable

    def wait(self, after: int, timeout: float, stop: Callable[[], bool]) -> bool:
        """Block until a transaction later than `after` is durable (True) or `timeout` seconds pass (False).

        Ends early, with `QueueClosed`, once the queue fails or `stop()` (a
        close deferred by a signal handler) says so.
        """
        durability = self._durability
        with self._condition:
            self.watchers += 1
            try:
                committed = self._condition.wait_for(
                    lambda: durability.durable > after or durability.failed or stop(), timeout
                )
            finally:
                self.watchers -= 1
            if durability.failed or stop():
                raise QueueClosed("the queue was closed or poisoned during the wait")
            return committed

    def announce(self) -> None:
        """Wake the waiters if a transaction became durable since the last time. Call holding no lock."""
        if self.watchers and self._durability.durable > self._announced:
            self.wake()

    def wake(self) -> None:
        """Wake every waiter, to look at the durable sequence and the failure again."""
        with self._condition:
            self._announced = max(self._announced, self._durability.durable)
            self._condition.notify_all()

    def forget_after_fork(self) -> None:
        """In a forked child: a fresh condition, since another thread may have held this one at the fork."""
        self._condition = threading.Condition(threading.RLock())
        self.watchers = 0
