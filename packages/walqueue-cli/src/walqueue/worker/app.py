"""`App` and `@app.task`: tasks as Python functions, put by `enqueue`, run by `walqueue-worker DIR module:app`.

The payload of a task function's task is ``{"kind": name, "args": [...],
"kwargs": {...}}``: the same ``kind`` field a `Router` dispatches on, so an
App's tasks and a Router's live in one store. Creating an app opens
nothing; it is given a source (a directory, a `Queue`, a `Client`, an
`AsyncClient`) now or later with `bind`, and a worker runs it on the
worker's own source, whatever the app was given.

Run by a worker, an App is the handler: it finds the function by name,
calls it with the stored arguments (a coroutine function on the worker's
event loop, `aio.py`), and returns a `Completion` (the result and the
follow-ups), which the worker commits with the ack in one transaction.

Times: the store's times are the worker clock's units (milliseconds by
default, `units_per_second`); `delay=`, `at=`, `timeout=` and `result_ttl`
here are seconds, converted with the app's clock.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import os
import threading
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, ParamSpec, TypedDict, TypeVar, Unpack, overload

from walqueue import KeyConflict, Queue
from walqueue.worker.chains import Signature, new_task_id, next_step
from walqueue.worker.clock import MILLISECONDS, Clock, milliseconds
from walqueue.worker.completion import DEFAULT_MAX_RESULT_BYTES, Completion, check_json_value
from walqueue.worker.context import Context, Job
from walqueue.worker.current import TaskContext, enter, leave
from walqueue.worker.errors import Permanent, Retry, UnknownKind
from walqueue.worker.handles import ResultTooLarge, TaskHandle
from walqueue.worker.retry import RetryPolicy
from walqueue.worker.taskspec import TaskApp, TaskSpec

__all__ = ["DEFAULT_QUEUE", "DEFAULT_RESULT_TTL", "App", "CallOptions", "TaskCall", "TaskFunction"]

P = ParamSpec("P")
R = TypeVar("R")

#: How long a stored result is kept, in seconds, unless the app or the task says otherwise (a day).
DEFAULT_RESULT_TTL = 86_400.0
#: The queue and priority a task has unless it says otherwise (the lanes' defaults: nothing extra is sent).
DEFAULT_QUEUE = "default"
DEFAULT_PRIORITY = 0


class TaskOptions(TypedDict, total=False):
    """`App.task`'s options (see it): each is the task's own, and defaults as `App.task` says."""

    name: str | None
    queue: str
    priority: int
    max_attempts: int
    timeout: float | None
    retry: RetryPolicy | None
    result_ttl: float | None


class CallOptions(TypedDict, total=False):
    """One call's options (`TaskFunction.options`, `TaskCall`), each None or left out: the task's own.

    `key`: the task's id and idempotency key (the same key is the same
    task; by default a new id); `delay` seconds from now or `at` (seconds
    since the epoch or an aware datetime), not both; `queue`, `priority`.
    """

    key: str | None
    delay: float | None
    at: float | datetime | None
    queue: str | None
    priority: int | None


def _seconds(value: float | None, what: str, *, allow_zero: bool = True) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TypeError(f"{what} is a number of seconds, not {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{what} must be {'>= 0' if allow_zero else '> 0'} seconds, not {value!r}")
    return float(value)


class App:
    """Task functions, by name, and the source their tasks are put on (see the module's docstring).

    `source`: a directory (opened as a `Queue` on first use, closed by
    `close()`), a `Queue`, a `walqueue.cli.Client` or `AsyncClient`, or None
    (bind one later). `result_ttl`: seconds a result is kept (a task may say
    otherwise). `max_result_bytes`: the longest result's JSON.
    """

    def __init__(
        self,
        source: Any = None,
        *,
        result_ttl: float = DEFAULT_RESULT_TTL,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        clock: Clock = milliseconds,
        units_per_second: int = MILLISECONDS,
    ) -> None:
        self.result_ttl = _seconds(result_ttl, "result_ttl")
        if type(max_result_bytes) is not int or max_result_bytes < 1:
            raise ValueError(f"max_result_bytes must be an int >= 1, not {max_result_bytes!r}")
        self.max_result_bytes = max_result_bytes
        self.clock = clock
        self.units_per_second = units_per_second
        self.tasks: dict[str, TaskFunction[Any, Any]] = {}
        self._source: Any = None
        self._directory: str | None = None
        self._opening = threading.Lock()
        self._runner: Any = None  # the event loop of async tasks (aio.AsyncRunner), made on first use
        if source is not None:
            self.bind(source)

    # -- the source --------------------------------------------------------------------

    def bind(self, source: Any) -> App:
        """Give the app its source (replacing any): a directory path, a Queue, a Client or an AsyncClient."""
        from walqueue.client import AsyncClient, Client  # here: a worker on a directory never loads the clients

        if isinstance(source, str | os.PathLike):
            self._directory, self._source = os.fspath(source), None
        elif isinstance(source, Queue | Client | AsyncClient):  # the sources there are (declared, not probed)
            self._directory, self._source = None, source
        else:
            raise TypeError(f"an app's source is a directory, a Queue, a Client or an AsyncClient, not {source!r}")
        return self

    def source_for_calls(self) -> Any:
        """The bound source (a directory is opened now, once); `RuntimeError` if the app has none."""
        with self._opening:
            if self._source is None and self._directory is not None:
                self._source = Queue(self._directory)
            if self._source is None:
                raise RuntimeError("this app has no source: App(source) or app.bind(source) first")
            return self._source

    def close(self) -> None:
        """Close the Queue the app opened from a directory (a source given to it is the giver's to close)."""
        with self._opening:
            if self._directory is not None and isinstance(self._source, Queue):
                self._source.close()
                self._source = None
        if self._runner is not None:
            self._runner.close()
            self._runner = None

    def handle(self, task_id: str) -> TaskHandle:
        """The handle of a task put earlier (`.status()`, `.result()`), from its id."""
        if not isinstance(task_id, str):
            raise TypeError(f"a task id is a str, not {type(task_id).__name__}")
        return TaskHandle(self, task_id)

    def now(self) -> int:
        return self.clock()

    def units(self, seconds: float) -> int:
        return math.ceil(seconds * self.units_per_second)

    # -- declaring tasks -----------------------------------------------------------------

    @overload
    def task(self, function: Callable[P, R], /) -> TaskFunction[P, R]: ...

    @overload
    def task(self, /, **options: Unpack[TaskOptions]) -> Callable[[Callable[P, R]], TaskFunction[P, R]]: ...

    def task(self, function: Callable[P, R] | None = None, /, **options: Unpack[TaskOptions]) -> Any:
        """Register a function (``@app.task`` or ``@app.task(name=..., max_attempts=...)``); returns a `TaskFunction`.

        `name` defaults to ``module.qualname``. `timeout` (seconds): a
        coroutine function is cancelled when it passes; a plain function's
        result is discarded and the attempt fails (a thread cannot be
        stopped; the worker's --timeout is the hard limit). `retry`: the
        backoff of this task's retries (default: the worker's). `queue`,
        `priority` and `max_attempts` (3) are its puts' (`Queue.put`).
        """
        unknown = sorted(set(options) - set(TaskOptions.__annotations__))
        if unknown:
            raise TypeError(f"app.task() got unexpected keyword argument(s): {', '.join(unknown)}")
        queue, priority = options.get("queue", DEFAULT_QUEUE), options.get("priority", DEFAULT_PRIORITY)

        def register(target: Callable[P, R]) -> TaskFunction[P, R]:
            name, max_attempts, retry = options.get("name"), options.get("max_attempts", 3), options.get("retry")
            timeout = _seconds(options.get("timeout"), "timeout", allow_zero=False)
            task = TaskFunction(self, target, name, queue, priority, max_attempts, timeout, retry)
            task.result_ttl = _seconds(options.get("result_ttl"), "result_ttl")
            if task.name in self.tasks:
                raise ValueError(
                    f"a task named {task.name!r} is already registered: {self.tasks[task.name].function!r}"
                )
            self.tasks[task.name] = task
            return task

        return register if function is None else register(function)

    # -- running tasks (the worker's handler) ----------------------------------------------

    def __call__(self, job: Job, context: Context) -> Completion:
        """Run the task function `job` names; its result and follow-ups go back to the worker to commit."""
        payload = job.payload
        name = payload.get("kind")
        task = self.tasks.get(name) if isinstance(name, str) else None
        if task is None:
            known = ", ".join(sorted(self.tasks)) or "none"
            raise UnknownKind(f"no task function named {name!r} in this app (known: {known})")
        args, kwargs = payload.get("args", []), payload.get("kwargs", {})
        if type(args) is not list or type(kwargs) is not dict:
            raise Permanent(f"the payload of {job.id} has no list args and dict kwargs")
        task_context = TaskContext(job, context)
        token = enter(task_context)
        began = self.clock()
        try:
            value = self._run(task, args, kwargs, context)
        except (Permanent, Retry):
            raise
        except Exception as error:
            if task.retry is not None:  # the task's backoff; the error stays the task's own (type and message)
                with contextlib.suppress(AttributeError):  # an exception class without a __dict__: the worker's
                    error.walqueue_retry_delay = task.retry.delay(job.attempts)  # type: ignore[attr-defined]
            raise
        finally:
            leave(token)
        if task.timeout is not None and self.clock() - began > self.units(task.timeout):
            raise TimeoutError(f"{task.name} ran longer than its timeout ({task.timeout} s); its result is discarded")
        following = next_step(job.id, payload, value)  # a chain's next step: committed with this ack too
        if following is not None:
            task_context.followups.append(following)
        return self._completion(task, value, task_context)

    def _run(self, task: TaskFunction[Any, Any], args: list[Any], kwargs: dict[str, Any], context: Context) -> Any:
        if not task.is_async:
            return task.function(*args, **kwargs)
        with self._opening:
            if self._runner is None:
                from walqueue.worker.aio import AsyncRunner

                self._runner = AsyncRunner()
            runner = self._runner
        return runner.run(task.function(*args, **kwargs), task.timeout, context.lost)

    def _completion(self, task: TaskFunction[Any, Any], value: Any, task_context: TaskContext) -> Completion:
        if value is None:
            return Completion(None, None, task_context.followups)
        encoded = check_json_value(value, f"the result of {task.name}")
        if len(encoded) > self.max_result_bytes:
            raise ResultTooLarge(
                f"the result of {task.name} is {len(encoded)} bytes of JSON, more than {self.max_result_bytes}"
            )
        ttl = task.result_ttl if task.result_ttl is not None else self.result_ttl
        assert ttl is not None
        return Completion(value, self.clock() + self.units(ttl), task_context.followups)

    def __repr__(self) -> str:
        where = self._directory if self._directory is not None else type(self._source).__name__
        return f"<App {len(self.tasks)} task(s) on {where}>"


class TaskFunction[**P, R]:
    """A registered function: call it to run it here; `enqueue` to put it; `options(...)` for one call's options."""

    def __init__(
        self,
        app: App,
        function: Callable[P, R],
        name: str | None,
        queue: str,
        priority: int,
        max_attempts: int,
        timeout: float | None,
        retry: RetryPolicy | None,
    ) -> None:
        if not callable(function):
            raise TypeError(f"@app.task decorates a function, not {function!r}")
        self.app = app
        self.function = function
        self.name = name if name is not None else f"{function.__module__}.{function.__qualname__}"
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"a task's name is a non-empty str, not {self.name!r}")
        if type(max_attempts) is not int or max_attempts < 1:
            raise ValueError(f"max_attempts must be an int >= 1, not {max_attempts!r}")
        if not isinstance(queue, str) or not queue or type(priority) is not int:
            raise ValueError(f"queue is a non-empty str and priority an int, not {queue!r} and {priority!r}")
        self.queue, self.priority, self.max_attempts = queue, priority, max_attempts
        self.timeout, self.retry = timeout, retry
        self.result_ttl: float | None = None
        self.is_async = inspect.iscoroutinefunction(function)
        self.signature = inspect.signature(function)
        functools.update_wrapper(self, function)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the function here and now, as if it were not decorated."""
        return self.function(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<TaskFunction {self.name}>"

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """This function with these arguments, as a step of `chain` (a later step gets the previous result first)."""
        return Signature(self, args, kwargs)

    def options(self, **options: Unpack[CallOptions]) -> TaskCall:
        """One call's options (`CallOptions`): `key`, `delay` or `at`, queue, priority."""
        return TaskCall(self, **options)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle:
        """Put a task that runs this function with these arguments; returns its handle. Nothing is written on error."""
        return TaskCall(self).enqueue(*args, **kwargs)

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> TaskHandle:
        """`enqueue` on an app bound to an `AsyncClient`."""
        return await TaskCall(self).aenqueue(*args, **kwargs)

    def payload(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The payload of a call: arguments bound to the signature (`TypeError` as a call would), each one JSON."""
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as error:
            raise TypeError(f"{self.name}: {error}") from None
        for index, value in enumerate(args):
            check_json_value(value, f"argument {index} of {self.name}")
        for name, value in kwargs.items():
            check_json_value(value, f"argument {name!r} of {self.name}")
        return {"kind": self.name, "args": list(args), "kwargs": dict(kwargs)}

    def put_item(
        self,
        task_id: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        key: str | None = None,
        available_at: int = 0,
        queue: str | None = None,
        priority: int | None = None,
        put_at: int = 0,
    ) -> dict[str, Any]:
        """The arguments of the put (as `put_many` takes them): queue, priority and put time only when not defaults."""
        item: dict[str, Any] = {"task_id": task_id, "payload": self.payload(args, kwargs)}
        item["key"] = key if key is not None else task_id
        item["available_at"] = available_at
        item["max_attempts"] = self.max_attempts
        queue = self.queue if queue is None else queue
        priority = self.priority if priority is None else priority
        if queue != DEFAULT_QUEUE:  # the lanes' fields: sent only when used, so today's engine takes the rest
            item["queue"] = queue
        if priority != DEFAULT_PRIORITY:
            item["priority"] = priority
        if put_at:  # the app's clock, the store's unit: the task is due from then and ages from it (DECISIONS §46)
            item["put_at"] = put_at
        return item


class TaskCall:
    """A task function with one call's options (from `TaskFunction.options`)."""

    def __init__(self, task: TaskFunction[Any, Any], /, **options: Unpack[CallOptions]) -> None:
        unknown = sorted(options.keys() - CallOptions.__optional_keys__)
        if unknown:  # what Python says of a keyword the signature lacks: a typo is never silently dropped
            raise TypeError(f"options() got an unexpected keyword argument {unknown[0]!r}")
        key, delay, at = options.get("key"), options.get("delay"), options.get("at")
        if delay is not None and at is not None:
            raise ValueError("give delay or at, not both")
        if key is not None and (not isinstance(key, str) or not key):
            raise TypeError(f"key is a non-empty str, not {key!r}")
        if isinstance(at, datetime):
            if at.tzinfo is None:
                raise ValueError("at is an aware datetime (with a tzinfo) or seconds since the epoch")
            at = at.timestamp()
        self.task = task
        self.key, self.queue, self.priority = key, options.get("queue"), options.get("priority")
        self.delay = _seconds(delay, "delay")
        self.at = _seconds(at, "at")

    def _item(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        app = self.task.app
        available_at = 0
        if self.delay is not None:
            available_at = app.now() + app.units(self.delay)
        elif self.at is not None:
            available_at = app.units(self.at)
        task_id = self.key if self.key is not None else new_task_id()
        return self.task.put_item(
            task_id, args, kwargs, available_at=available_at, queue=self.queue, priority=self.priority, put_at=app.now()
        )

    def enqueue(self, *args: Any, **kwargs: Any) -> TaskHandle:
        """Put the task (the arguments are checked first: nothing is written for a bad one); its handle."""
        item = self._item(args, kwargs)
        source = self.task.app.source_for_calls()
        if not isinstance(source, Queue) and _is_async(source):
            raise TypeError("this app is bound to an AsyncClient: await task.aenqueue(...)")
        task_id = item.pop("task_id")
        try:
            source.put(task_id, item.pop("payload"), **item)
        except KeyConflict:
            if self.key is None:
                raise
            # The same key again, with another delay or arguments: the key names one task, the first one.
        return TaskHandle(self.task.app, task_id)

    async def aenqueue(self, *args: Any, **kwargs: Any) -> TaskHandle:
        item = self._item(args, kwargs)
        source = self.task.app.source_for_calls()
        task_id = item.pop("task_id")
        try:
            await source.put(task_id, item.pop("payload"), **item)
        except KeyConflict:
            if self.key is None:
                raise
        return TaskHandle(self.task.app, task_id)


def _is_async(source: object) -> bool:
    """Whether `source` is an `AsyncClient` (its calls are awaited); the clients are imported only when one is bound."""
    from walqueue.client import AsyncClient

    return isinstance(source, AsyncClient)


if TYPE_CHECKING:  # App and TaskFunction are what handles, chains and current() take them as (mypy checks)
    _app_is_a_task_app: type[TaskApp] = App
    _task_function_is_a_task_spec: type[TaskSpec] = TaskFunction
