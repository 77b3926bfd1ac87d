"""`TaskHandle`: what `enqueue` returns (an id, its status, its result), and the errors reading a result raises.

`result(timeout=)` blocks on the source's `wait` (a `Queue` in this
process, or a long poll through walqueue-serve), never on a sleep loop:
`wait` returns at the next durable commit, and counts every commit since
this thread's previous call, so a commit between the read of the task and
the wait is not missed. A completed task's result is its stored value
(`Queue.result`): ``None`` for a function that returned ``None`` (nothing is
stored for it) or once the result expired (`result_ttl`) or was dropped at
compaction. A dead task raises `TaskFailed` with its last error; a task
still running when the timeout passes raises `TimeoutError`. A task not in
the store yet is waited for like a pending one: the handle of a follow-up
(``<parent id>/<n>``) may be read before its parent has completed.
"""

from __future__ import annotations

import math
import time
from typing import Any

from walqueue import LastError, WalQueueError
from walqueue.worker.errors import Permanent
from walqueue.worker.taskspec import TaskApp

__all__ = ["ResultTooLarge", "TaskFailed", "TaskHandle"]

#: The longest single wait of `result(timeout=None)` (a long poll is bounded; the loop waits again).
_LONGEST_WAIT = 60.0


class TaskFailed(WalQueueError):
    """The task is dead (its attempts ran out, a permanent failure, or it was cancelled): `last_error` says why."""

    def __init__(self, task_id: str, last_error: LastError | None) -> None:
        self.task_id = task_id
        self.last_error = last_error
        why = "no error recorded" if last_error is None else f"{last_error.type}: {last_error.message}"
        super().__init__(f"task {task_id} is dead ({why})")


class ResultTooLarge(Permanent):
    """A task function returned a value whose JSON is longer than the store keeps: the task dies with this error."""


class TaskHandle:
    """A task put by `enqueue` (or rebuilt by `App.handle(task_id)`): `.id`, `.status()`, `.result(timeout=)`.

    On an app bound to an `AsyncClient`, use `await handle.astatus()` and `await handle.aresult(timeout=)`.
    """

    __slots__ = ("app", "id")

    def __init__(self, app: TaskApp, task_id: str) -> None:
        self.app = app
        self.id = task_id

    def __repr__(self) -> str:
        return f"<TaskHandle {self.id!r}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TaskHandle) and other.app is self.app and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def status(self) -> str | None:
        """ "ready", "leased", "completed" or "dead"; None if the store has no such task."""
        task = self.app.source_for_calls().get(self.id)
        return None if task is None else task.status

    def result(self, timeout: float | None = None) -> Any:
        """The task's return value once completed; `TaskFailed` once dead; `TimeoutError` after `timeout` seconds."""
        source = self.app.source_for_calls()
        deadline = None if timeout is None else time.monotonic() + _check_timeout(timeout)
        while True:
            task = source.get(self.id)
            if task is None:
                pass  # not yet put: a follow-up whose parent has not completed (waited for like a pending task)
            elif task.status == "completed":
                stored = source.result(self.id, now=self.app.now())  # every source keeps results
                return None if stored is None else stored["value"]
            elif task.status == "dead":
                raise TaskFailed(self.id, task.last_error)
            source.wait(_remaining(deadline, self.id))

    async def astatus(self) -> str | None:
        task = await self.app.source_for_calls().get(self.id)
        return None if task is None else str(task.status)

    async def aresult(self, timeout: float | None = None) -> Any:
        """`result` for an app bound to an `AsyncClient`: awaits the same waits."""
        source = self.app.source_for_calls()
        deadline = None if timeout is None else time.monotonic() + _check_timeout(timeout)
        while True:
            task = await source.get(self.id)
            if task is None:
                pass  # not yet put (see `result`)
            elif task.status == "completed":
                stored = await source.result(self.id, now=self.app.now())
                return None if stored is None else stored["value"]
            elif task.status == "dead":
                raise TaskFailed(self.id, task.last_error)
            await source.wait(_remaining(deadline, self.id))


def _check_timeout(timeout: float) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not math.isfinite(timeout) or timeout < 0:
        raise ValueError(f"timeout is None or a number of seconds >= 0, not {timeout!r}")
    return float(timeout)


def _remaining(deadline: float | None, task_id: str) -> float:
    """How long the next wait may last; `TimeoutError` once the deadline has passed."""
    if deadline is None:
        return _LONGEST_WAIT
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"task {task_id} has no result yet")
    return min(left, _LONGEST_WAIT)
