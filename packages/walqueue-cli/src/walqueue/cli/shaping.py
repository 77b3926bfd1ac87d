"""What a client call becomes before any I/O: its arguments checked by the engine's own rules, its request, its answer.

Both clients (`Client`, `AsyncClient`) shape every call here and nowhere
else. Arguments are checked with the very functions `Queue` calls
(`walqueue.engine.ops`, `walqueue.engine.validate`), in `Queue`'s order, so
a bad argument raises the exception `Queue` raises for it (type and
message) before anything is sent; the server then refuses nothing for a
reason `Queue` would not. What depends on the queue's state (`KeyConflict`,
`StaleLease`, `WrongStatus`, a redrive past the attempts bound) comes back
from the server by name.

`retry` says whether a call may be sent again after its connection was lost
once it was sent: true only where an identical retry provably changes
nothing (`put`, `put_many`: every task has an idempotency key; the reads;
`wait`; `compact`, which never changes what the queue answers).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from walqueue import Lease, StaleLease, Task
from walqueue.cli.protocol import MAX_WAIT_SECONDS
from walqueue.engine import ops
from walqueue.engine.records import STATUSES
from walqueue.engine.types import plain_lease
from walqueue.engine.validate import MAX_INT, check_int, check_name, check_timeout

__all__ = ["RETRY_SAFE", "OutgoingCall", "PutOptions"]

#: The calls a client may send again after a lost connection (see the module's docstring).
RETRY_SAFE = frozenset({"put", "put_many", "get", "tasks", "stats", "compact", "wait"})


@dataclass(frozen=True, slots=True)
class OutgoingCall[T]:
    """One call, checked and ready to send: the request, whether a retry is safe, how its answer becomes a result.

    `extra_seconds`: how long the server may rightly take on top of the
    client's timeout (a ``wait``'s own timeout).
    """

    request: dict[str, Any]
    convert: Callable[[dict[str, Any]], T]
    extra_seconds: float = 0.0

    @property
    def op(self) -> str:
        return str(self.request["op"])

    @property
    def retry(self) -> bool:
        return self.op in RETRY_SAFE


def _nothing(answer: dict[str, Any]) -> None:
    return None


def _leases(answer: dict[str, Any]) -> list[Lease]:
    return [Lease.from_dict(lease) for lease in answer["leases"]]


def _lease(answer: dict[str, Any]) -> Lease:
    return Lease.from_dict(answer["lease"])


def _task(answer: dict[str, Any]) -> Task | None:
    return None if answer["task"] is None else Task(**answer["task"])


def _lease_token(lease: Lease) -> Lease:
    """`lease` as the plain token `Queue` reads (`TypeError` for anything that is not a `Lease`)."""
    token = plain_lease(lease)
    if not isinstance(token, Lease):
        raise TypeError(f"lease must be a Lease, not {type(lease).__name__}")
    return token


def _owner(token: Lease) -> dict[str, Any]:
    """What the server reads of a lease: its owner's three fields, checked last, as `Queue` checks them.

    A token whose fields could never match a stored lease is `StaleLease`
    here, exactly as `Queue` answers it (its fields would not survive JSON).
    """
    task_id, worker, generation = token.task_id, token.worker, token.generation
    if type(task_id) is not str or type(worker) is not str or type(generation) is not int:
        raise StaleLease("the lease token's task_id, worker or generation has the wrong type")
    return {"task_id": task_id, "worker": worker, "generation": generation}


class PutOptions(TypedDict, total=False):
    """`Queue.put`'s keyword arguments, declared once for both clients (defaults: None, 0, 3)."""

    key: str | None
    available_at: int
    max_attempts: int


def put(
    task_id: str, payload: dict[str, Any], *, key: str | None = None, available_at: int = 0, max_attempts: int = 3
) -> OutgoingCall[str]:
    ops.put_op(task_id, payload, key=key, available_at=available_at, max_attempts=max_attempts)
    request = {
        "op": "put",
        "task_id": task_id,
        "payload": payload,
        "key": key,
        "available_at": available_at,
        "max_attempts": max_attempts,
    }
    return OutgoingCall(request, lambda answer: str(answer["task_id"]))


def put_many(tasks: Iterable[Mapping[str, Any]]) -> OutgoingCall[list[str]]:
    if isinstance(tasks, (str, bytes, Mapping)) or not isinstance(tasks, Iterable):
        raise TypeError("put_many takes an iterable of mappings")
    items = [dict(item) if isinstance(item, Mapping) else item for item in tasks]
    for item in items:
        ops.put_op_from_mapping(item)
    return OutgoingCall({"op": "put_many", "tasks": items}, lambda answer: [str(t) for t in answer["task_ids"]])


def reserve(worker: str, now: int, lease_seconds: int, limit: int) -> OutgoingCall[list[Lease]]:
    ops.validate_reserve_args(worker, now, lease_seconds, limit)
    request = {"op": "reserve", "worker": worker, "now": now, "lease_seconds": lease_seconds, "limit": limit}
    return OutgoingCall(request, _leases)


def ack(lease: Lease, now: int) -> OutgoingCall[None]:
    token = _lease_token(lease)
    check_int(now, "now")
    return OutgoingCall({"op": "ack", "lease": _owner(token), "now": now}, _nothing)


def release(lease: Lease, now: int, delay: int) -> OutgoingCall[None]:
    token = _lease_token(lease)
    check_int(now, "now")
    check_int(delay, "delay")
    if now + delay > MAX_INT:
        raise ValueError(f"now + delay exceeds {MAX_INT}")
    return OutgoingCall({"op": "release", "lease": _owner(token), "now": now, "delay": delay}, _nothing)


def extend(lease: Lease, now: int, lease_seconds: int) -> OutgoingCall[Lease]:
    token = _lease_token(lease)
    check_int(now, "now")
    check_int(lease_seconds, "lease_seconds", 1)
    request = {"op": "extend", "lease": _owner(token), "now": now, "lease_seconds": lease_seconds}
    return OutgoingCall(request, _lease)


def redrive(task_id: str, available_at: int, extra_attempts: int) -> OutgoingCall[None]:
    check_int(available_at, "available_at")
    check_int(extra_attempts, "extra_attempts", 1)
    check_name(task_id, "task_id")
    request = {"op": "redrive", "task_id": task_id, "available_at": available_at, "extra_attempts": extra_attempts}
    return OutgoingCall(request, _nothing)


def cancel(task_id: str) -> OutgoingCall[None]:
    check_name(task_id, "task_id")
    return OutgoingCall({"op": "cancel", "task_id": task_id}, _nothing)


def get(task_id: str) -> OutgoingCall[Task | None]:
    if not isinstance(task_id, str):
        raise TypeError(f"task_id must be a str, not {type(task_id).__name__}")
    return OutgoingCall({"op": "get", "task_id": task_id}, _task)


def tasks(status: str | None) -> OutgoingCall[list[Task]]:
    if status is not None and (type(status) is not str or status not in STATUSES):
        raise ValueError(f"status must be one of {', '.join(STATUSES)} or None, not {status!r}")
    return OutgoingCall({"op": "tasks", "status": status}, lambda answer: [Task(**t) for t in answer["tasks"]])


def stats() -> OutgoingCall[dict[str, Any]]:
    return OutgoingCall({"op": "stats"}, lambda answer: dict(answer["stats"]))


def compact() -> OutgoingCall[None]:
    return OutgoingCall({"op": "compact"}, _nothing)


def wait(timeout: float) -> OutgoingCall[bool]:
    """A long poll; a timeout past the protocol's bound (one day) waits that day and answers False."""
    seconds = min(check_timeout(timeout), MAX_WAIT_SECONDS)
    return OutgoingCall({"op": "wait", "timeout": seconds}, lambda answer: bool(answer["committed"]), float(seconds))
