"""What each op kind does to its task's record: the transitions, and the staging they read.

A task's last error (`ErrorFields`) is kept by every transition but three:
expire derives `LeaseExpired` from the record, error sets the op's, and ack
drops it with the payload.

A transition takes the task's current record (None for a kind that creates
its task) and a valid op of its kind, and returns the record the task will
have; `state.apply` has checked the op's keys and field values (unless a
planner made it) and the record's status, and installs what the
transitions return only once every op of the transaction is valid. A
transition raises `OpError` to refuse an op (apply names the transaction
and the op). Nothing here changes a `State`: it only reads, through
`StateReads`, which keeps this module free of state.py (the table of
kinds, `opkinds.OP_KINDS`, imports it for the transition of each row).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Protocol

from walqueue.engine.optable import Op
from walqueue.engine.records import (
    DEAD,
    LEASED,
    READY,
    LaneRecord,
    Record,
    StoredError,
    TaskRecord,
    Tombstone,
    check_error_fits,
    expiry_error,
    identity_digest,
    with_traceback,
)
from walqueue.engine.types import WalQueueError
from walqueue.engine.validate import DEFAULT_QUEUE, check_payload, check_record_fits, check_result
from walqueue.format.canonical import canonical_str

__all__ = [
    "NOTHING_STAGED",
    "OpError",
    "StateReads",
    "Staging",
    "Transition",
    "ack",
    "cancel",
    "clock",
    "error",
    "expire",
    "extend",
    "fail",
    "give_back",
    "lease",
    "put",
    "redrive",
    "release",
    "traceback",
    "result",
]


class StateReads(Protocol):
    """What a transition reads of the state besides the op's own record."""

    #: The store's clock unit (units per second), None until a "clock" op recorded it.
    clock: int | None

    def lookup_key(self, key: str) -> str | None: ...

    def rate_limited(self, queue: str) -> bool: ...


class OpError(WalQueueError):
    """An op-level refusal; `apply` turns it into `InvalidTransaction`, naming the transaction and the op."""


class _EncodedPut(Protocol):
    """What a planned put carries as its payload (ops.py's carrier): its canonical JSON and identity digest."""

    canonical: bytes
    identity: bytes


class Staging:
    """The records a transaction has touched so far, the keys its puts claimed, and where its ops come from.

    Later ops of the same transaction see these instead of the committed
    records; nothing here is visible in the `State` until the commit. A
    transaction of one op (most of them) has no later op to inform, so it
    shares an empty one from `NOTHING_STAGED`, which transitions only read.
    """

    __slots__ = ("records", "keys", "decoded", "planned", "settings", "results")

    def __init__(self, decoded: bool, planned: bool) -> None:
        self.records: dict[str, Record] = {}
        self.keys: set[str] = set()
        #: The store-level settings this transaction's ops set (a "clock" op), by name.
        self.settings: dict[str, int] = {}
        self.decoded = decoded
        self.planned = planned
        #: task id -> (at, expires, the result's JSON) of this transaction's result ops (None: a one-op transaction)
        self.results: dict[str, tuple[int, int, bytes]] | None = {}


#: The shared empty staging of one-op transactions, by (`decoded`, `_planned`).
NOTHING_STAGED = {(d, p): Staging(d, p) for d in (False, True) for p in (False, True)}
for _shared in NOTHING_STAGED.values():
    _shared.results = None  # a result op alone is refused (it belongs with its task's ack)


def _with(
    record: Record,
    status: str,
    available_at: int,
    max_attempts: int,
    worker: str | None,
    deadline: int | None,
    stored_error: StoredError | None,
) -> TaskRecord:
    """A not-completed record like `record` (same payload, attempts, generation, lane) but for the fields given.

    The traceback belongs to the last error: `record.stored_error` keeps both,
    a new error (`ErrorFields`, no traceback) replaces both.
    """
    assert isinstance(record, TaskRecord)  # (a tombstone never changes)
    return type(record)(
        record.task_id,
        record.key,
        status,
        record.digest_and_payload,
        available_at,
        max_attempts,
        record.attempts,
        record.generation,
        worker,
        deadline,
        stored_error,
        record.queue,
        record.priority,
    )


def _unleased(record: Record, available_at: int, stored_error: StoredError | None) -> TaskRecord:
    """Where expire and release send a leased task: ready again, or dead once its attempts are spent."""
    status = DEAD if record.attempts >= record.max_attempts else READY
    return _with(record, status, available_at, record.max_attempts, None, None, stored_error)


def _held(record: Record, op: Op) -> Record:
    """The leased record an expire/ack/release op names, if the op's generation is the lease's."""
    if op["generation"] != record.generation:
        raise OpError(
            f"task {record.task_id!r:.100} is leased with generation {record.generation}, not {op['generation']}"
        )
    return record


# Each transition takes the task's current record (None for a kind that
# creates its task) and a valid op of its kind: `_stage` has checked the op's
# keys and field values (unless a planner made it) and the record's status.


def put(state: StateReads, staging: Staging, record: Record | None, op: Op) -> Record:
    task_id, key, available_at, max_attempts = op["task"], op["key"], op["available_at"], op["max_attempts"]
    payload = op["payload"]
    if staging.planned:
        # ops.put_op checked this op's names, numbers and payload, and encoded it, once.
        encoded: _EncodedPut = payload
        payload_json, digest = encoded.canonical, encoded.identity
    else:
        payload_json = check_payload(payload, staging.decoded)
        task_json = canonical_str(task_id)
        check_record_fits(payload_json, task_json, task_json if key == task_id else canonical_str(key))
        digest = identity_digest(
            task_json, payload_json, available_at, max_attempts, op.get("queue", DEFAULT_QUEUE), op.get("priority", 0)
        )
    if key in staging.keys or state.lookup_key(key) is not None:
        raise OpError(f"key {key!r:.100} is already known")
    queue, priority = op.get("queue", DEFAULT_QUEUE), op.get("priority", 0)
    if queue is not DEFAULT_QUEUE:
        queue = sys.intern(queue)  # one string per queue, not per task (and "default" is DEFAULT_QUEUE itself)
    if "put_at" in op and op["put_at"] > available_at:  # a stamped put is due from its put time (DECISIONS §46)
        available_at = op["put_at"]
    # (task_record's choice of shape, inlined: this is every put's path)
    return (TaskRecord if queue is DEFAULT_QUEUE and priority == 0 else LaneRecord)(
        task_id,
        key,
        READY,
        digest + payload_json,
        available_at,
        max_attempts,
        0,
        0,
        None,
        None,
        None,
        queue,
        priority,
    )


def lease(state: StateReads, staging: Staging, record: Record | None, op: Op) -> Record:
    assert record is not None
    generation = op["generation"]
    if generation != record.generation + 1:
        raise OpError(f"lease generation must be {record.generation + 1}, not {generation}")
    if ("at" in op) != state.rate_limited(record.queue):  # the limiter's input: written iff the queue has a rate
        raise OpError(f"a lease in queue {record.queue!r} {'must not' if 'at' in op else 'must'} carry at")
    assert isinstance(record, TaskRecord)  # (a ready task)
    return type(record)(
        record.task_id,
        record.key,
        LEASED,
        record.digest_and_payload,
        record.available_at,
        record.max_attempts,
        record.attempts + 1,
        generation,
        op["worker"],
        op["deadline"],
        record.stored_error,
        record.queue,
        record.priority,
    )


def expire(state: StateReads, staging: Staging, record: Record | None, op: Op) -> Record:
    assert record is not None and record.deadline is not None  # a leased record always has one
    return _unleased(_held(record, op), record.deadline, expiry_error(record))


def ack(state: StateReads, staging: Staging, record: Record | None, op: Op) -> Record:
    assert record is not None
    _held(record, op)
    return Tombstone.of(
        record.task_id,
        record.key,
        record.identity,
        record.available_at,
        record.max_attempts,
        record.attempts,
        record.generation,
        record.queue,
        record.priority,
    )


def release(state: StateReads, staging: Staging, record: Record | None, op: Op) -> Record:
    assert record is not None
    return _unleased(_held(record, op), op["available_at"], record.stored_error)


def extend(state: StateReads, staging: Staging, record: Record | None, op: Op) -> Record:
    assert record is not None
    _held(record, op)
    return _with(
        record, LEASED, record.available_at, record.max_attempts, record.worker, op["deadline"], record.stored_error
    )


def redrive(state: StateReads, staging: Staging, record: Record | None, op: Op) -> Record:
    assert record is not None
    max_attempts = op["max_attempts"]
    if max_attempts <= record.max_attempts:  # a redrive grants attempts; so a ready task has some left
        raise OpError(f"redrive max_attempts must exceed {record.max_attempts}, not {max_attempts}")
    return _with(record, READY, op["available_at"], max_attempts, None, None, record.stored_error)


def cancel(state: StateReads, staging: Staging, record: Record | None, op: Op) -> Record:
    assert record is not None
    return _with(record, DEAD, record.available_at, record.max_attempts, None, None, record.stored_error)


def fail(state: StateReads, staging: Staging, record: Record | None, op: Op) -> Record:
    """A permanent failure: the holder's task is dead at once, whatever its attempts left."""
    assert record is not None
    _held(record, op)
    return _with(record, DEAD, record.available_at, record.max_attempts, None, None, record.stored_error)


def error(state: StateReads, staging: Staging, record: Record | None, op: Op) -> Record:
    """The task's last error becomes the op's, with the task's attempts; nothing else changes.

    The writer puts it just before the release, fail or cancel it explains,
    in the same transaction (the attempt is the record's, so it is not written).
    """
    assert record is not None
    last_error = (op["type"], op["message"], record.attempts, op["at"])
    check_error_fits(record, last_error)  # a ValueError, named by apply like a field's
    return _with(
        record, record.status, record.available_at, record.max_attempts, record.worker, record.deadline, last_error
    )


def traceback(state: StateReads, staging: Staging, record: Record | None, op: Op) -> Record:
    """The traceback of the task's last error: written just after the error op it belongs to (a format extension)."""
    assert isinstance(record, TaskRecord)  # ready or leased
    if record.last_error is None:
        raise OpError(f"task {record.task_id!r:.100} has no last error for a traceback")
    check_error_fits(record, record.last_error, op["text"])  # a ValueError, named by apply like a field's
    return type(record)(
        record.task_id,
        record.key,
        record.status,
        record.digest_and_payload,
        record.available_at,
        record.max_attempts,
        record.attempts,
        record.generation,
        record.worker,
        record.deadline,
        with_traceback(record.last_error, op["text"]),
        record.queue,
        record.priority,
    )


# -- store-level kinds: they name no task; each returns (the setting, its new value) --


def clock(state: StateReads, staging: Staging, record: Record | None, op: Op) -> tuple[str, int]:
    """The store's clock unit, recorded once: a second "clock" op is refused, whatever its unit.

    The engine never reads a clock; this is only the agreement every tool
    that does (worker, scheduler, shell, dashboard, metrics) checks itself against.
    """
    recorded = staging.settings.get("clock", state.clock)
    if recorded is not None:
        raise OpError(f"the store's clock unit is already recorded ({recorded} units per second)")
    return ("clock", op["units_per_second"])


def give_back(state: StateReads, staging: Staging, record: Record | None, op: Op) -> Record:
    """An unstarted lease given back by its holder: the lease undone, so the task is as it was before it.

    Fenced like release (the lease's generation). Attempts and generation
    both go back by one (a stored record has one counter for both, CONTRACT
    §3), so the next lease reuses the generation: the holder must not use
    its token again (docs/DECISIONS.md §36). available_at and the last error
    are kept.
    """
    assert isinstance(record, TaskRecord)  # (a leased task)
    _held(record, op)
    return type(record)(
        record.task_id,
        record.key,
        READY,
        record.digest_and_payload,
        record.available_at,
        record.max_attempts,
        record.attempts - 1,
        record.generation - 1,
        None,
        None,
        record.stored_error,
        record.queue,
        record.priority,
    )


def result(state: StateReads, staging: Staging, record: Record | None, op: Op) -> Record:
    """A leased task's result, stored when its ack in the same transaction completes it; the record is unchanged.

    Refused alone, or unless the ack of the same lease follows (`state.apply` checks the task ends completed).
    """
    assert record is not None
    _held(record, op)
    if staging.results is None:
        raise OpError("a result op belongs in one transaction with its task's ack")
    if op["expires"] < op["at"]:
        raise OpError(f"a result expires at or after its time {op['at']}, not at {op['expires']}")
    value = op["value"]
    encoded: bytes = value.canonical if staging.planned else check_result(value, staging.decoded)
    staging.results[record.task_id] = (op["at"], op["expires"], encoded)
    return record


Transition = Callable[[StateReads, Staging, Record | None, Op], Record]


def configure(state: StateReads, staging: Staging, record: Record | None, op: Op) -> Record:
    """A configure op changes a queue, not a task: state.apply installs it itself (`state._configure`)."""
    raise OpError("a configure op stands alone in its transaction")
