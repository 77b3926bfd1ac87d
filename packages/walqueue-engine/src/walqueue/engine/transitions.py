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

from collections.abc import Callable
from collections.abc import Set as AbstractSet
from typing import Protocol

from walqueue.engine.optable import CARRIER_SEPARATOR, Op
from walqueue.engine.records import (
    check_error_fits,
    expiry_error,
    identity_digest,
    pack_tombstone,
    queue_of,
)
from walqueue.engine.rows import (
    ATTEMPTS,
    AVAILABLE_AT,
    DATA,
    DEAD,
    DEADLINE,
    ERROR,
    GENERATION,
    KEY,
    LANE,
    LEASED,
    MAX_ATTEMPTS,
    READY,
    STATUS,
    TASK_ID,
    WORKER,
    Row,
    Stored,
    StoredError,
    new_row,
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

    @property
    def rated(self) -> AbstractSet[str]:
        """The names of the queues with a rate limit: a lease in one of them carries its reserve's `now` as ``at``."""


class OpError(WalQueueError):
    """An op-level refusal; `apply` turns it into `InvalidTransaction`, naming the transaction and the op."""


class Staging:
    """The records a transaction has touched so far, the keys its puts claimed, and where its ops come from.

    Later ops of the same transaction see these instead of the committed
    records; nothing here is visible in the `State` until the commit. A
    transaction of one op (most of them) has no later op to inform, so it
    shares an empty one from `NOTHING_STAGED`, which transitions only read.
    """

    __slots__ = ("records", "keys", "decoded", "planned", "settings", "results")

    def __init__(self, decoded: bool, planned: bool) -> None:
        self.records: dict[str, Stored] = {}
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
    row: Row,
    status: str,
    available_at: int,
    max_attempts: int,
    worker: str | None,
    deadline: int | None,
    stored_error: StoredError | None,
) -> Row:
    """A row like `row` (same payload, attempts, generation, lane) but for the fields given, with its new entry.

    The traceback belongs to the last error: ``row[ERROR]`` keeps both, a
    new error (`ErrorFields`, no traceback) replaces both.
    """
    task_id = row[TASK_ID]
    entry = (available_at, task_id) if status == READY else (deadline, task_id) if status == LEASED else None
    return (
        task_id, row[KEY], status, row[DATA], available_at, max_attempts, row[ATTEMPTS], worker, deadline,
        stored_error, entry,
    ) + row[LANE:]  # fmt: skip


def _unleased(row: Row, available_at: int, stored_error: StoredError | None) -> Row:
    """Where expire and release send a leased task: ready again, or dead once its attempts are spent."""
    status = DEAD if row[ATTEMPTS] >= row[MAX_ATTEMPTS] else READY
    return _with(row, status, available_at, row[MAX_ATTEMPTS], None, None, stored_error)


def _held(row: Row, op: Op) -> Row:
    """The leased row an expire/ack/release op names, if the op's generation is the lease's."""
    if op["generation"] != row[GENERATION]:
        raise OpError(f"task {row[TASK_ID]!r:.100} is leased with generation {row[GENERATION]}, not {op['generation']}")
    return row


# Each transition takes the task's current record (None for a kind that
# creates its task) and a valid op of its kind: `admission.stage` has checked the op's
# keys and field values (unless a planner made it) and the record's status.


def put(state: StateReads, staging: Staging, record: Row | None, op: Op) -> Stored:
    task_id, key, available_at, max_attempts = op["task"], op["key"], op["available_at"], op["max_attempts"]
    if staging.planned:
        # ops.put_op checked this op's names, numbers and payload, and encoded it, once: its carrier ends with the
        # row's data, the identity digest and the payload's JSON (putops.py).
        data: bytes = op["payload"].partition(CARRIER_SEPARATOR)[2]
    else:
        payload_json = check_payload(op["payload"], staging.decoded)
        task_json = canonical_str(task_id)
        check_record_fits(payload_json, task_json, task_json if key == task_id else canonical_str(key))
        data = (
            identity_digest(
                task_json, payload_json, available_at, max_attempts, op.get("queue", DEFAULT_QUEUE),
                op.get("priority", 0),
            )
            + payload_json
        )  # fmt: skip
    if key in staging.keys or state.lookup_key(key) is not None:
        raise OpError(f"key {key!r:.100} is already known")
    if len(op) == 6:  # put's six keys alone: the default lane, no put time (the optional fields are omitted)
        queue, priority = DEFAULT_QUEUE, 0
    else:
        queue, priority = op.get("queue", DEFAULT_QUEUE), op.get("priority", 0)
        if "put_at" in op and op["put_at"] > available_at:  # a stamped put is due from its put time (DECISIONS §46)
            available_at = op["put_at"]
    if queue is DEFAULT_QUEUE and priority == 0:  # (records.new_row, inlined: this is every put's path)
        return (task_id, key, READY, data, available_at, max_attempts, 0, None, None, None,
                (available_at, task_id))  # fmt: skip
    # (new_row shares one lane key, with one interned queue string, among the lane's rows)
    return new_row(task_id, key, READY, data, available_at, max_attempts, 0, None, None, None,
                   queue, priority)  # fmt: skip


def lease(state: StateReads, staging: Staging, record: Row | None, op: Op) -> Stored:
    assert record is not None
    generation = op["generation"]
    if generation != record[GENERATION] + 1:
        raise OpError(f"lease generation must be {record[GENERATION] + 1}, not {generation}")
    rated = state.rated  # the limiter's input, `at`, is written iff the queue has a rate
    if ("at" in op) != (queue_of(record) in rated if rated else False):
        raise OpError(f"a lease in queue {queue_of(record)!r} {'must not' if 'at' in op else 'must'} carry at")
    task_id, deadline = record[TASK_ID], op["deadline"]
    return (
        task_id, record[KEY], LEASED, record[DATA], record[AVAILABLE_AT], record[MAX_ATTEMPTS], generation,
        op["worker"], deadline, record[ERROR], (deadline, task_id),
    ) + record[LANE:]  # fmt: skip


def expire(state: StateReads, staging: Staging, record: Row | None, op: Op) -> Stored:
    assert record is not None and record[DEADLINE] is not None  # a leased record always has one
    return _unleased(_held(record, op), record[DEADLINE], expiry_error(record))


def ack(state: StateReads, staging: Staging, record: Row | None, op: Op) -> Stored:
    assert record is not None
    return pack_tombstone(_held(record, op))


def release(state: StateReads, staging: Staging, record: Row | None, op: Op) -> Stored:
    assert record is not None
    return _unleased(_held(record, op), op["available_at"], record[ERROR])


def extend(state: StateReads, staging: Staging, record: Row | None, op: Op) -> Stored:
    assert record is not None
    _held(record, op)
    return _with(
        record, LEASED, record[AVAILABLE_AT], record[MAX_ATTEMPTS], record[WORKER], op["deadline"], record[ERROR]
    )


def redrive(state: StateReads, staging: Staging, record: Row | None, op: Op) -> Stored:
    assert record is not None
    max_attempts = op["max_attempts"]
    if max_attempts <= record[MAX_ATTEMPTS]:  # a redrive grants attempts; so a ready task has some left
        raise OpError(f"redrive max_attempts must exceed {record[MAX_ATTEMPTS]}, not {max_attempts}")
    return _with(record, READY, op["available_at"], max_attempts, None, None, record[ERROR])


def cancel(state: StateReads, staging: Staging, record: Row | None, op: Op) -> Stored:
    assert record is not None
    return _with(record, DEAD, record[AVAILABLE_AT], record[MAX_ATTEMPTS], None, None, record[ERROR])


def fail(state: StateReads, staging: Staging, record: Row | None, op: Op) -> Stored:
    """A permanent failure: the holder's task is dead at once, whatever its attempts left."""
    assert record is not None
    _held(record, op)
    return _with(record, DEAD, record[AVAILABLE_AT], record[MAX_ATTEMPTS], None, None, record[ERROR])


def error(state: StateReads, staging: Staging, record: Row | None, op: Op) -> Stored:
    """The task's last error becomes the op's, with the task's attempts; nothing else changes.

    The writer puts it just before the release, fail or cancel it explains,
    in the same transaction (the attempt is the record's, so it is not written).
    """
    assert record is not None
    last_error = (op["type"], op["message"], record[ATTEMPTS], op["at"])
    check_error_fits(record, last_error)  # a ValueError, named by apply like a field's
    return _with(
        record, record[STATUS], record[AVAILABLE_AT], record[MAX_ATTEMPTS], record[WORKER], record[DEADLINE],
        last_error,
    )  # fmt: skip


def traceback(state: StateReads, staging: Staging, record: Row | None, op: Op) -> Stored:
    """The traceback of the task's last error: written just after the error op it belongs to (a format extension)."""
    assert type(record) is tuple  # ready or leased
    stored: StoredError | None = record[ERROR]
    if stored is None:
        raise OpError(f"task {record[TASK_ID]!r:.100} has no last error for a traceback")
    last_error = stored[:4]
    check_error_fits(record, last_error, op["text"])  # a ValueError, named by apply like a field's
    return _with(
        record, record[STATUS], record[AVAILABLE_AT], record[MAX_ATTEMPTS], record[WORKER], record[DEADLINE],
        with_traceback(last_error, op["text"]),
    )  # fmt: skip


# -- store-level kinds: they name no task; each returns (the setting, its new value) --


def clock(state: StateReads, staging: Staging, record: Row | None, op: Op) -> tuple[str, int]:
    """The store's clock unit, recorded once: a second "clock" op is refused, whatever its unit.

    The engine never reads a clock; this is only the agreement every tool
    that does (worker, scheduler, shell, dashboard, metrics) checks itself against.
    """
    recorded = staging.settings.get("clock", state.clock)
    if recorded is not None:
        raise OpError(f"the store's clock unit is already recorded ({recorded} units per second)")
    return ("clock", op["units_per_second"])


def give_back(state: StateReads, staging: Staging, record: Row | None, op: Op) -> Stored:
    """An unstarted lease given back by its holder: the lease undone, so the task is as it was before it.

    Fenced like release (the lease's generation). Attempts and generation
    both go back by one (a stored record has one counter for both, CONTRACT
    §3), so the next lease reuses the generation: the holder must not use
    its token again (docs/DECISIONS.md §36). available_at and the last error
    are kept.
    """
    assert record is not None
    _held(record, op)
    task_id, available_at = record[TASK_ID], record[AVAILABLE_AT]
    return (
        task_id, record[KEY], READY, record[DATA], available_at, record[MAX_ATTEMPTS], record[ATTEMPTS] - 1,
        None, None, record[ERROR], (available_at, task_id),
    ) + record[LANE:]  # fmt: skip


def result(state: StateReads, staging: Staging, record: Row | None, op: Op) -> Stored:
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
    staging.results[record[TASK_ID]] = (op["at"], op["expires"], encoded)
    return record


Transition = Callable[[StateReads, Staging, Row | None, Op], Stored]


def configure(state: StateReads, staging: Staging, record: Row | None, op: Op) -> Stored:
    """A configure op changes a queue, not a task: state.apply installs it itself (`state._configure`)."""
    raise OpError("a configure op stands alone in its transaction")
