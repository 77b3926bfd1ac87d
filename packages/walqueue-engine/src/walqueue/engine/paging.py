"""Bounded reads: one page of the tasks with a status, in task-id order, after a cursor.

Why in three steps: `Queue.tasks(status)` builds every task of a status
(a million payloads decoded for one screenful), under the queue's lock. A
page instead copies, under the lock, only the index that holds the status
(a C-speed copy of a set or a heap: milliseconds for a million ids); picks
the `limit` smallest ids after the cursor with the lock released (the
queue's other callers go on meanwhile); and then, under the lock again,
builds just those tasks, dropping any that changed status in between. The
work is linear in the size of the status's index but done outside the lock,
and the answer is at most `limit` tasks, whatever the page's depth (a
cursor, never an offset). Nothing here touches a file or a clock.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Iterable
from contextlib import AbstractContextManager
from operator import itemgetter
from typing import Any, Final

from walqueue.engine.records import view
from walqueue.engine.rows import status_of
from walqueue.engine.types import Task

__all__ = ["MAX_PAGE", "check_page_args", "collect", "read_page", "smallest_after"]

#: The most tasks one page may ask for.
MAX_PAGE: Final = 10_000

_STATUSES: Final = ("ready", "leased", "completed", "dead")


def check_page_args(status: Any, after: Any, limit: Any) -> None:
    """`ValueError`/`TypeError` for a bad status, cursor or limit; nothing is read before this passes."""
    if type(status) is not str or status not in _STATUSES:
        raise ValueError(f"status must be one of {', '.join(_STATUSES)}, not {status!r}")
    if after is not None and type(after) is not str:
        raise TypeError(f"after must be a task id (str) or None, not {type(after).__name__}")
    if type(limit) is not int:
        raise TypeError(f"limit must be an int, not {type(limit).__name__}")
    if not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be from 1 to {MAX_PAGE}, not {limit}")


def smallest_after(index: Collection[Any], after: str | None, limit: int) -> list[str]:
    """The `limit` smallest task ids of a copied index that sort after `after` (heap entries: their ids, deduplicated).

    Called with the lock released, on a copy only this call holds.
    """
    ids: Iterable[str] = index
    if index and isinstance(next(iter(index)), tuple):
        ids = set(map(itemgetter(1), index))  # a heap's (time, task id) entries, stale ones included
    if after is not None:
        ids = filter(after.__lt__, ids)  # the comparisons in C: twice as fast as a comprehension
    return heapq.nsmallest(limit, ids)


def collect(tasks: dict[str, Any], ids: list[str], status: str) -> list[Task]:
    """The tasks of `ids` that are still in `status` (called under the lock), in the order of `ids`."""
    found = []
    for task_id in ids:
        record = tasks.get(task_id)
        if record is not None and status_of(record) == status:
            found.append(view(record).to_task())
    return found


def read_page(
    guard: AbstractContextManager[Any],
    index_of: Callable[[str], list[Any]],
    tasks: dict[str, Any],
    status: Any,
    after: Any,
    limit: Any,
) -> list[Task]:
    """`Queue.page`: the three steps, the lock (`guard`) taken for the first and the last only.

    `index_of(status)` copies the status's index (`State.status_index`);
    `tasks` is the state's task map. A page that lost tasks to a concurrent
    change is topped up from its last id, at most three times.
    """
    check_page_args(status, after, limit)
    found: list[Task] = []
    for _ in range(4):
        wanted = limit - len(found)
        with guard:
            index = index_of(status)
        ids = smallest_after(index, after, wanted)  # the lock released: the queue's other calls go on
        with guard:
            found.extend(collect(tasks, ids, status))
        if len(ids) < wanted or len(found) >= limit:
            break
        after = ids[-1]
    return found
