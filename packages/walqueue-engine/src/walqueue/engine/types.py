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
    "LastError",
    "Lease",
    "QueueClosed",
    "ReentrantCall",
    "StaleLease",
    "Stats",
    "Status",
    "Task",
    "WalQueueError",
    "WrongStatus",
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
    - `segments`: the number of live WAL segments;
    - `next_available_at`: the smallest `available_at` of a ready task (None:
      none is ready), and `next_deadline`: the earliest deadline of a leased
      task (None: none is leased), so that a worker on its own clock knows
      when the next `reserve` can find work;
    - `clock`: the store's clock unit in units per second, as `Queue.set_clock`
      recorded it (None: never recorded; tools then read milliseconds, see
      walqueue.engine.clockunit).
    """

    counts: dict[str, int]
    last_seq: int
    snapshot_seq: int
    wal_bytes: int
    segments: int
    next_available_at: int | None
    next_deadline: int | None
    clock: int | None


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


class WrongStatus(WalQueueError, ValueError):
    """`redrive` or `cancel` of a task that does not exist or is not in the status the call needs.

    A redrive needs a dead task, a cancel a ready or leased one. Nothing is
    written. Also a `ValueError`, since it says the argument was wrong for the
    queue as it is; a distinct class, because unlike a bad argument it can
    come from a race (another process cancelled, a worker acked first).
    """


class DirectoryLocked(WalQueueError):
    """Another `Queue` (in this process or another) owns the directory.

    Ownership is an `fcntl.flock` on ``DIR/LOCK``; it ends when that queue is
    closed, garbage-collected or poisoned, or its process exits. When the
    owner is a walqueue-serve, `socket_path` is the socket it listens on
    (its owner note in LOCK; the message names it too): use
    ``Client(socket_path)`` there.
    """

    #: The owning walqueue-serve's socket, when its owner note says (else None).
    socket_path: str | None = None


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

    Pass it back to `Queue.ack`, `Queue.release` or `Queue.extend`. Only
    `task_id`, `worker` and `generation` are read: `deadline`, `attempts`
    and `payload` are informational (a copy of what reserve saw), never
    compared with the durable lease, and may be left out (0, 0 and ``{}``),
    so a token rebuilt from those three fields alone works as well. To send
    a lease over a wire, use `to_dict()` and `Lease.from_dict()`.

    Example: ``queue.ack(Lease.from_dict(json.loads(line)), now=110)``
    """

    task_id: str
    worker: str
    generation: int
    deadline: int = 0
    attempts: int = 0
    payload: dict[str, Any] = field(default_factory=dict, compare=True)
    #: The task's queue and priority (informational, like the deadline: never compared with the store).
    queue: str = "default"
    priority: int = 0

    def to_dict(self, *, copy_payload: bool = True) -> dict[str, Any]:
        """The lease as a plain JSON object (a copy of the payload), the inverse of `from_dict`.

        ``copy_payload=False`` shares this lease's payload instead: only for a
        caller that encodes the object at once and keeps nothing of it (the
        protocol's answer), which then skips a deep copy per answer.
        """
        d = {
            "task_id": self.task_id,
            "worker": self.worker,
            "generation": self.generation,
            "deadline": self.deadline,
            "attempts": self.attempts,
            "payload": _copy_payload(self.payload) if copy_payload else self.payload,
        }
        if self.queue != "default" or self.priority:  # a lease of the default lane is what it always was
            d["queue"] = self.queue
            d["priority"] = self.priority
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Lease:
        """Rebuild a token from `task_id`, `worker` and `generation`, and optionally the informational rest.

        `deadline`, `attempts` (ints) and `payload` (a JSON object) may be
        missing, and are type-checked when present; a missing required
        key, an unknown key or an ill-typed value is a `ValueError`.
        """
        if not isinstance(d, Mapping):
            raise ValueError(f"a lease must be a mapping, not {type(d).__name__}")
        keys = set(d.keys())
        missing = sorted(_LEASE_REQUIRED - keys)
        unknown = sorted(repr(k) for k in keys - _LEASE_REQUIRED - _LEASE_OPTIONAL)
        if missing or unknown:
            raise ValueError(f"bad lease object: missing {missing}, unknown {unknown}")
        for name in ("task_id", "worker"):
            if not isinstance(d[name], str):
                raise ValueError(f"lease {name} must be a str")
        for name in ("generation", "deadline", "attempts"):
            if name in d and type(d[name]) is not int:
                raise ValueError(f"lease {name} must be an int")
        if "payload" in d and not isinstance(d["payload"], dict):
            raise ValueError("lease payload must be a JSON object")
        if type(d.get("queue", "")) is not str or type(d.get("priority", 0)) is not int:
            raise ValueError("lease queue must be a str and priority an int")
        return cls(
            task_id=d["task_id"],
            worker=d["worker"],
            generation=d["generation"],
            deadline=d.get("deadline", 0),
            attempts=d.get("attempts", 0),
            payload=_copy_payload(d["payload"]) if "payload" in d else {},
            queue=d.get("queue", "default"),
            priority=d.get("priority", 0),
        )


_LEASE_REQUIRED = frozenset({"task_id", "worker", "generation"})
_LEASE_OPTIONAL = frozenset({"deadline", "attempts", "payload", "queue", "priority"})


class _LeaseSlots:
    """`Lease`'s very slot layout without its frozen ``__setattr__``: `new_lease` fills one, then makes it a `Lease`."""

    __slots__ = ("task_id", "worker", "generation", "deadline", "attempts", "payload", "queue", "priority")
    task_id: str
    worker: str
    generation: int
    deadline: int
    attempts: int
    payload: Any
    queue: str
    priority: int


assert _LeaseSlots.__slots__ == Lease.__slots__  # (the layouts `__class__` assignment needs to be the same)


def new_lease(
    task_id: str,
    worker: str,
    generation: int,
    deadline: int,
    attempts: int,
    payload: Any,
    queue: str = "default",
    priority: int = 0,
) -> Lease:
    """`Lease(...)` for the engine's hot path: every reserve builds one per task.

    A frozen dataclass's generated ``__init__`` sets each field through
    ``object.__setattr__``, and writing its slots through their descriptors
    costs about 1,000 instructions a field (DECISIONS §61). An instance of
    `_LeaseSlots`, whose slots are the same, takes its fields as plain
    attribute writes; assigning its ``__class__`` (allowed between two
    classes of one layout) then makes it a `Lease` like any other: frozen,
    equal and hashed as the constructor's (a test compares them field by field).
    """
    lease = _LeaseSlots()
    lease.task_id = task_id
    lease.worker = worker
    lease.generation = generation
    lease.deadline = deadline
    lease.attempts = attempts
    lease.payload, lease.queue, lease.priority = payload, queue, priority  # (the informational fields)
    lease.__class__ = Lease  # type: ignore[assignment]
    return lease  # type: ignore[return-value]


@dataclass(frozen=True, slots=True)
class LastError:
    """Why a task last failed: what `release`, `fail` or `cancel` was given, or a lease's expiry.

    `type` and `message` are the error's (each cut, with a marker, to the
    stored bounds: 256 and 2,048 UTF-8 bytes); `attempt` is the task's
    attempt count when it failed (the attempt that failed, or 0 for a task
    cancelled before its first lease); `at` is the `now` of the call that
    recorded it, or the lease's deadline for an expiry (type
    ``"LeaseExpired"``). Kept durably until the task completes. `traceback`
    is the failure's traceback when the caller gave one (the worker does),
    cut to its last 8,192 UTF-8 bytes; None otherwise.
    """

    type: str
    message: str
    attempt: int
    at: int
    traceback: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The error as a plain JSON object (``traceback`` only when there is one)."""
        shown = {"type": self.type, "message": self.message, "attempt": self.attempt, "at": self.at}
        return shown if self.traceback is None else {**shown, "traceback": self.traceback}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LastError:
        """The inverse of `to_dict`; a missing or unknown key, or an ill-typed value, is a `ValueError`."""
        keys = set(d.keys()) if isinstance(d, Mapping) else None
        if keys != {"type", "message", "attempt", "at"} and keys != {"type", "message", "attempt", "at", "traceback"}:
            raise ValueError("a last error is a mapping with the keys type, message, attempt and at (and traceback)")
        if type(d.get("traceback", "")) is not str:
            raise ValueError("a last error's traceback must be a str")
        if type(d["type"]) is not str or type(d["message"]) is not str:
            raise ValueError("a last error's type and message must be str")
        if type(d["attempt"]) is not int or type(d["at"]) is not int:
            raise ValueError("a last error's attempt and at must be int")
        return cls(d["type"], d["message"], d["attempt"], d["at"], d.get("traceback"))


@dataclass(frozen=True, slots=True)
class Task:
    """A read-only view of one task, as `Queue.get` and `Queue.tasks` return it.

    `status` is one of ``"ready"``, ``"leased"``, ``"completed"``, ``"dead"``;
    `payload` is a copy, ``None`` once completed (a completed task is a
    tombstone that keeps its id and key forever). `worker` and `deadline`
    are ``None`` unless the task is leased. `attempts` counts the leases so
    far, `generation` the current lease's number. `last_error` is why it
    last failed (a `LastError`), or ``None``; a completed task has none.
    A plain mapping given as `last_error` (as `to_dict` writes it, say read
    back from JSON) is taken as `LastError.from_dict` of it.
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
    last_error: LastError | None = None
    #: The task's queue and priority (docs/guide/lanes.md).
    queue: str = "default"
    priority: int = 0

    def __post_init__(self) -> None:
        last_error: object = self.last_error  # a mapping too, read back from JSON
        if last_error is not None and not isinstance(last_error, LastError):
            object.__setattr__(self, "last_error", LastError.from_dict(last_error))  # type: ignore[arg-type]

    def to_dict(self, *, copy_payload: bool = True) -> dict[str, Any]:
        """The task as a plain JSON object with every field (a copy of the payload; `last_error` as a dict).

        ``copy_payload=False``: the payload shared, as `Lease.to_dict` says.
        """
        d = {
            "task_id": self.task_id,
            "key": self.key,
            "status": self.status,
            "payload": _copy_payload(self.payload) if copy_payload else self.payload,
            "available_at": self.available_at,
            "max_attempts": self.max_attempts,
            "attempts": self.attempts,
            "generation": self.generation,
            "worker": self.worker,
            "deadline": self.deadline,
            "last_error": None if self.last_error is None else self.last_error.to_dict(),
        }
        if self.queue != "default" or self.priority:  # a task of the default lane is what it always was
            d["queue"] = self.queue
            d["priority"] = self.priority
        return d


def plain_lease(lease: Lease) -> Lease:
    """A subclass's token as a plain `Lease`, read now (before a lock is taken: its attributes may run code).

    Only the three owner fields are copied, as they are all a settling op
    checks; anything that is not a `Lease` is returned as it is, for the
    planner to refuse.
    """
    if type(lease) is Lease or not isinstance(lease, Lease):
        return lease
    return new_lease(lease.task_id, lease.worker, lease.generation, 0, 0, None)
