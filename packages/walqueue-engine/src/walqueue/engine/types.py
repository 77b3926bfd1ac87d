"""The public value types, error classes, type aliases and fault-injection phase names.

Everything here is plain data: no I/O, no state. `CorruptStore` and
`WalQueueError` come from the format layer so that the offline inspector and
the engine raise the very same classes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

from walqueue.format.errors import CorruptStore, WalQueueError

__all__ = [
    "PHASES",
    "CorruptStore",
    "DirectoryLocked",
    "InjectedCrash",
    "KeyConflict",
    "Lease",
    "QueueClosed",
    "ReentrantCall",
    "StaleLease",
    "Stats",
    "Status",
    "Task",
    "WalQueueError",
]

#: A task's status, for type checkers: `Queue.tasks("redy")` is a type error
#: under mypy (and a `ValueError` at run time).
Status = Literal["ready", "leased", "completed", "dead"]


class Stats(TypedDict):
    """What `Queue.stats()` returns.

    - `counts`: the number of tasks per status, always with exactly the keys
      ``"ready"``, ``"leased"``, ``"completed"`` and ``"dead"``;
    - `last_seq`: the sequence of the last committed transaction (0 if none);
    - `snapshot_seq`: the sequence the published snapshot covers (0 if none);
    - `wal_bytes`: bytes of live WAL written after that snapshot (0 right
      after `compact()`);
    - `segments`: the number of live WAL segments.
    """

    counts: dict[str, int]
    last_seq: int
    snapshot_seq: int
    wal_bytes: int
    segments: int


#: Every fault-injection phase, in the order they can occur; `Queue(hook=...)` is called with each
#: at the step its name says; raising `InjectedCrash` there simulates a crash (docs/RELIABILITY.md).
PHASES: tuple[str, ...] = (
    "wal.append.before",
    "wal.append.partial",
    "wal.append.written",
    "wal.append.synced",
    "wal.rotate.before",
    "wal.rotate.after",
    "snapshot.partial",
    "snapshot.written",
    "snapshot.synced",
    "current.written",
    "current.published",
    "segment.deleted",
    "compact.done",
    "recover.truncate.before",
    "recover.truncate.after",
)


class KeyConflict(WalQueueError):
    """A put reuses a known key with another identity, or a known task id with a new key.

    The identity of a request is its task id, payload, `available_at` and
    `max_attempts`; nothing is written when this is raised.
    """


class StaleLease(WalQueueError):
    """The lease token no longer owns its task (acked, released, expired, re-leased, or never did).

    Also raised when `now` is at or after the lease's deadline. Nothing is
    written; a later `reserve` hands the task out again if it is still due.
    """


class DirectoryLocked(WalQueueError):
    """Another `Queue` (in this process or another) owns the directory.

    Ownership is an `fcntl.flock` on ``DIR/LOCK``; it ends when that queue is
    closed, garbage-collected or poisoned, or its process exits.
    """


class QueueClosed(WalQueueError):
    """The queue was closed or poisoned; discard it and open a new one.

    A new `Queue` on the same directory recovers everything that was
    committed before the failure.
    """


class ReentrantCall(WalQueueError, RuntimeError):
    """A call on a `Queue` from inside another call on it, in the same thread.

    That happens when the test hook, or a signal handler that interrupted a
    call, calls the queue. The outer call holds the queue's lock and may be
    halfway through a change, so the inner one can neither wait for it
    (that would wait for ever) nor see its state; it is refused instead.
    Only `close()` is allowed there: it closes the queue for every later
    call, and the interrupted call releases the files when it returns.
    """


class InjectedCrash(Exception):
    """Raised by a test's hook to simulate the death of the process.

    Deliberately not a `WalQueueError`: no code path may catch it as an
    ordinary queue error.
    """


def _copy_payload(payload: Any) -> Any:
    # A JSON round trip is the cheapest deep copy that is also exactly the
    # set of values a payload may hold.
    if payload is None:
        return None
    return json.loads(json.dumps(payload))


@dataclass(frozen=True, slots=True)
class Lease:
    """A reservation token, as `Queue.reserve` returns it.

    Pass it back to `Queue.ack` or `Queue.release`. Only `task_id`, `worker`
    and `generation` are trusted: changing `deadline` or `payload` changes
    nothing durable. `payload` is a copy of the task's payload. To send a
    lease over a wire, use `to_dict()` and `Lease.from_dict()`.

    Example: ``queue.ack(Lease.from_dict(json.loads(line)), now=110)``
    """

    task_id: str
    worker: str
    generation: int
    deadline: int
    attempts: int
    payload: dict[str, Any] = field(compare=True)

    def to_dict(self) -> dict[str, Any]:
        """The lease as a plain JSON object (a copy of the payload), the inverse of `from_dict`."""
        return {
            "task_id": self.task_id,
            "worker": self.worker,
            "generation": self.generation,
            "deadline": self.deadline,
            "attempts": self.attempts,
            "payload": _copy_payload(self.payload),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Lease:
        """Rebuild a token; missing, unknown or ill-typed keys are a `ValueError`."""
        if not isinstance(d, Mapping):
            raise ValueError(f"a lease must be a mapping, not {type(d).__name__}")
        expected = {"task_id", "worker", "generation", "deadline", "attempts", "payload"}
        keys = set(d.keys())
        if keys != expected:
            missing = sorted(expected - keys, key=str)
            unknown = sorted(repr(k) for k in keys - expected)
            raise ValueError(f"bad lease object: missing {missing}, unknown {unknown}")
        for name in ("task_id", "worker"):
            if not isinstance(d[name], str):
                raise ValueError(f"lease {name} must be a str")
        for name in ("generation", "deadline", "attempts"):
            value = d[name]
            if type(value) is not int:
                raise ValueError(f"lease {name} must be an int")
        if not isinstance(d["payload"], dict):
            raise ValueError("lease payload must be a JSON object")
        return cls(
            task_id=d["task_id"],
            worker=d["worker"],
            generation=d["generation"],
            deadline=d["deadline"],
            attempts=d["attempts"],
            payload=_copy_payload(d["payload"]),
        )


_SET_LEASE_FIELDS = tuple(
    Lease.__dict__[name].__set__ for name in ("task_id", "worker", "generation", "deadline", "attempts", "payload")
)


def new_lease(task_id: str, worker: str, generation: int, deadline: int, attempts: int, payload: Any) -> Lease:
    """`Lease(...)` for the engine's hot path: every reserve builds one per task.

    A frozen dataclass's generated ``__init__`` sets each field through
    ``object.__setattr__``; writing the slots through their descriptors does
    the same thing without that detour. The result is an ordinary, equal
    `Lease` (a test compares it field by field with the constructor's).
    """
    lease = object.__new__(Lease)
    set_task_id, set_worker, set_generation, set_deadline, set_attempts, set_payload = _SET_LEASE_FIELDS
    set_task_id(lease, task_id)
    set_worker(lease, worker)
    set_generation(lease, generation)
    set_deadline(lease, deadline)
    set_attempts(lease, attempts)
    set_payload(lease, payload)
    return lease


@dataclass(frozen=True, slots=True)
class Task:
    """A read-only view of one task, as `Queue.get` and `Queue.tasks` return it.

    `status` is one of ``"ready"``, ``"leased"``, ``"completed"``, ``"dead"``;
    `payload` is a copy, ``None`` once completed (a completed task is a
    tombstone that keeps its id and key forever). `worker` and `deadline`
    are ``None`` unless the task is leased. `attempts` counts the leases so
    far, `generation` the current lease's number.
    """

    task_id: str
    key: str
    status: str
    payload: dict[str, Any] | None
    available_at: int
    max_attempts: int
    attempts: int
    generation: int
    worker: str | None
    deadline: int | None

    def to_dict(self) -> dict[str, Any]:
        """The task as a plain JSON object with every field (a copy of the payload)."""
        return {
            "task_id": self.task_id,
            "key": self.key,
            "status": self.status,
            "payload": _copy_payload(self.payload),
            "available_at": self.available_at,
            "max_attempts": self.max_attempts,
            "attempts": self.attempts,
            "generation": self.generation,
            "worker": self.worker,
            "deadline": self.deadline,
        }
