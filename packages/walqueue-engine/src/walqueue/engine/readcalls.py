"""`Queue`'s reads: `get`, `tasks`, `stats`, `metrics`, `page` and `last_seq`, the calls that never write.

A base class of `Queue` (as lanecalls.py is), apart from the write path:
each takes the guard (closed, re-entrant, the lock), reads the state or
the parts that count (the WAL writer, the compactor, the metrics) and
changes nothing. They use only what `Queue` gives them, declared below
for the type checker.
"""

from __future__ import annotations

from functools import partial

from walqueue.engine import paging
from walqueue.engine.autocompact import Compactor
from walqueue.engine.callguard import CallGuard
from walqueue.engine.metrics import Metrics, MetricsReading
from walqueue.engine.state import State
from walqueue.engine.types import Stats, Status, Task
from walqueue.engine.wal import WalWriter

__all__ = ["ReadCalls"]


class ReadCalls:
    """What `Queue` provides to its reads, declared for the type checker, and the reads."""

    __slots__ = ()

    _guard: CallGuard
    _state: State
    _wal: WalWriter
    _compactor: Compactor
    _metrics: Metrics

    def _check_open(self) -> None:
        raise NotImplementedError

    def get(self, task_id: str) -> Task | None:
        """The task `task_id` as a `Task`, or ``None`` if no such id was ever stored. Writes nothing.

        Raises `TypeError` if `task_id` is not a `str`, `QueueClosed`.

        Example: ``queue.get("email-1").status  # "ready"``
        """
        self._check_open()
        if not isinstance(task_id, str):
            raise TypeError(f"task_id must be a str, not {type(task_id).__name__}")
        with self._guard:
            return self._state.get_task(task_id)

    def tasks(self, status: Status | None = None, *, queue: str | None = None) -> list[Task]:
        """Every task, or every task with `status`, ordered by task id. Writes nothing.

        `status` is one of ``"ready"``, ``"leased"``, ``"completed"``,
        ``"dead"`` (typed as `walqueue.Status`), or ``None`` for all; anything
        else raises `ValueError`; `queue` keeps only that queue's tasks. `QueueClosed` once closed.

        Example: ``for task in queue.tasks("dead"): print(task.task_id)``  (the dead letters)
        """
        with self._guard:
            return self._state.list_tasks(status, queue)

    def stats(self) -> Stats:
        """Counts per status and the log's position, as a `walqueue.Stats` dict. Writes nothing.

        Keys: `counts` (exactly ``ready``, ``leased``, ``completed``,
        ``dead``), `last_seq`, `snapshot_seq`, `wal_bytes` (live WAL after the
        snapshot), `segments` (live WAL segments), `next_available_at` (the
        smallest `available_at` of a ready task) and `next_deadline` (the
        earliest lease deadline), each None when there is none. Raises `QueueClosed`.

        Example: ``queue.stats()["counts"]["ready"]``
        """
        with self._guard:
            return {
                "counts": self._state.counts(),
                "last_seq": self._state.last_seq,
                "snapshot_seq": self._compactor.snapshot_seq,
                "wal_bytes": self._wal.wal_bytes,
                "segments": self._wal.segments,
                "next_available_at": self._state.next_available_at(),
                "next_deadline": self._state.next_deadline(),
                "clock": self._state.clock,
            }

    def metrics(self, *, now: int | None = None) -> MetricsReading:
        """Counters since opening, gauges (`oldest_ready_age` against `now`), histograms: a `MetricsReading`.

        Writes nothing; `TypeError`/`ValueError` for a bad `now`. Example: ``queue.metrics(now=int(time.time()))``"""
        stats = self.stats()
        with self._guard:  # the dead count with the counters: `deaths` is derived from both
            return self._metrics.reading(stats, now, self._state, self._guard, self._compactor)

    def page(
        self, status: Status, *, after: str | None = None, limit: int = 100, queue: str | None = None
    ) -> list[Task]:
        """Up to `limit` (1 to 10,000) tasks with `status` whose ids sort after `after`, by id: a bounded `tasks`.

        Writes nothing; the lock is held only to copy an index and build the page (engine/paging.py). Example:
        ``page = queue.page("dead", limit=50); next_page = queue.page("dead", after=page[-1].task_id)``"""
        index_of = partial(self._state.status_index, queue=queue)  # `queue`: only that queue's tasks
        return paging.read_page(self._guard, index_of, self._state.tasks, status, after, limit)

    @property
    def last_seq(self) -> int:
        """The sequence number of the last committed transaction (0 when none). Raises `QueueClosed`."""
        with self._guard:
            return self._state.last_seq
