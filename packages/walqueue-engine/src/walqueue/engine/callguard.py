"""The context of one `Queue` call: its lock, its re-entrancy check, its wait for durability, closing.

Kept apart from `Queue` because these rules concern every call alike and
must never differ between two of them: exactly one call holds the queue at
a time; a call made from inside another one in the same thread (the hook, a
signal handler) is `ReentrantCall` instead of a deadlock; a `close()` made
there is deferred to the interrupted call; every call waits, outside the
lock, until the state it saw is durable (or leaves that wait to its batch,
`Batch`). A forked child closes every queue it inherited
(`os.register_at_fork`), so that it never writes through descriptors it
shares with its parent.

`CallGuard` holds what those rules need (the lock, the depth, the closed
flags, what each thread is doing) and talks to the rest of the queue
through what it is given: the durability to wait for, the commit notices
to announce to, and two callbacks of the queue: `release_files` (close
the files) and `on_fork` (drop an inherited copy).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field, replace

from walqueue.engine.commits import CommitNotices
from walqueue.engine.durability import Durability
from walqueue.engine.types import QueueClosed, ReentrantCall, StaleLease

__all__ = ["OPEN_GUARDS", "Batch", "CallGuard", "ThreadFlags"]

#: The guard of every open queue of this process, so that a forked child can close its copies.
OPEN_GUARDS: weakref.WeakSet[CallGuard] = weakref.WeakSet()


def _close_inherited_queues() -> None:
    for guard in list(OPEN_GUARDS):
        guard.abandon_in_child()


os.register_at_fork(after_in_child=_close_inherited_queues)


class ThreadFlags(threading.local):
    """What the calling thread is doing with the queue; class attributes are every new thread's defaults.

    A signal handler runs in the thread it interrupts, so these flags are
    how it finds out what it interrupted. Read by every call on its way in,
    so plain attribute reads rather than ``getattr`` with a default.
    """

    #: Inside a wait for an fsync (`CallGuard.wait_durable`).
    waiting: bool = False
    #: Inside `Queue.wait` (`CallGuard.wait_for_commit`).
    commit_waiting: bool = False
    #: The written sequence when this thread's last call ended: what its `wait` waits beyond.
    seen: int | None = None
    #: Depth of `Queue.batch()` contexts: calls then leave their wait to the batch's exit.
    batching: int = 0
    #: Inside the release of the queue's files.
    releasing: bool = False
    #: Joining the background snapshot's thread.
    joining: bool = False


@dataclass(slots=True, weakref_slot=True, eq=False, repr=False)
class CallGuard:
    """The context of one call: the queue's lock, held by exactly one call at a time.

    An `RLock` with a depth count rather than a plain lock: a signal handler
    (or the hook) that calls the queue from inside a call of the same thread
    must find out that it did, instead of waiting for itself. A handler that
    runs between taking the lock and counting the call sees depth 0 and may
    close the queue at once; the call then finds the queue closed before it
    does anything.

    A forked child replaces the guard (`abandon_in_child`): another thread
    may have held the lock at the fork, and the call under way in the child,
    if any, must release the lock it took.
    """

    durability: Durability
    commits: CommitNotices
    _: KW_ONLY
    #: The queue's directory, which the errors name.
    where: str
    #: Close the queue's files (with `drain`, first sync what callers wait for); `release` marks the thread.
    release_files: Callable[[bool], None]
    #: The queue's own part of `abandon_in_child`.
    on_fork: Callable[[], None]
    #: The process that opened the queue: a forked child's copy is closed, and `closed_error` says why.
    owner_pid: int = field(default_factory=os.getpid)
    #: Calls begun so far (unlocked, so only approximately): the background snapshot watches it.
    entered: int = field(default=0, init=False)
    #: Calls refused with `StaleLease` (Queue.metrics): counted here, where every call ends.
    stale_leases: int = field(default=0, init=False)
    depth: int = field(default=0, init=False)
    closed: bool = field(default=False, init=False)
    #: A close() deferred to the call (or wait, or join) it interrupted.
    close_pending: bool = field(default=False, init=False)
    mutex: threading.RLock = field(default_factory=threading.RLock, init=False)
    flags: ThreadFlags = field(default_factory=ThreadFlags, init=False)
    #: One item per thread inside a wait (`waiting` or `commit_waiting` set), appended before the flag is set and
    #: popped after it is cleared (a list's append and pop are atomic): a call reads the flags only when it is
    #: not empty, which spares every call two thread-local reads (DECISIONS §61).
    waits: list[None] = field(default_factory=list, init=False)

    def __enter__(self) -> None:
        self.entered += 1
        if self.waits and (self.flags.waiting or self.flags.commit_waiting):
            # A signal handler that interrupted this thread's wait for an fsync or a commit.
            raise ReentrantCall(
                f"a call on the queue of {self.where} from a signal handler that interrupted a call on it; "
                "only close() may be called there"
            )
        mutex = self.mutex
        mutex.acquire()
        self.depth += 1
        if self.depth > 1:
            self.depth -= 1
            mutex.release()
            raise ReentrantCall(
                f"a call on the queue of {self.where} from inside another call on it in the same thread "
                "(from the hook or a signal handler); only close() may be called there"
            )
        if self.closed:
            self.depth -= 1
            mutex.release()
            raise self.closed_error()

    def __exit__(self, error_type: type[BaseException] | None, *exc: object) -> None:
        durability = self.durability
        # Everything this call saw (its own transactions included) must be
        # durable before it answers: the wait is for that fsync, outside the
        # lock. A call that poisoned the queue answers with its own error.
        needed = durability.written
        if error_type is StaleLease:
            self.stale_leases += 1
        poisoned = error_type is not None and self.closed
        self.depth -= 1
        if self.close_pending:
            self.close_pending = False
            self.release(drain=True)
        self.mutex.release()
        if poisoned:
            return
        flags = self.flags
        if needed > durability.durable and not flags.batching:
            self.wait_durable(needed)
        if durability.replica_wait is not None and not flags.batching:
            durability.replica_wait(needed)  # synchronous replication: the answer waits for the replica too
        flags.seen = needed  # what a `wait` (or the batch's exit) of this thread waits beyond
        if self.commits.watchers:  # holding no lock: wakes the `wait`s of other threads
            self.commits.announce()

    # -- the queue's life ----------------------------------------------------------

    def check_open(self) -> None:
        if self.closed:
            raise self.closed_error()

    def closed_error(self) -> QueueClosed:
        """The error a call on the closed queue raises: closed, or another process's (a forked child)."""
        if os.getpid() != self.owner_pid:
            return QueueClosed(
                f"the queue on {self.where} belongs to process {self.owner_pid}; "
                "a forked child must open a Queue of its own (once the parent has closed it)"
            )
        return QueueClosed(f"the queue on {self.where} is closed; open a new one")

    def closed_copy(self) -> CallGuard:
        """A new guard of the same queue, closed, with a lock and flags of its own (a forked child's)."""
        guard = replace(self)
        guard.closed = True
        return guard

    def release(self, *, drain: bool) -> None:
        """Close the queue's files now (under the lock); with `drain`, first sync what callers wait for."""
        flags = self.flags
        flags.releasing = True
        try:
            self.release_files(drain)
        finally:
            flags.releasing = False

    def close(self) -> None:
        """`Queue.close()`: release now, or defer to the call, wait or join this thread is inside."""
        flags = self.flags
        if flags.commit_waiting:
            # A signal handler that interrupted this thread's `wait`: taking the
            # lock could deadlock (commits.py); the wait ends and releases.
            self.closed = self.close_pending = True
            self.commits.wake()
            return
        with self.mutex:
            if flags.releasing:
                return  # a signal handler interrupted this thread's own release, which goes on
            if self.depth or flags.joining or flags.waiting:
                # Interrupted inside a call, a wait for an fsync or a join of the
                # snapshot thread: joining or waiting again here would wait for
                # this very thread. The interrupted step releases the files.
                self.closed = self.close_pending = True
                return
            self.release(drain=True)

    def release_if_pending(self) -> None:
        """Finish a close() that a signal handler deferred to the step it interrupted."""
        if self.close_pending:
            with self.mutex:
                if self.close_pending:
                    self.close_pending = False
                    self.release(drain=True)

    def join(self, thread: Callable[[], None]) -> None:
        """Run `thread` (a join of the background snapshot's thread), marked so that a close() defers to it."""
        self.flags.joining = True
        try:
            thread()
        finally:
            self.flags.joining = False
        self.release_if_pending()

    def abandon_in_child(self) -> None:
        """Right after a fork, in the child: this guard is closed for good, and the queue replaces it."""
        self.closed = True
        self.close_pending = False
        OPEN_GUARDS.discard(self)
        self.on_fork()

    # -- waits ---------------------------------------------------------------------

    def seen(self) -> int:
        """The last sequence this thread's calls have seen (the durable one, if it made none)."""
        seen = self.flags.seen
        return self.durability.durable if seen is None else seen

    def wait_durable(self, needed: int) -> None:
        """Wait (outside the lock) until transaction `needed` is durable; a failed fsync poisons the queue."""
        flags = self.flags
        try:
            self.waits.append(None)
            flags.waiting = True
            try:
                self.durability.wait(needed)
            finally:
                flags.waiting = False
                self.waits.pop()
        except OSError:
            with self.mutex:
                self.release(drain=False)
            raise
        finally:
            self.release_if_pending()  # close() from a signal handler that interrupted the wait

    def wait_for_commit(self, after: int, timeout: float) -> bool:
        """`Queue.wait`: block until a transaction later than `after` is durable, or `timeout` passes."""
        flags = self.flags
        self.waits.append(None)
        flags.commit_waiting = True
        try:
            committed = self.commits.wait(after, timeout, self._closing)
            if committed:
                flags.seen = self.durability.durable
            return committed
        finally:
            flags.commit_waiting = False
            self.waits.pop()
            self.release_if_pending()  # close() from a signal handler that interrupted the wait

    def _closing(self) -> bool:
        return self.closed


class Batch:
    """`Queue.batch()`: this thread's calls answer at once; leaving waits once for all of them (group commit).

    Inside, a call of this thread does not wait for durability on its way
    out; what it wrote or saw is recorded (`ThreadFlags.seen`) and the exit
    of the outermost batch waits until all of it is durable: one fsync
    covers every call of the batch. Whoever answers for those calls (the
    server) must send nothing before that exit has returned; if it raises
    (the fsync failed: `OSError`, and the queue is poisoned; or the queue
    was poisoned or closed before its writes were synced: `QueueClosed`),
    no call of the batch may be reported as a success. Nested batches are
    one batch; other threads are not affected; ungrouped durability (a hook,
    or `sync=False`) makes every write durable at once, so a batch changes
    nothing there.
    """

    __slots__ = ("_guard",)

    def __init__(self, guard: CallGuard) -> None:
        self._guard = guard

    def __enter__(self) -> None:
        guard = self._guard
        guard.check_open()
        guard.flags.batching += 1

    def __exit__(self, *exc: object) -> None:
        guard = self._guard
        flags = guard.flags
        flags.batching -= 1
        if flags.batching:
            return  # an inner batch: the outermost one waits
        needed = flags.seen
        if needed is not None and needed > guard.durability.durable:
            guard.wait_durable(needed)
        if needed is not None and guard.durability.replica_wait is not None:
            guard.durability.replica_wait(needed)
        if guard.commits.watchers:  # holding no lock: wakes the `wait`s of other threads
            guard.commits.announce()
