"""walqueue.worker: run your functions for the tasks of a WALQueue (`walqueue-worker`, or `Worker` in code).

Heartbeats, retries with backoff, the last error, timeouts, a clean stop on
SIGTERM, several threads or processes, and periodic tasks. The map:

  clock.py       the one explicit clock (default: milliseconds since the epoch)
  errors.py      Retry, Permanent, UnknownKind (what a handler raises), LeaseLost
  context.py     Job and Context: what a handler is given
  router.py      Router: one function per payload["kind"]
  app.py         App and @app.task: tasks as Python functions (enqueue, options, the worker's handler)
  handles.py     TaskHandle (id, status, result), TaskFailed, ResultTooLarge
  current.py     current(): the running task's context; its follow-ups, committed with the ack
  completion.py  Completion: the result and follow-ups a worker commits in one `complete`
  chains.py      chain(a.s(...), b.s(...)): each step's result the next one's first argument
  taskspec.py    TaskSpec, TaskApp: what handles, chains and current() use of a task function and its app
  aio.py         AsyncRunner: the event loop on which async def tasks run
  retry.py       RetryPolicy: exponential backoff with full jitter
  settings.py    WorkerSettings: every option of a Worker in one checked value
  source.py      WorkerSource: the calls a source declares (Queue, Client), its grouping; acks sent together
  run.py         Run: one leased task, from its reserve to its settling
  fetch.py       the fetch role: reserve and prefetch, hand runs out, wait when nothing is due
  execute.py     the execute role: run the handler, hand its outcome to the completer
  complete.py    the complete role: the only code that acks, releases, fails or gives back a lease
  monitor.py     the keep-alive role: heartbeats and timeouts (tick with a fake clock in tests)
  lifecycle.py   the lifecycle role: stop, the shutdown in order, a timeout's consequence
  crew.py        Crew: what the roles share (signals, completer, keep-alive, room, hand-off)
  running.py     old names (Run, Settler) kept for imports written against them
  schedule.py    periodic tasks (`cron:<name>:<time>` keys), cron.py the 5-field parser
  report.py      counters, one log line per outcome, the summary line, JSON lines
  sync_only.py   an async def handler refused (at start, and what a call returned)
  forks.py       a process forked by a handler ends where the handler returned
  summaries.py   --processes: the children send counters, the supervisor logs one line
  runner.py      Worker: the roles of one process put together, its public calls
  supervisor.py  several processes sharing one queue through walqueue-serve
  cli.py         the walqueue-worker command
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Imported now: the function `current` has the name of its module, which would hide it once imported.
from walqueue.worker.current import TaskContext, current

if TYPE_CHECKING:
    from walqueue.worker.app import App, TaskFunction
    from walqueue.worker.chains import chain
    from walqueue.worker.clock import MILLISECONDS, Clock, milliseconds
    from walqueue.worker.context import Context, Job
    from walqueue.worker.errors import LeaseLost, Permanent, Retry, UnknownKind
    from walqueue.worker.handles import ResultTooLarge, TaskFailed, TaskHandle
    from walqueue.worker.retry import RetryPolicy
    from walqueue.worker.router import Handler, Router
    from walqueue.worker.runner import Worker
    from walqueue.worker.schedule import Periodic, firing_key
    from walqueue.worker.settings import WorkerSettings

__all__ = [
    "MILLISECONDS",
    "App",
    "ResultTooLarge",
    "TaskContext",
    "TaskFailed",
    "TaskFunction",
    "TaskHandle",
    "current",
    "Clock",
    "Context",
    "Handler",
    "Job",
    "LeaseLost",
    "Periodic",
    "Permanent",
    "Retry",
    "RetryPolicy",
    "Router",
    "UnknownKind",
    "Worker",
    "WorkerSettings",
    "chain",
    "firing_key",
    "milliseconds",
]

#: Where each public name lives, by module: imported from it on first use (PEP 562), so that importing one
#: module of the package (`python -m walqueue.worker`, a handler's `from walqueue.worker import Retry`)
#: imports only what that needs: not the scheduler (tomllib, cron) of a worker without a schedule.
_HOMES: dict[str, str] = {
    name: f"walqueue.worker.{module}"
    for module, names in (
        ("app", ("App", "TaskFunction")),
        ("chains", ("chain",)),
        ("clock", ("MILLISECONDS", "Clock", "milliseconds")),
        ("context", ("Context", "Job")),
        ("errors", ("LeaseLost", "Permanent", "Retry", "UnknownKind")),
        ("handles", ("ResultTooLarge", "TaskFailed", "TaskHandle")),
        ("retry", ("RetryPolicy",)),
        ("router", ("Handler", "Router")),
        ("runner", ("Worker",)),
        ("schedule", ("Periodic", "firing_key")),
        ("settings", ("WorkerSettings",)),
    )
    for name in names
}


def __getattr__(name: str) -> Any:
    """A public name on first use, imported from its module."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
