"""The queue's state machine: the state, the table of op kinds, and `apply`, the only transitions.

Everything that changes a task lives in this file, and this file knows no
files, clocks, threads or hooks. Live operations and recovery both call the
same `apply(state, transaction)`, so a transaction means exactly the same
thing whether it was just written or is being replayed years later. The
shapes of a stored task are in records.py; building a state from a
snapshot's records is snapshot_load.py.

The transitions, as data (SPEC §3, and `OP_KINDS` below, which is the one
declaration of each kind); every op names its task and is valid only from
the status in the second column:

=========  ========  ==========================  ================================
op         from      to                          also
=========  ========  ==========================  ================================
put        (new)     ready                       attempts 0, generation 0
lease      ready     leased                      G == generation + 1; attempts += 1
expire     leased    dead if attempts >= max,    available_at = old deadline;
                     else ready                  last error LeaseExpired
ack        leased    completed                   payload dropped (a tombstone)
release    leased    dead if attempts >= max,    available_at = A
                     else ready
extend     leased    leased                      same generation; deadline = D
redrive    dead      ready                       available_at = A; max_attempts =
                                                 M > the old one
cancel     ready or  dead                        worker, deadline cleared
           leased
fail       leased    dead                        same generation (fenced)
error      ready or  (same)                      last error = type, message,
           leased                                attempts, at
=========  ========  ==========================  ================================

`worker` and `deadline` are set exactly while a task is leased. Anything
else is an `InvalidTransaction`, raised before the state is touched. Every
transition but ack keeps the task's last error unless it sets one; an
error op comes just before the release, fail or cancel it explains, in
the same transaction.

Adding an op kind: one `OpKind` row in `OP_KINDS` (name, fields, from-status,
transition), its transition function here, a planner in ops.py, and the
`Queue` method that commits the planner's output. Keys, dispatch, the JSON
template and the size bound follow from the row (optable.py).

The format layer owns the list of op names (`walqueue.format.transaction.OP_NAMES`,
which replay and `walqueue-fsck` check every frame against), since it
cannot import the engine; this module refuses to import unless `OP_KINDS`
has exactly those names.

Why the indexes: the ready and lease orders are heaps with lazy deletion
(heaps.py), so a transition never searches a heap. The same heaps list the
ready and the leased tasks, and a set holds the dead ones, so that
`list_tasks(status)` costs what it returns rather than a walk of every
task; completed tasks alone have no index (docs/DECISIONS.md, "Reads by
status": a set entry would cost more than the tombstone's whole memory
budget).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from walqueue.engine.heaps import HEAP_SLACK, pruned
from walqueue.engine.invariants import check_invariants
from walqueue.engine.optable import Field, Op, OpKind
from walqueue.engine.reads import StateReads
from walqueue.engine.records import (
    COMPLETED,
    DEAD,
    LEASED,
    READY,
    STATUSES,
    ErrorFields,
    HeapEntry,
    InvalidTransaction,
    Record,
    TaskRecord,
    Tombstone,
    check_error_fits,
    expiry_error,
    identity_digest,
    request_identity,
)
from walqueue.engine.snapshot_load import check_snapshot_seq, load_records
from walqueue.engine.validate import check_name, check_payload, check_record_fits
from walqueue.format.canonical import canonical_str
from walqueue.format.transaction import OP_NAMES

__all__ = [
    "COMPLETED",
    "DEAD",
    "LEASED",
    "OP_KEYS",
    "OP_KINDS",
    "READY",
    "STATUSES",
    "InvalidTransaction",
    "Record",
    "State",
    "TaskRecord",
    "Tombstone",
    "apply",
    "identity_digest",
    "request_identity",
]


class State(StateReads):
    """All tasks, their key index, the ready and lease orders, and the last sequence.

    Mutated only by `apply` (and built by `from_records`, from snapshot_load's pieces); every other method
    reads. The key index holds only keys that differ from their task id, so
    the default key (the task id itself) costs no memory.
    """

    __slots__ = ("last_seq", "tasks", "_key_owner", "_ready", "_leases", "_counts", "_dead")

    def __init__(self) -> None:
        self.last_seq = 0
        #: task id -> record; read it, never write it (use `apply`).
        self.tasks: dict[str, Record] = {}
        self._key_owner: dict[str, str] = {}
        self._ready: list[HeapEntry] = []
        self._leases: list[HeapEntry] = []
        self._counts: dict[str, int] = dict.fromkeys(STATUSES, 0)
        #: The ids of the dead tasks (the ready and leased ones are in their heaps).
        self._dead: set[str] = set()

    # -- reads (the rest are StateReads', reads.py) ------------------------------

    def __len__(self) -> int:
        return len(self.tasks)

    def __eq__(self, other: object) -> bool:
        """Equal states hold the same tasks with the same fields at the same sequence."""
        if not isinstance(other, State):
            return NotImplemented
        if self.last_seq != other.last_seq or len(self.tasks) != len(other.tasks):
            return False
        other_tasks = other.tasks
        for task_id, record in self.tasks.items():
            other_record = other_tasks.get(task_id)
            if other_record is None or record.fields() != other_record.fields():
                return False
        return True

    __hash__ = None  # type: ignore[assignment]

    @classmethod
    def from_records(cls, seq: int, records: Iterable[Mapping[str, Any]], *, decoded: bool = False) -> State:
        """Rebuild the state written as snapshot `seq` from its decoded records (see snapshot_load).

        Any flaw is `InvalidTransaction`; nothing is normalized, so the
        result equals the state that was written. `decoded=True` (records
        straight from the JSON decoder) checks payloads as `apply`'s
        `decoded` does.
        """
        seq = check_snapshot_seq(seq)
        loaded = load_records(records, decoded=decoded)
        state = cls()
        state.tasks = loaded.tasks
        state._key_owner = loaded.key_owner
        state._ready = loaded.ready
        state._leases = loaded.leases
        state._counts = loaded.counts
        state._dead = loaded.dead
        state.last_seq = seq
        return state

    # -- commit (apply's second half) -----------------------------------------

    def _commit(self, staged: Iterable[tuple[str, Record]], seq: int) -> None:
        """Install the staged (task id, record) pairs, each replacing the task's record, and advance to `seq`."""
        tasks = self.tasks
        counts = self._counts
        dead = self._dead
        for task_id, record in staged:
            old = tasks.get(task_id)
            status = record.status
            if old is None:
                if record.key != task_id:
                    self._key_owner[record.key] = task_id
            else:
                counts[old.status] -= 1
                if old.status == DEAD:
                    dead.discard(task_id)
            counts[status] += 1
            if status == DEAD:
                dead.add(task_id)
            tasks[task_id] = record
            if status == READY:
                assert type(record) is TaskRecord
                record.entry = entry = (record.available_at, task_id)
                heapq.heappush(self._ready, entry)
            elif status == LEASED:
                assert type(record) is TaskRecord and record.deadline is not None
                record.entry = entry = (record.deadline, task_id)
                heapq.heappush(self._leases, entry)
        self.last_seq = seq
        # WARNING: these two tests restate `pruned`'s bound, so that the usual
        # commit, which rebuilds nothing, makes no call for it (this runs for
        # every transaction opened or committed). Keep them equal to it: the
        # invariant check, run after every call in the tests, asks `pruned`
        # itself whether a heap is over the bound.
        if len(self._ready) > 2 * counts[READY] + HEAP_SLACK:
            self._ready = pruned(self._ready, tasks, counts[READY])
        if len(self._leases) > 2 * counts[LEASED] + HEAP_SLACK:
            self._leases = pruned(self._leases, tasks, counts[LEASED])

    def check_invariants(self) -> None:
        """Verify every index against the records; `AssertionError` names the first broken one.

        O(n): for tests and offline checks (`walqueue-fsck --replay`), never
        on a live path (invariants.py).
        """
        check_invariants(self)


# -- apply ---------------------------------------------------------------------


class _OpError(Exception):
    """An op-level refusal; `apply` adds the transaction, the op's index and its name."""


class _EncodedPut(Protocol):
    """What a planned put carries as its payload (ops.py's carrier): its canonical JSON and identity digest."""

    canonical: bytes
    identity: bytes


class _Staging:
    """The records a transaction has touched so far, the keys its puts claimed, and where its ops come from.

    Later ops of the same transaction see these instead of the committed
    records; nothing here is visible in the `State` until the commit. A
    transaction of one op (most of them) has no later op to inform, so it
    shares an empty one from `_NOTHING_STAGED`, which transitions only read.
    """

    __slots__ = ("records", "keys", "decoded", "planned")

    def __init__(self, decoded: bool, planned: bool) -> None:
        self.records: dict[str, Record] = {}
        self.keys: set[str] = set()
        self.decoded = decoded
        self.planned = planned


#: The shared empty staging of one-op transactions, by (`decoded`, `_planned`).
_NOTHING_STAGED = {(d, p): _Staging(d, p) for d in (False, True) for p in (False, True)}


def _describe(value: object) -> str:
    """A short repr that never fails (a huge int's repr can raise) and never floods a message."""
    if type(value) is int and value.bit_length() > 64:
        return f"an int of {value.bit_length()} bits"
    return f"{value!r:.80}"


def _with(
    record: Record,
    status: str,
    available_at: int,
    max_attempts: int,
    worker: str | None,
    deadline: int | None,
    last_error: ErrorFields | None,
) -> TaskRecord:
    """A not-completed record like `record` (same payload, attempts, generation) but for the fields given."""
    return TaskRecord(
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
        last_error,
    )


def _unleased(record: Record, available_at: int, last_error: ErrorFields | None) -> TaskRecord:
    """Where expire and release send a leased task: ready again, or dead once its attempts are spent."""
    status = DEAD if record.attempts >= record.max_attempts else READY
    return _with(record, status, available_at, record.max_attempts, None, None, last_error)


def _held(record: Record, op: Op) -> Record:
    """The leased record an expire/ack/release op names, if the op's generation is the lease's."""
    if op["generation"] != record.generation:
        raise _OpError(
            f"task {record.task_id!r:.100} is leased with generation {record.generation}, not {op['generation']}"
        )
    return record


# Each transition takes the task's current record (None for a kind that
# creates its task) and a valid op of its kind: `_stage` has checked the op's
# keys and field values (unless a planner made it) and the record's status.


def _put(state: State, staging: _Staging, record: Record | None, op: Op) -> Record:
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
        digest = identity_digest(task_json, payload_json, available_at, max_attempts)
    if key in staging.keys or state.lookup_key(key) is not None:
        raise _OpError(f"key {key!r:.100} is already known")
    return TaskRecord(task_id, key, READY, digest + payload_json, available_at, max_attempts, 0, 0, None, None, None)


def _lease(state: State, staging: _Staging, record: Record | None, op: Op) -> Record:
    assert record is not None
    generation = op["generation"]
    if generation != record.generation + 1:
        raise _OpError(f"lease generation must be {record.generation + 1}, not {generation}")
    return TaskRecord(
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
        record.last_error,
    )


def _expire(state: State, staging: _Staging, record: Record | None, op: Op) -> Record:
    assert record is not None and record.deadline is not None  # a leased record always has one
    return _unleased(_held(record, op), record.deadline, expiry_error(record))


def _ack(state: State, staging: _Staging, record: Record | None, op: Op) -> Record:
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
    )


def _release(state: State, staging: _Staging, record: Record | None, op: Op) -> Record:
    assert record is not None
    return _unleased(_held(record, op), op["available_at"], record.last_error)


def _extend(state: State, staging: _Staging, record: Record | None, op: Op) -> Record:
    assert record is not None
    _held(record, op)
    return _with(
        record, LEASED, record.available_at, record.max_attempts, record.worker, op["deadline"], record.last_error
    )


def _redrive(state: State, staging: _Staging, record: Record | None, op: Op) -> Record:
    assert record is not None
    max_attempts = op["max_attempts"]
    if max_attempts <= record.max_attempts:  # a redrive grants attempts; so a ready task has some left
        raise _OpError(f"redrive max_attempts must exceed {record.max_attempts}, not {max_attempts}")
    return _with(record, READY, op["available_at"], max_attempts, None, None, record.last_error)


def _cancel(state: State, staging: _Staging, record: Record | None, op: Op) -> Record:
    assert record is not None
    return _with(record, DEAD, record.available_at, record.max_attempts, None, None, record.last_error)


def _fail(state: State, staging: _Staging, record: Record | None, op: Op) -> Record:
    assert record is not None
    _held(record, op)
    return _with(record, DEAD, record.available_at, record.max_attempts, None, None, record.last_error)


def _error(state: State, staging: _Staging, record: Record | None, op: Op) -> Record:
    assert record is not None
    last_error = (op["type"], op["message"], record.attempts, op["at"])
    check_error_fits(record, last_error)
    return _with(
        record, record.status, record.available_at, record.max_attempts, record.worker, record.deadline, last_error
    )


_Transition = Callable[[State, _Staging, Record | None, Op], Record]

#: The one declaration of every op kind (SPEC §3): name, fields besides ``op`` and ``task``, the
#: status its task must have (None: it creates the task), and its transition.
OP_KINDS: dict[str, OpKind] = {
    kind.name: kind
    for kind in (
        OpKind(
            "put",
            (
                ("key", Field.NAME),
                ("payload", Field.PAYLOAD),
                ("available_at", Field.INT),
                ("max_attempts", Field.POSITIVE_INT),
            ),
            None,
            _put,
        ),
        OpKind(
            "lease",
            (("worker", Field.NAME), ("generation", Field.POSITIVE_INT), ("deadline", Field.INT)),
            READY,
            _lease,
        ),
        OpKind("expire", (("generation", Field.POSITIVE_INT),), LEASED, _expire),
        OpKind("ack", (("generation", Field.POSITIVE_INT),), LEASED, _ack),
        OpKind("release", (("generation", Field.POSITIVE_INT), ("available_at", Field.INT)), LEASED, _release),
        OpKind("extend", (("generation", Field.POSITIVE_INT), ("deadline", Field.INT)), LEASED, _extend),
        OpKind("redrive", (("available_at", Field.INT), ("max_attempts", Field.POSITIVE_INT)), DEAD, _redrive),
        OpKind("cancel", (), (READY, LEASED), _cancel),
        OpKind("fail", (("generation", Field.POSITIVE_INT),), LEASED, _fail),
        OpKind(
            "error",
            (("type", Field.ERROR_TYPE), ("message", Field.ERROR_MESSAGE), ("at", Field.INT)),
            (READY, LEASED),
            _error,
        ),
    )
}
if frozenset(OP_KINDS) != OP_NAMES:
    # The format layer owns the list of names every reader of the log accepts
    # (it cannot import the engine); a kind added here alone would be refused
    # by replay and by walqueue-fsck. Refuse to run instead.
    raise ImportError(
        "the engine's op kinds and walqueue.format.transaction.OP_NAMES differ: "
        f"{sorted(frozenset(OP_KINDS) ^ OP_NAMES)}; declare the kind in both"
    )

#: op name -> the exact keys of that op (SPEC §3), derived from `OP_KINDS`.
OP_KEYS: dict[str, frozenset[str]] = {name: kind.keys for name, kind in OP_KINDS.items()}


def _stage(state: State, staging: _Staging, seq: int, index: int, op: object) -> Record:
    """The record op `index` of transaction `seq` leads to, or `InvalidTransaction`.

    The one place that admits an op. An op a planner made (`staging.planned`)
    skips only the field checks its planner already made; its keys, its
    task's status and every rule of its transition are checked all the same.
    """
    if type(op) is not dict:
        raise InvalidTransaction(f"transaction {seq} op {index}: an op must be a dict, not {type(op).__name__}")
    name = op.get("op")
    kind = OP_KINDS.get(name) if type(name) is str else None
    if kind is None:
        raise InvalidTransaction(f"transaction {seq} op {index}: unknown op {_describe(name)}")
    if op.keys() != kind.keys:
        wanted = sorted(kind.keys)
        raise InvalidTransaction(
            f"transaction {seq} op {index} ({name}): keys must be exactly {wanted}, not {sorted(map(repr, op))}"
        )
    try:
        task_id = op["task"]
        statuses = kind.statuses
        if statuses is None:  # the op creates its task
            if not staging.planned:
                check_name(task_id, "task")
            if task_id in state.tasks or task_id in staging.records:
                raise _OpError(f"task {task_id!r:.100} already exists")
            if not staging.planned:
                kind.check_fields(op)
            record = None
        else:
            if type(task_id) is not str:
                raise _OpError(f"task must be a str, not {type(task_id).__name__}")
            record = staging.records.get(task_id)
            if record is None:
                record = state.tasks.get(task_id)
            if record is None:
                raise _OpError(f"unknown task {task_id!r:.100}")
            if not staging.planned:  # a flawed field is named before a wrong status
                kind.check_fields(op)
            if record.status not in statuses:
                raise _OpError(f"task {task_id!r:.100} is {record.status}, not {' or '.join(sorted(statuses))}")
        transition: _Transition = kind.transition
        return transition(state, staging, record, op)
    except (_OpError, TypeError, ValueError) as exc:  # a check's TypeError/ValueError names the field
        raise InvalidTransaction(f"transaction {seq} op {index} ({name}): {exc}") from None


def apply(state: State, tx: Mapping[str, Any], *, decoded: bool = False, _planned: bool = False) -> None:
    """Apply transaction `tx` (``{"seq": S, "ops": [...]}``) to `state`, whole or not at all.

    Every op is checked first, against the state as the earlier ops of the
    same transaction would leave it (staged copies of the touched records);
    only when all are valid are the staged records committed. Any flaw
    raises `InvalidTransaction` naming the op and the reason, and leaves
    `state` exactly as it was.

    `decoded=True` says that `tx` is exactly what the JSON decoder returned
    for a frame (recovery): payloads are then checked with
    `check_payload(decoded=True)`, which reaches the same verdict and bytes.
    `_planned=True`, like h11's ``_parsed``, is for `Queue` alone: the ops are
    a planner's (ops.py), whose fields were checked when they were planned
    and whose puts carry their payload encoded. Everything that depends on
    the state is checked either way.
    """
    if type(tx) is not dict:
        raise InvalidTransaction(f"a transaction must be a dict, not {type(tx).__name__}")
    if len(tx) != 2 or "seq" not in tx or "ops" not in tx:  # exactly these two keys, without a keys view
        raise InvalidTransaction(f"a transaction has exactly the keys ops and seq, not {sorted(map(repr, tx))}")
    seq = tx["seq"]
    if type(seq) is not int or seq != state.last_seq + 1:
        raise InvalidTransaction(f"transaction sequence must be {state.last_seq + 1}, not {_describe(seq)}")
    ops = tx["ops"]
    if type(ops) is not list or not ops:
        raise InvalidTransaction(f"transaction {seq}: ops must be a non-empty list")
    if len(ops) == 1:
        # Nothing later in the transaction can see this op's result.
        op = ops[0]
        record = _stage(state, _NOTHING_STAGED[decoded, _planned], seq, 0, op)
        state._commit(((op["task"], record),), seq)  # a valid op's task is its task id
        return
    staging = _Staging(decoded, _planned)
    staged = staging.records
    for index, op in enumerate(ops):
        record = _stage(state, staging, seq, index, op)
        task_id = op["task"]
        if task_id not in staged and task_id not in state.tasks:  # the op created its task: its key is taken
            staging.keys.add(record.key)
        staged[task_id] = record
    state._commit(staged.items(), seq)
