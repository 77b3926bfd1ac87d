"""Loading a snapshot's records: the one acceptor of a record, and the indexes built around it.

Opening a store spends most of its time here, once per task, so the loop is
kept lean; but there is only one piece of code that accepts a record and
builds it, the body of `load_records`' loop (`record_from_dict` runs it for
one record), and every rule it applies raises its own error at the point it
is checked. There is no second, "full" path that could accept something
else.

Records are checked completely, including the invariants that the
transitions keep (``generation == attempts``; a ready task has attempts
left; a leased or completed one was leased at least once; a dead one may
have attempts left, since a cancel kills a task whatever its attempts),
and they must come in strictly increasing task-id order with unique keys, as
`State.iter_record_json` writes them. Nothing is normalized, so the loaded
state equals the state that was written.
"""

from __future__ import annotations

import heapq
import sys
from collections.abc import Iterable
from operator import itemgetter
from typing import NamedTuple

from walqueue.engine.gcpause import paused_gc
from walqueue.engine.lanes import Lane, Lanes
from walqueue.engine.records import InvalidTransaction, Record, last_error_member_size, tombstone_bytes, view
from walqueue.engine.rows import (
    COMPLETED,
    DEAD,
    DIGEST_BYTES,
    LEASED,
    READY,
    STATUSES,
    ErrorFields,
    HeapEntry,
    Stored,
    lane_key,
    with_traceback,
)
from walqueue.engine.taskmap import TaskMap
from walqueue.engine.validate import (
    DEFAULT_QUEUE,
    FITTING_PAYLOAD_BYTES,
    LAST_ERROR_ROOM,
    MAX_INT,
    check_error_message,
    check_error_type,
    check_int,
    check_last_error_fits,
    check_name,
    check_payload,
    check_priority,
    check_queue_name,
    check_record_fits,
    check_result,
    check_traceback,
)
from walqueue.format.canonical import canonical_str

__all__ = ["RECORD_FIELDS", "Loaded", "check_snapshot_seq", "load_records", "record_from_dict"]

#: The fields of a snapshot record (CONTRACT §3), in the order `_record_fields` returns them.
RECORD_FIELDS = (
    "task",
    "key",
    "identity",
    "status",
    "payload",
    "available_at",
    "max_attempts",
    "attempts",
    "generation",
    "worker",
    "deadline",
)
#: A record may also hold ``last_error``, ``queue`` and ``priority`` (each omitted at its default),
#: which `_record_fields` does not fetch.
_RECORD_KEYS = frozenset(RECORD_FIELDS)
#: Every field of a record, fetched in one C call. A dict of exactly `len(RECORD_FIELDS)` items
#: that holds all of them has exactly these keys, so the fetch also settles the key set.
_record_fields = itemgetter(*RECORD_FIELDS)
_RECORD_FIELD_COUNT = len(RECORD_FIELDS)

#: A decoded status string -> the module's constant: a loaded task shares one status string with
#: every other task (instead of keeping the decoder's copy), and `==` against the constants stops
#: at identity.
_STATUS_CONSTANTS: dict[str, str] = {status: status for status in STATUSES}


def _digest_from_hex(identity: object) -> bytes:
    """The 32 bytes written as `identity`: exactly 64 lowercase hex digits, nothing else.

    `bytes.fromhex` alone would also take uppercase digits and spaces; the
    digest encoding back to the very same text rules those out.
    """
    if type(identity) is str and len(identity) == 2 * DIGEST_BYTES:
        try:
            digest = bytes.fromhex(identity)
        except ValueError:
            pass
        else:
            if digest.hex() == identity:
                return digest
    raise ValueError(f"identity must be 64 lowercase hex digits, not {identity!r:.80}")


def _counter_flaw(available_at: object, max_attempts: object, attempts: object, generation: object) -> Exception:
    """The error that names why a record's counters failed `_accept`'s test (which only then calls this)."""
    try:
        check_int(available_at, "available_at")
        check_int(max_attempts, "max_attempts", 1)
        check_int(attempts, "attempts")
        check_int(generation, "generation")
    except (TypeError, ValueError) as exc:
        return exc
    if generation != attempts:
        return ValueError(f"generation {generation} differs from attempts {attempts}")
    if attempts > max_attempts:  # type: ignore[operator]  # all four are checked ints by now
        return ValueError(f"attempts {attempts} exceed max_attempts {max_attempts}")
    raise AssertionError("counters refused without a flaw")  # pragma: no cover - the two tests disagree


_LAST_ERROR_KEYS = frozenset({"type", "message", "attempt", "at"})
#: A record without the ``last_error`` key (it is never written as null: one state, one encoding).
_ABSENT = object()


def _last_error(
    value: object, traceback: object, status: str, attempts: int, payload_json: bytes, task_id: str, key: str
) -> tuple[ErrorFields, str | None]:
    """A record's ``last_error``, checked as the error op's transition checks it; `TypeError`/`ValueError` if flawed.

    The key is absent when a task has no last error (never null), and a
    completed task never has one (the ack drops it with the payload). `traceback`: the record's
    ``traceback`` key (a format extension, only beside a last error), `_ABSENT` when it has none.
    """
    if status is COMPLETED:
        raise ValueError("a completed task has no last_error")
    if type(value) is not dict or value.keys() != _LAST_ERROR_KEYS:
        raise ValueError(f"last_error must be an object with exactly the keys {sorted(_LAST_ERROR_KEYS)}")
    attempt = check_int(value["attempt"], "last_error attempt")
    if attempt > attempts:
        raise ValueError(f"last_error attempt {attempt} exceeds the task's attempts {attempts}")
    fields = (
        check_error_type(value["type"], "last_error type"),
        check_error_message(value["message"], "last_error message"),
        attempt,
        check_int(value["at"], "last_error at"),
    )
    text = None if traceback is _ABSENT else check_traceback(traceback, "traceback")
    size = last_error_member_size(fields, text)
    if size > LAST_ERROR_ROOM:
        task_json = canonical_str(task_id)
        check_last_error_fits(payload_json, task_json, task_json if key is task_id else canonical_str(key), size)
    return fields, text


def record_from_dict(value: object, *, decoded: bool = False) -> Record:  # (a view of what the state stores)
    """Check one decoded snapshot record completely and build it (`load_records` of that record alone).

    A `ValueError` (`InvalidTransaction`) names any flaw.
    """
    (record,) = load_records((value,), decoded=decoded).tasks.values()
    return view(record)


class Loaded(NamedTuple):
    """What a snapshot's records make: the pieces of a `State` (state.py assembles them)."""

    tasks: dict[str, Stored]
    key_owner: dict[str, str]
    ready: list[HeapEntry]
    leases: list[HeapEntry]
    counts: dict[str, int]
    #: The ids of the dead tasks.
    dead: set[str]
    #: Completed tasks' stored results, b"<expires> <JSON>" (a record's optional ``result``).
    results: dict[str, bytes] = {}  # noqa: RUF012 - a NamedTuple's default, never mutated
    #: Every queue and lane (`ready` is the default lane's heap); None: a state without lanes built.
    lanes: Lanes | None = None


_RESULT_KEYS = frozenset({"expires", "value"})


def _result(value: object, status: str) -> bytes:
    """A completed record's ``result`` ({"expires": E, "value": V}) as the state keeps it: b"<E> <JSON of V>"."""
    if status is not COMPLETED:
        raise ValueError(f"a {status} task has no result")
    if type(value) is not dict or value.keys() != _RESULT_KEYS:
        raise ValueError(f"result must be an object with exactly the keys {sorted(_RESULT_KEYS)}")
    return b"%d %b" % (check_int(value["expires"], "result expires"), check_result(value["value"], True))


def load_records(records: Iterable[object], *, decoded: bool = False) -> Loaded:
    """Accept every record of a snapshot, in order, and build the indexes; `InvalidTransaction` on any flaw.

    The loop body is the one acceptor of a record: it checks every field and
    invariant, raising `TypeError`/`ValueError` at the first flaw (turned
    into `InvalidTransaction` naming the record), and builds the record.

    WARNING: this function is longer than the house's 80 lines on purpose.
    The loop body is inline, not a function per record, because opening a
    store runs it once per task and a call per record costs a visible share
    of the snapshot load (docs/PERFORMANCE.md, bench (e), the load rate
    target); split it only with a measurement that shows no loss. `decoded=True`
    says the values came straight from the JSON decoder, so payloads are
    checked as `check_payload(decoded=True)` does. A key equal to the task
    id is stored as the task id's own string, and the status as the
    module's constant: the decoder's separate copies would cost memory for
    as long as the task lives.

    A lanes store's usual record holds one optional member, a queue whose
    name an earlier record introduced: it takes a short path, one lookup by
    the name, to that queue's shared name and its priority 0 lane; every
    other record's optional members go through `_optional_members` (the
    tests hold the two to the same result, tests/engine/test_snapshot_load_lanes.py).

    The cyclic GC is paused while the records are built (and decoded, when
    `records` streams from a reader): a load allocates several tracked
    objects per task and frees none of them, so the collections they would
    trigger only walk the growing state again and again (`gcpause`).
    """
    tasks: dict[str, Stored] = TaskMap()  # as State keeps it (taskmap.py)
    key_owner: dict[str, str] = {}
    ready: list[HeapEntry] = []
    leases: list[HeapEntry] = []
    counts = dict.fromkeys(STATUSES, 0)
    dead: set[str] = set()
    results: dict[str, bytes] = {}
    lanes = Lanes()
    ready = lanes.default_lane.heap
    known_lanes: dict[str, Lane] = {}  # a checked queue name -> its priority 0 lane (its queue: the shared name)
    other_lanes: dict[tuple[str, int], list[HeapEntry]] = {}  # (queue, priority) -> its lane's heap
    default_lane = lanes.default_lane
    ready_at = 0  # the last ready record's available_at: while they never decrease, every heap is in order
    in_order = True
    previous: str | None = None
    record: Stored
    entry: HeapEntry = (0, "")
    with paused_gc():
        for index, value in enumerate(records):
            try:
                if type(value) is not dict:
                    raise TypeError(f"a record must be a JSON object, not {type(value).__name__}")
                try:
                    stored_error: object = _ABSENT
                    stored_traceback: object = _ABSENT
                    stored_result: object = _ABSENT
                    queue: str = DEFAULT_QUEUE
                    priority = 0
                    lane: Lane | None = default_lane  # None: the lane is looked up by (queue, priority)
                    if (size := len(value)) != _RECORD_FIELD_COUNT:
                        # A lanes store's usual record: only a queue, one already seen (one get, one lookup).
                        name = value.get("queue") if size == _QUEUE_ONLY_FIELD_COUNT else None
                        lane = known_lanes.get(name) if type(name) is str else None
                        if lane is not None:
                            queue = lane.queue.name
                        else:
                            stored_error, stored_traceback, stored_result, queue, priority = _optional_members(
                                value, known_lanes, lanes
                            )
                    (
                        task_id,
                        key,
                        identity,
                        status,
                        payload,
                        available_at,
                        max_attempts,
                        attempts,
                        generation,
                        worker,
                        deadline,
                    ) = _record_fields(value)
                except KeyError:
                    raise ValueError(
                        f"record keys must be exactly {sorted(_RECORD_KEYS)} (and last_error or result, if any;"
                        f" a last_error with its traceback; queue, priority), not {sorted(map(str, value))}"
                    ) from None
                check_name(task_id, "task")
                if type(key) is str and key == task_id:
                    key = task_id
                else:
                    check_name(key, "key")
                digest = _digest_from_hex(identity)
                status = _STATUS_CONSTANTS.get(status) if type(status) is str else None
                if status is None:
                    raise ValueError(f"status must be one of {STATUSES}, not {value['status']!r:.80}")
                # The counters and the invariants every sequence of transitions keeps between them (see
                # opkinds.py's table), in one test; `_counter_flaw` names what is wrong only once it failed.
                if not (
                    type(available_at) is int
                    and type(max_attempts) is int
                    and type(attempts) is int
                    and type(generation) is int
                    and 0 <= available_at <= MAX_INT
                    and 0 <= attempts == generation <= max_attempts <= MAX_INT
                    and max_attempts >= 1
                ):
                    raise _counter_flaw(available_at, max_attempts, attempts, generation)
                if status is LEASED:
                    check_name(worker, "worker")
                    check_int(deadline, "deadline")
                elif worker is not None or deadline is not None:
                    raise ValueError(f"a {status} task has no worker and no deadline")
                if status is COMPLETED:
                    if payload is not None:
                        raise ValueError("a completed task's payload must be null")
                    payload_json = b""
                else:
                    payload_json = check_payload(payload, decoded)
                    if len(payload_json) > FITTING_PAYLOAD_BYTES:
                        task_json = canonical_str(task_id)
                        check_record_fits(payload_json, task_json, task_json if key is task_id else canonical_str(key))
                # What the status adds to those invariants.
                if status is READY:
                    if attempts >= max_attempts:
                        raise ValueError("a ready task has no attempts left")
                elif status is not DEAD and attempts < 1:
                    raise ValueError(f"a {status} task was never leased")
                last_error, traceback = (
                    (None, None)
                    if stored_error is _ABSENT
                    else _last_error(stored_error, stored_traceback, status, attempts, payload_json, task_id, key)
                )
                if stored_result is not _ABSENT:
                    results[task_id] = _result(stored_result, status)
                if status is COMPLETED:
                    counters = (available_at, max_attempts, attempts, generation)
                    record = tombstone_bytes(task_id, key, digest, counters, queue, priority)
                else:  # a row (records.new_row's layout, inlined: one call less per record)
                    entry = (available_at, task_id) if status is READY else (deadline, task_id)
                    record = (
                        task_id, key, status, digest + payload_json, available_at, max_attempts, attempts, worker,
                        deadline, with_traceback(last_error, traceback), None if status is DEAD else entry,
                    )  # fmt: skip
                    if queue is not DEFAULT_QUEUE or priority != 0:
                        record += (lane_key(queue, priority) if lane is None else lane.key,)
            except (TypeError, ValueError) as exc:
                raise InvalidTransaction(f"snapshot record {index}: {exc}") from None
            if previous is not None and not previous < task_id:
                raise InvalidTransaction(f"snapshot record {index}: task {task_id!r:.100} is out of task-id order")
            previous = task_id
            if key != task_id:
                if key in key_owner or (key in tasks and view(tasks[key]).key == key):
                    raise InvalidTransaction(f"snapshot record {index}: key {key!r:.100} is repeated")
                key_owner[key] = task_id
            elif task_id in key_owner:
                raise InvalidTransaction(f"snapshot record {index}: key {key!r:.100} is repeated")
            tasks[task_id] = record
            counts[status] += 1
            if status is DEAD:
                dead.add(task_id)
            if status is not READY and queue is not DEFAULT_QUEUE:  # ready ones: counted by `_settle_lanes`
                lanes.queues[queue].counts[status] += 1  # (a shared string: no copy per task)
            if status is READY:
                if available_at < ready_at:
                    in_order = False
                ready_at = available_at
                if lane is not None:
                    lane.heap.append(entry)
                else:
                    (other_lanes.get((queue, priority)) or _lane_heap(lanes, other_lanes, queue, priority)).append(
                        entry
                    )
            elif status is LEASED:
                leases.append(entry)
    heapq.heapify(leases)
    _settle_lanes(lanes, counts, in_order)
    return Loaded(tasks, key_owner, ready, leases, counts, dead, results, lanes)


# -- decoding a record's optional members and placing it in its lane (lanes) -------------------------------
#: A record holding the fields and one optional member, which the loop first tries as a known queue's name.
_QUEUE_ONLY_FIELD_COUNT = _RECORD_FIELD_COUNT + 1


def _optional_members(
    value: dict[str, object], known_lanes: dict[str, Lane], lanes: Lanes
) -> tuple[object, object, object, str, int]:
    """A record's optional members: (last_error, traceback, result, queue, priority), each `_ABSENT` or default.

    `KeyError` if the record holds a key that is neither a field nor one of
    these (the loop reports the key set), or a traceback without its last
    error. The loop's fast path (a record whose one optional member names a
    queue already seen) gives exactly what this gives for it.
    """
    # Counted without building a set (a lanes store has them on most records).
    stored_error = value.get("last_error", _ABSENT)
    stored_traceback = value.get("traceback", _ABSENT)
    stored_result = value.get("result", _ABSENT)
    name = value.get("queue", _ABSENT)
    given = value.get("priority", _ABSENT)
    optional = (
        (stored_error is not _ABSENT)
        + (stored_traceback is not _ABSENT)
        + (stored_result is not _ABSENT)
        + (name is not _ABSENT)
        + (given is not _ABSENT)
    )
    if len(value) != _RECORD_FIELD_COUNT + optional:
        raise KeyError
    if stored_traceback is not _ABSENT and stored_error is _ABSENT:
        raise KeyError  # a traceback belongs to a last error
    queue = DEFAULT_QUEUE
    if name is not _ABSENT:
        lane = known_lanes.get(name) if type(name) is str else None
        queue = lane.queue.name if lane is not None else _queue(name, known_lanes, lanes)
    return stored_error, stored_traceback, stored_result, queue, 0 if given is _ABSENT else _priority(given)


def _queue(name: object, known_lanes: dict[str, Lane], lanes: Lanes) -> str:
    """A record's queue name seen for the first time: checked, never the default (omitted), then shared.

    Its queue and its priority 0 lane are made now, so that the loop's fast
    path finds the lane by the name (a lane may stay empty, as one whose
    tasks all left it does).
    """
    checked = check_queue_name(name)
    if checked == DEFAULT_QUEUE:
        raise ValueError("queue is omitted at its default 'default', never written")
    shared = sys.intern(checked)
    known_lanes[shared] = lanes.lane(lanes.queue(shared), 0)
    return shared


def _lane_heap(
    lanes: Lanes, heaps: dict[tuple[str, int], list[HeapEntry]], queue: str, priority: int
) -> list[HeapEntry]:
    """The heap of lane (queue, priority) for a record the loop's fast path did not place, kept in `heaps`."""
    heap = heaps[queue, priority] = lanes.lane(lanes.queue(queue), priority).heap
    return heap


def _priority(value: object) -> int:
    """A record's priority: present only when it is not the default 0."""
    if check_priority(value) == 0:
        raise ValueError("priority is omitted at its default 0, never written")
    return value  # type: ignore[return-value]  # checked: an int


def _settle_lanes(lanes: Lanes, counts: dict[str, int], in_order: bool) -> None:
    """Heapify every lane (unless `in_order`), count its live entries and the queues' ready tasks, seat the lanes.

    `in_order`: the ready records' available_at never decreased. Their task
    ids strictly increase, so each lane's entries were appended in strictly
    increasing (available_at, task id) order: a sorted list is already a
    heap (a store whose tasks are due at once, or put in the order of their
    ids, skips the heapify).

    The loop counted the other queues' tasks in every status but ready: a
    lane's heap holds exactly its ready tasks here, so their sum is the
    queue's ready count (one addition per lane, not one per task). The
    default queue's counts are the rest of the store's.
    """
    others = [q for q in lanes.queues.values() if q is not lanes.default]
    for q in others:
        q.counts[READY] = sum(len(lane.heap) for lane in q.lanes.values())
    default = lanes.default.counts
    for status in STATUSES:
        default[status] = counts[status] - sum(q.counts[status] for q in others)
    for q in lanes.queues.values():
        for lane in q.lanes.values():
            if not in_order:
                heapq.heapify(lane.heap)
            lane.live = len(lane.heap)
            if lane.heap:
                lanes.place(lane, lane.heap[0][0], lane.heap[0][1])


def check_snapshot_seq(seq: object) -> int:
    """The snapshot's sequence, if it is an int in 0..MAX_INT; `InvalidTransaction` otherwise."""
    try:
        return check_int(seq, "snapshot sequence")
    except (TypeError, ValueError) as exc:
        raise InvalidTransaction(str(exc)) from None
