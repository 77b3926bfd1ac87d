"""The context of one `Queue` call: its lock, its re-entrancy check, its wait for durability.

Kept apart from `Queue` because these rules concern every call alike and
must never differ between two of them: exactly one call holds the queue at
a time; a call made from inside another one in the same thread (the hook, a
signal handler) is `ReentrantCall` instead of a deadlock; a `close()` made
there is deferred to the interrupted call; every call waits, outside the
lock, until the state it saw is durable. A forked child closes every queue
it inherited (`os.register_at_fork`), so that it never writes through
descriptors it shares with its parent.

`Serialized` reaches into the `Queue` it guards (`_depth`, `_closed`,
`_close_pending`, `_durability`, `_release`, `_wait_durable`): the two are
one unit split in two files, and change together.
"""

from __future__ import annotations

import os
import weakref
from typing import TYPE_CHECKING

from walqueue.engine.types import ReentrantCall

if TYPE_CHECKING:
    from walqueue.engine.queue import Queue

__all__ = ["OPEN_QUEUES", "Batch", "Serialized"]

#: Every open queue of this process, so that a forked child can close its copies.
OPEN_QUEUES: weakref.WeakSet[Queue] = weakref.WeakSet()


def _close_inherited_queues() -> None:
    for queue in list(OPEN_QUEUES):
        queue._abandon_in_child()


os.register_at_fork(after_in_child=_close_inherited_queues)


class Serialized:
    """The context of one call: the queue's lock, held by exactly one call at a time.

    An `RLock` with a depth count rather than a plain lock: a signal handler
    (or the hook) that calls the queue from inside a call of the same thread
    must find out that it did, instead of waiting for itself. A handler that
    runs between taking the lock and counting the call sees depth 0 and may
    close the queue at once; the call then finds the queue closed before it
    does anything.
    """

    __slots__ = ("_queue", "_mutex", "entered")

    def __init__(self, queue: Queue) -> None:
        self._queue = queue
        #: Calls begun so far (unlocked, so only approximately): the background snapshot watches it.
        self.entered = 0
        # The lock this guard takes, kept here: a forked child replaces the
        # queue's lock, and the call under way must release the one it took.
        self._mutex = queue._mutex

    def __enter__(self) -> None:
        queue = self._queue
        self.entered += 1
        if queue._durability.waiting_here():
            # A signal handler that interrupted this thread's wait for an fsync.
            raise ReentrantCall(
                f"a call on the queue of {queue._directory} from a signal handler that interrupted a call on it; "
                "only close() may be called there"
            )
        mutex = self._mutex
        mutex.acquire()
        queue._depth += 1
        if queue._depth > 1:
            queue._depth -= 1
            mutex.release()
            raise ReentrantCall(
                f"a call on the queue of {queue._directory} from inside another call on it in the same thread "
                "(from the hook or a signal handler); only close() may be called there"
            )
        if queue._closed:
            queue._depth -= 1
            mutex.release()
            queue._raise_closed()

    def __exit__(self, error_type: type[BaseException] | None, *exc: object) -> None:
        queue = self._queue
        durability = queue._durability
        # Everything this call saw (its own transactions included) must be
        # durable before it answers: the wait is for that fsync, outside the
        # lock. A call that poisoned the queue answers with its own error.
        needed = durability.written
        poisoned = error_type is not None and queue._closed
        queue._depth -= 1
        if queue._close_pending:
            queue._close_pending = False
            queue._release(drain=True)
        self._mutex.release()
        if poisoned:
            return
        local = durability._local
        if needed > durability.durable and not local.batching:
            queue._wait_durable(needed)
        local.seen = needed  # what a `wait` (or the batch's exit) of this thread waits beyond (`Durability.seen`)
        if durability._watchers:  # holding no lock: wakes the `wait`s of other threads
            durability.announce()


class Batch:
    """`Queue.batch()`: this thread's calls answer at once; leaving waits once for all of them (group commit).

    Inside, a call of this thread does not wait for durability on its way
    out; what it wrote or saw is recorded (`Durability.seen`) and the exit
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

    __slots__ = ("_queue",)

    def __init__(self, queue: Queue) -> None:
        self._queue = queue

    def __enter__(self) -> None:
        queue = self._queue
        queue._check_open()
        queue._durability._local.batching += 1

    def __exit__(self, *exc: object) -> None:
        queue = self._queue
        durability = queue._durability
        local = durability._local
        local.batching -= 1
        if local.batching:
            return  # an inner batch: the outermost one waits
        needed = local.seen
        if needed is not None and needed > durability.durable:
            queue._wait_durable(needed)
        if durability._watchers:  # holding no lock: wakes the `wait`s of other threads
            durability.announce()
