"""Building transactions from validated requests: pure planning, no I/O.

Like h2's "data to send", an operation here only *produces* a transaction: a `Plan`, its ops together with each op's
canonical JSON. The storage layer alone frames (`Plan.body`), writes and syncs it, and then hands the very same ops
to `state.apply`. A planner reads the state and never changes it, so a call refused here (bad arguments,
`KeyConflict`, `StaleLease`) has written nothing and changed nothing.

Every op's JSON comes from its kind's template (`OpKind.encode`, derived from `state.OP_KINDS`), so `Queue` never
chooses an encoder and no kind can lack one. A put's payload travels in the op as putops.py's carrier, exact
bytes: the op's JSON, its identity digest and the payload's canonical JSON, computed once there; `apply` reads it
only for a `Plan`'s ops (its `_planned` flag).

Every planner that may split or cut a transaction takes the frame bound as a keyword (`max_frame_bytes`), so that
tests can split with small bounds; the storage layer uses the default, `MAX_FRAME_BYTES`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from itertools import repeat
from operator import itemgetter

from walqueue.engine import records, rows
from walqueue.engine.laneplans import stamp_lease_times
from walqueue.engine.optable import CARRIER_SEPARATOR, Op, OpKind
from walqueue.engine.putops import put_op, put_op_from_mapping, put_ops_from_mappings
from walqueue.engine.rows import DIGEST_BYTES
from walqueue.engine.state import LEASED, OP_KINDS, State
from walqueue.engine.tracebacks import traceback_op
from walqueue.engine.txsize import fixed_size as _fixed_size
from walqueue.engine.txsize import surely_fits as _surely_fits
from walqueue.engine.txsize import transaction_size
from walqueue.engine.types import KeyConflict, Lease, StaleLease, WrongStatus, plain_lease
from walqueue.engine.validate import (
    ERROR_MESSAGE_BYTES,
    ERROR_TYPE_BYTES,
    MAX_FRAME_BYTES,
    MAX_INT,
    MAX_NAME_BYTES,
    TIGHT_ERROR_MESSAGE_BYTES,
    TIGHT_ERROR_TYPE_BYTES,
    check_int,
    check_name,
    cut_text,
)

__all__ = [
    "Op",
    "Plan",
    "lease_tokens",
    "plan_ack",
    "plan_acks",
    "plan_cancel",
    "plan_extend",
    "plan_fail",
    "plan_lease",
    "plan_put",
    "plan_puts",
    "plan_reap",
    "plan_redrive",
    "plan_release",
    "put_op",
    "put_op_from_mapping",
    "put_ops_from_mappings",
    "transaction_size",
    "validate_reserve_args",
]

_LEASE = OP_KINDS["lease"]
_EXPIRE = OP_KINDS["expire"]
_ACK = OP_KINDS["ack"]
_RELEASE = OP_KINDS["release"]
_EXTEND = OP_KINDS["extend"]
_REDRIVE = OP_KINDS["redrive"]
_CANCEL = OP_KINDS["cancel"]
_FAIL = OP_KINDS["fail"]
_ERROR = OP_KINDS["error"]

Error = tuple[str, ...]  #: as `validate.check_error` returns it: (type, message[, traceback]), not yet cut


class Plan:
    """A planned transaction: its ops, for `apply`, and each op's canonical JSON, for the frame.

    A `__slots__` class, not a `NamedTuple`: one is made per write, and a named tuple's `__new__` costs more.
    """

    __slots__ = ("ops", "op_json")
    #: Whether the ops are `plan_puts`' new tasks alone (`state.apply`'s `_fresh_puts`): a `_NewPuts`.
    fresh_puts = False

    def __init__(self, ops: list[Op], op_json: list[bytes]) -> None:
        self.ops = ops
        self.op_json = op_json

    def body(self, seq: int) -> bytes:
        """The canonical JSON of ``{"ops": ops, "seq": seq}``, spliced from the ops' own JSON.

        Several ops are joined once, the brackets riding on the first and the last op's JSON: put_many(1000)'s
        body is about 200 KB, and each large copy made on the way costs about half its SHA-256 (DECISIONS §58).
        """
        op_json = self.op_json
        if len(op_json) < 2:  # (one op: the list below costs more than the copy it saves)
            return b'{"ops":[%b],"seq":%d}' % (b",".join(op_json), seq)
        pieces = [b'{"ops":[' + op_json[0], *op_json[1:]]
        pieces[-1] += b'],"seq":%d}' % seq
        return b",".join(pieces)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Plan):
            return NotImplemented
        return self.ops == other.ops and self.op_json == other.op_json

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Plan({self.ops!r:.200}, {len(self.op_json)} encoded)"


class _NewPuts(Plan):
    """`plan_puts`' plan: new tasks alone (`state.apply`'s `_fresh_puts`)."""

    __slots__ = ()
    fresh_puts = True


def plan_puts(state: State, put_ops: Iterable[Op]) -> tuple[Plan, list[str]]:
    """The puts of `put_ops` (from `put_op`) that create a task, and the task id each names, in input order.

    Each put is judged against the state plus the earlier puts of the same
    list. A known key with the same identity is an identical retry (nothing
    to write, whatever the task's status: nothing is ever resurrected); a
    known key with another identity, or a new key with a known task id, is
    a `KeyConflict` that fails the whole list. A plan without ops writes nothing.
    """
    put_ops = put_ops if type(put_ops) is list else list(put_ops)
    if (fresh := _fresh_batch(state, put_ops)) is not None:
        return fresh
    new: list[Op] = []
    op_json: list[bytes] = []
    task_ids: list[str] = []
    planned_keys: dict[str, bytes] = {}  # key -> identity, for the new tasks of this list
    planned_ids: set[str] = set()
    tasks, lookup_key = state.tasks, state.lookup_key
    for index, op in enumerate(put_ops):
        json, _, data = _carrier(op, "plan_puts").partition(CARRIER_SEPARATOR)
        identity = data[:DIGEST_BYTES]
        key, task_id = op["key"], op["task"]
        task_ids.append(task_id)
        known = key in planned_keys or task_id in tasks or task_id in planned_ids or lookup_key(key) is not None
        if not known or _is_new(state, op, identity, planned_keys, planned_ids, index):
            planned_keys[key] = identity
            planned_ids.add(task_id)
            new.append(op)
            op_json.append(json)
    return _NewPuts(new, op_json), task_ids


def _fresh_batch(state: State, put_ops: list[Op]) -> tuple[Plan, list[str]] | None:
    """`plan_puts`' answer for the usual batch, judged whole at C speed; None: it must be judged item by item.

    The usual batch: `put_op`'s ops alone (exact dicts, put ops with their carrier), whose task ids are distinct,
    whose keys are distinct, and none of them known to the state (`State.all_new`). Each of its puts is then
    new, the verdict the item-by-item loop reaches for each, and the plan is the whole batch.
    """
    if not put_ops or {*map(type, put_ops)} != {dict}:
        return None
    try:
        names, task_ids, keys, carriers = [list(map(field, put_ops)) for field in _PUT_FIELDS]
    except KeyError:  # (not put_op's: the loop names it)
        return None
    count = len(put_ops)
    if {*map(type, carriers)} != {bytes} or names.count("put") != count:  # (no value hashed before)
        return None
    if not state.all_new(task_ids, task_ids if keys == task_ids else keys):  # (keys == task_ids: put's default)
        return None
    parts = map(bytes.partition, carriers, repeat(CARRIER_SEPARATOR, count))
    return _NewPuts(put_ops.copy(), list(map(_JSON, parts))), task_ids


_PUT_FIELDS, _JSON = tuple(map(itemgetter, ("op", "task", "key", "payload"))), itemgetter(0)  # (op JSON: putops.py)


def plan_put(state: State, op: Op) -> Plan | None:
    """`plan_puts` of a single put (`Queue.put`): the put's plan, or ``None`` for an identical retry."""
    json, _, data = _carrier(op, "plan_put").partition(CARRIER_SEPARATOR)
    if (state.lookup_key(op["key"]) is None and op["task"] not in state.tasks) or _is_new(
        state, op, data[:DIGEST_BYTES], {}, frozenset(), 0
    ):
        return Plan([op], [json])
    return None


def _carrier(op: object, planner: str) -> bytes:
    """The carrier of a put op built by `put_op` (putops.py); `TypeError` for anything else."""
    if type(op) is not dict or op.get("op") != "put" or type(payload := op.get("payload")) is not bytes:
        raise TypeError(f"{planner} takes put ops built by put_op, not {type(op).__name__}")
    return payload


def _is_new(
    state: State,
    op: Op,
    identity: bytes,
    planned_keys: dict[str, bytes],
    planned_ids: AbstractSet[str],
    index: int,
) -> bool:
    """True for a new task, False for an identical retry, `KeyConflict` for anything else (see `plan_puts`)."""
    key, task_id = op["key"], op["task"]
    known_identity = planned_keys.get(key)
    if known_identity is None:
        owner = state.lookup_key(key)
        if owner is not None:
            known_identity = state.identity(owner)
    if known_identity is not None:
        if known_identity != identity:
            raise KeyConflict(
                f"item {index}: key {key!r:.100} is already used by a different request"
                " (task id, payload, available_at, max_attempts, queue or priority differ)"
            )
        return False
    if task_id in state.tasks or task_id in planned_ids:
        raise KeyConflict(f"item {index}: task {task_id!r:.100} already exists under another key")
    return True


def plan_reap(
    state: State, now: int, first_seq: int, *, max_frame_bytes: int = MAX_FRAME_BYTES, _checked: bool = False
) -> list[Plan]:
    """Expire ops for every leased task with ``deadline <= now``, in (deadline, task id) order.

    Usually one transaction; split into consecutive ones (sequences
    `first_seq`, `first_seq + 1`, ...) only where one would exceed the frame
    bound. An empty list means nothing is overdue. `_checked=True` is for
    `Queue.reserve`, which has checked `now` with the lease's arguments,
    before its reap, and passes the next sequence.
    """
    if not _checked:
        check_int(now, "now")
        check_int(first_seq, "first_seq", 1)
    first = state.next_deadline()  # (the usual reserve's answer, nothing overdue, without a list of ids)
    if first is None or first > now:
        return []
    tasks = state.tasks
    expire_ops: list[Op] = [
        {"op": "expire", "task": task_id, "generation": tasks[task_id][rows.GENERATION]}
        for task_id in state.peek_expired(now, _checked=True)
    ]
    encode = _EXPIRE.encode
    expire_json = [encode(op) for op in expire_ops]
    if _surely_fits(len(expire_ops), _EXPIRE.max_json, max_frame_bytes):
        return [Plan(expire_ops, expire_json)]  # no need to measure
    plans: list[Plan] = []
    current = Plan([], [])
    seq = first_seq
    size = _fixed_size(seq)
    for op, op_json in zip(expire_ops, expire_json, strict=True):
        op_size = len(op_json)
        added = op_size + (1 if current.ops else 0)
        if size + added > max_frame_bytes:
            if not current.ops:
                raise ValueError(f"an expire op of {op_size} bytes cannot fit in a frame of {max_frame_bytes}")
            plans.append(current)
            seq += 1
            if seq > MAX_INT:
                raise ValueError("sequence numbers exhausted")
            current = Plan([], [])
            size = _fixed_size(seq)
            added = op_size
            if size + added > max_frame_bytes:
                raise ValueError(f"an expire op of {op_size} bytes cannot fit in a frame of {max_frame_bytes}")
        current.ops.append(op)
        current.op_json.append(op_json)
        size += added
    plans.append(current)
    return plans


def validate_reserve_args(worker: object, now: object, lease_seconds: object, limit: object) -> None:
    """Check `reserve`'s arguments before anything (the reap included) is written.

    The usual arguments pass `check_int`'s and `check_name`'s first tests, made here without their four calls
    (every reserve's path); anything else takes the checks themselves, which name the first flaw.
    """
    if type(now) is int and type(lease_seconds) is int and type(limit) is int and type(worker) is str:
        if 0 <= now <= MAX_INT and 0 < lease_seconds <= MAX_INT and 0 < limit <= MAX_INT:
            if 0 < len(worker) <= MAX_NAME_BYTES and worker.isascii():
                return
    check_name(worker, "worker")
    check_int(now, "now")
    check_int(lease_seconds, "lease_seconds", 1)
    check_int(limit, "limit", 1)


def plan_lease(
    state: State,
    worker: str,
    now: int,
    lease_seconds: int,
    limit: int,
    seq: int,
    *,
    max_frame_bytes: int = MAX_FRAME_BYTES,
    _checked: bool = False,
    queues: tuple[str, ...] | None = None,
) -> Plan:
    """Lease ops for up to `limit` ready tasks with ``available_at <= now``, best first (`State.peek_ready`).

    Deadline ``now + lease_seconds``, or the end of time (`MAX_INT`) if
    that is sooner, generation one more than the task's.
    If all of them would not fit in one frame (as transaction `seq`), as
    many as fit, in that order. Call it after the reap has been applied: an
    expired task that became ready again is then eligible. A plan without
    ops means nothing is due. `_checked=True` is for `Queue.reserve`, which
    checks the arguments once, before its reap.
    """
    if not _checked:
        validate_reserve_args(worker, now, lease_seconds, limit)
        check_int(seq, "seq", 1)
    # Capped, not refused: reserve(now=MAX_INT) must be accepted so that it
    # can reap every lease ever granted (a lease granted that late is due).
    deadline = now + lease_seconds
    if deadline > MAX_INT:
        deadline = MAX_INT
    tasks = state.tasks
    planned: list[Op] = [
        {
            "op": "lease",
            "task": task_id,
            "worker": worker,
            "generation": tasks[task_id][rows.GENERATION] + 1,
            "deadline": deadline,
        }
        for task_id in state.peek_ready(now, limit, queues, _checked=True)
    ]
    if state.rated:  # (a lease of a rate-limited queue carries at)
        stamp_lease_times(state, planned, now)
    encode = _LEASE.encode
    lease_json = [encode(op) for op in planned]
    if _surely_fits(len(planned), _LEASE.max_json, max_frame_bytes):
        return Plan(planned, lease_json)  # no need to measure
    size = _fixed_size(seq)
    for count, op_json in enumerate(lease_json):
        added = len(op_json) + (1 if count else 0)
        if size + added > max_frame_bytes:
            if not count:
                raise ValueError(f"a lease op of {added} bytes cannot fit in a frame of {max_frame_bytes}")
            return Plan(planned[:count], lease_json[:count])
        size += added
    return Plan(planned, lease_json)


def _check_lease(lease: object) -> Lease:
    if not isinstance(lease, Lease):
        raise TypeError(f"lease must be a Lease, not {type(lease).__name__}")
    return lease


def _owned_record_generation(state: State, lease: Lease, now: int) -> tuple[str, int]:
    """The stored task id and generation that `lease` still owns at `now`, or `StaleLease`.

    Only the token's task_id, worker and generation are read. A field that
    could never match a stored lease (a non-str name, a name too long to
    store, a non-int or bool generation) makes the token stale rather than
    the call ill-typed: the token is data the caller got back from us,
    perhaps through JSON, and the answer "this lease no longer owns its
    task" is the true one. Only a `lease` that is not a `Lease` at all is a
    `TypeError`.
    """
    task_id, worker, generation = lease.task_id, lease.worker, lease.generation
    if type(task_id) is not str or type(worker) is not str or type(generation) is not int:
        raise StaleLease("the lease token's task_id, worker or generation has the wrong type")
    record = state.tasks.get(task_id)
    if record is None:
        raise StaleLease(f"task {task_id!r:.100} does not exist")
    if type(record) is not tuple or record[rows.STATUS] != LEASED:
        raise StaleLease(f"task {task_id!r:.100} is {rows.status_of(record)}, not leased")
    if record[rows.WORKER] != worker or record[rows.GENERATION] != generation:
        raise StaleLease(f"task {task_id!r:.100} is leased to another worker or generation")
    if not now < record[rows.DEADLINE]:
        raise StaleLease(f"task {task_id!r:.100}: the lease expired at {record[rows.DEADLINE]} (now {now})")
    return record[rows.TASK_ID], generation


def plan_ack(state: State, lease: Lease, now: int, kind: OpKind = _ACK) -> Plan:
    """The one ack op (or `kind`'s, fenced alike: give_back) of a lease that still owns its task, else `StaleLease`."""
    lease = lease if type(lease) is Lease else _check_lease(lease)  # (a plain token, the usual one: no call)
    if type(now) is not int or not 0 <= now <= MAX_INT:  # (check_int's test, its call made only when it fails)
        check_int(now, "now")
    task_id, generation = _owned_record_generation(state, lease, now)
    op: Op = {"op": kind.name, "task": task_id, "generation": generation}
    return Plan([op], [kind.encode(op)])


def lease_tokens(leases: object) -> list[Lease]:
    """`ack_many`'s iterable of `Lease` as plain tokens, read now (user code: before any lock).

    `TypeError` names a bad item; a lone `Lease`, a string or a mapping is refused rather than iterated."""
    if isinstance(leases, (str, bytes, Mapping, Lease)) or not isinstance(leases, Iterable):
        raise TypeError(f"leases must be an iterable of Lease, not {type(leases).__name__}")
    tokens: list[Lease] = []
    for index, lease in enumerate(leases):
        if not isinstance(lease, Lease):
            raise TypeError(f"leases[{index}] must be a Lease, not {type(lease).__name__}")
        tokens.append(plain_lease(lease))
    return tokens


def plan_acks(state: State, leases: list[Lease], now: int) -> Plan:
    """The ack ops of `leases` (from `lease_tokens`) for one transaction: all or none. No leases: no ops.

    Each is judged as by `plan_ack`; the first stale one, or one whose task an
    earlier item acks, is `StaleLease` naming its index and task."""
    now = check_int(now, "now")
    planned: list[Op] = []
    seen: set[str] = set()
    for index, lease in enumerate(leases):
        try:
            task_id, generation = _owned_record_generation(state, _check_lease(lease), now)
        except StaleLease as error:
            raise StaleLease(f"leases[{index}]: {error}") from None
        if task_id in seen:
            raise StaleLease(f"leases[{index}]: task {task_id!r:.100} is listed twice (an earlier item acks it)")
        seen.add(task_id)
        planned.append({"op": "ack", "task": task_id, "generation": generation})
    return Plan(planned, [_ACK.encode(op) for op in planned])


def _with_error(state: State, op: Op, encoded: bytes, error: Error | None, now: int) -> Plan:
    """The plan of the settling `op` (its JSON `encoded`), preceded by the error op that records `error` at `now`.

    The error op comes first, while the task still has the status it
    explains, in the same transaction as `op`. The type and message are cut
    here, deterministically, to the stored bounds; an error that would not fit
    beside the task's payload (one within a few KiB of the frame bound) is
    cut further, to the bounds that fit beside any task.
    """
    if error is None:
        return Plan([op], [encoded])
    record: rows.Row = state.tasks[op["task"]]  # type: ignore[assignment]  # (a leased, ready or dead task)
    error_type, message = cut_text(error[0], ERROR_TYPE_BYTES), cut_text(error[1], ERROR_MESSAGE_BYTES)
    attempts = record[rows.ATTEMPTS]
    try:
        records.check_error_fits(record, (error_type, message, attempts, now))
    except ValueError:
        error_type = cut_text(error[0], TIGHT_ERROR_TYPE_BYTES)
        message = cut_text(error[1], TIGHT_ERROR_MESSAGE_BYTES)
    error_op: Op = {"op": "error", "task": op["task"], "type": error_type, "message": message, "at": now}
    extra = () if len(error) < 3 else traceback_op(record, (error_type, message, attempts, now), error[2])
    return Plan([error_op, *extra[:1], op], [_ERROR.encode(error_op), *extra[1:], encoded])


def plan_release(state: State, lease: Lease, now: int, delay: int = 0, error: Error | None = None) -> Plan:
    """The release op (ready again at ``now + delay``) of a lease that still owns its task, with `error` if any.

    `error` is what `validate.check_error` made of the caller's argument.
    """
    lease = _check_lease(lease)
    now = check_int(now, "now")
    delay = check_int(delay, "delay")
    if now + delay > MAX_INT:
        raise ValueError(f"now + delay exceeds {MAX_INT}")
    task_id, generation = _owned_record_generation(state, lease, now)
    op: Op = {"op": "release", "task": task_id, "generation": generation, "available_at": now + delay}
    return _with_error(state, op, _RELEASE.encode(op), error, now)


def plan_fail(state: State, lease: Lease, now: int, error: Error | None = None) -> Plan:
    """The fail op (dead at once, whatever its attempts) of a lease that still owns its task, with `error` if any."""
    lease = _check_lease(lease)
    now = check_int(now, "now")
    task_id, generation = _owned_record_generation(state, lease, now)
    op: Op = {"op": "fail", "task": task_id, "generation": generation}
    return _with_error(state, op, _FAIL.encode(op), error, now)


def plan_extend(state: State, lease: Lease, now: int, lease_seconds: int) -> Plan:
    """The one extend op of a lease that still owns its task: deadline ``now + lease_seconds``, capped at MAX_INT.

    Capped, not refused, as `plan_lease` caps a new lease's deadline.
    """
    lease = _check_lease(lease)
    now = check_int(now, "now")
    lease_seconds = check_int(lease_seconds, "lease_seconds", 1)
    task_id, generation = _owned_record_generation(state, lease, now)
    op: Op = {"op": "extend", "task": task_id, "generation": generation, "deadline": min(now + lease_seconds, MAX_INT)}
    return Plan([op], [_EXTEND.encode(op)])


def _record_in(state: State, task_id: object, kind: OpKind) -> str:
    """The stored id of `task_id`, if its task has a status `kind` starts from; else `WrongStatus`, writing nothing.

    The statuses are the op table's own (`OpKind.statuses`), which `apply`
    checks again: a planner restates no rule of the state machine.
    """
    task_id = check_name(task_id, "task_id")
    record = state.tasks.get(task_id)
    if record is None:
        raise WrongStatus(f"{kind.name}: unknown task {task_id!r:.100}")
    statuses = kind.statuses
    assert statuses is not None  # only kinds that take an existing task come here
    if (status := rows.status_of(record)) not in statuses:
        raise WrongStatus(f"{kind.name}: task {task_id!r:.100} is {status}, not {' or '.join(sorted(statuses))}")
    return records.view(record).task_id  # (the stored string)


def plan_redrive(state: State, task_id: str, available_at: int, extra_attempts: int = 1) -> Plan:
    """The one redrive op of a dead task: ready at `available_at`, with `extra_attempts` more attempts."""
    available_at = check_int(available_at, "available_at")
    extra_attempts = check_int(extra_attempts, "extra_attempts", 1)
    stored_id = _record_in(state, task_id, _REDRIVE)
    max_attempts = records.view(state.tasks[stored_id]).max_attempts + extra_attempts
    if max_attempts > MAX_INT:
        raise ValueError(f"max_attempts + extra_attempts exceeds {MAX_INT}")
    op: Op = {"op": "redrive", "task": stored_id, "available_at": available_at, "max_attempts": max_attempts}
    return Plan([op], [_REDRIVE.encode(op)])


def plan_cancel(state: State, task_id: str, error: Error | None = None, now: int | None = None) -> Plan:
    """The cancel op of a ready or leased task (it becomes dead; a holder's token is stale from then on).

    With `error` (the reason, as `validate.check_error` made it), `now` is
    required: the time the error records. Without one, `now` is checked if
    given, and unused.
    """
    if now is not None:
        now = check_int(now, "now")
    elif error is not None:
        raise TypeError("cancel with an error needs now, the time the error records")
    op: Op = {"op": "cancel", "task": _record_in(state, task_id, _CANCEL)}
    assert error is None or now is not None
    return _with_error(state, op, _CANCEL.encode(op), error, 0 if now is None else now)
