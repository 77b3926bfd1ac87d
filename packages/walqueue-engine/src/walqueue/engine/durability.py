"""Group commit: which transactions are durable, and the one fsync that many callers share.

A durable call's frame is written under the queue's lock, and the fsync
runs outside it, so that while one fsync is under way the next callers can
write their frames; the next fsync then covers all of them. This is the
leader/follower scheme of LevelDB's writer queue (`DBImpl::Write`) and of
PostgreSQL's WAL flush, reduced to what one process needs:

- `wrote(seq)` (under the queue's lock) records that transaction `seq` is
  in the log, in log order, which is also the order of application.
- `wait(seq)` (outside the lock) returns once an fsync that started after
  `seq` was written has finished. The first waiter that finds no fsync
  under way becomes the leader: it takes everything written so far as its
  target, syncs, publishes the new durable sequence and wakes the waiters
  that fsync covered. A waiter whose sequence the running fsync does not
  cover waits apart, on a second condition; of those, the leader wakes just
  one, who leads the next fsync, which covers them all (as LevelDB's
  writer queue signals only its new front). A thread is never woken only
  to find that it must sleep again.
- A failed fsync is final: every waiter, and every later call, fails (as in
  LevelDB: after a sync error nothing more is written). The queue poisons
  itself.
- `drain()` (under the lock) makes everything written durable before a
  segment is sealed or the queue closes.

Every call waits this way before it answers, reads included, for the state
it looked at (docs/DECISIONS.md, "Group commit"): no answer ever shows a
transaction that a power cut could still take away.

The fsync itself is the log writer's (`WalWriter.sync`), the one place that
makes the log durable. What a thread is doing meanwhile (for a signal
handler that interrupts it) is the caller's to record (calls.py), and the
wake-ups of `Queue.wait` are commits.py's: this module is group commit only.
"""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Callable

from walqueue.engine.metrics import Metrics
from walqueue.engine.types import QueueClosed
from walqueue.engine.wal import WalWriter

__all__ = ["Durability"]


class Durability:
    """The written and durable sequences of one queue's log, and the shared fsync.

    Without grouping (no fsync at all, or a hook that must see each frame
    synced in its own phases), every written transaction counts as durable
    at once and `wait` never waits.
    """

    __slots__ = (
        "written",
        "durable",
        "_wal",
        "_grouped",
        "_lock",
        "_covered",
        "_later",
        "_target",
        "_syncing",
        "_sleeping",
        "_failure",
        "metrics",
        "replica_wait",
    )

    def __init__(self, seq: int, wal: WalWriter, *, grouped: bool) -> None:
        self.written = seq
        self.durable = seq
        self._wal = wal
        self._grouped = grouped
        self._new_conditions()
        self._target = seq
        self._syncing = False
        #: Threads asleep on either condition (changed under the lock): an fsync with none to wake notifies nobody.
        self._sleeping = 0
        self._failure: OSError | QueueClosed | None = None
        #: Told of each successful fsync, holding the lock: its seconds and the transactions it made durable.
        self.metrics: Metrics | None = None
        #: Synchronous replication only: called outside every lock with the sequence an answer needs in the
        #: replica; returns once it is there (walqueue.engine.replication, the replicator beside the writer).
        self.replica_wait: Callable[[int], None] | None = None

    @property
    def grouped(self) -> bool:
        return self._grouped

    def wrote(self, seq: int) -> None:
        """Transaction `seq` is written (and, ungrouped, synced already). Call under the queue's lock."""
        self.written = seq
        if not self._grouped:
            self.durable = seq

    def wait(self, needed: int) -> None:
        """Return once every transaction up to `needed` is durable; the fsync error if that cannot be.

        A waiter that the running fsync covers waits on `_covered`; one whose
        frame came after that fsync started waits on `_later`. When an fsync
        ends, its leader wakes every covered waiter and just one of the later
        ones, who leads the next fsync (which covers all of them): no thread
        is woken only to find that it must sleep again.
        """
        with self._lock:
            try:
                while self.durable < needed:
                    if self._failure is not None:
                        raise _echo(self._failure)
                    if not self._syncing:
                        self._lead()
                    else:
                        self._sleeping += 1
                        try:
                            (self._covered if needed <= self._target else self._later).wait()
                        finally:
                            self._sleeping -= 1
            except BaseException:
                # This thread may have been the one woken to lead next (a signal
                # handler raised in its wait): pass that on, or the others sleep on.
                self._covered.notify()
                self._later.notify()
                raise

    def drain(self) -> None:
        """Make everything written durable now (under the queue's lock, before sealing or closing)."""
        if not self._grouped:
            return
        with self._lock:
            while self._syncing:
                self._sleeping += 1
                try:
                    self._covered.wait()
                finally:
                    self._sleeping -= 1
            if self._failure is not None:
                raise _echo(self._failure)
            if self.durable < self.written:
                self._lead()

    def fail(self, error: QueueClosed) -> None:
        """Nothing more can become durable (the queue was poisoned or closed): every waiter raises `error`."""
        with self._lock:
            if self._failure is None:
                self._failure = error
            self._covered.notify_all()
            self._later.notify_all()

    def forget_after_fork(self) -> None:
        """In a forked child: a fresh condition, since another thread may have held this one at the fork."""
        self._new_conditions()
        self._syncing = False
        self._sleeping = 0
        self._failure = QueueClosed("a forked child's copy of the queue")

    @property
    def failed(self) -> bool:
        return self._failure is not None

    def _new_conditions(self) -> None:
        """The lock and the two conditions of the waiters (anew in a forked child)."""
        self._lock = threading.Lock()
        self._covered = threading.Condition(self._lock)
        self._later = threading.Condition(self._lock)

    def _lead(self) -> None:
        """Sync everything written so far, outside the lock; then wake whom it concerns. Called with it held.

        The durable sequence moves only if nothing failed meanwhile: a queue
        poisoned during the fsync closes its descriptor, whose number could
        then name another file by the time this fsync ran.
        """
        lock = self._lock
        self._syncing = True
        target = self._target = self.written
        try:
            lock.release()
            started = time.perf_counter()  # measures the fsync for metrics only; nothing depends on it
            try:
                self._wal.sync()
            finally:
                lock.acquire()
            seconds = time.perf_counter() - started
        except OSError as exc:
            if self._failure is not None:
                # Poisoned or closed during the fsync, which then met a descriptor
                # the queue had closed: the poisoning is what happened.
                raise _echo(self._failure) from None
            self._failure = exc
            raise
        finally:
            self._syncing = False
            covered, later = self._covered, self._later
            if self._sleeping:  # nobody asleep (a lone caller's usual fsync): no condition to wake
                covered.notify_all()
                if self._failure is not None:
                    later.notify_all()
                else:
                    later.notify()  # the next leader; its fsync will cover every later waiter
            self._covered, self._later = later, covered
        if self._failure is None and target > self.durable:
            if self.metrics is not None:
                self.metrics.synced(seconds, target - self.durable)
            self.durable = target


def _echo(failure: OSError | QueueClosed) -> OSError | QueueClosed:
    """What a waiter raises once nothing more can become durable: a new exception like the first one.

    A failed fsync reaches each waiter as an `OSError` of the same errno
    (CONTRACT §2, Poisoning: an OSError that poisons propagates unwrapped); a queue poisoned
    or closed under the waiters as `QueueClosed`.
    """
    if isinstance(failure, OSError):
        reason = failure.strerror or str(failure)
        return OSError(failure.errno or errno.EIO, f"the fsync that covered this call failed: {reason}")
    return QueueClosed(str(failure))
