"""What the dashboard reads from a queue: one adapter over a `Queue` or a `Client`, with bounded reads.

Why an adapter: the dashboard must work over any `QueueSource` (an embedded
`Queue`, a `Client` of a served one, a test double), and must stay bounded
on a queue of a million tasks: every page is read with the bounded
``page(status, after=, limit=)``, which every source declares (no backend
is probed for it).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, cast

from walqueue import Task
from walqueue.engine.clockunit import store_unit
from walqueue.engine.types import Status
from walqueue.protocol.source import QueueSource

__all__ = [
    "Backend",
    "ErrorGroup",
    "MAX_LIMIT",
    "Page",
    "Source",
    "error_of",
    "group_id",
    "task_view",
]

#: The most tasks one page holds (an answer's size stays bounded).
MAX_LIMIT: Final = 500
#: The tasks read per call when the dashboard scans (grouping, offsets): fewer, larger reads.
SCAN_CHUNK: Final = 5000
#: How long a grouping of the dead letters is reused (the page asks every two seconds).
GROUPS_SECONDS: Final = 10.0
#: The longest payload excerpt shown, in characters.
EXCERPT_CHARS: Final = 240
#: The longest error message shown or grouped on, in characters.
MESSAGE_CHARS: Final = 500


#: What the dashboard reads from and acts on: any source (`Queue`, `Client`, a test double implementing it).
Backend = QueueSource


@dataclass(frozen=True, slots=True)
class Page:
    """Up to `limit` tasks in task-id order after a cursor, and the cursor of the next page (None: last)."""

    tasks: list[Task]
    next_after: str | None


@dataclass(slots=True)
class ErrorGroup:
    """The dead letters that failed the same way: the last error's type and message."""

    group: str
    type: str
    message: str
    count: int
    example: str


def error_of(task: Task) -> dict[str, Any] | None:
    """The task's last error as a plain dict, or None (`Task.last_error` is always a `LastError` or None)."""
    error = task.last_error
    return None if error is None else error.to_dict()


def _error_key(error: Mapping[str, Any] | None) -> tuple[str, str]:
    if error is None:
        return ("", "")
    return (str(error.get("type", "")), str(error.get("message", ""))[:MESSAGE_CHARS])


def group_id(error: Mapping[str, Any] | None) -> str:
    """A short stable name for an error group, usable in a URL or a form (hex; "none" for no error)."""
    kind, message = _error_key(error)
    if not kind and not message:
        return "none"
    return hashlib.sha256(f"{kind}\0{message}".encode("utf-8", "surrogatepass")).hexdigest()[:16]


def excerpt(payload: Any) -> str:
    """The payload as compact JSON, cut to `EXCERPT_CHARS` with a marker."""
    if payload is None:
        return ""
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 1] + "\u2026"


def task_view(task: Task, now: int) -> dict[str, Any]:
    """One task as the JSON API shows it: no whole payload, an excerpt; the lease's time left."""
    error = error_of(task)
    if error is not None and isinstance(error.get("message"), str):
        error["message"] = error["message"][:MESSAGE_CHARS]
    return {
        "task_id": task.task_id,
        "key": task.key,
        "status": task.status,
        "payload_excerpt": excerpt(task.payload),
        "available_at": task.available_at,
        "max_attempts": task.max_attempts,
        "attempts": task.attempts,
        "generation": task.generation,
        "worker": task.worker,
        "deadline": task.deadline,
        "time_left": None if task.deadline is None else task.deadline - now,
        "last_error": error,
        "group": group_id(error),
    }


class Source:
    """The dashboard's reads and actions over one backend."""

    def __init__(self, backend: QueueSource, on_commit: Callable[[], None] | None = None) -> None:
        self.backend = backend
        #: Called after each action that may have committed (walqueue-serve wakes its loop with it).
        self.on_commit = on_commit
        self._groups: tuple[int, float, tuple[list[ErrorGroup], int, bool]] | None = None
        self._units: int | None = None

    def units(self) -> int:
        """The store's clock unit (units per second) every time it shows is in (walqueue.engine.clockunit).

        Read from `stats()` until the store records one, then kept: a recorded unit never changes.
        """
        if self._units is not None:
            return self._units
        recorded = dict(self.backend.stats()).get("clock")
        self._units = recorded
        return store_unit(recorded)

    def now(self, seconds: float) -> int:
        """`seconds` since the epoch (the dashboard's clock) in the store's unit."""
        return int(seconds * self.units())

    def stats(self) -> dict[str, Any]:
        """The backend's `stats()`, as a plain dict."""
        return dict(self.backend.stats())

    def metrics(self, now: int) -> dict[str, Any]:
        """The backend's `metrics(now=now)` with each queue's settings and counts (lanes), as a plain dict."""
        return {**self.backend.metrics(now=now), "queues": list(self.backend.queues())}

    def page(self, status: str, after: str | None, limit: int) -> Page:
        """Up to `limit` tasks with `status` whose id sorts after `after`, in id order."""
        tasks = list(self.backend.page(cast(Status, status), after=after, limit=limit + 1))
        more = len(tasks) > limit
        tasks = tasks[:limit]
        return Page(tasks, tasks[-1].task_id if more and tasks else None)

    def scan(self, statuses: Sequence[str], budget: int, chunk: int = SCAN_CHUNK) -> tuple[list[Task], bool]:
        """Up to `budget` tasks of `statuses` (in id order per status), and whether any were left unread."""
        found: list[Task] = []
        for status in statuses:
            after: str | None = None
            while True:
                page = self.page(status, after, min(chunk, budget - len(found)))
                found.extend(page.tasks)
                if page.next_after is None:
                    break
                if len(found) >= budget:
                    return found, True
                after = page.next_after
        return found, False

    def groups(self, budget: int) -> tuple[list[ErrorGroup], int, bool]:
        """The dead letters grouped by last error over the first `budget` of them: groups, scanned, truncated.

        Reused for `GROUPS_SECONDS` (on a monotonic clock) while the dead count
        stays the same: grouping reads up to `budget` tasks, and every open page
        asks for it every two seconds.
        """
        dead_count = self.stats()["counts"]["dead"]
        cached = self._groups
        if cached is not None and cached[0] == dead_count and time.monotonic() - cached[1] < GROUPS_SECONDS:
            return cached[2]
        result = self._group(budget)
        self._groups = (dead_count, time.monotonic(), result)
        return result

    def _group(self, budget: int) -> tuple[list[ErrorGroup], int, bool]:
        dead, truncated = self.scan(("dead",), budget)
        groups: dict[str, ErrorGroup] = {}
        for task in dead:
            error = error_of(task)
            name = group_id(error)
            group = groups.get(name)
            if group is None:
                kind, message = _error_key(error)
                groups[name] = ErrorGroup(name, kind, message, 1, task.task_id)
            else:
                group.count += 1
        ordered = sorted(groups.values(), key=lambda group: (-group.count, group.type, group.message))
        return ordered, len(dead), truncated
