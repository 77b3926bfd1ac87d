"""The stored shape of a task: a row (an exact tuple, by position) or, once completed, a tombstone (exact bytes).

Why exact: the cyclic collector tracks every instance of a Python class
(a tuple or bytes subclass too) for as long as it lives, and a full
collection walks every tracked object: at a million tasks that was a pause
of about a second. A collection untracks an exact tuple whose items are
all untracked (str, int, bytes, None, or such tuples) when it looks at it,
so a row is untracked by the second collection that sees it at the latest
(its heap entry and its error are tuples too), and bytes are never
tracked: the state's tasks cost a full collection next to nothing
(docs/DECISIONS.md §50). Reading by position costs
what reading a slot did; readers off the hot path use records.view.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
from itertools import repeat
from typing import Any

from walqueue.engine.validate import DEFAULT_QUEUE

__all__ = [
    "COMPLETED",
    "DEAD",
    "DIGEST_BYTES",
    "ErrorFields",
    "HeapEntry",
    "LEASED",
    "READY",
    "Row",
    "STATUSES",
    "Stored",
    "StoredError",
    "lane_key",
    "new_ready_rows",
    "new_row",
    "status_of",
    "with_traceback",
]

READY = "ready"
LEASED = "leased"
COMPLETED = "completed"
DEAD = "dead"
#: Every status a task can have, in the order `State.counts()` lists them.
STATUSES: tuple[str, ...] = (READY, LEASED, COMPLETED, DEAD)

#: The size of a put's identity digest (SHA-256), which starts every record's `digest_and_payload`.
DIGEST_BYTES = 32

#: A task's last error as stored: (type, message, attempt, at), the fields of `LastError` in its order.
ErrorFields = tuple[str, str, int, int]

#: A ready task's (available_at, task id) or a leased one's (deadline, task id): its place in a heap.
HeapEntry = tuple[int, str]

#: A last error as a row stores it: `ErrorFields`, with its traceback as a fifth item when it has one.
StoredError = tuple[str, str, int, int] | tuple[str, str, int, int, str]

#: A stored not-completed task: an exact tuple of atomic values, laid out by the positions below.
Row = tuple[Any, ...]
#: What `State.tasks` holds for a task: its `Row`, or once completed its packed tombstone (exact bytes).
Stored = Row | bytes

# Where each field sits in a `Row`. `generation` has no place of its own: every
# transition keeps it equal to `attempts` (snapshot loading refuses a record
# where it is not), so it reads ATTEMPTS. ENTRY is the row's heap entry,
# (available_at, task id) when ready, (deadline, task id) when leased, else
# None: a heap entry is live while ``tasks[task_id][ENTRY] is entry``. A task
# in another lane than the default queue at priority 0 has one more item, its
# lane's key: the exact tuple (queue, priority) that `lane_key` shares among
# every row of that lane (8 bytes a task, not 16 for two items).
TASK_ID = 0
KEY = 1
STATUS = 2
DATA = 3  # digest_and_payload
AVAILABLE_AT = 4
MAX_ATTEMPTS = 5
ATTEMPTS = 6
GENERATION = ATTEMPTS
WORKER = 7
DEADLINE = 8
ERROR = 9  # StoredError | None
ENTRY = 10
LANE = 11  # a lane row's `lane_key`: ``row[LANE:]`` is () in the default lane, ``(key,)`` in another
#: The name of the field at each position of a `Row` up to its lane (a record view answers them by name).
FIELDS: tuple[str, ...] = ("task_id", "key", "status", "digest_and_payload", "available_at", "max_attempts")
FIELDS += ("attempts", "worker", "deadline", "stored_error", "entry")


#: Every lane's key, by itself: one tuple per (queue, priority) the process has seen (lanes are few: CONTRACT's
#: queue names and -100..100), so a million rows of a lane hold one key, and reading it is one index.
_LANE_KEYS: dict[tuple[str, int], tuple[str, int]] = {}


def lane_key(queue: str, priority: int) -> tuple[str, int]:
    """The shared key of lane (`queue`, `priority`): an exact tuple of atomic values, untracked like its rows."""
    key = (queue, priority)
    shared = _LANE_KEYS.get(key)
    if shared is None:
        shared = key if type(queue) is str and sys.intern(queue) is queue else (sys.intern(queue), priority)
        _LANE_KEYS[shared] = shared  # the key is its own value: one tuple per lane
    return shared


def new_row(
    task_id: str,
    key: str,
    status: str,
    digest_and_payload: bytes,
    available_at: int,
    max_attempts: int,
    attempts: int,
    worker: str | None,
    deadline: int | None,
    stored_error: StoredError | None,
    queue: str = DEFAULT_QUEUE,
    priority: int = 0,
) -> Row:
    """A not-completed task's row, with its heap entry, and its lane only outside the default one.

    Hot transitions build their row inline in the same layout (transitions.py).
    """
    entry = (available_at, task_id) if status == READY else (deadline, task_id) if status == LEASED else None
    row = (task_id, key, status, digest_and_payload, available_at, max_attempts, attempts, worker, deadline)
    if priority == 0 and (queue is DEFAULT_QUEUE or queue == DEFAULT_QUEUE):
        return (*row, stored_error, entry)
    return (*row, stored_error, entry, lane_key(queue, priority))


def new_ready_rows(
    task_ids: Sequence[str],
    keys: Iterable[str],
    digests_and_payloads: Iterable[bytes],
    available_at: Sequence[int],
    max_attempts: Iterable[int],
) -> Iterator[Row]:
    """`new_row` of one new ready task in the default lane per position of the columns, built by `zip` at C speed.

    A put_many of new tasks builds a thousand rows at once (`admission.stage_new_puts`); one call per row costs
    about as much again as the rows (tests: equal to `new_row`'s, for all inputs).
    """
    count = len(task_ids)
    return zip(
        task_ids, keys, repeat(READY, count), digests_and_payloads, available_at, max_attempts, repeat(0, count),
        repeat(None, count), repeat(None, count), repeat(None, count), zip(available_at, task_ids, strict=True),
        strict=True,
    )  # fmt: skip


def status_of(stored: Stored) -> str:
    """The task's status: a row's item, COMPLETED for a tombstone."""
    if isinstance(stored, bytes):
        return COMPLETED
    status: str = stored[STATUS]
    return status


def with_traceback(last_error: ErrorFields | None, traceback: str | None) -> StoredError | None:
    """How a row stores `last_error` and its `traceback` (None: the error alone)."""
    if traceback is None or last_error is None:
        return last_error
    return (*last_error, traceback)
