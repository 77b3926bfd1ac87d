"""`current()`: the running task's context, and the follow-ups it collects (committed with its ack).

A context variable rather than a thread-local, so that it is right in a
thread and in a coroutine alike (each asyncio task runs in a copy of the
context it was created in). The App sets it around each run of a task
function; outside one, `current()` is a `RuntimeError`.

Why follow-ups are collected rather than put: a handler that puts the next
step itself, then crashes before its ack, runs again and puts it again (or,
putting after the ack, loses it). Collected here, they are committed by the
worker in ONE transaction with the task's completion (`Queue.complete`), so
a follow-up exists exactly when its parent completed. Each gets the id and
key ``<parent id>/<n>``, n counting this run's enqueues from 1: a re-run of
the handler after a crash builds the same ids, and an identical retry of a
put writes nothing.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import Any

from walqueue.worker.context import Context, Job
from walqueue.worker.taskspec import TaskSpec

__all__ = ["TaskContext", "current"]


@dataclass(eq=False)
class TaskContext:
    """The running task: `job` (id, payload, attempts), the worker's `context`, and its follow-ups so far.

    The task's id, its function's name and this attempt's number are read
    from the job, never copied: the job is the one record of them.
    """

    job: Job
    context: Context
    followups: list[dict[str, Any]] = field(default_factory=list, init=False)

    @property
    def id(self) -> str:
        return self.job.id

    @property
    def name(self) -> str:
        """The task function's name: the payload's ``kind``, by which the App found it."""
        name: str = self.job.payload["kind"]
        return name

    @property
    def attempts(self) -> int:
        """This attempt's number: 1 for the first run."""
        return self.job.attempts

    def enqueue(self, task: TaskSpec, /, *args: Any, **kwargs: Any) -> str:
        """Collect a follow-up of `task` with these arguments; returns its id (``<this id>/<n>``).

        Nothing is written now: the worker commits it with this task's
        completion, or never (if this run fails, is retried or is lost).
        """
        followup_id = f"{self.job.id}/{len(self.followups) + 1}"
        self.followups.append(task.put_item(followup_id, args, kwargs, put_at=task.app.now()))  # ages from now
        return followup_id

    def check(self) -> None:
        """`Context.check`: `LeaseLost` once the task is no longer this worker's."""
        self.context.check()


_current: contextvars.ContextVar[TaskContext] = contextvars.ContextVar("walqueue_current_task")


def current() -> TaskContext:
    """The context of the task function running now; `RuntimeError` outside one."""
    try:
        return _current.get()
    except LookupError:
        raise RuntimeError("current() is called from inside a task function the worker is running") from None


def enter(task_context: TaskContext) -> contextvars.Token[TaskContext]:
    return _current.set(task_context)


def leave(token: contextvars.Token[TaskContext]) -> None:
    _current.reset(token)
