"""The state machine (walqueue.engine.state): every transition, every refusal, atomicity, snapshots."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walqueue.engine.records import pack_tombstone, tombstone_bytes
from walqueue.engine.records import view as record_view
from walqueue.engine.rows import ENTRY, new_ready_rows, new_row
from walqueue.engine.state import (
    COMPLETED,
    DEAD,
    LEASED,
    READY,
    STATUSES,
    InvalidTransaction,
    State,
    Tombstone,
    apply,
    identity_digest,
)
from walqueue.engine.types import LastError, Lease, Task, new_lease
from walqueue.engine.validate import MAX_FRAME_BYTES, MAX_INT, MAX_NAME_BYTES, RECORD_WORST_CASE_EXTRA
from walqueue.format.canonical import canonical_json

SETTINGS = settings(max_examples=50, deadline=None)


# -- helpers --------------------------------------------------------------------


def put(
    task: str, payload: Any = None, *, key: str | None = None, available_at: int = 0, max_attempts: int = 3
) -> dict[str, Any]:
    return {
        "op": "put",
        "task": task,
        "key": task if key is None else key,
        "payload": {"n": task} if payload is None else payload,
        "available_at": available_at,
        "max_attempts": max_attempts,
    }


def lease(task: str, generation: int = 1, *, worker: str = "w", deadline: int = 100) -> dict[str, Any]:
    return {"op": "lease", "task": task, "worker": worker, "generation": generation, "deadline": deadline}


def expire(task: str, generation: int = 1) -> dict[str, Any]:
    return {"op": "expire", "task": task, "generation": generation}


def ack(task: str, generation: int = 1) -> dict[str, Any]:
    return {"op": "ack", "task": task, "generation": generation}


def release(task: str, generation: int = 1, available_at: int = 7) -> dict[str, Any]:
    return {"op": "release", "task": task, "generation": generation, "available_at": available_at}


def run(state: State, *ops: dict[str, Any]) -> None:
    apply(state, {"seq": state.last_seq + 1, "ops": list(ops)})


def task(state: State, task_id: str) -> Task:
    found = state.get_task(task_id)
    assert found is not None
    return found


def view(state: State) -> Any:
    """Everything observable about a state, including both orders and the key index."""
    state.check_invariants()
    return (
        state.last_seq,
        {task_id: record.fields() for task_id, record in ((t, record_view(r)) for t, r in state.tasks.items())},
        state.counts(),
        state.peek_ready(MAX_INT, MAX_INT),
        state.peek_expired(MAX_INT),
        {record.key: state.lookup_key(record.key) for record in map(record_view, state.tasks.values())},
    )


def sample_state() -> State:
    """One task in every status: r (ready), l (leased, gen 1), c (completed), d (dead)."""
    state = State()
    run(state, put("r"), put("l"), put("c"), put("d", max_attempts=1))
    run(state, lease("l", deadline=50), lease("c"), lease("d", deadline=60))
    run(state, ack("c"), expire("d"))
    return state


# -- random states ---------------------------------------------------------------

names = st.text(alphabet='ab"\\\x00é', min_size=1, max_size=3)
times = st.integers(0, 30) | st.sampled_from([0, MAX_INT])
scalars = st.none() | st.booleans() | st.integers(-5, 5) | st.floats(-2, 2) | st.text(alphabet='x"é\x01', max_size=3)
payloads = st.dictionaries(
    st.text(alphabet="kz", max_size=2),
    st.recursive(
        scalars, lambda c: st.lists(c, max_size=2) | st.dictionaries(st.text("ab", max_size=1), c, max_size=2)
    ),
    max_size=3,
)


@st.composite
def valid_op(draw: st.DrawFn, state: State) -> dict[str, Any] | None:
    """A valid op for `state` (None if the drawn kind has no candidate)."""
    kind = draw(
        st.sampled_from(
            ["put", "put", "lease", "lease", "expire", "ack", "release", "extend", "redrive", "cancel", "fail", "error"]
        )
    )
    by_status: dict[str, list[str]] = {status: [] for status in STATUSES}
    for record in map(record_view, state.tasks.values()):
        by_status[record.status].append(record.task_id)
    if kind == "put":
        task_id = draw(names)
        key = draw(st.none() | names)
        key = task_id if key is None else key
        if task_id in state.tasks or state.lookup_key(key) is not None:
            return None
        return put(task_id, draw(payloads), key=key, available_at=draw(times), max_attempts=draw(st.integers(1, 3)))
    wanted = {"lease": [READY], "redrive": [DEAD], "cancel": [READY, LEASED], "error": [READY, LEASED]}.get(
        kind, [LEASED]
    )
    candidates = sorted(task_id for status in wanted for task_id in by_status[status])
    if not candidates:
        return None
    task_id = draw(st.sampled_from(candidates))
    generation = record_view(state.tasks[task_id]).generation
    if kind == "cancel":
        return {"op": "cancel", "task": task_id}
    if kind == "error":
        return {"op": "error", "task": task_id, "type": draw(names), "message": draw(st.text()), "at": draw(times)}
    if kind == "redrive":
        more = record_view(state.tasks[task_id]).max_attempts + draw(st.integers(1, 2))
        return {"op": "redrive", "task": task_id, "available_at": draw(times), "max_attempts": more}
    if kind == "extend":
        return {"op": "extend", "task": task_id, "generation": generation, "deadline": draw(times)}
    if kind == "lease":
        return lease(task_id, generation + 1, worker=draw(names), deadline=draw(times))
    if kind == "release":
        return release(task_id, generation, draw(times))
    return {"op": kind, "task": task_id, "generation": generation}


@st.composite
def states(draw: st.DrawFn, max_steps: int = 14) -> State:
    state = State()
    for _ in range(draw(st.integers(0, max_steps))):
        op = draw(valid_op(state))
        if op is not None:
            run(state, op)
    return state


def record_dict(state: State, task_id: str) -> dict[str, Any]:
    """The CONTRACT §3 snapshot record of a task, built from the public reads alone."""
    found = task(state, task_id)
    return {
        "task": found.task_id,
        "key": found.key,
        "identity": state.identity(task_id).hex(),
        "status": found.status,
        "payload": found.payload,
        "available_at": found.available_at,
        "max_attempts": found.max_attempts,
        "attempts": found.attempts,
        "generation": found.generation,
        "worker": found.worker,
        "deadline": found.deadline,
        **({} if found.last_error is None else {"last_error": found.last_error.to_dict()}),
    }


def records_of(state: State) -> list[dict[str, Any]]:
    return [json.loads(record) for record in state.iter_record_json()]


# -- put -----------------------------------------------------------------------------


def test_put_creates_a_ready_task_with_no_attempts_and_generation_zero() -> None:
    state = State()
    run(state, put("t", {"a": [1, 2.5]}, key="k", available_at=5, max_attempts=4))
    assert state.last_seq == 1
    assert state.get_task("t") == Task("t", "k", READY, {"a": [1, 2.5]}, 5, 4, 0, 0, None, None)
    assert state.counts() == {READY: 1, LEASED: 0, COMPLETED: 0, DEAD: 0}
    assert state.lookup_key("k") == "t"
    assert state.lookup_key("t") is None


def test_identity_is_the_sha256_of_the_original_put_request() -> None:
    state = State()
    run(state, put("t", {"x": 1}, available_at=2, max_attempts=5))
    expected = canonical_json({"available_at": 2, "max_attempts": 5, "payload": {"x": 1}, "task": "t"})
    assert state.identity("t") == hashlib.sha256(expected).digest()


@SETTINGS
@given(task_id=names, payload=payloads, available_at=times, max_attempts=st.integers(1, MAX_INT))
def test_the_identity_digest_equals_the_digest_of_canonical_json(
    task_id: str, payload: dict[str, Any], available_at: int, max_attempts: int
) -> None:
    document = {"available_at": available_at, "max_attempts": max_attempts, "payload": payload, "task": task_id}
    digest = identity_digest(canonical_json(task_id), canonical_json(payload), available_at, max_attempts)
    assert digest == hashlib.sha256(canonical_json(document)).digest()


def test_identity_tells_one_from_one_point_zero_from_true() -> None:
    state = State()
    run(state, put("a", {"x": 1}, key="ka"), put("b", {"x": 1.0}, key="kb"), put("c", {"x": True}, key="kc"))
    digests = {state.identity(name) for name in "abc"}
    assert len(digests) == 3
    assert task(state, "b").payload == {"x": 1.0} and type(task(state, "b").payload["x"]) is float  # type: ignore[index]
    assert task(state, "c").payload["x"] is True  # type: ignore[index]


def test_key_index_holds_only_keys_that_differ_from_their_task_id() -> None:
    state = State()
    run(state, put("a"), put("b"), put("c", key="kc"))
    assert state._key_owner == {"kc": "c"}


def test_task_whose_id_equals_a_key_does_not_own_that_key() -> None:
    state = State()
    run(state, put("a", key="b"), put("b", key="c"))
    assert state.lookup_key("b") == "a"
    assert state.lookup_key("c") == "b"
    assert state.lookup_key("a") is None
    run(state, put("x", key="a"))  # key "a" was free although task "a" exists
    assert state.lookup_key("a") == "x"


# -- lease, expire, ack, release ----------------------------------------------------------


def test_lease_makes_a_ready_task_leased_and_counts_an_attempt() -> None:
    state = State()
    run(state, put("t", available_at=3))
    run(state, lease("t", 1, worker="w1", deadline=40))
    assert state.get_task("t") == Task("t", "t", LEASED, {"n": "t"}, 3, 3, 1, 1, "w1", 40)
    assert state.lease_for("t") == Lease("t", "w1", 1, 40, 1, {"n": "t"})
    assert state.counts()[LEASED] == 1 and state.counts()[READY] == 0


def test_expire_returns_the_task_to_ready_at_its_old_deadline() -> None:
    state = State()
    run(state, put("t", available_at=3), lease("t", deadline=40))
    run(state, expire("t"))
    expired = LastError("LeaseExpired", "worker w did not ack, release or extend lease 1 by its deadline 40", 1, 40)
    assert state.get_task("t") == Task("t", "t", READY, {"n": "t"}, 40, 3, 1, 1, None, None, expired)


def test_expire_of_the_last_attempt_makes_the_task_dead_keeping_its_payload() -> None:
    state = State()
    run(state, put("t", max_attempts=1), lease("t", deadline=40), expire("t"))
    expired = LastError("LeaseExpired", "worker w did not ack, release or extend lease 1 by its deadline 40", 1, 40)
    assert state.get_task("t") == Task("t", "t", DEAD, {"n": "t"}, 40, 1, 1, 1, None, None, expired)
    assert state.counts() == {READY: 0, LEASED: 0, COMPLETED: 0, DEAD: 1}


def test_ack_completes_the_task_and_drops_its_payload() -> None:
    state = State()
    run(state, put("t", available_at=3), lease("t", deadline=40))
    identity = state.identity("t")
    run(state, ack("t"))
    assert state.get_task("t") == Task("t", "t", COMPLETED, None, 3, 3, 1, 1, None, None)
    assert state.identity("t") == identity
    assert record_view(state.tasks["t"]).digest_and_payload == identity  # a tombstone: the digest alone


def test_release_returns_the_task_to_ready_at_the_given_time() -> None:
    state = State()
    run(state, put("t", available_at=3), lease("t", deadline=40))
    run(state, release("t", 1, available_at=9))
    assert state.get_task("t") == Task("t", "t", READY, {"n": "t"}, 9, 3, 1, 1, None, None)


def test_release_of_the_last_attempt_makes_the_task_dead_at_the_given_time() -> None:
    state = State()
    run(state, put("t", max_attempts=2), lease("t"), release("t", 1, 5), lease("t", 2, deadline=80))
    run(state, release("t", 2, available_at=11))
    assert state.get_task("t") == Task("t", "t", DEAD, {"n": "t"}, 11, 2, 2, 2, None, None)


def test_each_lease_increments_attempts_and_generation() -> None:
    state = State()
    run(state, put("t", max_attempts=3))
    for generation in (1, 2, 3):
        run(state, lease("t", generation), expire("t", generation))
    found = task(state, "t")
    assert (found.status, found.attempts, found.generation) == (DEAD, 3, 3)


def test_ops_of_one_transaction_see_the_earlier_ops() -> None:
    state = State()
    run(state, put("t", max_attempts=2), lease("t", 1), release("t", 1, 4), lease("t", 2, deadline=9), ack("t", 2))
    assert state.last_seq == 1
    assert state.get_task("t") == Task("t", "t", COMPLETED, None, 4, 2, 2, 2, None, None)
    assert state.counts() == {READY: 0, LEASED: 0, COMPLETED: 1, DEAD: 0}
    state.check_invariants()


def test_seq_advances_by_one_per_transaction() -> None:
    state = State()
    for expected in (1, 2, 3):
        run(state, put(f"t{expected}"))
        assert state.last_seq == expected


# -- refusals ------------------------------------------------------------------------------

INVALID_TRANSACTIONS: dict[str, Any] = {
    "not a dict": [("seq", 4), ("ops", [put("new")])],
    "seq missing": {"ops": [put("new")]},
    "ops missing": {"seq": 4},
    "extra key": {"seq": 4, "ops": [put("new")], "x": 1},
    "seq repeated": {"seq": 3, "ops": [put("new")]},
    "seq skips": {"seq": 6, "ops": [put("new")]},
    "seq bool": {"seq": True, "ops": [put("new")]},
    "seq float": {"seq": 4.0, "ops": [put("new")]},
    "seq huge": {"seq": 10**5000, "ops": [put("new")]},
    "ops empty": {"seq": 4, "ops": []},
    "ops tuple": {"seq": 4, "ops": (put("new"),)},
    "ops dict": {"seq": 4, "ops": {"0": put("new")}},
}


@pytest.mark.parametrize("tx", INVALID_TRANSACTIONS.values(), ids=INVALID_TRANSACTIONS.keys())
def test_malformed_transaction_is_refused_and_changes_nothing(tx: Any) -> None:
    state = sample_state()
    before = view(state)
    with pytest.raises(InvalidTransaction):
        apply(state, tx)
    assert view(state) == before


def _without(op: dict[str, Any], name: str) -> dict[str, Any]:
    return {k: v for k, v in op.items() if k != name}


def _with(original: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**original, **changes}


deep: dict[str, Any] = {}
for _ in range(64):
    deep = {"x": deep}

# In sample_state(): r ready (gen 0), l leased (gen 1), c completed, d dead.
INVALID_OPS: dict[str, Any] = {
    "op not a dict": ["put", "n"],
    "op name unknown": {"op": "delete", "task": "r"},
    "op name missing": _without(put("n"), "op"),
    "op name not str": _with(put("n"), op=1),
    # put
    "put missing field": _without(put("n"), "max_attempts"),
    "put extra field": _with(put("n"), worker="w"),
    "put task exists": put("r", key="fresh"),
    "put task exists completed": put("c", key="fresh"),
    "put key known (default key)": put("fresh", key="l"),
    "put key known (custom key)": put("fresh", key="kd"),
    "put task empty": put("", key="fresh"),
    "put task not str": _with(put("n"), task=1),
    "put task too long": put("x" * (MAX_NAME_BYTES + 1), key="fresh"),
    "put task lone surrogate": put("\ud800", key="fresh"),
    "put key too long": put("n", key="é" * 513),
    "put key not str": _with(put("n"), key=None),
    "put payload list": put("n", [1]),
    "put payload null": _with(put("n"), payload=None),
    "put payload nan": put("n", {"x": float("nan")}),
    "put payload inf": put("n", {"x": float("inf")}),
    "put payload tuple": put("n", {"x": (1,)}),
    "put payload int key": put("n", {1: 1}),
    "put payload too deep": put("n", {"x": deep}),
    "put payload too large": put("n", {"x": "a" * (MAX_FRAME_BYTES - RECORD_WORST_CASE_EXTRA)}),
    "put available_at negative": put("n", available_at=-1),
    "put available_at too big": put("n", available_at=MAX_INT + 1),
    "put available_at bool": _with(put("n"), available_at=False),
    "put available_at float": _with(put("n"), available_at=1.0),
    "put max_attempts zero": put("n", max_attempts=0),
    "put max_attempts bool": _with(put("n"), max_attempts=True),
    # lease
    "lease unknown task": lease("nope"),
    "lease leased task": lease("l", 2),
    "lease completed task": lease("c", 2),
    "lease dead task": lease("d", 2),
    "lease same generation": lease("r", 0),
    "lease skips a generation": lease("r", 2),
    "lease generation bool": lease("r", True),
    "lease worker empty": lease("r", worker=""),
    "lease worker too long": lease("r", worker="w" * (MAX_NAME_BYTES + 1)),
    "lease worker not str": _with(lease("r"), worker=7),
    "lease deadline negative": lease("r", deadline=-1),
    "lease deadline too big": lease("r", deadline=MAX_INT + 1),
    "lease deadline null": _with(lease("r"), deadline=None),
    "lease missing field": _without(lease("r"), "deadline"),
    "lease extra field": _with(lease("r"), attempts=1),
    "lease task not str": _with(lease("r"), task=["r"]),
    # expire / ack / release
    "expire unknown task": expire("nope"),
    "expire ready task": expire("r", 1),
    "expire completed task": expire("c", 1),
    "expire dead task": expire("d", 1),
    "expire wrong generation": expire("l", 2),
    "expire generation zero": expire("l", 0),
    "expire generation bool": expire("l", True),
    "expire extra field": _with(expire("l"), available_at=3),
    "ack unknown task": ack("nope"),
    "ack ready task": ack("r", 0),
    "ack completed task": ack("c", 1),
    "ack dead task": ack("d", 1),
    "ack wrong generation": ack("l", 2),
    "ack generation str": _with(ack("l"), generation="1"),
    "ack missing generation": _without(ack("l"), "generation"),
    "release unknown task": release("nope"),
    "release ready task": release("r", 1),
    "release completed task": release("c", 1),
    "release dead task": release("d", 1),
    "release wrong generation": release("l", 3),
    "release available_at negative": release("l", 1, -1),
    "release available_at too big": release("l", 1, MAX_INT + 1),
    "release missing available_at": _without(release("l"), "available_at"),
    "release task not str": _with(release("l"), task=None),
}


@pytest.mark.parametrize("op", INVALID_OPS.values(), ids=INVALID_OPS.keys())
def test_invalid_op_is_refused_naming_its_index_and_changes_nothing(op: Any) -> None:
    state = sample_state()
    run(state, put("kd-owner", key="kd"))
    before = view(state)
    # A valid op first: the whole transaction must still be refused.
    with pytest.raises(InvalidTransaction, match=r"op 1\b"):
        run(state, put("fresh-valid"), op)
    assert view(state) == before


def test_put_of_a_task_id_or_key_claimed_earlier_in_the_same_transaction_is_refused() -> None:
    state = State()
    with pytest.raises(InvalidTransaction, match="already exists"):
        run(state, put("a", key="k1"), put("a", key="k2"))
    with pytest.raises(InvalidTransaction, match="already known"):
        run(state, put("a", key="k"), put("b", key="k"))
    with pytest.raises(InvalidTransaction, match="already known"):
        run(state, put("a"), put("b", key="a"))
    assert view(state) == view(State())


def test_second_lease_of_the_same_task_in_one_transaction_is_refused() -> None:
    state = State()
    run(state, put("t"))
    before = view(state)
    with pytest.raises(InvalidTransaction, match="not ready"):
        run(state, lease("t", 1), lease("t", 2))
    assert view(state) == before


def test_a_ready_task_with_attempts_left_may_be_leased_until_they_are_spent() -> None:
    state = State()
    run(state, put("t", max_attempts=1), lease("t"), release("t", 1, 0))
    with pytest.raises(InvalidTransaction, match="dead, not ready"):
        run(state, lease("t", 2))


@SETTINGS
@given(st.data())
def test_random_invalid_transaction_leaves_the_state_identical(data: st.DataObject) -> None:
    state = data.draw(states())
    before = view(state)
    ops: list[Any] = []
    # A few ops, each valid against the state as it stands, then one random broken op.
    scratch = State.from_records(state.last_seq, records_of(state))
    for _ in range(data.draw(st.integers(0, 3))):
        op = data.draw(valid_op(scratch))
        if op is not None:
            run(scratch, op)
            ops.append(op)
    broken = data.draw(st.sampled_from(list(INVALID_OPS.values())))
    ops.insert(data.draw(st.integers(0, len(ops))), broken)
    try:
        apply(state, {"seq": state.last_seq + 1, "ops": ops})
    except InvalidTransaction:
        assert view(state) == before
    else:  # the broken op happened to be valid here (e.g. "put task exists" on another state)
        assert state.last_seq == before[0] + 1
        state.check_invariants()


def test_invariant_check_notices_a_broken_index() -> None:
    state = sample_state()
    state._dead.add("l")  # a leased task filed as dead too
    with pytest.raises(AssertionError, match="dead tasks"):
        state.check_invariants()
    state = sample_state()
    row = state.tasks["r"]
    state.tasks["r"] = (*row[:ENTRY], (0, "r"), *row[ENTRY + 1 :])  # not the tuple that is in the heap
    with pytest.raises(AssertionError, match="ready heap"):
        state.check_invariants()


@SETTINGS
@given(st.data())
def test_valid_transactions_keep_every_index_consistent(data: st.DataObject) -> None:
    state = data.draw(states(max_steps=25))
    state.check_invariants()
    assert len(state) == sum(state.counts().values())


# -- reads -----------------------------------------------------------------------------------


def test_records_and_state_have_no_instance_dict() -> None:
    state = sample_state()
    record = state.tasks["r"]
    assert type(record) is tuple and type(state.tasks["c"]) is bytes  # (exact: untracked by the collector)
    assert not hasattr(state, "__dict__")


def test_returned_payloads_are_copies() -> None:
    state = State()
    payload = {"list": [1]}
    run(state, put("t", payload))
    payload["list"].append(2)
    first = task(state, "t")
    assert first.payload == {"list": [1]}
    first.payload["list"].append(3)
    assert task(state, "t").payload == {"list": [1]}
    run(state, lease("t"))
    token = state.lease_for("t")
    token.payload["list"].append(4)
    assert state.lease_for("t").payload == {"list": [1]}


def test_record_repr_shows_its_fields() -> None:
    assert repr(record_view(sample_state().tasks["l"])).startswith("TaskRecord('l', 'l', 'leased', b'")


def test_get_task_of_an_unknown_id_is_none() -> None:
    assert sample_state().get_task("nope") is None


def test_list_tasks_is_ordered_by_task_id_and_filtered_by_status() -> None:
    state = State()
    run(state, put("b"), put("a"), put("é"), put("B"), lease("a"))
    assert [t.task_id for t in state.list_tasks()] == ["B", "a", "b", "é"]
    assert [t.task_id for t in state.list_tasks(READY)] == ["B", "b", "é"]
    assert [t.task_id for t in state.list_tasks(LEASED)] == ["a"]
    assert state.list_tasks(DEAD) == []


@SETTINGS
@given(states(max_steps=30))
def test_every_read_by_status_is_what_a_walk_of_every_task_finds(state: State) -> None:
    """The indexes behind `list_tasks(status)` and the next times agree with the records themselves."""
    records = sorted(map(record_view, state.tasks.values()), key=lambda record: record.task_id)
    for status in STATUSES:
        walked = [record.task_id for record in records if record.status == status]
        assert [found.task_id for found in state.list_tasks(status)] == walked
    ready_times = [record.available_at for record in records if record.status == READY]
    deadlines = [record.deadline for record in records if record.status == LEASED]
    assert state.next_available_at() == (min(ready_times) if ready_times else None)
    assert state.next_deadline() == (min(deadlines) if deadlines else None)  # type: ignore[type-var]


@pytest.mark.parametrize("status", ["READY", "gone", "", 1, b"ready"])
def test_list_tasks_with_an_unknown_status_is_value_error(status: Any) -> None:
    with pytest.raises(ValueError, match="status"):
        sample_state().list_tasks(status)


def test_counts_always_have_exactly_the_four_statuses() -> None:
    assert State().counts() == {READY: 0, LEASED: 0, COMPLETED: 0, DEAD: 0}
    assert sample_state().counts() == {READY: 1, LEASED: 1, COMPLETED: 1, DEAD: 1}
    assert len(sample_state()) == 4


def test_lease_for_needs_a_leased_task() -> None:
    state = sample_state()
    with pytest.raises(KeyError):
        state.lease_for("nope")
    for task_id in ("r", "c", "d"):
        with pytest.raises(ValueError):
            state.lease_for(task_id)


# -- the ready and lease orders ----------------------------------------------------------------


def test_peek_ready_orders_by_available_at_then_task_id_and_respects_now_and_limit() -> None:
    state = State()
    run(state, put("c", available_at=1), put("b", available_at=2), put("a", available_at=2), put("z", available_at=0))
    run(state, put("late", available_at=10))
    assert state.peek_ready(2, 10) == ["z", "c", "a", "b"]
    assert state.peek_ready(2, 2) == ["z", "c"]
    assert state.peek_ready(0, 10) == ["z"]
    assert state.peek_ready(10, 10) == ["z", "c", "a", "b", "late"]
    assert state.peek_ready(2, 10) == ["z", "c", "a", "b"]  # peeking changed nothing


def test_peek_expired_orders_by_deadline_then_task_id() -> None:
    state = State()
    run(state, put("a"), put("b"), put("c"), put("d"))
    run(state, lease("a", deadline=5), lease("b", deadline=3), lease("c", deadline=3), lease("d", deadline=9))
    assert state.peek_expired(2) == []
    assert state.peek_expired(5) == ["b", "c", "a"]
    assert state.peek_expired(MAX_INT) == ["b", "c", "a", "d"]


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda state: state.peek_ready(-1, 1), ValueError),
        (lambda state: state.peek_ready(MAX_INT + 1, 1), ValueError),
        (lambda state: state.peek_ready(True, 1), TypeError),
        (lambda state: state.peek_ready(1.0, 1), TypeError),
        (lambda state: state.peek_ready(0, 0), ValueError),
        (lambda state: state.peek_ready(0, False), TypeError),
        (lambda state: state.peek_ready(0, MAX_INT + 1), ValueError),
        (lambda state: state.peek_expired(-1), ValueError),
        (lambda state: state.peek_expired(None), TypeError),
    ],
)
def test_peeks_refuse_bad_arguments(call: Callable[[State], object], error: type[Exception]) -> None:
    state = State()
    run(state, put("a"))
    with pytest.raises(error):
        call(state)
    assert state.peek_ready(MAX_INT, MAX_INT) == ["a"] and state.peek_ready(0, MAX_INT) == ["a"]


def test_orders_forget_tasks_that_left_them() -> None:
    state = State()
    run(state, put("a"), put("b"), lease("a", deadline=5), lease("b", deadline=5))
    run(state, ack("a"), release("b", 1, 3))
    assert state.peek_expired(MAX_INT) == []
    assert state.peek_ready(MAX_INT, 5) == ["b"]


def test_stale_heap_entries_stay_bounded() -> None:
    state = State()
    run(state, put("t", max_attempts=10_000))
    for generation in range(1, 2000):
        # Far deadlines: the lease heap's stale entries are never popped by a peek.
        run(state, lease("t", generation, deadline=MAX_INT - generation))
        run(state, release("t", generation, generation))
    state.check_invariants()  # asserts each heap <= 2 * live + slack
    assert len(state._leases) <= 64 and len(state._lanes.default_lane.heap) <= 66


@pytest.mark.parametrize(("now", "limit"), [(-1, 1), (0, 0), (True, 1), (0, 1.0)])
def test_peek_arguments_are_checked(now: Any, limit: Any) -> None:
    with pytest.raises((TypeError, ValueError)):
        State().peek_ready(now, limit)


class NoScanDict(dict):  # type: ignore[type-arg]
    """A task table that fails any attempt to walk all tasks."""

    def _scan(self, *args: Any) -> Any:
        raise AssertionError("walked every task")

    __iter__ = keys = values = items = __len__ = _scan


def test_transitions_and_peeks_never_walk_all_tasks() -> None:
    state = State()
    run(state, *(put(f"t{i}", available_at=i) for i in range(50)))
    state.tasks = NoScanDict(state.tasks)
    run(state, put("new"), lease("t0"), lease("t1", deadline=3))
    assert state.peek_ready(3, 2) == ["new", "t2"]
    assert state.peek_expired(3) == ["t1"]
    run(state, expire("t1"), ack("t0"), lease("t1", 2), release("t1", 2, 9))
    assert state.lookup_key("t5") == "t5"
    assert state.get_task("t5") is not None


# -- snapshots ----------------------------------------------------------------------------------


@SETTINGS
@given(states(max_steps=20))
def test_record_json_is_byte_equal_to_canonical_json_of_the_record(state: State) -> None:
    encoded = list(state.iter_record_json())
    task_ids = sorted(state.tasks)
    assert encoded == [canonical_json(record_dict(state, task_id)) for task_id in task_ids]


@SETTINGS
@given(states(max_steps=20))
def test_loading_the_snapshot_records_gives_back_exactly_the_same_state(state: State) -> None:
    loaded = State.from_records(state.last_seq, records_of(state))
    assert loaded == state
    assert view(loaded) == view(state)
    assert list(loaded.iter_record_json()) == list(state.iter_record_json())


@SETTINGS
@given(st.data())
def test_a_loaded_state_behaves_like_the_original(data: st.DataObject) -> None:
    state = data.draw(states())
    loaded = State.from_records(state.last_seq, records_of(state))
    for _ in range(data.draw(st.integers(1, 5))):
        op = data.draw(valid_op(state))
        if op is not None:
            run(state, op)
            run(loaded, op)
    assert view(loaded) == view(state)


def test_state_equality_compares_every_field_and_the_sequence() -> None:
    assert sample_state() == sample_state()
    other = sample_state()
    run(other, put("more"))
    assert other != sample_state()
    assert State.from_records(7, []) != State()
    renamed = State()
    run(renamed, put("r"), put("l"), put("c"), put("other", max_attempts=1))
    run(renamed, lease("l", deadline=50), lease("c"), lease("other", deadline=60))
    run(renamed, ack("c"), expire("other"))
    assert renamed != sample_state()
    assert State() != "not a state"


def valid_records() -> list[dict[str, Any]]:
    return records_of(sample_state())


def _record_index(task_id: str) -> int:
    return ["c", "d", "l", "r"].index(task_id)


def mutate(task_id: str, **changes: Any) -> list[dict[str, Any]]:
    records = valid_records()
    records[_record_index(task_id)].update(changes)
    return records


def drop_field(task_id: str, name: str) -> list[dict[str, Any]]:
    records = valid_records()
    del records[_record_index(task_id)][name]
    return records


BAD_RECORDS: dict[str, Any] = {
    "record not a dict": [*valid_records(), ["x"]],
    "missing field": drop_field("r", "identity"),
    "extra field": mutate("r", extra=1),
    "task not str": mutate("r", task=1),
    "task empty": mutate("r", task=""),
    "key too long": mutate("r", key="k" * (MAX_NAME_BYTES + 1)),
    "identity uppercase": mutate("r", identity="A" * 64),
    "identity short": mutate("r", identity="a" * 63),
    "identity not str": mutate("r", identity=None),
    "status unknown": mutate("r", status="waiting"),
    "status not str": mutate("r", status=1),
    "ready with worker": mutate("r", worker="w"),
    "ready with deadline": mutate("r", deadline=5),
    "leased without worker": mutate("l", worker=None),
    "leased without deadline": mutate("l", deadline=None),
    "leased worker empty": mutate("l", worker=""),
    "completed with payload": mutate("c", payload={}),
    "ready without payload": mutate("r", payload=None),
    "dead without payload": mutate("d", payload=None),
    "payload not an object": mutate("r", payload=[1]),
    "payload infinite": mutate("r", payload={"x": float("inf")}),
    "payload too deep": mutate("r", payload={"x": deep}),
    "available_at negative": mutate("r", available_at=-1),
    "available_at bool": mutate("r", available_at=True),
    "max_attempts zero": mutate("r", max_attempts=0, attempts=0),
    "deadline too big": mutate("l", deadline=MAX_INT + 1),
    "attempts float": mutate("r", attempts=0.0),
    "generation differs from attempts": mutate("l", generation=2),
    "ready with no attempts left": mutate("r", attempts=3, generation=3),
    "leased never leased": mutate("l", attempts=0, generation=0),
    "completed never leased": mutate("c", attempts=0, generation=0),
    "attempts above max": mutate("c", attempts=4, generation=4),
    "duplicate task id": [*valid_records(), valid_records()[3]],
    "out of order": list(reversed(valid_records())),
    "duplicate custom key": mutate("r", key="kx") + [{**valid_records()[3], "task": "s", "key": "kx"}],
    "key equals a later default key": mutate("l", key="r"),
    "key equals an earlier default key": mutate("r", key="c"),
}


@pytest.mark.parametrize("records", BAD_RECORDS.values(), ids=BAD_RECORDS.keys())
def test_invalid_snapshot_record_is_refused(records: list[Any]) -> None:
    with pytest.raises(InvalidTransaction, match="snapshot record"):
        State.from_records(9, records)


@pytest.mark.parametrize("seq", [-1, True, 1.0, MAX_INT + 1, None])
def test_invalid_snapshot_sequence_is_refused(seq: Any) -> None:
    with pytest.raises(InvalidTransaction, match="sequence"):
        State.from_records(seq, [])


def test_from_records_accepts_the_sample_and_any_iterable() -> None:
    state = State.from_records(4, iter(valid_records()))
    assert state == State.from_records(4, copy.deepcopy(valid_records()))
    assert state.counts() == {READY: 1, LEASED: 1, COMPLETED: 1, DEAD: 1}
    assert state.peek_expired(MAX_INT) == ["l"]
    assert state.peek_ready(MAX_INT, 9) == ["r"]


# -- tombstones (completed tasks, packed) ------------------------------------------------

names = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40)
ints = st.integers(0, MAX_INT)


@SETTINGS
@given(
    st.lists(st.tuples(names, names, st.binary(min_size=32, max_size=40), ints, st.integers(1, MAX_INT)), min_size=1)
)
def test_ready_rows_built_by_columns_are_the_rows_new_row_builds(
    columns: list[tuple[str, str, bytes, int, int]],
) -> None:
    task_ids, keys, data, available_at, max_attempts = (list(column) for column in zip(*columns, strict=True))
    built = list(new_ready_rows(task_ids, keys, data, available_at, max_attempts))
    assert built == [new_row(*fields[:2], READY, *fields[2:], 0, None, None, None) for fields in columns]
    assert {type(row) for row in built} <= {tuple}


@given(task_id=names, key=names | st.none(), available_at=ints, max_attempts=st.integers(1, MAX_INT), data=st.data())
def test_a_tombstone_answers_every_field_it_packed(
    task_id: str, key: str | None, available_at: int, max_attempts: int, data: st.DataObject
) -> None:
    key = task_id if key is None else key
    attempts = data.draw(st.integers(1, max_attempts))
    digest = hashlib.sha256(task_id.encode()).digest()
    queue = data.draw(st.sampled_from(["default", "emails", "a.b:c-d_e", "q" * 64]))
    priority = data.draw(st.integers(-100, 100))
    packed = tombstone_bytes(task_id, key, digest, (available_at, max_attempts, attempts, attempts), queue, priority)
    stone = Tombstone(packed)
    # An ack packs its leased row (`pack_tombstone`, without the checks) into the very same bytes.
    leased = new_row(task_id, key, LEASED, digest + b'{"n":1}', available_at, max_attempts, attempts, "w", 9, None,
                     queue, priority)  # fmt: skip
    assert pack_tombstone(leased) == packed
    fields = (task_id, key, COMPLETED, digest, available_at, max_attempts, attempts, attempts, None, None, None)
    plain = record_view(new_row(*fields[:7], *fields[8:], queue, priority))
    assert stone.fields() == plain.fields()
    assert stone.record_json() == plain.record_json()
    assert stone.to_task() == plain.to_task()
    assert stone.payload_json() == b"null"
    assert stone.entry is None


def test_a_tombstone_refuses_what_no_transition_produces() -> None:
    digest = bytes(32)
    with pytest.raises(ValueError, match="generation"):
        Tombstone(tombstone_bytes("t", "t", digest, (0, 3, 1, 2)))
    with pytest.raises(ValueError, match="digest"):
        Tombstone(tombstone_bytes("t", "t", digest[:31], (0, 3, 1, 1)))


def test_ack_packs_the_task_into_a_tombstone_that_keeps_its_key() -> None:
    state = State()
    run(state, put("t", key="k"), lease("t"))
    before = record_view(state.tasks["t"])
    run(state, ack("t"))
    assert type(state.tasks["t"]) is bytes  # exact bytes: never tracked by the collector
    record = record_view(state.tasks["t"])
    assert isinstance(record, Tombstone)
    digest = before.digest_and_payload[:32]
    assert record.fields() == ("t", "k", COMPLETED, digest, 0, 3, 1, 1, None, None, None, None, "default", 0)
    assert state.lookup_key("k") == "t"
    # A snapshot round trip gives the same tombstone back.
    reloaded = State.from_records(state.last_seq, [json.loads(line) for line in state.iter_record_json()])
    assert reloaded == state
    assert type(reloaded.tasks["t"]) is bytes


def test_a_short_tombstone_is_one_small_object() -> None:
    """Deterministic sizes, not timings: the packed layout is what keeps completed tasks cheap."""
    stone = Tombstone(tombstone_bytes("g-000000001", "g-000000001", bytes(32), (0, 3, 1, 1)))
    assert sys.getsizeof(stone) <= 110


@SETTINGS
@given(task_id=names, worker=names, generation=ints, deadline=ints, attempts=ints)
def test_new_lease_builds_the_same_token_as_the_constructor(
    task_id: str, worker: str, generation: int, deadline: int, attempts: int
) -> None:
    payload = {"n": [1, "x"]}
    fast = new_lease(task_id, worker, generation, deadline, attempts, payload, "emails", -3)
    slow = Lease(task_id, worker, generation, deadline, attempts, payload, "emails", -3)
    assert type(fast) is Lease
    assert fast == slow
    assert repr(fast) == repr(slow)
    assert hash((fast.task_id, fast.generation)) == hash((slow.task_id, slow.generation))
    assert copy.copy(fast) == slow
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.worker = "another"  # type: ignore[misc]


def test_the_rows_of_one_lane_share_one_lane_key() -> None:
    """A lane row's one extra item is its lane's (queue, priority), one exact tuple for every task of the lane."""
    state = State()
    run(
        state,
        *({**put(name), "queue": "emails", "priority": 2} for name in ("a", "b")),
        {**put("c"), "queue": "emails"},
    )
    a, b, c = (state.tasks[name][-1] for name in "abc")
    assert a == ("emails", 2) and type(a) is tuple and a is b
    assert c == ("emails", 0) and c is not a


def test_a_default_lane_record_stores_no_lane_and_no_traceback() -> None:
    """A task in the default queue at priority 0 pays no item for its lane; the traceback rides in the error."""
    state = State()
    run(state, put("d"), {**put("q"), "queue": "emails"}, {**put("p"), "priority": 3})
    plain, lanes = state.tasks["d"], [state.tasks["q"], state.tasks["p"]]
    assert type(plain) is tuple and (record_view(plain).queue, record_view(plain).priority) == ("default", 0)
    assert all(type(row) is tuple and len(row) == len(plain) + 1 for row in lanes)
    assert [(record_view(r).queue, record_view(r).priority) for r in lanes] == [("emails", 0), ("default", 3)]
