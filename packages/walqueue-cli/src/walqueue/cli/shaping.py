"""What a client call becomes before any I/O: its arguments checked by the engine's own rules, its request, its answer.

Both clients (`Client`, `AsyncClient`) shape every call here and nowhere
else. Arguments are checked with the very functions `Queue` calls
(`walqueue.engine.ops`, `walqueue.engine.validate`), in `Queue`'s order, so
a bad argument raises the exception `Queue` raises for it (type and
message) before anything is sent; the server then refuses nothing for a
reason `Queue` would not. What depends on the queue's state (`KeyConflict`,
`StaleLease`, `WrongStatus`, a redrive past the attempts bound) comes back
from the server by name.

The request, the answer's conversion and the retry rule come from the table
of calls (`walqueue.engine.calltable.CALLS`): `retry` says whether a call
may be sent again after its connection was lost once it was sent. What is
added here is only the order of the checks where `Queue`'s differs from the
table's kinds (a lease's owner fields are checked last, as staleness; a
release's ``now + delay`` bound), and the clamp of a wait to the protocol's
day.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from walqueue import Lease, StaleLease, Task
from walqueue.engine import ops
from walqueue.engine.callkinds import MAX_WAIT_SECONDS
from walqueue.engine.calltable import CALLS
from walqueue.engine.paging import check_page_args
from walqueue.engine.records import STATUSES
from walqueue.engine.types import plain_lease
from walqueue.engine.validate import MAX_INT, check_error, check_int, check_name, check_timeout

__all__ = ["OutgoingCall", "PutOptions"]


@dataclass(frozen=True, slots=True)
class OutgoingCall[T]:
    """One call, checked and ready to send: the request, how its answer becomes a result, whether a retry is safe.

    `extra_seconds`: how long the server may rightly take on top of the
    client's timeout (a ``wait``'s own timeout).
    """

    request: dict[str, Any]
    convert: Callable[[dict[str, Any]], T]
    retry: bool
    extra_seconds: float = 0.0

    @property
    def op(self) -> str:
        return str(self.request["op"])


def _outgoing(name: str, *args: Any, **kwargs: Any) -> OutgoingCall[Any]:
    """The request, answer and retry rule of the call `name`, from the table of calls (`CALLS`)."""
    call = CALLS[name]
    request = call.request(*args, **kwargs)
    return OutgoingCall(request, call.result, call.retry, call.blocks_for(request))


def _lease_token(lease: Lease) -> Lease:
    """`lease` as the plain token `Queue` reads (`TypeError` for anything that is not a `Lease`)."""
    token = plain_lease(lease)
    if not isinstance(token, Lease):
        raise TypeError(f"lease must be a Lease, not {type(lease).__name__}")
    return token


def _owner(token: Lease, now: int) -> None:
    """The owner's fields of a lease, checked last, as `Queue` checks them (`now` first).

    A token whose fields could never match a stored lease is `StaleLease`
    here, exactly as `Queue` answers it (such fields would not survive the
    JSON request, and the server would call them a bad request).
    """
    check_int(now, "now")
    task_id, worker, generation = token.task_id, token.worker, token.generation
    if type(task_id) is not str or type(worker) is not str or type(generation) is not int:
        raise StaleLease("the lease token's task_id, worker or generation has the wrong type")


class PutOptions(TypedDict, total=False):
    """`Queue.put`'s keyword arguments, declared once for both clients (defaults: None, 0, 3)."""

    key: str | None
    available_at: int
    max_attempts: int


def put(
    task_id: str, payload: dict[str, Any], *, key: str | None = None, available_at: int = 0, max_attempts: int = 3
) -> OutgoingCall[str]:
    ops.put_op(task_id, payload, key=key, available_at=available_at, max_attempts=max_attempts)
    return _outgoing("put", task_id, payload, key=key, available_at=available_at, max_attempts=max_attempts)


def put_many(tasks: Iterable[Mapping[str, Any]]) -> OutgoingCall[list[str]]:
    if isinstance(tasks, (str, bytes, Mapping)) or not isinstance(tasks, Iterable):
        raise TypeError("put_many takes an iterable of mappings")
    items = [dict(item) if isinstance(item, Mapping) else item for item in tasks]
    for item in items:
        ops.put_op_from_mapping(item)
    return _outgoing("put_many", items)


def reserve(worker: str, now: int, lease_seconds: int, limit: int) -> OutgoingCall[list[Lease]]:
    ops.validate_reserve_args(worker, now, lease_seconds, limit)
    return _outgoing("reserve", worker, now=now, lease_seconds=lease_seconds, limit=limit)


def ack(lease: Lease, now: int) -> OutgoingCall[None]:
    _owner(_lease_token(lease), now)
    return _outgoing("ack", lease, now=now)


def ack_many(leases: Iterable[Lease], now: int) -> OutgoingCall[None]:
    tokens = ops.lease_tokens(leases)  # Queue's rule and order: the items, `now`, then each owner
    check_int(now, "now")
    for index, token in enumerate(tokens):
        try:
            _owner(token, now)
        except StaleLease as error:
            raise StaleLease(f"leases[{index}]: {error}") from None
    return _outgoing("ack_many", tokens, now=now)


def _error(error: Mapping[str, str] | None) -> dict[str, Any]:
    """A settling call's `error` argument, checked first (as `Queue` checks it), as keyword arguments to send."""
    check_error(error)
    return {} if error is None else {"error": {"type": error["type"], "message": error["message"]}}


def release(lease: Lease, now: int, delay: int, error: Mapping[str, str] | None = None) -> OutgoingCall[None]:
    extra = _error(error)
    token = _lease_token(lease)
    check_int(now, "now")
    check_int(delay, "delay")
    if now + delay > MAX_INT:
        raise ValueError(f"now + delay exceeds {MAX_INT}")
    _owner(token, now)
    return _outgoing("release", lease, now=now, delay=delay, **extra)


def fail(lease: Lease, now: int, error: Mapping[str, str] | None = None) -> OutgoingCall[None]:
    extra = _error(error)
    _owner(_lease_token(lease), now)
    return _outgoing("fail", lease, now=now, **extra)


def extend(lease: Lease, now: int, lease_seconds: int) -> OutgoingCall[Lease]:
    token = _lease_token(lease)
    check_int(now, "now")
    check_int(lease_seconds, "lease_seconds", 1)
    _owner(token, now)
    return _outgoing("extend", lease, now=now, lease_seconds=lease_seconds)


def redrive(task_id: str, available_at: int, extra_attempts: int) -> OutgoingCall[None]:
    check_int(available_at, "available_at")
    check_int(extra_attempts, "extra_attempts", 1)
    check_name(task_id, "task_id")
    return _outgoing("redrive", task_id, available_at=available_at, extra_attempts=extra_attempts)


def cancel(task_id: str, error: Mapping[str, str] | None = None, now: int | None = None) -> OutgoingCall[None]:
    extra = _error(error)
    if now is not None:
        check_int(now, "now")
        extra["now"] = now
    elif error is not None:
        raise TypeError("cancel with an error needs now, the time the error records")
    check_name(task_id, "task_id")
    return _outgoing("cancel", task_id, **extra)


def get(task_id: str) -> OutgoingCall[Task | None]:
    if not isinstance(task_id, str):
        raise TypeError(f"task_id must be a str, not {type(task_id).__name__}")
    return _outgoing("get", task_id)


def tasks(status: str | None) -> OutgoingCall[list[Task]]:
    if status is not None and (type(status) is not str or status not in STATUSES):
        raise ValueError(f"status must be one of {', '.join(STATUSES)} or None, not {status!r}")
    return _outgoing("tasks", status)


def stats() -> OutgoingCall[dict[str, Any]]:
    return _outgoing("stats")


def metrics(now: int | None) -> OutgoingCall[dict[str, Any]]:
    return _outgoing("metrics") if now is None else _outgoing("metrics", now=now)


def page(status: str, after: str | None, limit: int) -> OutgoingCall[list[Task]]:
    check_page_args(status, after, limit)  # Queue.page's own rule, in its order
    return _outgoing("page", status, after=after, limit=limit)


def compact() -> OutgoingCall[None]:
    return _outgoing("compact")


def wait(timeout: float) -> OutgoingCall[bool]:
    """A long poll; a timeout past the protocol's bound (one day) waits that day and answers False."""
    seconds = min(check_timeout(timeout), MAX_WAIT_SECONDS)
    return _outgoing("wait", seconds)
