"""Building transactions from validated requests: pure planning, no I/O.

Like h2's "data to send", an operation here only *produces* ops; the
storage layer alone frames, writes and syncs them, and then hands the very
same transaction to `state.apply`. A planner reads the state and never
changes it, so a call refused here (bad arguments, `KeyConflict`,
`StaleLease`) has written nothing and changed nothing.

Every planner that may have to split or cut a transaction takes the frame
bound as a keyword (`max_frame_bytes`) so that tests can exercise splitting
with small bounds; the storage layer uses the default, `MAX_FRAME_BYTES`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from walqueue.engine.state import LEASED, OP_KEYS, EncodedPayload, State, identity_digest
from walqueue.engine.types import KeyConflict, Lease, StaleLease
from walqueue.engine.validate import (
    MAX_FRAME_BYTES,
    MAX_INT,
    MAX_NAME_BYTES,
    RECORD_WORST_CASE_EXTRA,
    check_int,
    check_name,
    check_payload,
    check_record_fits,
)
from walqueue.format.canonical import canonical_json, canonical_str

__all__ = [
    "lease_json",
    "lease_ops",
    "plan_ack",
    "plan_lease",
    "plan_put",
    "plan_puts",
    "plan_reap",
    "plan_release",
    "put_op",
    "put_op_from_mapping",
    "reap_ops",
    "settle_json",
    "transaction_body",
    "transaction_body_of",
    "transaction_size",
    "validate_reserve_args",
]

Op = dict[str, Any]

_TX_OPEN = len(b'{"ops":[')
_TX_MIDDLE = len(b'],"seq":')
_TX_CLOSE = len(b"}")

# Upper bounds of an op's canonical size, so that the usual transaction (a
# few ops, far below the frame bound) is never measured op by op: a name is
# at most 6 * MAX_NAME_BYTES + 2 bytes of JSON (every byte a \uXXXX escape,
# plus quotes) and an int at most 19 digits.
_NAME_JSON_MAX = 6 * MAX_NAME_BYTES + 2
_INT_MAX_DIGITS = len(str(MAX_INT))
_EXPIRE_OP_MAX = len(b'{"generation":,"op":"expire","task":}') + _INT_MAX_DIGITS + _NAME_JSON_MAX
_LEASE_OP_MAX_WITHOUT_WORKER = (
    len(b'{"deadline":,"generation":,"op":"lease","task":,"worker":}') + 2 * _INT_MAX_DIGITS + _NAME_JSON_MAX
)


#: A put op's canonical JSON with the values left out: available_at, the key's
#: and the payload's canonical JSON, max_attempts, the task id's canonical JSON.
_PUT_OP_JSON = b'{"available_at":%d,"key":%b,"max_attempts":%d,"op":"put","payload":%b,"task":%b}'


def put_op(
    task_id: object,
    payload: object,
    *,
    key: object = None,
    available_at: object = 0,
    max_attempts: object = 3,
) -> Op:
    """Validate the arguments of `Queue.put` (`TypeError`/`ValueError`) and build the put's op.

    A validated put is its op, as every planner's output is. Its payload is
    an `EncodedPayload`: the payload's canonical JSON (bytes, so the caller
    mutating its own dict afterwards changes nothing), the 32-byte identity
    digest that decides whether a retry is identical, and the op's own
    canonical JSON, spliced while those bytes are at hand so that framing
    the put encodes nothing. No request object stands between validation
    and the op: on a durable put every object and call layer costs more than
    its work (docs/PERFORMANCE.md, item 17).
    """
    task_id = check_name(task_id, "task_id")
    key = task_id if key is None else check_name(key, "key")
    payload_json = check_payload(payload)
    # The usual values pass the inline tests; the checks name the flaw of any other.
    if type(available_at) is not int or not 0 <= available_at <= MAX_INT:
        available_at = check_int(available_at, "available_at")
    if type(max_attempts) is not int or not 1 <= max_attempts <= MAX_INT:
        max_attempts = check_int(max_attempts, "max_attempts", 1)
    task_json = canonical_str(task_id)
    key_json = task_json if key == task_id else canonical_str(key)
    if len(payload_json) + len(task_json) + len(key_json) + RECORD_WORST_CASE_EXTRA > MAX_FRAME_BYTES:
        check_record_fits(payload_json, task_json, key_json)
    encoded = EncodedPayload(
        payload_json,
        identity_digest(task_json, payload_json, available_at, max_attempts),
        _PUT_OP_JSON % (available_at, key_json, max_attempts, payload_json, task_json),
    )
    return {
        "op": "put",
        "task": task_id,
        "key": key,
        "payload": encoded,
        "available_at": available_at,
        "max_attempts": max_attempts,
    }


_PUT_ARGUMENTS = frozenset({"task_id", "payload", "key", "available_at", "max_attempts"})


def put_op_from_mapping(item: object) -> Op:
    """Validate one `put_many` item: a mapping with exactly `put`'s keyword names.

    A missing `task_id` or `payload`, or any other key, is a `TypeError`,
    as the same mistake in a call to `put` would be.
    """
    if not isinstance(item, Mapping):
        raise TypeError(f"each put_many item must be a mapping, not {type(item).__name__}")
    # The usual item (a dict with no unknown key and both required ones) is
    # recognized at C speed; anything else is examined to name its flaw.
    if not (type(item) is dict and item.keys() <= _PUT_ARGUMENTS and "task_id" in item and "payload" in item):
        unknown = [name for name in item if name not in _PUT_ARGUMENTS]
        if unknown:
            raise TypeError(f"unexpected put argument(s) {sorted(map(repr, unknown))}")
        missing = [name for name in ("task_id", "payload") if name not in item]
        if missing:
            raise TypeError(f"put_many item lacks {', '.join(missing)}")
    return put_op(
        item["task_id"],
        item["payload"],
        key=item.get("key"),
        available_at=item.get("available_at", 0),
        max_attempts=item.get("max_attempts", 3),
    )


def plan_puts(state: State, put_ops: Iterable[Op]) -> tuple[list[Op], list[str]]:
    """The ops of `put_ops` (from `put_op`) that create a task, and the task id each names, in input order.

    Each put is judged against the state plus the earlier puts of the same
    list. A known key with the same identity is an identical retry (nothing
    to write, whatever the task's status: nothing is ever resurrected); a
    known key with another identity, or a new key with a known task id, is
    a `KeyConflict` that fails the whole list.
    """
    new: list[Op] = []
    task_ids: list[str] = []
    planned_keys: dict[str, bytes] = {}  # key -> identity, for the new tasks of this list
    planned_ids: set[str] = set()
    for index, op in enumerate(put_ops):
        encoded = _encoded_payload(op, "plan_puts")
        if _is_new(state, op, encoded.identity, planned_keys, planned_ids, index):
            planned_keys[op["key"]] = encoded.identity
            planned_ids.add(op["task"])
            new.append(op)
        task_ids.append(op["task"])
    return new, task_ids


def plan_put(state: State, op: Op) -> Op | None:
    """`plan_puts` of a single put (`Queue.put`): `op` itself, or ``None`` for an identical retry."""
    encoded = _encoded_payload(op, "plan_put")
    if state.lookup_key(op["key"]) is None and op["task"] not in state.tasks:
        return op  # the usual put: a new key and a new task id
    return op if _is_new(state, op, encoded.identity, {}, _NO_IDS, 0) else None


_NO_IDS: frozenset[str] = frozenset()


def _encoded_payload(op: object, planner: str) -> EncodedPayload:
    """The carrier of a put op built by `put_op`; `TypeError` for anything else."""
    if type(op) is not dict or op.get("op") != "put" or type(payload := op.get("payload")) is not EncodedPayload:
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
                " (task id, payload, available_at or max_attempts differ)"
            )
        return False
    if task_id in state.tasks or task_id in planned_ids:
        raise KeyConflict(f"item {index}: task {task_id!r:.100} already exists under another key")
    return True


def transaction_size(op_sizes: Iterable[int], seq: int) -> int:
    """The exact size of the body ``{"ops":[op,...],"seq":S}`` whose ops encode to `op_sizes` bytes."""
    count = 0
    total = 0
    for size in op_sizes:
        total += size
        count += 1
    return _TX_OPEN + total + max(count - 1, 0) + _TX_MIDDLE + len(str(seq)) + _TX_CLOSE


def _fixed_size(seq: int) -> int:
    """What a transaction body costs before its ops (and the commas between them)."""
    return _TX_OPEN + _TX_MIDDLE + len(str(seq)) + _TX_CLOSE


def plan_reap(state: State, now: int, first_seq: int, *, max_frame_bytes: int = MAX_FRAME_BYTES) -> list[list[Op]]:
    """Expire ops for every leased task with ``deadline <= now``, in (deadline, task id) order.

    Usually one transaction; split into consecutive ones (sequences
    `first_seq`, `first_seq + 1`, ...) only where one would exceed the frame
    bound. An empty list means nothing is overdue.
    """
    check_int(now, "now")
    check_int(first_seq, "first_seq", 1)
    return reap_ops(state, now, first_seq, max_frame_bytes=max_frame_bytes)


def reap_ops(state: State, now: int, first_seq: int, *, max_frame_bytes: int = MAX_FRAME_BYTES) -> list[list[Op]]:
    """`plan_reap` for arguments already checked: `Queue.reserve` checks them once, before its reap."""
    tasks = state.tasks
    expire_ops: list[Op] = [
        {"op": "expire", "task": task_id, "generation": tasks[task_id].generation}
        for task_id in state.peek_expired(now)
    ]
    if not expire_ops:
        return []
    if _fixed_size(first_seq) + len(expire_ops) * (_EXPIRE_OP_MAX + 1) <= max_frame_bytes:
        return [expire_ops]  # surely one frame: no need to measure
    transactions: list[list[Op]] = []
    current: list[Op] = []
    seq = first_seq
    size = _fixed_size(seq)
    for op in expire_ops:
        op_size = len(canonical_json(op))
        added = op_size + (1 if current else 0)
        if size + added > max_frame_bytes:
            if not current:
                raise ValueError(f"an expire op of {op_size} bytes cannot fit in a frame of {max_frame_bytes}")
            transactions.append(current)
            seq += 1
            if seq > MAX_INT:
                raise ValueError("sequence numbers exhausted")
            current = []
            size = _fixed_size(seq)
            added = op_size
            if size + added > max_frame_bytes:
                raise ValueError(f"an expire op of {op_size} bytes cannot fit in a frame of {max_frame_bytes}")
        current.append(op)
        size += added
    transactions.append(current)
    return transactions


def validate_reserve_args(worker: object, now: object, lease_seconds: object, limit: object) -> None:
    """Check `reserve`'s arguments before anything (the reap included) is written."""
    check_name(worker, "worker")
    if not (
        type(now) is int
        and type(lease_seconds) is int
        and type(limit) is int
        and 0 <= now <= MAX_INT
        and 1 <= lease_seconds <= MAX_INT
        and 1 <= limit <= MAX_INT
    ):  # the usual arguments pass this test; the checks name the flaw of any other
        now = check_int(now, "now")
        lease_seconds = check_int(lease_seconds, "lease_seconds", 1)
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
) -> list[Op]:
    """Lease ops for up to `limit` ready tasks with ``available_at <= now``, in (available_at, task id) order.

    Deadline ``now + lease_seconds``, or the end of time (`MAX_INT`) if
    that is sooner, generation one more than the task's.
    If all of them would not fit in one frame (as transaction `seq`), as
    many as fit, in that order. Call it after the reap has been applied: an
    expired task that became ready again is then eligible. An empty list
    means nothing is due.
    """
    validate_reserve_args(worker, now, lease_seconds, limit)
    check_int(seq, "seq", 1)
    return lease_ops(state, worker, now, lease_seconds, limit, seq, max_frame_bytes=max_frame_bytes)


# A lease op is at most this long whatever its worker (a checked name), and a
# transaction's own bytes at most this many whatever its sequence: enough to
# know, without encoding anything, that a usual lease transaction fits.
_LEASE_OP_WORST = _LEASE_OP_MAX_WITHOUT_WORKER + _NAME_JSON_MAX
_FIXED_WORST = _TX_OPEN + _TX_MIDDLE + _INT_MAX_DIGITS + _TX_CLOSE


def lease_ops(
    state: State,
    worker: str,
    now: int,
    lease_seconds: int,
    limit: int,
    seq: int,
    *,
    max_frame_bytes: int = MAX_FRAME_BYTES,
) -> list[Op]:
    """`plan_lease` for arguments already checked: `Queue.reserve` checks them once, before its reap.

    The deadline is capped at `MAX_INT`, not refused: `reserve(now=MAX_INT)`
    must be accepted so that it can reap every lease ever granted (a lease
    granted that late is then already due).
    """
    deadline = min(now + lease_seconds, MAX_INT)
    tasks = state.tasks
    planned: list[Op] = [
        {
            "op": "lease",
            "task": task_id,
            "worker": worker,
            "generation": tasks[task_id].generation + 1,
            "deadline": deadline,
        }
        for task_id in state.peek_ready(now, limit)
    ]
    if _FIXED_WORST + len(planned) * (_LEASE_OP_WORST + 1) <= max_frame_bytes:
        return planned  # surely one frame: no need to measure
    size = _fixed_size(seq)
    for count, op in enumerate(planned):
        added = len(canonical_json(op)) + (1 if count else 0)
        if size + added > max_frame_bytes:
            if not count:
                raise ValueError(f"a lease op of {added} bytes cannot fit in a frame of {max_frame_bytes}")
            return planned[:count]
        size += added
    return planned


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
    if record.status != LEASED:
        raise StaleLease(f"task {task_id!r:.100} is {record.status}, not leased")
    if record.worker != worker or record.generation != generation:
        raise StaleLease(f"task {task_id!r:.100} is leased to another worker or generation")
    assert record.deadline is not None
    if not now < record.deadline:
        raise StaleLease(f"task {task_id!r:.100}: the lease expired at {record.deadline} (now {now})")
    return record.task_id, record.generation


def plan_ack(state: State, lease: Lease, now: int) -> list[Op]:
    """The one ack op of a lease that still owns its task, else `StaleLease`."""
    lease = _check_lease(lease)
    if type(now) is not int or not 0 <= now <= MAX_INT:
        now = check_int(now, "now")
    task_id, generation = _owned_record_generation(state, lease, now)
    return [{"op": "ack", "task": task_id, "generation": generation}]


def plan_release(state: State, lease: Lease, now: int, delay: int = 0) -> list[Op]:
    """The one release op (ready again at ``now + delay``) of a lease that still owns its task."""
    lease = _check_lease(lease)
    now = check_int(now, "now")
    delay = check_int(delay, "delay")
    if now + delay > MAX_INT:
        raise ValueError(f"now + delay exceeds {MAX_INT}")
    task_id, generation = _owned_record_generation(state, lease, now)
    return [{"op": "release", "task": task_id, "generation": generation, "available_at": now + delay}]


def _put_json(op: Op) -> bytes | None:
    payload = op["payload"]
    available_at = op["available_at"]
    max_attempts = op["max_attempts"]
    key = op["key"]
    if type(payload) is EncodedPayload and type(available_at) is int and type(max_attempts) is int and type(key) is str:
        return _PUT_OP_JSON % (
            available_at,
            canonical_str(key),
            max_attempts,
            payload.canonical,
            canonical_str(op["task"]),
        )
    return None


def _lease_json(op: Op) -> bytes | None:
    deadline = op["deadline"]
    generation = op["generation"]
    worker = op["worker"]
    if type(deadline) is int and type(generation) is int and type(worker) is str:
        return b'{"deadline":%d,"generation":%d,"op":"lease","task":%b,"worker":%b}' % (
            deadline,
            generation,
            canonical_str(op["task"]),
            canonical_str(worker),
        )
    return None


def _settle_json(op: Op) -> bytes | None:
    """An ack or an expire op (the same keys; `_op_json` has checked the name)."""
    generation = op["generation"]
    if type(generation) is int:
        return b'{"generation":%d,"op":"%b","task":%b}' % (
            generation,
            op["op"].encode("ascii"),
            canonical_str(op["task"]),
        )
    return None


def _release_json(op: Op) -> bytes | None:
    available_at = op["available_at"]
    generation = op["generation"]
    if type(available_at) is int and type(generation) is int:
        return b'{"available_at":%d,"generation":%d,"op":"release","task":%b}' % (
            available_at,
            generation,
            canonical_str(op["task"]),
        )
    return None


#: op name -> its splicing encoder, which checks the value types and answers
#: None for anything but the planners' shape. Each reads every key of its op
#: kind besides ``op`` before it answers bytes: `_known_kind_json` relies on it.
_SPLICERS: dict[str, Callable[[Op], bytes | None]] = {
    "put": _put_json,
    "lease": _lease_json,
    "ack": _settle_json,
    "expire": _settle_json,
    "release": _release_json,
}


def _op_json(op: Op) -> bytes:
    """One op's canonical JSON, spliced from its fields where the op has the planners' exact shape.

    Keys appear in canonical (sorted) order; names go through
    `canonical_str`, ints through ``%d`` only when they are exact ints. Any
    other shape falls back to `canonical_json(op)`, so the result is always
    the op's canonical JSON (a property test checks every op kind).
    """
    kind = op.get("op")
    if type(kind) is not str or (splice := _SPLICERS.get(kind)) is None:
        return canonical_json(op)
    return _known_kind_json(op, len(OP_KEYS[kind]), (kind,), splice)


def lease_json(op: Op) -> bytes:
    """The canonical JSON of a lease op, for a caller that holds `lease_ops`' output.

    `transaction_body` first finds an op's encoder by its name;
    `Queue.reserve` knows what it holds and skips that dispatch
    (docs/PERFORMANCE.md, item 18). The result is always the op's canonical
    JSON (see `_known_kind_json`).
    """
    return _known_kind_json(op, len(OP_KEYS["lease"]), ("lease",), _lease_json)


def settle_json(op: Op) -> bytes:
    """`lease_json` for an ack or expire op (`plan_ack`'s and `reap_ops`' output)."""
    return _known_kind_json(op, len(OP_KEYS["ack"]), ("ack", "expire"), _settle_json)


def _known_kind_json(op: Op, size: int, kinds: tuple[str, ...], splice: Callable[[Op], bytes | None]) -> bytes:
    """`splice(op)` if `op` has exactly the keys of its kind, else `canonical_json(op)`.

    `size` keys, of which `splice` reads every one besides ``op`` (a missing
    one raises `KeyError`, which ends in the fallback), are exactly the
    kind's keys: no set of keys is built or compared.
    """
    try:
        if len(op) == size and op["op"] in kinds and type(op["task"]) is str:
            spliced = splice(op)
            if spliced is not None:
                return spliced
    except KeyError:
        pass
    return canonical_json(op)


def transaction_body(seq: int, ops: list[Op]) -> bytes:
    """The canonical JSON of ``{"seq": seq, "ops": ops}``, reusing put payloads' encoded bytes.

    Byte-identical to `canonical_json` of the transaction (a property test
    proves it); it only avoids encoding each payload a second time.
    """
    return transaction_body_of(seq, [_op_json(op) for op in ops])


def transaction_body_of(seq: int, op_json: Iterable[bytes]) -> bytes:
    """The canonical JSON of the transaction `seq` whose ops' canonical JSON is `op_json`, in order.

    For a planner that already holds its ops' bytes (a put's `EncodedPayload.op_json`).
    """
    return b'{"ops":[%b],"seq":%d}' % (b",".join(op_json), seq)
