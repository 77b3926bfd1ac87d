"""This worker runs plain functions only: an `async def` handler is refused, at start and at run time.

Calling an `async def` function (or an async generator function, or a
generator function) runs none of its body: it returns an object that
someone must await or iterate. A worker that called one and acked the task
would mark it completed without running it. Until handlers can be awaited,
such a handler is refused here, in this one module:

- `refuse_async(handler)` at start (`Worker()` raises it as a `TypeError`,
  walqueue-worker as a usage error, exit 64, before anything is written):
  the handler itself, a callable object whose ``__call__`` is async, a
  `functools.partial` of one, and every route of a `Router`;
- `refuse_awaitable(result)` after each call, for what the start could not
  see (a lambda that returns a coroutine, a route added later): the
  coroutine is closed unrun and the task fails as `Permanent`, so it is
  dead, never completed, and can be redriven once the handler is fixed.

Replacing this module (awaiting coroutines on an event loop) is the whole
change that async handlers need in the worker's checks.
"""

from __future__ import annotations

import inspect
from typing import Any

from walqueue.worker.errors import Permanent

__all__ = ["AsyncHandler", "refuse_async", "refuse_awaitable"]


class AsyncHandler(Permanent, TypeError):
    """A handler whose call would not run its body (an `async def`, a generator): this worker cannot run it."""


def _not_run_by_a_call(function: Any) -> str | None:
    """What kind of function `function` is if calling it runs none of its body, else None."""
    if inspect.iscoroutinefunction(function):
        return "an async def function"
    if inspect.isasyncgenfunction(function):
        return "an async generator function"
    if inspect.isgeneratorfunction(function):
        return "a generator function"
    return None


def refuse_async(handler: Any, where: str = "the handler") -> None:
    """Raise `AsyncHandler` if calling `handler` (or one of a `Router`'s routes) would not run its body."""
    from walqueue.worker.router import Router

    if isinstance(handler, Router):
        for kind in handler.kinds:
            refuse_async(handler.handler_for({handler.field: kind}), f"the route {kind!r}")
        return
    what = _not_run_by_a_call(handler)
    if what is None and not inspect.isroutine(handler) and not inspect.isclass(handler):
        what = _not_run_by_a_call(getattr(handler, "__call__", None))  # noqa: B004 - the object's own __call__
        what = what and f"an object whose __call__ is {what}"
    if what is not None:
        raise AsyncHandler(
            f"{where} {handler!r:.200} is {what}: this worker calls handlers without awaiting or iterating them, "
            "so its body would never run; make it a plain def function, or declare it with @app.task"
            " (walqueue.worker.App runs async def tasks on an event loop)"
        )


def refuse_awaitable(result: Any) -> None:
    """Raise `AsyncHandler` if a handler returned a coroutine or another awaitable (closed unrun)."""
    if inspect.isawaitable(result) or inspect.isasyncgen(result):
        if inspect.iscoroutine(result):
            result.close()  # no "never awaited" warning: it is refused on purpose
        raise AsyncHandler(
            f"the handler returned {type(result).__name__} {result!r:.100} without running it: this worker does not "
            "await handlers; make the handler a plain def function, then redrive the task"
        )
