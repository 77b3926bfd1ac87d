"""`TaskSpec` and `TaskApp`: what a handle, a chain step and a follow-up need of a task function and of its app.

`App` and `TaskFunction` (app.py) build handles, signatures and the running
task's context, so those modules cannot name them back without a circle in
the import graph. They name these protocols instead: the few members they
use, which `App` and `TaskFunction` have structurally (app.py checks it
under `TYPE_CHECKING`, so mypy fails if a member drifts).
"""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["TaskApp", "TaskSpec"]


class TaskApp(Protocol):
    """An app as its handles and chains see it: the source tasks are put on and read from, and its clock."""

    def source_for_calls(self) -> Any:
        """The bound source (a Queue, a Client or an AsyncClient); `RuntimeError` if none."""
        ...

    def now(self) -> int:
        """The app's clock, in the store's units (what `Queue.result` takes as `now`)."""
        ...


class TaskSpec(Protocol):
    """A task function as a chain step or a follow-up sees it: its name, app, attempts, payload and put."""

    @property
    def name(self) -> str: ...

    @property
    def app(self) -> TaskApp: ...

    @property
    def max_attempts(self) -> int: ...

    def payload(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The payload of a call with these arguments (`TypeError` as a call would)."""
        ...

    def put_item(
        self, task_id: str, args: tuple[Any, ...], kwargs: dict[str, Any], *, put_at: int = 0
    ) -> dict[str, Any]:
        """The arguments of a put of a call with these arguments, as `put_many` takes them."""
        ...
