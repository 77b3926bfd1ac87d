"""`chain(a.s(...), b.s(...), ...)`: steps that run one after another, each result the next step's first argument.

Sugar over follow-ups: the first step's payload carries the steps still to
come (``"then"``: a list of ``{"kind", "args", "kwargs", "max_attempts"}``),
and when a step completes, the App commits the next step with its ack, as
the follow-up ``<this id>/then`` (a fixed suffix, so that the last step's id
is known when the chain is put: ``<first id>/then/then...``, whatever
follow-ups the steps enqueue themselves). A step that dies stops the chain
there; redriving it resumes the chain from it.
"""

from __future__ import annotations

from typing import Any

from walqueue.worker.completion import check_json_value
from walqueue.worker.errors import Permanent
from walqueue.worker.handles import TaskHandle
from walqueue.worker.taskspec import TaskSpec

__all__ = ["THEN", "Chain", "Signature", "chain", "next_step"]


def new_task_id() -> str:
    """A new task id: a random UUID's 32 hex digits (`uuid` imported here, off the worker's start-up path)."""
    import uuid

    return uuid.uuid4().hex


#: The payload key of the steps still to come, and the suffix of the next step's id.
THEN = "then"


class Signature:
    """A task function with some of its arguments (`TaskFunction.s`): a step of a chain."""

    __slots__ = ("task", "args", "kwargs")

    def __init__(self, task: TaskSpec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.task, self.args, self.kwargs = task, args, kwargs

    def step(self) -> dict[str, Any]:
        """This signature as a later step: the previous result comes first, so the signature is checked with it."""
        payload = self.task.payload((None, *self.args), self.kwargs)
        return {"kind": payload["kind"], "args": payload["args"][1:], "kwargs": payload["kwargs"],
                "max_attempts": self.task.max_attempts}  # fmt: skip

    def __repr__(self) -> str:
        return f"<Signature {self.task.name}{self.args!r}>"


class Chain:
    """Steps to put together: `enqueue()` puts the first (carrying the rest) and returns the LAST step's handle."""

    def __init__(self, signatures: tuple[Signature, ...]) -> None:
        if not signatures or not all(isinstance(s, Signature) for s in signatures):
            raise TypeError("chain takes one or more signatures: chain(a.s(1), b.s(), ...)")
        apps = {id(s.task.app) for s in signatures}
        if len(apps) != 1:
            raise ValueError("every step of a chain belongs to the same App")
        self.signatures = signatures

    def _item(self) -> tuple[str, dict[str, Any], int]:
        first, rest = self.signatures[0], [s.step() for s in self.signatures[1:]]
        task_id = new_task_id()
        item = first.task.put_item(task_id, first.args, first.kwargs, put_at=first.task.app.now())
        if rest:
            item["payload"][THEN] = rest
        return task_id, item, len(rest)

    def enqueue(self) -> TaskHandle:
        app = self.signatures[0].task.app
        task_id, item, later = self._item()
        app.source_for_calls().put(item.pop("task_id"), item.pop("payload"), **item)
        return TaskHandle(app, task_id + f"/{THEN}" * later)

    async def aenqueue(self) -> TaskHandle:
        app = self.signatures[0].task.app
        task_id, item, later = self._item()
        await app.source_for_calls().put(item.pop("task_id"), item.pop("payload"), **item)
        return TaskHandle(app, task_id + f"/{THEN}" * later)


def chain(*signatures: Signature) -> Chain:
    """``chain(fetch.s(url), parse.s(), store.s(table="pages")).enqueue()``: the last step's handle."""
    return Chain(signatures)


def next_step(task_id: str, payload: dict[str, Any], value: Any) -> dict[str, Any] | None:
    """The put of the step after the one that just returned `value` (None: the chain ends, or is no chain)."""
    steps = payload.get(THEN)
    if steps is None:
        return None
    if type(steps) is not list or not steps or not all(type(step) is dict for step in steps):
        raise Permanent(f"the payload of {task_id} has a malformed {THEN!r} (a list of steps)")
    step, rest = steps[0], steps[1:]
    check_json_value(value, f"the result that {task_id} passes to the next step")
    next_payload: dict[str, Any] = {"kind": step.get("kind"), "args": [value, *step.get("args", [])]}
    next_payload["kwargs"] = step.get("kwargs", {})
    if rest:
        next_payload[THEN] = rest
    next_id = f"{task_id}/{THEN}"
    return {"task_id": next_id, "payload": next_payload, "key": next_id, "available_at": 0,
            "max_attempts": step.get("max_attempts", 3)}  # fmt: skip
