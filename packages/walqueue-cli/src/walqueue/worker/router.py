"""`Router`: one handler per kind of task, picked by a field of the payload (by default ``payload["kind"]``).

The convention: a producer puts ``{"kind": "email", ...}``; the worker's
router calls the function registered for ``"email"`` with the same
``(job, context)`` as any handler. A task whose payload has no such field,
or names a kind with no function, cannot succeed on any retry, so the
router raises `UnknownKind` (a `Permanent` failure): the task goes to the
dead letters at once, with that error as its last error, and the worker
goes on with the next task.

Example::

    router = Router()

    @router.route("email")
    def send_email(job, context): ...

    Worker("/var/lib/app/queue", router).run()
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from walqueue.worker.context import Context, Job
from walqueue.worker.errors import UnknownKind

__all__ = ["DEFAULT_FIELD", "Handler", "Router"]

DEFAULT_FIELD = "kind"

#: A handler: called with the job and its context; its return value is ignored.
Handler = Callable[[Job, Context], Any]


class Router:
    """A handler that dispatches on ``job.payload[field]``; register functions with `route` or a mapping."""

    def __init__(self, routes: Mapping[str, Handler] | None = None, *, field: str = DEFAULT_FIELD) -> None:
        self.field = field
        self._routes: dict[str, Handler] = {}
        for kind, handler in (routes or {}).items():
            self.add(kind, handler)

    def add(self, kind: str, handler: Handler) -> None:
        """Register `handler` for `kind`; a kind registered twice is a mistake (`ValueError`)."""
        if not isinstance(kind, str) or not kind:
            raise ValueError(f"a kind is a non-empty str, not {kind!r}")
        if not callable(handler):
            raise TypeError(f"the handler for {kind!r} is not callable: {handler!r}")
        if kind in self._routes:
            raise ValueError(f"kind {kind!r} already has a handler: {self._routes[kind]!r}")
        self._routes[kind] = handler

    def route(self, kind: str) -> Callable[[Handler], Handler]:
        """Decorator form of `add`: ``@router.route("email")``."""

        def register(handler: Handler) -> Handler:
            self.add(kind, handler)
            return handler

        return register

    @property
    def kinds(self) -> list[str]:
        return sorted(self._routes)

    def handler_for(self, payload: Mapping[str, Any]) -> Handler:
        """The function for this payload's kind; `UnknownKind` if there is none."""
        kind = payload.get(self.field)
        if not isinstance(kind, str):
            raise UnknownKind(f"the payload has no str {self.field!r} field to route on (got {kind!r})")
        handler = self._routes.get(kind)
        if handler is None:
            known = ", ".join(repr(name) for name in self.kinds) or "none"
            raise UnknownKind(f"no handler for {self.field} {kind!r} (known: {known})")
        return handler

    def __call__(self, job: Job, context: Context) -> Any:
        return self.handler_for(job.payload)(job, context)
