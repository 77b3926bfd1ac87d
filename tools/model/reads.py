"""The model's reads (`get`, `tasks`, the counts and the next deadline), and `Model`, which is every call."""

from __future__ import annotations

from walqueue import Task

from .results import ResultCalls
from .rules import STATUSES, check_queue
from .state import task_of


class Model(ResultCalls):
    """The reference semantics of `walqueue.Queue` (CONTRACT §2), in memory: every group of calls, and the reads."""

    def get(self, task_id: str) -> Task | None:
        """The task, or `None` for any id never stored."""
        if not isinstance(task_id, str):
            raise TypeError(f"task_id must be a str, not {type(task_id).__name__}")
        record = self._tasks.get(task_id)
        return None if record is None else task_of(record)

    def tasks(self, status: str | None = None, *, queue: str | None = None) -> list[Task]:
        """Every task (or those of one status, of one queue), ordered by task id."""
        if status is not None:
            if not isinstance(status, str):
                raise TypeError("status must be a str or None")
            if status not in STATUSES:
                raise ValueError(f"unknown status {status!r}")
        if queue is not None:
            check_queue(queue)
        return [
            task_of(r)
            for _, r in sorted(self._tasks.items())
            if (status is None or r["status"] == status) and (queue is None or r["queue"] == queue)
        ]

    def counts(self) -> dict[str, int]:
        """The number of tasks per status, always with exactly the four keys."""
        counts = dict.fromkeys(STATUSES, 0)
        for record in self._tasks.values():
            counts[record["status"]] += 1
        return counts

    def next_deadline(self) -> int | None:
        """`stats()["next_deadline"]`: the earliest deadline of a leased task, or None."""
        times = [r["deadline"] for r in self._tasks.values() if r["status"] == "leased"]
        return min(times) if times else None
