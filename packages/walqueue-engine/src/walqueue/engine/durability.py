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

`Queue.wait` waits here too (`wait_for_commit`), for a transaction that is
durable, so that a woken thread that reads the queue sees what woke it. A
committing call announces its transactions on its way out (`announce`),
holding no other lock; `fail` is the only code that takes the commit
condition while holding another lock (the queue's), so a `close()` from a
signal handler that interrupted a waiting thread never takes the queue's
lock (see `Queue.close`): it only wakes that very thread, through the
re-entrant condition that thread may hold at that moment.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable

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
        "_failure",
        "_local",
        "_commits",
        "_watchers",
        "_announced",
    )

    def __init__(self, seq: int, wal: WalWriter, *, grouped: bool) -> None:
        self.written = seq
        self.durable = seq
        self._wal = wal
        self._grouped = grouped
        self._new_conditions()
        self._target = seq
        self._syncing = False
        self._failure: OSError | QueueClosed | None = None
        self._local = _ThreadFlags()
        self._commits = threading.Condition(threading.RLock())
        self._watchers = 0  # threads in wait_for_commit: only then does a commit notify
        self._announced = seq

    @property
    def grouped(self) -> bool:
        return self._grouped

    def wrote(self, seq: int) -> None:
        """Transaction `seq` is written (and, ungrouped, synced already). Call under the queue's lock."""
        self.written = seq
        if not self._grouped:
            self.durable = seq

    def waiting_here(self) -> bool:
        """Whether this thread is inside `wait` or `wait_for_commit` (so is a signal handler that interrupted it)."""
        local = self._local
        return local.waiting or local.commit_waiting

    def batching_here(self) -> bool:
        """Whether the calling thread is inside `Queue.batch()` (its calls leave the wait to the batch's exit)."""
        return self._local.batching > 0

    def commit_waiting_here(self) -> bool:
        """Whether this thread is inside `wait_for_commit` (so is a signal handler that interrupted it)."""
        return self._local.commit_waiting

    def seen(self) -> int:
        """The last sequence the calling thread's calls have seen (the durable one, if it made none).

        Each call records it as it ends (`Serialized.__exit__`, calls.py,
        writes ``_local.seen`` inline: it is on the path of every call).
        """
        seen = self._local.seen
        return self.durable if seen is None else seen

    def wait_for_commit(self, after: int, timeout: float, stop: Callable[[], bool]) -> bool:
        """Block until a transaction later than `after` is durable (True) or `timeout` seconds pass (False).

        Ends early, with `QueueClosed`, once the queue fails or `stop()` (a
        close deferred by a signal handler) says so.
        """
        commits = self._commits
        self._local.commit_waiting = True
        try:
            with commits:
                self._watchers += 1
                try:
                    committed = commits.wait_for(
                        lambda: self.durable > after or self._failure is not None or stop(), timeout
                    )
                finally:
                    self._watchers -= 1
                if self._failure is not None or stop():
                    raise QueueClosed("the queue was closed or poisoned during the wait")
                if committed:
                    self._local.seen = self.durable
                return committed
        finally:
            self._local.commit_waiting = False

    def announce(self) -> None:
        """Wake `wait_for_commit` if a transaction became durable since the last time. Call holding no lock."""
        if self._watchers and self.durable > self._announced:
            self.wake()

    def wake(self) -> None:
        """Wake every `wait_for_commit`, to look at the durable sequence and the failure again."""
        with self._commits:
            self._announced = max(self._announced, self.durable)
            self._commits.notify_all()

    def wait(self, needed: int) -> None:
        """Return once every transaction up to `needed` is durable; the fsync error if that cannot be.

        A waiter that the running fsync covers waits on `_covered`; one whose
        frame came after that fsync started waits on `_later`. When an fsync
        ends, its leader wakes every covered waiter and just one of the later
        ones, who leads the next fsync (which covers all of them): no thread
        is woken only to find that it must sleep again.
        """
        lock = self._lock
        self._local.waiting = True
        try:
            with lock:
                try:
                    while self.durable < needed:
                        if self._failure is not None:
                            raise _echo(self._failure)
                        if not self._syncing:
                            self._lead()
                        elif needed <= self._target:
                            self._covered.wait()
                        else:
                            self._later.wait()
                except BaseException:
                    # This thread may have been the one woken to lead next (a signal
                    # handler raised in its wait): pass that on, or the others sleep on.
                    self._covered.notify()
                    self._later.notify()
                    raise
        finally:
            self._local.waiting = False

    def drain(self) -> None:
        """Make everything written durable now (under the queue's lock, before sealing or closing)."""
        if not self._grouped:
            return
        with self._lock:
            while self._syncing:
                self._covered.wait()
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
        self.wake()

    def forget_after_fork(self) -> None:
        """In a forked child: a fresh condition, since another thread may have held this one at the fork."""
        self._new_conditions()
        self._commits = threading.Condition(threading.RLock())
        self._watchers = 0
        self._syncing = False
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
            fd = self._wal.fd()
            lock.release()
            try:
                os.fsync(fd)
            finally:
                lock.acquire()
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
            covered.notify_all()
            if self._failure is not None:
                later.notify_all()
            else:
                later.notify()  # the next leader; its fsync will cover every later waiter
            self._covered, self._later = later, covered
        if self._failure is None and target > self.durable:
            self.durable = target


class _ThreadFlags(threading.local):
    """What the calling thread is doing here; class attributes are every new thread's defaults.

    Read by every call on its way in (`waiting_here`), so plain attribute
    reads rather than ``getattr`` with a default.
    """

    waiting: bool = False
    commit_waiting: bool = False
    seen: int | None = None
    batching: int = 0  # depth of `Queue.batch()` contexts: calls then leave the wait to the batch's exit


def _echo(failure: OSError | QueueClosed) -> OSError | QueueClosed:
    """What a waiter raises once nothing more can become durable: a new exception like the first one.

    A failed fsync reaches each waiter as an `OSError` of the same errno
    (SPEC: an OSError that poisons propagates unwrapped); a queue poisoned
    or closed under the waiters as `QueueClosed`.
    """
    if isinstance(failure, OSError):
        reason = failure.strerror or str(failure)
        return OSError(failure.errno or errno.EIO, f"the fsync that covered this call failed: {reason}")
    return QueueClosed(str(failure))
