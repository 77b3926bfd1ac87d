"""`Queue`: ownership, the internal lock, the hook and poisoning, wired around the pure core.

Every write follows one path (`_commit`): plan a transaction from the
current state (pure), frame it (a too-large transaction is refused here,
before any byte is written), append and sync it, and only then apply it to
memory with the same `apply` that recovery uses. If anything fails once a
byte may have reached the disk, or the test hook raises, the queue poisons
itself: it releases its files and its lock at once, so the directory can be
reopened and recovered, and every later call raises `QueueClosed`.

`Queue` owns the state, the WAL writer and the directory, and builds the
parts that own the rest, each given what it needs: `CallGuard` (calls.py:
the lock, closing, what each thread is doing), `Durability` (group commit),
`CommitNotices` (`wait`'s wake-ups) and `Compactor` (autocompact.py: the
snapshot policy and the background thread). None of them reaches into
another's private attributes. The calls that never write are a base class
(readcalls.py), as the queues' own calls are (lanecalls.py).

What an ordinary process can do to a queue, and what this file does about it:

- The directory is opened once (`StoreDirectory`): a later `chdir` or a
  repointed symlink changes nothing about where the queue writes.
- A forked child never writes: `os.register_at_fork` closes every inherited
  queue in the child (its descriptors closed without unlocking, its lock
  replaced, since another thread may have held it at the fork), and the
  hook wrapper stops a call that a fork inside the hook would continue.
- No call can deadlock on the queue's own lock. User code (a `put_many`
  iterable, a mapping, a lease token's attributes) runs before the lock is
  taken; a call made from inside another call in the same thread (from the
  hook, or from a signal handler) is `ReentrantCall`, except `close()`,
  which closes the queue at once for every later call and leaves the
  release of the files to the interrupted call as it returns. An
  interrupted call that has not written yet then fails with `QueueClosed`.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from walqueue.engine import clockunit, complete, events, ops
from walqueue.engine.autocompact import Compactor
from walqueue.engine.callguard import OPEN_GUARDS, Batch, CallGuard
from walqueue.engine.commits import CommitNotices
from walqueue.engine.durability import Durability
from walqueue.engine.lanecalls import LaneCalls
from walqueue.engine.metrics import Metrics, RequestSeconds
from walqueue.engine.ownership import DirectoryLock
from walqueue.engine.readcalls import ReadCalls
from walqueue.engine.recovery import recover
from walqueue.engine.replication import ReplicationSeat
from walqueue.engine.state import OP_KINDS, apply, apply_one
from walqueue.engine.types import Lease, QueueClosed, ReentrantCall, plain_lease
from walqueue.engine.validate import check_error, check_queue_options, check_queues_filter, check_timeout
from walqueue.engine.wal import Hook, append_with_phases, no_hook
from walqueue.format.canonical import parse_json
from walqueue.format.directory import StoreDirectory, make_directories
from walqueue.format.frame import encode_body

__all__ = ["Queue"]

log = logging.getLogger("walqueue")

DEFAULT_COMPACT_BYTES = 64 * 2**20


class Queue(LaneCalls, ReadCalls):
    """A durable task queue that owns one directory.

    ``Queue(directory, *, hook=None, sync=True, compact_bytes=64 * 2**20)``
    opens `directory` (creating it and its parents if missing), takes
    exclusive ownership of it (an `fcntl.flock` on ``DIR/LOCK``) and
    recovers it: the state is exactly that of the last committed transaction,
    after cutting only a torn final write. Every write call returns after its
    transaction is in the write-ahead log (fsynced with `sync=True`; `False`
    skips the fsyncs, for tests). `compact_bytes`: compact automatically once
    the live WAL exceeds ``max(compact_bytes, 2 x the last snapshot)`` bytes;
    ``None``: only `compact()` compacts. `hook(phase)` is called at every
    durability step named in `walqueue.PHASES` (for crash tests). Threads may
    share one queue: its calls are serialized.

    Raises `CorruptStore` (damage, with path, offset and reason),
    `DirectoryLocked` (another `Queue` owns it), `OSError`, or `TypeError` /
    `ValueError` for bad arguments. After an I/O error or an exception from
    the hook, the queue is poisoned: it releases the directory and every call
    but `close()` raises `QueueClosed`. Use it as a context manager.

    Example::

        with Queue("/var/lib/app/queue") as queue:
            queue.put("email-1", {"to": "ada@example.org"})

    The disk format is docs/FORMAT.md; every choice is in docs/DECISIONS.md.
    """

    #: How this source sends several calls together, for the worker (walqueue.worker.source): in `batch()`, one fsync.
    grouping: Final = "batch"

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        hook: Callable[[str], None] | None = None,
        sync: bool = True,
        compact_bytes: int | None = DEFAULT_COMPACT_BYTES,
        create: bool = True,
    ) -> None:
        path = check_queue_options(directory, hook, sync, create, compact_bytes)
        self._directory = path
        self._pid = os.getpid()
        self._user_hook = hook
        self._hook: Hook = no_hook if hook is None else self._call_hook
        # Resolved once: the directory is then held by its descriptor.
        absolute = os.path.abspath(path)
        if create:
            make_directories(absolute, sync=sync)
        store = StoreDirectory.open(absolute)
        self._store_closer = weakref.finalize(self, store.close)
        try:
            self._ownership = DirectoryLock(store)
            try:
                recovered = recover(store, hook=self._hook, sync=sync)
            except BaseException:
                self._ownership.release()
                raise
        except BaseException:
            self._store_closer()
            raise
        self._state = recovered.state
        self._wal = recovered.wal
        # Group commit whenever frames are synced and no hook must see each one synced in its phases.
        self._durability = durability = Durability(
            recovered.state.last_seq, recovered.wal, grouped=sync and hook is None
        )
        self._commits = CommitNotices(durability)
        state = recovered.state
        self._metrics = durability.metrics = Metrics(state.counts()["dead"], state.has_lanes())
        self._guard = guard = CallGuard(
            durability, self._commits, where=path, release_files=self._release_files, on_fork=self._abandon_in_child
        )
        self._compactor = Compactor(
            store, recovered, compact_bytes=compact_bytes, hook=self._hook, durability=durability, guard=guard
        )
        self._source = self._compactor.source  # fed by every commit: kept at hand
        OPEN_GUARDS.add(guard)

    # -- lifecycle -----------------------------------------------------------------

    def close(self) -> None:
        """Release the files and the lock. Idempotent; never raises.

        From inside a call in the same thread (a signal handler, the hook)
        it closes the queue for every later call at once, and the
        interrupted call releases the files as it returns.
        """
        if os.getpid() != self._pid:
            return  # a forked child's copy, closed already at the fork
        guard = getattr(self, "_guard", None)
        if guard is not None:  # None: the queue never opened, and released what it had
            guard.close()

    def _release_files(self, drain: bool) -> None:
        """Close the files and give up the ownership; with `drain`, first sync what callers wait for.

        Called by the guard (`CallGuard.release`), holding the queue's lock.
        """
        guard = self._guard
        guard.closed = True
        OPEN_GUARDS.discard(guard)
        # Stopped and gone before the ownership is: a new owner must never
        # meet the background snapshot's files. It never waits blindly for the lock we hold.
        self._compactor.stop()
        durability = self._durability
        clean = drain and not durability.failed
        if clean:
            try:
                durability.drain()
            except OSError:
                clean = False  # the waiters get the error; close() itself never raises
        durability.fail(QueueClosed(f"the queue on {self._directory} was closed before this call was synced"))
        self._commits.wake()
        if clean:
            try:
                self._wal.trim()  # a cleanly closed segment holds exactly its frames (wal.py)
            except OSError:
                pass  # its zero tail stays: still the end of the log
        self._wal.close()
        self._ownership.release()
        self._store_closer()

    def _abandon_in_child(self) -> None:
        """Right after a fork, in the child: close this inherited copy without touching the parent's ownership.

        A new guard, closed, with a lock of its own (another thread may have
        held the old one at the fork); a call under way releases the old one.
        """
        self._durability.forget_after_fork()
        self._commits.forget_after_fork()
        self._guard = self._guard.closed_copy()
        self._wal.close()
        self._ownership.abandon()
        self._store_closer()

    def _poison(self) -> None:
        self._guard.release(drain=False)

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        guard = self._guard
        if guard.closed:  # inline rather than `guard.check_open()`: every call comes here
            raise guard.closed_error()

    def _call_hook(self, phase: str) -> None:
        """The user's hook, then a check that the hook neither closed the queue nor forked this process.

        A close from inside the hook (or from a signal handler it set off)
        ends the call here, as a failure: the write stops where the phase
        says, exactly as a crash there would leave it. A child returning
        from a fork in the hook would otherwise go on writing through
        descriptors it shares with its parent.
        """
        assert self._user_hook is not None
        self._user_hook(phase)
        if os.getpid() != self._pid:
            raise QueueClosed(f"the hook forked; the child may not continue the write to {self._directory}")
        guard = getattr(self, "_guard", None)  # None while opening: recovery's phases come first
        if guard is not None and guard.close_pending:
            raise QueueClosed(f"the queue on {self._directory} was closed during the call (at {phase})")

    # -- the one write path ---------------------------------------------------------

    def _commit(self, plan: ops.Plan) -> None:
        """Write, sync and apply the transaction a planner made (its ops and their canonical JSON)."""
        if self._guard.closed:
            # Closed by a signal handler or the hook of this very call: nothing is written.
            raise self._guard.closed_error()
        state = self._state
        seq = state.last_seq + 1
        # ValueError for an oversize transaction, before anything is written.
        frame = encode_body(plan.body(seq))
        wal = self._wal
        try:
            if self._hook is no_hook:
                wal.write(frame)  # synced by the fsync the callers share (or never, with sync=False)
            else:
                append_with_phases(wal, frame, self._hook)
            tx_ops = plan.ops
            source = self._source
            source.before_change(tx_ops, state.tasks)  # a running snapshot keeps what these ops replace
            held = events.before(tx_ops, state.tasks) if events.listening else None  # None: events are off
            self._metrics.counted(tx_ops, state)  # Queue.metrics's counters: by kind, and by queue (rows before)
            if len(tx_ops) == 1:  # (every reserve's and ack's: its transaction is well formed by construction)
                created = apply_one(state, seq, tx_ops[0])
            else:
                created = apply(state, {"seq": seq, "ops": tx_ops}, _planned=True, _fresh_puts=plan.fresh_puts)
            if held is not None:
                events.emit_transaction(tx_ops, held, state.tasks, seq)
            if created:
                source.created(created)
            self._durability.wrote(seq)
            compactor = self._compactor
            if compactor.at is not None and wal.wal_bytes > compactor.at and not compactor.running():
                compactor.trigger(state)
        except BaseException:
            self._poison()
            raise

    # -- writes --------------------------------------------------------------------

    def put(
        self,
        task_id: str,
        payload: dict[str, Any],
        *,
        key: str | None = None,
        available_at: int = 0,
        max_attempts: int = 3,
        queue: str = "default",
        priority: int = 0,
        put_at: int = 0,
    ) -> str:
        """Create a ready task and return `task_id`; an identical retry returns it and writes nothing.

        `key` (default: `task_id`) is the task's permanent idempotency key.
        `payload` must be a JSON object (a `dict` of plain JSON values);
        `available_at` (int >= 0) is the earliest `now` a reserve may lease
        it; `max_attempts` (int >= 1) the number of leases before it dies.
        A completed or dead task is never resurrected. `queue` (a name) and
        `priority` (-100..100, higher first) place it in a lane (docs/guide/lanes.md). `put_at` (int >= 0): the
        producer's time, in the store's unit; the task is due from then and ages from it (not in the identity).

        Raises `KeyConflict` (a known key with another task id, payload,
        `available_at` or `max_attempts`, or a known task id under a new key),
        `TypeError`/`ValueError` (bad arguments, too large), `QueueClosed`.

        Example: ``queue.put("email-1", {"to": "ada@example.org"}, key="order:1:email")``
        """
        self._check_open()
        # Validation reads only the caller's values: done before the lock is taken.
        op = ops.put_op(
            task_id,
            payload,
            key=key,
            available_at=available_at,
            max_attempts=max_attempts,
            queue=queue,
            priority=priority,
            put_at=put_at,
        )
        with self._guard:
            plan = ops.plan_put(self._state, op)
            if plan is not None:
                self._commit(plan)
            self._metrics.duplicate_puts += plan is None
            return task_id

    def put_many(self, tasks: Iterable[Mapping[str, Any]]) -> list[str]:
        """Create every new task in one transaction, or nothing at all; return the task ids in order.

        Each item is a mapping with `put`'s argument names (`task_id`,
        `payload`, optional `key`, `available_at`, `max_attempts`). Identical
        retries are returned without writing; any conflict or bad item raises
        (`KeyConflict`, `TypeError`, `ValueError`) and nothing is written.

        Example: ``queue.put_many([{"task_id": "a", "payload": {}}, {"task_id": "b", "payload": {}}])``
        """
        self._check_open()
        if isinstance(tasks, (str, bytes, Mapping)) or not isinstance(tasks, Iterable):
            raise TypeError("put_many takes an iterable of mappings")
        # The caller's iterable and mappings run their own code: all of it
        # runs here, before the lock is taken (it may even call this queue).
        put_ops = ops.put_ops_from_mappings(tasks)
        with self._guard:
            plan, task_ids = ops.plan_puts(self._state, put_ops)
            if plan.ops:
                self._commit(plan)
            self._metrics.duplicate_puts += len(put_ops) - len(plan.ops)
            return task_ids

    def reserve(
        self, worker: str, *, now: int, lease_seconds: int, limit: int = 1, queues: list[str] | None = None
    ) -> list[Lease]:
        """Expire overdue leases (one transaction), then lease up to `limit` due tasks (another).

        A leased task whose deadline is ``<= now`` becomes ready again (at its
        old deadline) or dead when it used up `max_attempts`. Then up to
        `limit` ready tasks with ``available_at <= now`` are leased to
        `worker` until ``now + lease_seconds``, higher priority first, then ``(available_at, task_id)``,
        from `queues` (None: all) within each queue's limits; each lease increments `attempts` and `generation`.
        Returns the leases (an empty list when nothing is due).

        Raises `TypeError`/`ValueError` (bad arguments), `QueueClosed`.

        Example: ``leases = queue.reserve("worker-1", now=int(time.time()), lease_seconds=60)``
        """
        self._check_open()
        ops.validate_reserve_args(worker, now, lease_seconds, limit)
        names = None if queues is None else check_queues_filter(queues)  # (None, the usual: no call)
        with self._guard:
            for reap in ops.plan_reap(self._state, now, self._state.last_seq + 1, _checked=True):
                self._commit(reap)
            lease = ops.plan_lease(
                self._state, worker, now, lease_seconds, limit, self._state.last_seq + 1, _checked=True, queues=names
            )
            if not lease.ops:
                return []
            self._commit(lease)
            return [self._state.lease_for(op["task"]) for op in lease.ops]

    def ack(self, lease: Lease, *, now: int) -> None:
        """Complete the leased task (its payload is dropped; it stays as a tombstone).

        Raises `StaleLease`, writing nothing, unless the task is still leased to `lease.worker` with
        `lease.generation` and ``now < deadline``; `TypeError` if `lease` is not a `Lease`; `QueueClosed`.

        Example: ``queue.ack(lease, now=int(time.time()))``
        """
        self._check_open()
        lease = plain_lease(lease)
        with self._guard:
            self._commit(ops.plan_ack(self._state, lease, now))

    def ack_many(self, leases: Iterable[Lease], *, now: int) -> None:
        """Complete every leased task of `leases` in one transaction, or none of them: many acks, one fsync.

        All or nothing, as `put_many`: a lease `ack` would refuse, or a task listed twice, is `StaleLease` naming
        its index, and nothing is written (nor for no leases). `TypeError` (not an iterable of `Lease`),
        `ValueError` (a bad `now`; more acks than a frame holds), `QueueClosed`.

        Example: ``queue.ack_many([lease_a, lease_b], now=int(time.time()))``
        """
        self._check_open()
        tokens = ops.lease_tokens(leases)  # the caller's iterable runs its code here, before the lock
        with self._guard:
            if (plan := ops.plan_acks(self._state, tokens, now)).ops:
                self._commit(plan)

    def complete(
        self,
        lease: Lease,
        *,
        now: int,
        result: Any = None,
        result_ttl: int = complete.DEFAULT_RESULT_TTL,
        puts: Iterable[Mapping[str, Any]] = (),
    ) -> None:
        """`ack` + `result` (JSON, kept `result_ttl`) + `puts` (as `put_many`): one transaction, or nothing."""
        self._check_open()
        args = complete.complete_args(lease, now, result, result_ttl, puts)  # user code (iterables): before the lock
        with self._guard:
            self._commit(complete.plan_complete(self._state, args))

    def result(self, task_id: str, *, now: int | None = None) -> dict[str, Any] | None:
        """A completed task's stored result, ``{"value": V, "expires": E}``; None if none (or expired by `now`)."""
        self._check_open()
        complete.check_result_args(task_id, now)
        with self._guard:
            stored = self._state.result(task_id)
        if stored is None or (now is not None and stored[0] <= now):  # expired at `now`: as good as dropped
            return None
        return {"value": parse_json(stored[1]), "expires": stored[0]}

    def release(self, lease: Lease, *, now: int, delay: int = 0, error: Mapping[str, str] | None = None) -> None:
        """Give the leased task back: ready at ``now + delay``, or dead once out of attempts.

        `error`, ``{"type": ..., "message": ...}``, becomes the task's `last_error` (with the attempt and
        `now`), in the same transaction. Raises `StaleLease` under the same rules as `ack`, writing
        nothing; `TypeError`/`ValueError` (a bad `delay` or `error`); `QueueClosed`.

        Example: ``queue.release(lease, now=now, delay=30, error={"type": "Timeout", "message": "smtp"})``
        """
        self._check_open()
        lease, checked = plain_lease(lease), check_error(error)
        with self._guard:
            self._commit(ops.plan_release(self._state, lease, now, delay, checked))

    def fail(self, lease: Lease, *, now: int, error: Mapping[str, str] | None = None) -> None:
        """Make the leased task dead at once, whatever its attempts left: a permanent failure.

        `error` as in `release`. Raises `StaleLease` under the rules of `ack`,
        writing nothing; `TypeError`/`ValueError`; `QueueClosed`.

        Example: ``queue.fail(lease, now=now, error={"type": "KeyError", "message": "no handler"})``
        """
        self._check_open()
        lease, checked = plain_lease(lease), check_error(error)
        with self._guard:
            self._commit(ops.plan_fail(self._state, lease, now, checked))

    def give_back(self, lease: Lease, *, now: int) -> None:
        """Give back a lease whose task the holder never started: ready again at once, its attempt restored.

        For a worker that reserved more than it ran (shutdown, a full pipeline): the task is as before the
        lease (same `available_at`, attempts one less, the last error kept), so a task with one attempt left
        can never die of a lease nobody used. Raises `StaleLease` under the rules of `ack`, writing nothing;
        `TypeError`/`ValueError`; `QueueClosed`.

        Example: ``queue.give_back(lease, now=int(time.time()))``
        """
        self._check_open()
        lease = plain_lease(lease)
        with self._guard:
            self._commit(ops.plan_ack(self._state, lease, now, OP_KINDS["give_back"]))

    def extend(self, lease: Lease, *, now: int, lease_seconds: int) -> Lease:
        """Move the deadline of a lease still held to ``now + lease_seconds`` (capped at 2**63 - 1): a heartbeat.

        Shorter than before is allowed; attempts and generation stay, so the
        old token stays valid too (its deadline is informational). Returns
        the token with the new deadline. Raises `StaleLease` under the rules
        of `ack`, writing nothing; `TypeError`/`ValueError` (`lease_seconds`
        int >= 1); `QueueClosed`.

        Example: ``lease = queue.extend(lease, now=int(time.time()), lease_seconds=60)``
        """
        self._check_open()
        lease = plain_lease(lease)
        with self._guard:
            self._commit(ops.plan_extend(self._state, lease, now, lease_seconds))
            return self._state.lease_for(lease.task_id)

    def redrive(self, task_id: str, *, available_at: int, extra_attempts: int = 1) -> None:
        """Make a dead task ready again at `available_at`, with `extra_attempts` (>= 1) more attempts.

        Attempts and generation keep counting (old tokens stay stale); the
        task's identity, its original put, does not change. Raises
        `WrongStatus` (unknown task, or not dead), writing nothing;
        `TypeError`/`ValueError`; `QueueClosed`.

        Example: ``for task in queue.tasks("dead"): queue.redrive(task.task_id, available_at=now)``
        """
        self._check_open()
        with self._guard:
            self._commit(ops.plan_redrive(self._state, task_id, available_at, extra_attempts))

    def cancel(self, task_id: str, *, error: Mapping[str, str] | None = None, now: int | None = None) -> None:
        """Make a ready or leased task dead (a holder's token is stale from then on; `redrive` undoes it).

        `error` (the reason, as in `release`) needs `now`, the time recorded. Raises `WrongStatus`
        (unknown task, completed or dead already), writing nothing; `TypeError`/`ValueError`; `QueueClosed`.

        Example: ``queue.cancel("email-1", error={"type": "Cancelled", "message": "by ops"}, now=now)``
        """
        self._check_open()
        checked = check_error(error)
        with self._guard:
            self._commit(ops.plan_cancel(self._state, task_id, checked, now))

    def set_clock(self, units_per_second: int) -> None:
        """Record the store's clock unit once (1: seconds, 1000: milliseconds); the same unit again writes nothing.

        Every tool that reads a clock for this store checks its unit against it (clockunit.py); `stats()["clock"]`
        reads it. `ClockMismatch` (a `ValueError`) if another unit is recorded, writing nothing; `QueueClosed`.
        """
        self._check_open()
        with self._guard:
            plan = clockunit.plan_clock(self._state, units_per_second)
            if plan is not None:
                self._commit(plan)

    def batch(self) -> Batch:
        """A context in which this thread's calls answer at once, and leaving it waits once for all of them.

        Group commit for a caller that answers many requests together (the
        server's event loop): inside, calls return without waiting for the
        fsync; leaving the outermost batch waits until everything those calls
        wrote or saw is durable, one fsync for all. Send no answer of the
        batch before its exit returns. The exit raises the failed fsync's
        `OSError` (the queue is then poisoned), or `QueueClosed` if the queue
        was poisoned before the batch's writes were synced; then none of the
        batch's calls may be reported as done. `wait` is refused inside a
        batch (`ReentrantCall`). With a hook or ``sync=False`` every write
        is durable at once and a batch changes nothing. Raises `QueueClosed`
        on entry once closed.

        Example: ``with queue.batch(): answers = [queue.put(t, {}) for t in ids]``  (then send them)
        """
        return Batch(self._guard)

    def wait(self, timeout: float) -> bool:
        """Block until another thread commits a transaction, or `timeout` seconds pass; return whether one did.

        A commit counts once durable, and once made after this thread's
        previous call on the queue looked at the state, so that ``reserve``
        finding nothing, then ``wait``, misses nothing committed in between.
        Holds no lock while waiting; uses real time for the wait only. A
        `close()` meanwhile (from any thread, or a signal handler) ends it
        with `QueueClosed`. Raises `TypeError`/`ValueError` (a number >= 0).

        Example: ``if not queue.reserve("w", now=now, lease_seconds=60): queue.wait(5.0)``
        """
        self._check_open()
        timeout = check_timeout(timeout)
        guard = self._guard
        if guard.flags.batching:
            raise ReentrantCall(
                "wait inside Queue.batch() would hold back the batch's answers; leave the batch, then wait"
            )
        after = guard.seen()
        with guard:  # the checks of every call: closed, re-entrant
            pass
        return guard.wait_for_commit(after, min(timeout, threading.TIMEOUT_MAX))

    def attach_request_seconds(self, request_seconds: RequestSeconds) -> None:
        """Show a server's request durations in `metrics()` as ``request_seconds`` (the server observes them).

        So that every reader of this queue's metrics (a ``metrics`` request,
        the dashboard in the server's process) gets them from one place."""
        self._metrics.request_seconds = request_seconds

    def compact(self) -> None:
        """Write a snapshot of the state, publish it, and delete the WAL it covers.

        A background snapshot under way is waited for first. Something in
        the way of a file compaction must create (a directory named like the
        next snapshot, for example) is `FileExistsError` naming it, before
        anything is written; the queue stays usable. Any other failure
        (`OSError`) poisons the queue; `QueueClosed` once closed. The steps
        and their crash safety: docs/FORMAT.md.
        """
        self._check_open()
        self._compactor.compact_when_free(self._state)

    @property
    def replication(self) -> ReplicationSeat:
        """What a replicator beside the writer reads and holds (walqueue.backup; engine/replication.py)."""
        return ReplicationSeat(os.path.abspath(self._directory), self._guard, self._wal, self._durability)

    def __repr__(self) -> str:
        state = "closed" if self._guard.closed else f"last_seq={self._state.last_seq}"
        return f"<Queue {self._directory!r} {state}>"
