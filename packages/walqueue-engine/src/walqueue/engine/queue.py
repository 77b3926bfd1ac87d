"""`Queue`: ownership, the internal lock, the hook and poisoning, wired around the pure core.

Every write follows one path (`_commit`): plan a transaction from the
current state (pure), frame it (a too-large transaction is refused here,
before any byte is written), append and sync it, and only then apply it to
memory with the same `apply` that recovery uses. If anything fails once a
byte may have reached the disk, or the test hook raises, the queue poisons
itself: it releases its files and its lock at once, so the directory can be
reopened and recovered, and every later call raises `QueueClosed`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from walqueue.engine import ops
from walqueue.engine.compaction import compact, compaction_threshold
from walqueue.engine.ownership import DirectoryLock
from walqueue.engine.recovery import recover
from walqueue.engine.state import apply
from walqueue.engine.types import Lease, QueueClosed, Stats, Status, Task
from walqueue.engine.wal import no_hook
from walqueue.format.frame import encode_body

__all__ = ["Queue"]

DEFAULT_COMPACT_BYTES = 64 * 2**20


class Queue:
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

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        hook: Callable[[str], None] | None = None,
        sync: bool = True,
        compact_bytes: int | None = DEFAULT_COMPACT_BYTES,
    ) -> None:
        if not isinstance(directory, (str, os.PathLike)):
            raise TypeError(f"directory must be a str or path-like, not {type(directory).__name__}")
        path = os.fspath(directory)
        if not isinstance(path, str):
            raise TypeError("directory must be a text path")
        if hook is not None and not callable(hook):
            raise TypeError("hook must be callable or None")
        if type(sync) is not bool:
            raise TypeError("sync must be a bool")
        if compact_bytes is not None:
            if type(compact_bytes) is not int:
                raise TypeError(f"compact_bytes must be None or an int, not {type(compact_bytes).__name__}")
            if compact_bytes < 1:
                raise ValueError(f"compact_bytes must be >= 1, not {compact_bytes}")
        self._closed = True  # until fully open, so that __del__/close on failure are harmless
        self._mutex = threading.Lock()
        self._directory = path
        self._sync = sync
        self._compact_bytes = compact_bytes
        self._hook = hook if hook is not None else no_hook
        os.makedirs(path, exist_ok=True)
        self._ownership = DirectoryLock(path)
        try:
            recovered = recover(path, hook=self._hook, sync=sync)
        except BaseException:
            self._ownership.release()
            raise
        self._state = recovered.state
        self._current = recovered.current
        self._wal = recovered.wal
        self._compact_at = compaction_threshold(recovered.snapshot_size, compact_bytes)
        self._closed = False

    # -- lifecycle -----------------------------------------------------------------

    def close(self) -> None:
        """Release the files and the lock. Idempotent; never raises, also when poisoned."""
        with self._mutex:
            self._release()

    def _release(self) -> None:
        self._closed = True
        wal = getattr(self, "_wal", None)
        if wal is not None:
            wal.close()
        ownership = getattr(self, "_ownership", None)
        if ownership is not None:
            ownership.release()

    def _poison(self) -> None:
        self._release()

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise QueueClosed(f"the queue on {self._directory} is closed; open a new one")

    # -- the one write path ---------------------------------------------------------

    def _commit(self, tx_ops: list[dict[str, Any]], op_json: Sequence[bytes] | None = None) -> None:
        """Write, sync and apply the transaction of `tx_ops`.

        `op_json`, when the planner already holds it, is each op's canonical
        JSON (a put op carries its own), so that framing encodes nothing again.
        """
        state = self._state
        seq = state.last_seq + 1
        body = ops.transaction_body(seq, tx_ops) if op_json is None else ops.transaction_body_of(seq, op_json)
        # ValueError for an oversize transaction, before anything is written.
        frame = encode_body(body)
        wal = self._wal
        try:
            wal.append(frame)
            apply(state, {"seq": seq, "ops": tx_ops})
            if self._compact_at is not None and wal.wal_bytes > self._compact_at:
                self._compact_now()
        except BaseException:
            self._poison()
            raise

    def _compact_now(self) -> None:
        current, size = compact(
            self._directory, self._state, self._wal, self._current, hook=self._hook, sync=self._sync
        )
        self._current = current
        if size is not None:
            self._compact_at = compaction_threshold(size, self._compact_bytes)

    # -- writes --------------------------------------------------------------------

    def put(
        self,
        task_id: str,
        payload: dict[str, Any],
        *,
        key: str | None = None,
        available_at: int = 0,
        max_attempts: int = 3,
    ) -> str:
        """Create a ready task and return `task_id`; an identical retry returns it and writes nothing.

        `key` (default: `task_id`) is the task's permanent idempotency key.
        `payload` must be a JSON object (a `dict` of plain JSON values);
        `available_at` (int >= 0) is the earliest `now` a reserve may lease
        it; `max_attempts` (int >= 1) the number of leases before it dies.
        A completed or dead task is never resurrected.

        Raises `KeyConflict` (a known key with another task id, payload,
        `available_at` or `max_attempts`, or a known task id under a new key),
        `TypeError`/`ValueError` (bad arguments, too large), `QueueClosed`.

        Example: ``queue.put("email-1", {"to": "ada@example.org"}, key="order:1:email")``
        """
        with self._mutex:
            self._check_open()
            op = ops.put_op(task_id, payload, key=key, available_at=available_at, max_attempts=max_attempts)
            if ops.plan_put(self._state, op) is not None:
                self._commit([op], (op["payload"].op_json,))
            return task_id

    def put_many(self, tasks: Iterable[Mapping[str, Any]]) -> list[str]:
        """Create every new task in one transaction, or nothing at all; return the task ids in order.

        Each item is a mapping with `put`'s argument names (`task_id`,
        `payload`, optional `key`, `available_at`, `max_attempts`). Identical
        retries are returned without writing; any conflict or bad item raises
        (`KeyConflict`, `TypeError`, `ValueError`) and nothing is written.

        Example: ``queue.put_many([{"task_id": "a", "payload": {}}, {"task_id": "b", "payload": {}}])``
        """
        with self._mutex:
            self._check_open()
            if isinstance(tasks, (str, bytes, Mapping)) or not isinstance(tasks, Iterable):
                raise TypeError("put_many takes an iterable of mappings")
            put_ops = [ops.put_op_from_mapping(item) for item in tasks]
            new, task_ids = ops.plan_puts(self._state, put_ops)
            if new:
                self._commit(new, [op["payload"].op_json for op in new])
            return task_ids

    def reserve(self, worker: str, *, now: int, lease_seconds: int, limit: int = 1) -> list[Lease]:
        """Expire overdue leases (one transaction), then lease up to `limit` due tasks (another).

        A leased task whose deadline is ``<= now`` becomes ready again (at its
        old deadline) or dead when it used up `max_attempts`. Then up to
        `limit` ready tasks with ``available_at <= now`` are leased to
        `worker` until ``now + lease_seconds``, in ``(available_at, task_id)``
        order; each lease increments the task's `attempts` and `generation`.
        Returns the leases (an empty list when nothing is due).

        Raises `TypeError`/`ValueError` (bad arguments), `QueueClosed`.

        Example: ``leases = queue.reserve("worker-1", now=int(time.time()), lease_seconds=60)``
        """
        with self._mutex:
            self._check_open()
            ops.validate_reserve_args(worker, now, lease_seconds, limit)
            for reap_ops in ops.reap_ops(self._state, now, self._state.last_seq + 1):
                self._commit(reap_ops)
            lease_ops = ops.lease_ops(self._state, worker, now, lease_seconds, limit, self._state.last_seq + 1)
            if not lease_ops:
                return []
            self._commit(lease_ops, [ops.lease_json(op) for op in lease_ops])
            return [self._state.lease_for(op["task"]) for op in lease_ops]

    def ack(self, lease: Lease, *, now: int) -> None:
        """Complete the leased task (its payload is dropped; it stays as a tombstone).

        Raises `StaleLease`, writing nothing, unless the task is still leased
        to `lease.worker` with `lease.generation` and ``now < deadline``;
        `TypeError` if `lease` is not a `Lease`; `QueueClosed`.

        Example: ``queue.ack(lease, now=int(time.time()))``
        """
        with self._mutex:
            self._check_open()
            ack_ops = ops.plan_ack(self._state, lease, now)
            self._commit(ack_ops, [ops.settle_json(op) for op in ack_ops])

    def release(self, lease: Lease, *, now: int, delay: int = 0) -> None:
        """Give the leased task back: ready at ``now + delay``, or dead once out of attempts.

        Raises `StaleLease` under the same rules as `ack`, writing nothing;
        `TypeError`/`ValueError` for a bad `delay` (int >= 0); `QueueClosed`.

        Example: ``queue.release(lease, now=int(time.time()), delay=30)``
        """
        with self._mutex:
            self._check_open()
            self._commit(ops.plan_release(self._state, lease, now, delay))

    def compact(self) -> None:
        """Write a snapshot of the state, publish it through CURRENT, and delete the WAL it covers.

        With nothing appended since the last snapshot it only deletes
        leftover segments. Raises `OSError` (the queue is then poisoned) or
        `QueueClosed`. The steps and their crash safety: docs/FORMAT.md.
        """
        with self._mutex:
            self._check_open()
            try:
                self._compact_now()
            except BaseException:
                self._poison()
                raise

    # -- reads (never write) ---------------------------------------------------------

    def get(self, task_id: str) -> Task | None:
        """The task `task_id` as a `Task`, or ``None`` if no such id was ever stored. Writes nothing.

        Raises `TypeError` if `task_id` is not a `str`, `QueueClosed`.

        Example: ``queue.get("email-1").status  # "ready"``
        """
        with self._mutex:
            self._check_open()
            if not isinstance(task_id, str):
                raise TypeError(f"task_id must be a str, not {type(task_id).__name__}")
            return self._state.get_task(task_id)

    def tasks(self, status: Status | None = None) -> list[Task]:
        """Every task, or every task with `status`, ordered by task id. Writes nothing.

        `status` is one of ``"ready"``, ``"leased"``, ``"completed"``,
        ``"dead"`` (typed as `walqueue.Status`), or ``None`` for all; anything
        else raises `ValueError`. `QueueClosed` once closed.

        Example: ``for task in queue.tasks("dead"): print(task.task_id)``  (the dead letters)
        """
        with self._mutex:
            self._check_open()
            return self._state.list_tasks(status)

    def stats(self) -> Stats:
        """Counts per status and the log's position, as a `walqueue.Stats` dict. Writes nothing.

        Keys: `counts` (exactly ``ready``, ``leased``, ``completed``,
        ``dead``), `last_seq`, `snapshot_seq`, `wal_bytes` (live WAL after the
        snapshot) and `segments` (live WAL segments). Raises `QueueClosed`.

        Example: ``queue.stats()["counts"]["ready"]``
        """
        with self._mutex:
            self._check_open()
            return {
                "counts": self._state.counts(),
                "last_seq": self._state.last_seq,
                "snapshot_seq": 0 if self._current is None else self._current.seq,
                "wal_bytes": self._wal.wal_bytes,
                "segments": self._wal.segments,
            }

    @property
    def last_seq(self) -> int:
        """The sequence number of the last committed transaction (0 when none). Raises `QueueClosed`."""
        with self._mutex:
            self._check_open()
            return self._state.last_seq

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"last_seq={self._state.last_seq}"
        return f"<Queue {self._directory!r} {state}>"
