"""Loading snapshot records (`State.from_records`): the one acceptor against the rules, stated plainly.

`snapshot_load.record_from_dict` is the only code that accepts a snapshot
record and builds it; `from_records` calls it for every record and adds the
bookkeeping (order, unique keys, heaps, counts, the paused GC). These tests
hold the acceptor to `reference_outcome`, an independent, deliberately
plain statement of CONTRACT §3's record and the transitions' invariants:

- the acceptor accepts exactly what the rules allow, record by record, on
  valid and on damaged records, with Python values and with values
  straight from the JSON decoder (``decoded=True``), and builds the very
  record the rules describe;
- `from_records` accepts exactly what the acceptor accepts;
- the bookkeeping around it is right for every valid snapshot;
- a record's optional ``last_error`` is held to the same rules.
"""

from __future__ import annotations

import gc
import hashlib
import heapq
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walqueue.engine.records import view
from walqueue.engine.snapshot_load import RECORD_FIELDS, record_from_dict
from walqueue.engine.state import (
    COMPLETED,
    DEAD,
    LEASED,
    READY,
    STATUSES,
    InvalidTransaction,
    Record,
    State,
    TaskRecord,
    Tombstone,
)
from walqueue.engine.validate import (
    ERROR_MESSAGE_BYTES,
    ERROR_TYPE_BYTES,
    FITTING_PAYLOAD_BYTES,
    MAX_FRAME_BYTES,
    MAX_INT,
    MAX_NAME_BYTES,
    RECORD_WORST_CASE_EXTRA,
    TRACEBACK_BYTES,
    check_payload,
)
from walqueue.format.canonical import canonical_json

SETTINGS = settings(max_examples=300, deadline=None)

# -- records -------------------------------------------------------------------------------

#: Names: short ones of any storable character (control characters, quotes, non-ASCII, astral),
#: and some at and around the UTF-8 bound, ASCII and not.
names = (
    st.text(st.characters(codec="utf-8"), min_size=1, max_size=8)
    | st.text(alphabet='a\x00"é', min_size=1, max_size=4)
    | st.sampled_from(
        [
            "x" * MAX_NAME_BYTES,
            "\x01" * MAX_NAME_BYTES,
            "é" * (MAX_NAME_BYTES // 2),
            "😀" * (MAX_NAME_BYTES // 4),
            "€" * (MAX_NAME_BYTES // 3),
        ]
    )
)
counters = st.integers(0, 5) | st.sampled_from([MAX_INT - 1, MAX_INT])
scalars = st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False, allow_infinity=False)
json_values = st.recursive(
    scalars | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)
payloads = st.dictionaries(st.text(max_size=4), json_values, max_size=4)


@st.composite
def valid_records(draw: st.DrawFn, status: str | None = None) -> dict[str, Any]:
    """A record that the rules allow, in any status (or the one given)."""
    status = draw(st.sampled_from(STATUSES)) if status is None else status
    task_id = draw(names)
    key = draw(st.none() | names)
    max_attempts = draw(st.integers(1, 4) | st.sampled_from([MAX_INT]))
    if status == READY:
        attempts = draw(st.integers(0, min(max_attempts - 1, 5)))
    elif status == DEAD:  # spent (expired, released) or cancelled at any count
        attempts = draw(st.just(max_attempts) | st.integers(0, min(max_attempts, 5)))
    else:
        attempts = draw(st.integers(1, min(max_attempts, 5)) | st.just(max_attempts))
    leased = status == LEASED
    record = {
        "task": task_id,
        "key": task_id if key is None else key,
        "identity": draw(st.binary(min_size=32, max_size=32)).hex(),
        "status": status,
        "payload": None if status == COMPLETED else draw(payloads),
        "available_at": draw(counters),
        "max_attempts": max_attempts,
        "attempts": attempts,
        "generation": attempts,
        "worker": draw(names) if leased else None,
        "deadline": draw(counters) if leased else None,
    }
    if draw(st.booleans()):  # a lane other than the default (lanes): each key only where it differs
        record["queue"] = draw(st.sampled_from(["emails", "bulk", "a.b:c-d_e"]))
    if draw(st.booleans()):
        record["priority"] = draw(st.sampled_from([1, -100, 100]))
    if status != COMPLETED and draw(st.booleans()):
        record["last_error"] = {
            "type": draw(error_types),
            "message": draw(error_messages),
            "attempt": draw(st.integers(0, attempts)),
            "at": draw(counters),
        }
    return record


error_types = names.filter(lambda name: len(name.encode("utf-8")) <= ERROR_TYPE_BYTES)
error_messages = st.text(st.characters(codec="utf-8"), max_size=8) | st.sampled_from(
    ["", "\x01" * ERROR_MESSAGE_BYTES, "é" * (ERROR_MESSAGE_BYTES // 2)]
)


#: Values that break some field of a record, and some that are valid in another field or status.
#: All are JSON, so they also reach `from_records` through the decoder.
NASTY: list[Any] = [
    None,
    True,
    False,
    0,
    1,
    -1,
    3,
    MAX_INT,
    MAX_INT + 1,
    2**64,
    -(2**63),
    0.0,
    1.0,
    1e300,
    "",
    "x",
    "w",
    "ready",
    "leased",
    "completed",
    "dead",
    "Ready",
    "ready ",
    "a" * 64,
    "A" * 64,
    "0" * 64,
    "a" * 63,
    "a" * 65,
    "ab" * 30 + " ab ",
    "g" * 64,
    "é" * 64,
    "\ud800",
    "ok\udfff",
    "x" * (MAX_NAME_BYTES + 1),
    "é" * (MAX_NAME_BYTES // 2 + 1),
    "€" * (MAX_NAME_BYTES // 3 + 1),
    "😀" * (MAX_NAME_BYTES // 4 + 1),
    [],
    [1],
    {},
    {"a": 1},
    {"a": [{"b": None}]},
    {"a": "\ud800"},
    {"deep": json.loads("[" * 70 + "]" * 70)},
]


class _PyStr(str):
    """A str subclass: equal to a valid value, never stored (exact types only)."""


class _PyInt(int):
    """An int subclass: likewise."""


#: Python values the decoder never builds (for ``decoded=False`` only).
PYTHON_ONLY: list[Any] = [
    _PyStr("ready"),
    _PyStr("t"),
    _PyStr("a" * 64),
    _PyInt(1),
    (1,),
    b"a" * 64,
    float("nan"),
    float("inf"),
    {"a": (1, 2)},
    {1: "a"},
    {"a": float("nan")},
    {"big": 2**15000},
]

FIELDS = sorted(RECORD_FIELDS)
#: The fields a damaged record may have changed or dropped: the eleven and the optional last error.
ANY_FIELDS = [*FIELDS, "last_error"]


#: For each field, values just outside what it may hold (or valid only in another status): a damaged
#: record most often misses by one rule, which is where an acceptor that skipped a check would show.
NAME_MISSES: list[Any] = ["", "\ud800", "x" * (MAX_NAME_BYTES + 1), "😀" * (MAX_NAME_BYTES // 4 + 1), 1, None]
COUNTER_MISSES: list[Any] = [-1, MAX_INT + 1, True, False, 1.0, "1", None, 0, 1, 2, 3, MAX_INT]
NEAR_MISSES: dict[str, list[Any]] = {
    "task": NAME_MISSES,
    "key": NAME_MISSES,
    "worker": [*NAME_MISSES, "w"],
    "identity": ["A" * 64, "aB" * 32, "a" * 63, "a" * 65, "ab" * 30 + " ab ", "g" * 64, "é" * 64, None, 0],
    "status": ["Ready", "ready ", "waiting", "", None, 1, *STATUSES],
    "payload": [None, [], [1], "{}", 1, {"x": json.loads("[" * 70 + "]" * 70)}, {"x": "\ud800"}, {}],
    "available_at": COUNTER_MISSES,
    "max_attempts": COUNTER_MISSES,
    "attempts": COUNTER_MISSES,
    "generation": COUNTER_MISSES,
    "deadline": COUNTER_MISSES,
    "last_error": [
        None,
        {},
        [],
        "x",
        {"type": "E", "message": "m", "attempt": 0},
        {"type": "E", "message": "m", "attempt": 0, "at": 0, "extra": 1},
        {"type": "E", "message": "m", "attempt": 0, "at": 0, "traceback": "in the error: not its place"},
        {"type": "", "message": "m", "attempt": 0, "at": 0},
        {"type": "x" * (ERROR_TYPE_BYTES + 1), "message": "m", "attempt": 0, "at": 0},
        {"type": "E", "message": "é" * (ERROR_MESSAGE_BYTES // 2 + 1), "attempt": 0, "at": 0},
        {"type": "E", "message": "\ud800", "attempt": 0, "at": 0},
        {"type": "E", "message": None, "attempt": 0, "at": 0},
        {"type": 1, "message": "m", "attempt": 0, "at": 0},
        {"type": "E", "message": "m", "attempt": -1, "at": 0},
        {"type": "E", "message": "m", "attempt": True, "at": 0},
        {"type": "E", "message": "m", "attempt": 4, "at": 0},
        {"type": "E", "message": "m", "attempt": 0, "at": MAX_INT + 1},
        {"type": "E", "message": "m", "attempt": 0, "at": 1.0},
        {"type": "E", "message": "m", "attempt": 1, "at": MAX_INT},
        {"type": "E" * ERROR_TYPE_BYTES, "message": "\x01" * ERROR_MESSAGE_BYTES, "attempt": 0, "at": 0},
    ],
}
#: Python values the decoder never builds, likewise (``decoded=False`` only).
PYTHON_MISSES: dict[str, list[Any]] = {
    "task": [_PyStr("t")],
    "key": [_PyStr("t")],
    "worker": [_PyStr("w")],
    "identity": [_PyStr("ab" * 32), b"a" * 64],
    "status": [_PyStr(status) for status in STATUSES],
    "payload": [{"a": (1, 2)}, {1: "a"}, {"a": float("nan")}, {"big": 2**15000}, {"s": _PyStr("s")}],
    "available_at": [_PyInt(1), float("inf")],
    "max_attempts": [_PyInt(3)],
    "attempts": [_PyInt(1)],
    "generation": [_PyInt(1)],
    "deadline": [_PyInt(9)],
    "last_error": [
        {"type": _PyStr("E"), "message": "m", "attempt": 0, "at": 0},
        {"type": "E", "message": "m", "attempt": _PyInt(0), "at": 0},
        {"type": "E", "message": "m", "attempt": 0, "at": 0, 1: 2},
    ],
}


@st.composite
def damaged_records(draw: st.DrawFn, python_values: bool) -> Any:
    """A valid record with one to three changes.

    A field gets a near miss (or any value at all), the counters move
    together (breaking only the invariants between them and the status),
    the status changes alone, a field goes missing or one is added, or the
    record is not a dict at all.
    """
    record: Any = draw(valid_records())
    nasty = st.sampled_from(NASTY + PYTHON_ONLY if python_values else NASTY)
    kinds = ["near miss"] * 4 + ["counters", "counters", "status", "lane", "any value", "drop", "add", "shape"]
    for _ in range(draw(st.sampled_from([1, 1, 2, 3]))):
        if not isinstance(record, dict):
            break
        change = draw(st.sampled_from(kinds))
        if change == "near miss":
            field = draw(st.sampled_from(ANY_FIELDS))
            misses = NEAR_MISSES[field] + (PYTHON_MISSES[field] if python_values else [])
            record[field] = draw(st.sampled_from(misses))
        elif change == "counters":
            attempts = draw(st.integers(0, 4))
            record["attempts"] = attempts
            record["generation"] = draw(st.just(attempts) | st.integers(0, 4))
            record["max_attempts"] = draw(st.integers(0, 4))
        elif change == "status":
            record["status"] = draw(st.sampled_from(STATUSES))
        elif change == "lane":  # a default written out, or a value out of the rules
            record["queue"] = draw(st.sampled_from(["default", "", "a,b", "-a", "q" * 65, 1, None, "emails"]))
            record["priority"] = draw(st.sampled_from([0, 101, -101, True, 2.0, None, 5]))
        elif change == "any value":
            record[draw(st.sampled_from(ANY_FIELDS))] = draw(nasty | json_values)
        elif change == "drop":
            record.pop(draw(st.sampled_from(ANY_FIELDS)), None)
        elif change == "add":
            record[draw(st.sampled_from(["extra", "Task", "tasks"]))] = draw(nasty)
        else:
            record = draw(st.sampled_from([[], [record], "record", None, 1]))
    return record


def decoded(value: Any) -> Any:
    """`value` as the JSON decoder gives it back (lone surrogates travel as escapes)."""
    return json.loads(json.dumps(value))


# -- outcomes ----------------------------------------------------------------------------


def fields_of(record: Record) -> tuple[Any, ...]:
    return (type(record), record.fields())


def _is_name(value: Any) -> bool:
    if type(value) is not str:
        return False
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        return False
    return 1 <= size <= MAX_NAME_BYTES


def _is_int(value: Any, minimum: int = 0) -> bool:
    return type(value) is int and minimum <= value <= MAX_INT


def reference_outcome(value: Any, is_decoded: bool) -> tuple[Any, ...] | None:
    """What the rules make of `value`: the record's type and fields, or None when they refuse it.

    Written for clarity, not speed, and sharing no code with the engine's
    acceptor but `check_payload` (a payload's rule, tested on its own).
    """
    lane = _reference_lane(value)
    if lane is None:
        return None
    if type(value) is dict:
        value = {name: item for name, item in value.items() if name not in ("queue", "priority")}
    if type(value) is not dict or sorted(value) not in (FIELDS, sorted(ANY_FIELDS), sorted([*ANY_FIELDS, "traceback"])):
        return None
    task_id, key, identity, status = value["task"], value["key"], value["identity"], value["status"]
    attempts, generation, max_attempts = value["attempts"], value["generation"], value["max_attempts"]
    worker, deadline, payload = value["worker"], value["deadline"], value["payload"]
    if not (_is_name(task_id) and _is_name(key)):
        return None
    if not (type(identity) is str and len(identity) == 64 and set(identity) <= set("0123456789abcdef")):
        return None
    if type(status) is not str or status not in STATUSES:
        return None
    if not (_is_int(value["available_at"]) and _is_int(max_attempts, 1) and _is_int(attempts) and _is_int(generation)):
        return None
    if status == LEASED:
        if not (_is_name(worker) and _is_int(deadline)):
            return None
    elif worker is not None or deadline is not None:
        return None
    if generation != attempts or attempts > max_attempts:
        return None
    if status == READY and attempts >= max_attempts:
        return None
    if status in (LEASED, COMPLETED) and attempts < 1:
        return None
    digest = bytes.fromhex(identity)
    if status == COMPLETED:
        if payload is not None:
            return None
        stored = digest
    else:
        try:
            payload_json = check_payload(payload)
        except (TypeError, ValueError):
            return None
        names = len(canonical_json(task_id)) + len(canonical_json(key))
        if len(payload_json) + names + RECORD_WORST_CASE_EXTRA > MAX_FRAME_BYTES:
            return None
        stored = digest + payload_json
    last_error = traceback = None
    if "last_error" in value:
        last_error = _reference_last_error(value["last_error"], status, attempts)
        if last_error is None:
            return None
        traceback = value.get("traceback")  # a format extension: never null when present
        if "traceback" in value and not _is_text(traceback, 0, TRACEBACK_BYTES):
            return None
    fields = (
        task_id,
        key,
        status,
        stored,
        value["available_at"],
        max_attempts,
        attempts,
        generation,
        worker,
        deadline,
        last_error,
        traceback,
        *lane,
    )
    return (Tombstone if status == COMPLETED else TaskRecord, fields)


def _reference_lane(value: Any) -> tuple[str, int] | None:
    """A record's (queue, priority): each key optional, present only when it differs from its default."""
    if type(value) is not dict:
        return ("default", 0)
    queue, priority = value.get("queue", "default"), value.get("priority", 0)
    if "queue" in value and not (
        type(queue) is str and queue != "default" and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}", queue)
    ):
        return None
    if "priority" in value and not (type(priority) is int and priority != 0 and -100 <= priority <= 100):
        return None
    return (queue, priority)


def _reference_last_error(error: Any, status: str, attempts: int) -> tuple[Any, ...] | None:
    """A last error's fields as the rules allow them (small payloads only: it always fits), or None."""
    if status == COMPLETED or type(error) is not dict or set(error) != {"at", "attempt", "message", "type"}:
        return None
    error_type, message = error["type"], error["message"]
    if not (_is_text(error_type, 1, ERROR_TYPE_BYTES) and _is_text(message, 0, ERROR_MESSAGE_BYTES)):
        return None
    if not (_is_int(error["attempt"]) and error["attempt"] <= attempts and _is_int(error["at"])):
        return None
    return (error_type, message, error["attempt"], error["at"])


def _is_text(value: Any, least: int, most: int) -> bool:
    if type(value) is not str:
        return False
    try:
        return least <= len(value.encode("utf-8")) <= most
    except UnicodeEncodeError:
        return False


def record_outcome(value: Any, is_decoded: bool) -> tuple[Any, ...] | None:
    """What `record_from_dict` makes of `value`, likewise."""
    try:
        record = record_from_dict(value, decoded=is_decoded)
    except (TypeError, ValueError):
        return None
    return fields_of(record)


def loaded_outcome(value: Any, is_decoded: bool) -> tuple[Any, ...] | None:
    """What `from_records` makes of `value` as a snapshot's only record, likewise."""
    try:
        state = State.from_records(5, [value], decoded=is_decoded)
    except InvalidTransaction as exc:
        assert str(exc).startswith("snapshot record 0: ")
        return None
    (record,) = map(view, state.tasks.values())
    state.check_invariants()
    return fields_of(record)


# -- the acceptor against the rules -------------------------------------------------------------


@SETTINGS
@given(st.data())
def test_the_acceptor_accepts_exactly_what_the_rules_allow_and_builds_their_record(data: st.DataObject) -> None:
    is_decoded = data.draw(st.booleans())
    value = data.draw(damaged_records(python_values=not is_decoded) | valid_records())
    if is_decoded:
        value = decoded(value)
    assert record_outcome(value, is_decoded) == reference_outcome(value, is_decoded)


@SETTINGS
@given(st.data())
def test_from_records_accepts_exactly_what_the_acceptor_accepts(data: st.DataObject) -> None:
    is_decoded = data.draw(st.booleans())
    value = data.draw(damaged_records(python_values=not is_decoded) | valid_records())
    if is_decoded:
        value = decoded(value)
    assert loaded_outcome(value, is_decoded) == record_outcome(value, is_decoded)


@SETTINGS
@given(record=valid_records(), is_decoded=st.booleans())
def test_every_valid_record_is_accepted(record: dict[str, Any], is_decoded: bool) -> None:
    value = decoded(record) if is_decoded else record
    outcome = loaded_outcome(value, is_decoded)
    assert outcome is not None
    assert outcome == reference_outcome(value, is_decoded)


def base_record(status: str, key: str = "k") -> dict[str, Any]:
    """A valid record in `status` with every field set to an ordinary value."""
    leased = status == LEASED
    return {
        "task": "t",
        "key": key,
        "identity": "0123456789abcdef" * 4,
        "status": status,
        "payload": None if status == COMPLETED else {"n": [1, "x"]},
        "available_at": 4,
        "max_attempts": 3,
        "attempts": {READY: 1, LEASED: 2, COMPLETED: 2, DEAD: 3}[status],
        "generation": {READY: 1, LEASED: 2, COMPLETED: 2, DEAD: 3}[status],
        "worker": "w" if leased else None,
        "deadline": 9 if leased else None,
    }


def assert_judged_alike(value: Any, is_decoded: bool) -> None:
    expected = reference_outcome(value, is_decoded)
    assert record_outcome(value, is_decoded) == expected, value
    assert loaded_outcome(value, is_decoded) == expected, value


@pytest.mark.parametrize("is_decoded", [False, True])
def test_every_near_miss_of_every_field_is_judged_alike(is_decoded: bool) -> None:
    """Each field of a record in each status, set to each of its near misses: one broken rule at a time."""
    for status in STATUSES:
        for key in ("k", "t"):
            for field in FIELDS:
                misses = NEAR_MISSES[field] + ([] if is_decoded else PYTHON_MISSES[field])
                for miss in misses:
                    record = {**base_record(status, key), field: miss}
                    assert_judged_alike(decoded(record) if is_decoded else record, is_decoded)


@pytest.mark.parametrize("is_decoded", [False, True])
def test_every_near_miss_of_a_last_error_is_judged_alike(is_decoded: bool) -> None:
    """The optional ``last_error`` of a record in each status, set to each of its near misses (and valid ones)."""
    misses = NEAR_MISSES["last_error"] + ([] if is_decoded else PYTHON_MISSES["last_error"])
    for status in STATUSES:
        for miss in misses:
            record = {**base_record(status), "last_error": miss}
            assert_judged_alike(decoded(record) if is_decoded else record, is_decoded)


@pytest.mark.parametrize("is_decoded", [False, True])
@pytest.mark.parametrize("traceback", ["Traceback ...", "", 1, None, "\ud800", "x" * (TRACEBACK_BYTES + 1)])
def test_a_traceback_beside_a_last_error_is_judged_alike(is_decoded: bool, traceback: Any) -> None:
    """The optional ``traceback`` of a record (a format extension): a str of its bound, only with a last error."""
    error = {"type": "E", "message": "m", "attempt": 0, "at": 0}
    for status in STATUSES:
        for record in (
            {**base_record(status), "last_error": error, "traceback": traceback},
            {**base_record(status), "traceback": traceback},
        ):
            assert_judged_alike(decoded(record) if is_decoded else record, is_decoded)


def test_a_last_error_that_would_not_fit_beside_a_huge_payload_is_refused() -> None:
    """The record must still fit a frame with its last error, in any status (validate.check_last_error_fits)."""
    error = {"type": "E", "message": "\x01" * ERROR_MESSAGE_BYTES, "attempt": 1, "at": 0}
    largest = MAX_FRAME_BYTES - RECORD_WORST_CASE_EXTRA - len('"t""k"') - len('{"x":""}')  # the task fits exactly
    record = {**base_record(READY), "payload": {"x": "y" * largest}, "last_error": error}
    with pytest.raises(InvalidTransaction, match="does not fit"):
        State.from_records(5, [record])
    small = {**error, "message": "m" * 200}
    state = State.from_records(5, [{**record, "last_error": small}])
    assert view(state.tasks["t"]).last_error == ("E", "m" * 200, 1, 0)


@pytest.mark.parametrize("is_decoded", [False, True])
def test_every_combination_of_small_counters_is_judged_alike(is_decoded: bool) -> None:
    """The invariants between attempts, generation, max_attempts and the status, exhaustively for 0..3."""
    accepted = 0
    for status in STATUSES:
        for attempts in range(4):
            for generation in range(4):
                for max_attempts in range(4):
                    record = {
                        **base_record(status),
                        "attempts": attempts,
                        "generation": generation,
                        "max_attempts": max_attempts,
                    }
                    assert_judged_alike(record, is_decoded)
                    accepted += reference_outcome(record, is_decoded) is not None
    # ready: 0 <= a < m; leased, completed: 1 <= a <= m; dead: 0 <= a <= m, m >= 1, since a cancel
    # kills a task whatever its attempts (generation == attempts throughout)
    assert accepted == 6 + 6 + 6 + 9


@pytest.mark.parametrize("status", STATUSES)
def test_a_loaded_record_shares_its_strings_with_the_state(status: str) -> None:
    """The key equal to the task id is the task id's string, the status the module's constant."""
    record = decoded(
        {
            "task": "t-1",
            "key": "t-1",
            "identity": "ab" * 32,
            "status": status,
            "payload": None if status == COMPLETED else {"n": 1},
            "available_at": 0,
            "max_attempts": 2,
            "attempts": 2 if status == DEAD else 1,
            "generation": 2 if status == DEAD else 1,
            "worker": "w" if status == LEASED else None,
            "deadline": 9 if status == LEASED else None,
        }
    )
    assert record["key"] is not record["task"]
    constant = STATUSES[STATUSES.index(status)]
    for loaded in (view(State.from_records(1, [record], decoded=True).tasks["t-1"]), record_from_dict(record)):
        assert loaded.status is constant
        if isinstance(loaded, TaskRecord):
            assert loaded.key is loaded.task_id
        else:
            assert isinstance(loaded, Tombstone) and loaded.key == loaded.task_id == "t-1"


# -- names and payloads at their bounds ------------------------------------------------------------


def _record(task_id: str = "t", key: str | None = None, payload: Any = None, worker: str = "w") -> dict[str, Any]:
    return {
        "task": task_id,
        "key": task_id if key is None else key,
        "identity": hashlib.sha256(task_id.encode("utf-8", "surrogatepass")).hexdigest(),
        "status": LEASED,
        "payload": {"n": 1} if payload is None else payload,
        "available_at": 0,
        "max_attempts": 3,
        "attempts": 1,
        "generation": 1,
        "worker": worker,
        "deadline": 10,
    }


NAME_CASES = [
    ("x" * MAX_NAME_BYTES, True),
    ("x" * (MAX_NAME_BYTES + 1), False),
    ("\x00" * MAX_NAME_BYTES, True),
    ("é" * (MAX_NAME_BYTES // 2), True),
    ("é" * (MAX_NAME_BYTES // 2) + "x", False),
    ("€" * (MAX_NAME_BYTES // 3), True),
    ("€" * (MAX_NAME_BYTES // 3) + "é", False),  # 1,023 + 2 bytes in 342 characters
    ("😀" * (MAX_NAME_BYTES // 4), True),
    ("😀" * (MAX_NAME_BYTES // 4 + 1), False),  # 1,028 bytes in 257 characters
    ("\ud800", False),
    ("ok\udfff", False),
    ("é\ud800", False),
    ("", False),
]


@pytest.mark.parametrize("field", ["task", "key", "worker"])
@pytest.mark.parametrize(("name", "valid"), NAME_CASES, ids=range(len(NAME_CASES)))
@pytest.mark.parametrize("is_decoded", [False, True])
def test_names_are_checked_by_their_utf8_size(field: str, name: str, valid: bool, is_decoded: bool) -> None:
    record = _record(**{"task_id" if field == "task" else field: name})
    value = decoded(record) if is_decoded else record
    assert (reference_outcome(value, is_decoded) is not None) is valid
    assert (loaded_outcome(value, is_decoded) is not None) is valid
    assert record_outcome(value, is_decoded) == reference_outcome(value, is_decoded)


def test_a_payload_beyond_the_fast_bound_is_measured_exactly() -> None:
    """At the bound that needs no measuring a record fits with the worst names; one byte more only with short ones."""
    fast_bound = FITTING_PAYLOAD_BYTES
    worst_task, worst_key = "\x01" * MAX_NAME_BYTES, "\x02" * MAX_NAME_BYTES
    assert len(canonical_json(worst_task)) == len(canonical_json(worst_key)) == 6 * MAX_NAME_BYTES + 2

    def payload(size: int) -> dict[str, str]:
        value = {"b": "x" * (size - len('{"b":""}'))}
        assert len(canonical_json(value)) == size
        return value

    at_bound = _record(worst_task, worst_key, payload(fast_bound))
    assert loaded_outcome(at_bound, False) == reference_outcome(at_bound, False) is not None
    # One byte more: exactly one byte over the frame bound with the worst names (refused) ...
    over = _record(worst_task, worst_key, payload(fast_bound + 1))
    assert len(canonical_json(over["payload"])) + 2 * (6 * MAX_NAME_BYTES + 2) + RECORD_WORST_CASE_EXTRA == (
        MAX_FRAME_BYTES + 1
    )
    assert record_outcome(over, False) is None
    assert reference_outcome(over, False) is None
    with pytest.raises(InvalidTransaction, match="too large"):
        State.from_records(1, [over])
    # ... but with short names the same payload fits: the full check measures them.
    short = _record("t", "k", over["payload"])
    assert loaded_outcome(short, False) == reference_outcome(short, False) is not None


# -- bookkeeping around the acceptor ---------------------------------------------


@st.composite
def snapshots(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Valid records in task-id order with unique keys, as a snapshot holds them."""
    records = draw(st.lists(valid_records(), max_size=12, unique_by=lambda r: r["task"]))
    records.sort(key=lambda r: r["task"])
    keys: set[str] = set()
    unique = []
    for record in records:
        if record["key"] not in keys:
            keys.add(record["key"])
            unique.append(record)
    return unique


def _view(state: State) -> Any:
    state.check_invariants()
    return (
        state.last_seq,
        {task_id: fields_of(record) for task_id, record in ((t, view(r)) for t, r in state.tasks.items())},
        state.counts(),
        sorted(state._key_owner.items()),
        state.peek_ready(MAX_INT, MAX_INT),
        state.peek_expired(MAX_INT),
    )


@SETTINGS
@given(records=snapshots(), is_decoded=st.booleans())
def test_a_snapshot_loads_to_the_state_its_records_describe(records: list[dict[str, Any]], is_decoded: bool) -> None:
    values = decoded(records) if is_decoded else records
    fast = State.from_records(3, values, decoded=is_decoded)
    view = _view(fast)
    assert view[1] == {r["task"]: reference_outcome(r, is_decoded) for r in values}
    assert view[2] == {status: sum(r["status"] == status for r in records) for status in STATUSES}
    assert view[3] == sorted((r["key"], r["task"]) for r in records if r["key"] != r["task"])
    # Every task comes back in the order of its heap: (time, task id), whatever the records' order of times;
    # the ready ones higher priority first (lanes).
    ready = sorted((-r.get("priority", 0), r["available_at"], r["task"]) for r in records if r["status"] == READY)
    leased = sorted((r["deadline"], r["task"]) for r in records if r["status"] == LEASED)
    assert fast.peek_ready(MAX_INT, MAX_INT) == [task_id for *_, task_id in ready]
    assert fast.peek_expired(MAX_INT) == [task_id for _, task_id in leased]
    # And a loaded state writes the very records it was loaded from.
    assert [json.loads(r) for r in fast.iter_record_json()] == decoded(records)


def test_repeated_keys_and_disorder_are_refused() -> None:
    def ready(task_id: str, key: str | None = None) -> dict[str, Any]:
        return {
            **_record(task_id, key),
            "status": READY,
            "attempts": 0,
            "generation": 0,
            "worker": None,
            "deadline": None,
        }

    cases = {
        "out of task-id order": [ready("b"), ready("a")],
        "repeated task id": [ready("a"), ready("a", "k")],
        "repeated key": [ready("a", "k"), ready("b", "k")],
        "key equal to a later task id": [ready("a", "b"), ready("b")],
        "key equal to an earlier task id": [ready("a"), ready("b", "a")],
    }
    for records in cases.values():
        with pytest.raises(InvalidTransaction, match="snapshot record 1: .*(order|repeated)"):
            State.from_records(1, records)


def test_times_out_of_order_still_make_valid_heaps() -> None:
    def task(task_id: str, status: str, time: int) -> dict[str, Any]:
        record = _record(task_id)
        if status == READY:
            unleased = {"status": READY, "attempts": 0, "generation": 0, "worker": None, "deadline": None}
            return {**record, **unleased, "available_at": time}
        return {**record, "deadline": time}

    times = [5, 3, 9, 0, 3, 7, 1, 1, 8]
    records = [task(f"t{index}", READY if index % 2 else LEASED, time) for index, time in enumerate(times)]
    state = State.from_records(1, records)
    state.check_invariants()
    ready = sorted((r["available_at"], r["task"]) for r in records if r["status"] == READY)
    leased = sorted((r["deadline"], r["task"]) for r in records if r["status"] == LEASED)
    assert state._lanes.default_lane.heap[0] == ready[0] and state._leases[0] == leased[0]
    assert sorted(state._lanes.default_lane.heap) == ready and sorted(state._leases) == leased
    copy = list(state._lanes.default_lane.heap)
    heapq.heapify(copy)
    assert [heapq.heappop(copy) for _ in range(len(ready))] == ready
    assert state.peek_ready(MAX_INT, MAX_INT) == [task_id for _, task_id in ready]
    assert state.peek_expired(MAX_INT) == [task_id for _, task_id in leased]


# -- the paused GC ---------------------------------------------------------------------------


@pytest.mark.parametrize("enabled", [True, False])
def test_the_gc_is_restored_after_a_load_and_after_a_refusal(enabled: bool) -> None:
    good = [_record("a"), _record("b")]
    bad = [_record("a"), {**_record("b"), "attempts": 0}]
    was = gc.isenabled()
    try:
        if not enabled:
            gc.disable()
        State.from_records(1, good)
        assert gc.isenabled() is enabled
        with pytest.raises(InvalidTransaction):
            State.from_records(1, bad)
        assert gc.isenabled() is enabled

        def failing() -> Iterator[dict[str, Any]]:
            yield _record("a")
            raise OSError("the reader failed")

        with pytest.raises(OSError):
            State.from_records(1, failing())
        assert gc.isenabled() is enabled
    finally:
        if was:
            gc.enable()
