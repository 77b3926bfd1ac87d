"""What a `State` answers: the reads of the tasks and their indexes, for `Queue`, the planners and snapshots.

Kept apart from state.py, which holds what changes a task: everything here
only reads. `StateReads` is the base class of `State`, which owns the
fields it reads (declared here for type checkers) and is their only writer.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from walqueue.engine.heaps import due, first_time, live_ids
from walqueue.engine.records import DEAD, LEASED, READY, STATUSES, HeapEntry, Record, decode_payload
from walqueue.engine.types import Lease, Task, new_lease
from walqueue.engine.validate import MAX_INT, check_int

__all__ = ["StateReads"]


class StateReads:
    """The reads of `State` (see state.py for the fields and the one writer, `apply`)."""

    __slots__ = ()

    last_seq: int
    tasks: dict[str, Record]
    _key_owner: dict[str, str]
    _ready: list[HeapEntry]
    _leases: list[HeapEntry]
    _counts: dict[str, int]
    _dead: set[str]

    def lookup_key(self, key: str) -> str | None:
        """The id of the task that owns `key`, or ``None`` if the key is unknown.

        A task whose id equals `key` owns it only if its key is its id too.
        """
        owner = self._key_owner.get(key)
        if owner is not None:
            return owner
        record = self.tasks.get(key)
        if record is not None and record.key == key:
            return key
        return None

    def get_task(self, task_id: str) -> Task | None:
        """A fresh view of the task (its payload decoded anew, so a copy), or ``None``."""
        record = self.tasks.get(task_id)
        return None if record is None else record.to_task()

    def list_tasks(self, status: str | None = None) -> list[Task]:
        """Every task (or every task with `status`), ordered by task id.

        O(k log k) for the k tasks returned, but for ``"completed"``, which
        walks every task once some are completed (and costs nothing when none is).
        """
        if status is not None and (type(status) is not str or status not in STATUSES):
            raise ValueError(f"status must be one of {', '.join(STATUSES)} or None, not {status!r}")
        tasks = self.tasks
        ids: Iterable[str]
        if status is None:
            ids = tasks
        elif not self._counts[status]:
            return []
        elif status == READY or status == LEASED:
            ids = live_ids(self._ready if status == READY else self._leases, tasks)
        elif status == DEAD:
            ids = self._dead
        else:
            ids = [task_id for task_id, record in tasks.items() if record.status == status]
        return [tasks[task_id].to_task() for task_id in sorted(ids)]

    def counts(self) -> dict[str, int]:
        """The number of tasks per status, always with exactly the four status keys."""
        return dict(self._counts)

    def next_available_at(self) -> int | None:
        """The smallest `available_at` of a ready task (None: none is ready); amortized O(log n)."""
        return first_time(self._ready, self.tasks)

    def next_deadline(self) -> int | None:
        """The earliest deadline of a leased task (None: none is leased); amortized O(log n)."""
        return first_time(self._leases, self.tasks)

    def identity(self, task_id: str) -> bytes:
        """The 32-byte identity digest of the task's original put (`KeyError` if unknown)."""
        return self.tasks[task_id].identity

    def lease_for(self, task_id: str) -> Lease:
        """The lease token of a leased task (`KeyError` if unknown, `ValueError` if not leased)."""
        record = self.tasks[task_id]
        if record.status != LEASED or record.worker is None or record.deadline is None:
            raise ValueError(f"task {task_id!r} is {record.status}, not leased")
        return new_lease(
            record.task_id,
            record.worker,
            record.generation,
            record.deadline,
            record.attempts,
            decode_payload(record.digest_and_payload),
        )

    # -- planner support ------------------------------------------------------

    def peek_ready(self, now: int, limit: int) -> list[str]:
        """Up to `limit` ready task ids with ``available_at <= now``, in (available_at, task id) order.

        O(k log n) for k results (heaps.due).
        """
        check_int(now, "now")
        check_int(limit, "limit", 1)
        return due(self._ready, self.tasks, now, limit)

    def peek_expired(self, now: int) -> list[str]:
        """Every leased task id with ``deadline <= now``, in (deadline, task id) order."""
        check_int(now, "now")
        return due(self._leases, self.tasks, now, MAX_INT)

    # -- snapshot support -----------------------------------------------------

    def iter_record_json(self) -> Iterator[bytes]:
        """Every task's snapshot record as canonical JSON bytes, in task-id order."""
        tasks = self.tasks
        for task_id in sorted(tasks):
            yield tasks[task_id].record_json()
