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
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from walqueue.engine import ops
from walqueue.engine.compaction import compact, compaction_threshold
from walqueue.engine.ownership import DirectoryLock
from walqueue.engine.recovery import recover
from walqueue.engine.state import apply
from walqueue.engine.types import Lease, QueueClosed, Task
from walqueue.engine.wal import no_hook
from walqueue.format.frame import encode_body

__all__ = ["Queue"]

DEFAULT_COMPACT_BYTES = 64 * 2**20


class Queue:
    """A durable task queue owning one directory. See SPEC §2 for every rule."""

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
        """Release the files and the lock. Idempotent; never raises."""
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

    def _commit(self, plan: ops.Plan) -> None:
        """Write, sync and apply the transaction a planner made."""
        state = self._state
        seq = state.last_seq + 1
        # ValueError for an oversize transaction, before anything is written.
        frame = encode_body(plan.body(seq))
        wal = self._wal
        try:
            wal.append(frame)
            apply(state, {"seq": seq, "ops": plan.ops}, _planned=True)
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
        """Create a task, or return `task_id` for an identical retry (writing nothing)."""
        with self._mutex:
            self._check_open()
            op = ops.put_op(task_id, payload, key=key, available_at=available_at, max_attempts=max_attempts)
            plan = ops.plan_put(self._state, op)
            if plan is not None:
                self._commit(plan)
            return task_id

    def put_many(self, tasks: Iterable[Mapping[str, Any]]) -> list[str]:
        """Create every new task in one transaction, or nothing at all."""
        with self._mutex:
            self._check_open()
            if isinstance(tasks, (str, bytes, Mapping)) or not isinstance(tasks, Iterable):
                raise TypeError("put_many takes an iterable of mappings")
            put_ops = [ops.put_op_from_mapping(item) for item in tasks]
            plan, task_ids = ops.plan_puts(self._state, put_ops)
            if plan.ops:
                self._commit(plan)
            return task_ids

    def reserve(self, worker: str, *, now: int, lease_seconds: int, limit: int = 1) -> list[Lease]:
        """Expire overdue leases (one transaction), then lease up to `limit` due tasks (another)."""
        with self._mutex:
            self._check_open()
            ops.validate_reserve_args(worker, now, lease_seconds, limit)
            for reap in ops.plan_reap(self._state, now, self._state.last_seq + 1, _checked=True):
                self._commit(reap)
            lease = ops.plan_lease(
                self._state, worker, now, lease_seconds, limit, self._state.last_seq + 1, _checked=True
            )
            if not lease.ops:
                return []
            self._commit(lease)
            return [self._state.lease_for(op["task"]) for op in lease.ops]

    def ack(self, lease: Lease, *, now: int) -> None:
        """Complete a leased task; `StaleLease` (writing nothing) unless the token still owns it."""
        with self._mutex:
            self._check_open()
            self._commit(ops.plan_ack(self._state, lease, now))

    def release(self, lease: Lease, *, now: int, delay: int = 0) -> None:
        """Give a leased task back (ready at `now + delay`, or dead once out of attempts)."""
        with self._mutex:
            self._check_open()
            self._commit(ops.plan_release(self._state, lease, now, delay))

    def compact(self) -> None:
        """Write a snapshot of the state, publish it, and delete the WAL it covers."""
        with self._mutex:
            self._check_open()
            try:
                self._compact_now()
            except BaseException:
                self._poison()
                raise

    # -- reads (never write) ---------------------------------------------------------

    def get(self, task_id: str) -> Task | None:
        with self._mutex:
            self._check_open()
            if not isinstance(task_id, str):
                raise TypeError(f"task_id must be a str, not {type(task_id).__name__}")
            return self._state.get_task(task_id)

    def tasks(self, status: str | None = None) -> list[Task]:
        with self._mutex:
            self._check_open()
            return self._state.list_tasks(status)

    def stats(self) -> dict[str, Any]:
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
        with self._mutex:
            self._check_open()
            return self._state.last_seq

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"last_seq={self._state.last_seq}"
        return f"<Queue {self._directory!r} {state}>"
