"""Transaction planners (walqueue.engine.ops): validation, identity, ordering, limits and the frame bound."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import types
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walqueue.engine import ops
from walqueue.engine.ops import (
    Op,
    Plan,
    plan_ack,
    plan_lease,
    plan_put,
    plan_puts,
    plan_reap,
    plan_release,
    put_op,
    put_op_from_mapping,
    transaction_size,
    validate_reserve_args,
)
from walqueue.engine.optable import CARRIER_SEPARATOR
from walqueue.engine.records import view
from walqueue.engine.rows import DIGEST_BYTES
from walqueue.engine.state import COMPLETED, DEAD, LEASED, OP_KINDS, READY, InvalidTransaction, State, apply
from walqueue.engine.types import KeyConflict, Lease, StaleLease
from walqueue.engine.validate import MAX_FRAME_BYTES, MAX_INT, MAX_NAME_BYTES, RECORD_WORST_CASE_EXTRA
from walqueue.format.canonical import canonical_json

SETTINGS = settings(max_examples=60, deadline=None)


# -- helpers --------------------------------------------------------------------


def plain(op: Op) -> Op:
    """`op` with a put's payload carrier replaced by the payload it stands for: what the op's JSON encodes."""
    payload = op.get("payload")
    return {**op, "payload": json.loads(_data(op)[DIGEST_BYTES:])} if type(payload) is bytes else op


def _data(op: Op) -> bytes:
    """A planned put's row data, from its carrier (putops.py): the identity digest, then the payload's JSON."""
    payload: bytes = op["payload"]
    return payload.partition(CARRIER_SEPARATOR)[2]


def commit(state: State, planned: Plan | list[Op]) -> None:
    """Apply a planner's `Plan` as `Queue` does (checking its JSON on the way), or hand-written ops as recovery does."""
    if isinstance(planned, Plan):
        assert planned.op_json == [canonical_json(plain(op)) for op in planned.ops]
        apply(state, {"seq": state.last_seq + 1, "ops": planned.ops}, _planned=True)
    else:
        apply(state, {"seq": state.last_seq + 1, "ops": planned})


def ops_of(plans: list[Plan]) -> list[list[Op]]:
    return [plan.ops for plan in plans]


def put_all(state: State, *put_ops: Op) -> list[str]:
    plan, task_ids = plan_puts(state, list(put_ops))
    if plan.ops:
        commit(state, plan)
    return task_ids


def reserve(state: State, worker: str, now: int, lease_seconds: int, limit: int = 1) -> list[Lease]:
    """What `Queue.reserve` does, without the disk: reap transactions, then one lease transaction."""
    validate_reserve_args(worker, now, lease_seconds, limit)
    for reap in plan_reap(state, now, state.last_seq + 1):
        commit(state, reap)
    lease = plan_lease(state, worker, now, lease_seconds, limit, state.last_seq + 1)
    if lease.ops:
        commit(state, lease)
    return [state.lease_for(op["task"]) for op in lease.ops]


def snapshot(state: State) -> Any:
    """Everything observable, to prove that planning changed nothing."""
    return (
        state.last_seq,
        {task_id: record.fields() for task_id, record in ((t, view(r)) for t, r in state.tasks.items())},
        state.counts(),
        state.peek_ready(MAX_INT, MAX_INT),
        state.peek_expired(MAX_INT),
    )


def body_size(tx_ops: list[dict[str, Any]], seq: int) -> int:
    return len(canonical_json({"ops": tx_ops, "seq": seq}))


def identity(op: Op) -> bytes:
    """The identity digest a put op carries."""
    digest: bytes = _data(op)[:DIGEST_BYTES]
    return digest


def expected_identity(task_id: str, payload: Any, available_at: int = 0, max_attempts: int = 3) -> bytes:
    document = {"available_at": available_at, "max_attempts": max_attempts, "payload": payload, "task": task_id}
    return hashlib.sha256(canonical_json(document)).digest()


# -- put_op ------------------------------------------------------------------------


def test_put_op_defaults_key_to_task_id_and_computes_the_identity() -> None:
    op = put_op("t", {"x": [1]})
    assert _data(op)[DIGEST_BYTES:] == b'{"x":[1]}'
    assert identity(op) == expected_identity("t", {"x": [1]})
    assert plain(op) == {
        "op": "put",
        "task": "t",
        "key": "t",
        "payload": {"x": [1]},
        "available_at": 0,
        "max_attempts": 3,
    }
    plan = plan_put(State(), op)
    assert plan is not None and plan.ops == [op]
    assert plan.op_json == [b'{"available_at":0,"key":"t","max_attempts":3,"op":"put","payload":{"x":[1]},"task":"t"}']


class _Int(int):
    pass


# put's numbers as a caller may pass them: the defaults themselves, equal values of other types, other values.
put_numbers = st.sampled_from([0, 3, 1, -1, MAX_INT, MAX_INT + 1, False, True, _Int(0), _Int(3), 0.0, 3.0, None, "3"])


@SETTINGS
@given(put_numbers, put_numbers, st.sampled_from([None, "t", "k", "", 1]), st.sampled_from(["t", "task-0-0001", "é"]))
def test_put_op_at_its_defaults_gets_the_tables_verdict_and_the_identity(
    available_at: Any, max_attempts: Any, key: Any, task_id: str
) -> None:
    """Skipping the table's field check at put's defaults changes no verdict, and the identity is the canonical one."""
    try:
        op: Any = put_op(task_id, {"x": 1}, key=key, available_at=available_at, max_attempts=max_attempts)
    except (TypeError, ValueError) as exc:
        op = (type(exc), str(exc))
    fields = {"op": "put", "task": task_id, "key": task_id if key is None else key, "payload": None}
    try:
        OP_KINDS["put"].check_fields({**fields, "available_at": available_at, "max_attempts": max_attempts})
    except (TypeError, ValueError) as exc:
        assert op == (type(exc), str(exc))
    else:
        assert identity(op) == expected_identity(task_id, {"x": 1}, available_at, max_attempts)
        assert plain(op) == {**fields, "payload": {"x": 1}, "available_at": available_at, "max_attempts": max_attempts}


def test_put_op_holds_a_private_copy_of_the_payload() -> None:
    payload = {"x": [1]}
    op = put_op("t", payload)
    payload["x"].append(2)
    assert json.loads(_data(op)[DIGEST_BYTES:]) == {"x": [1]}


def test_identity_includes_task_id_payload_available_at_and_max_attempts_but_not_key() -> None:
    base = put_op("t", {"x": 1}, key="k")
    assert identity(put_op("t", {"x": 1}, key="other")) == identity(base)
    assert identity(put_op("t", {"x": 1}, key="k", available_at=0, max_attempts=3)) == identity(base)
    for different in (
        put_op("u", {"x": 1}, key="k"),
        put_op("t", {"x": 2}, key="k"),
        put_op("t", {"x": 1}, key="k", available_at=1),
        put_op("t", {"x": 1}, key="k", max_attempts=4),
    ):
        assert identity(different) != identity(base)


def test_one_and_one_point_zero_and_true_are_different_identities() -> None:
    identities = {identity(put_op("t", {"x": value})) for value in (1, 1.0, True)}
    assert len(identities) == 3


def test_key_order_of_the_payload_does_not_change_the_identity() -> None:
    assert identity(put_op("t", {"a": 1, "b": 2})) == identity(put_op("t", {"b": 2, "a": 1}))


BAD_PUTS: dict[str, tuple[type[Exception], dict[str, Any]]] = {
    "task_id not str": (TypeError, {"task_id": 1}),
    "task_id empty": (ValueError, {"task_id": ""}),
    "task_id too long": (ValueError, {"task_id": "x" * (MAX_NAME_BYTES + 1)}),
    "task_id surrogate": (ValueError, {"task_id": "\udc80"}),
    "key not str": (TypeError, {"key": b"k"}),
    "key empty": (ValueError, {"key": ""}),
    "payload list": (TypeError, {"payload": [1]}),
    "payload none": (TypeError, {"payload": None}),
    "payload tuple inside": (TypeError, {"payload": {"x": (1, 2)}}),
    "payload nan": (ValueError, {"payload": {"x": float("nan")}}),
    "available_at negative": (ValueError, {"available_at": -1}),
    "available_at bool": (TypeError, {"available_at": True}),
    "available_at too big": (ValueError, {"available_at": MAX_INT + 1}),
    "max_attempts zero": (ValueError, {"max_attempts": 0}),
    "max_attempts float": (TypeError, {"max_attempts": 3.0}),
}


@pytest.mark.parametrize(("error", "change"), BAD_PUTS.values(), ids=BAD_PUTS.keys())
def test_bad_put_argument_is_refused(error: type[Exception], change: dict[str, Any]) -> None:
    arguments: dict[str, Any] = {"task_id": "t", "payload": {}, **change}
    with pytest.raises(error):
        put_op(**arguments)
    with pytest.raises(error):
        put_op_from_mapping(arguments)


def test_task_whose_record_could_exceed_a_frame_is_refused() -> None:
    fitting = MAX_FRAME_BYTES - RECORD_WORST_CASE_EXTRA - len(b'"t"') * 2 - len(b'{"x":""}')
    op = put_op("t", {"x": "a" * fitting})
    assert len(_data(op)) - DIGEST_BYTES + 6 + RECORD_WORST_CASE_EXTRA == MAX_FRAME_BYTES
    with pytest.raises(ValueError, match="too large"):
        put_op("t", {"x": "a" * (fitting + 1)})


# -- put_op_from_mapping --------------------------------------------------------


def test_mapping_item_uses_put_defaults() -> None:
    assert put_op_from_mapping({"task_id": "t", "payload": {"a": 1}}) == put_op("t", {"a": 1})
    full = {"task_id": "t", "payload": {}, "key": "k", "available_at": 4, "max_attempts": 2}
    assert put_op_from_mapping(types.MappingProxyType(full)) == put_op("t", {}, key="k", available_at=4, max_attempts=2)


@pytest.mark.parametrize(
    "item",
    [
        [("task_id", "t"), ("payload", {})],
        None,
        "task_id",
        {"task_id": "t"},
        {"payload": {}},
        {"task_id": "t", "payload": {}, "worker": "w"},
        {"task_id": "t", "payload": {}, 1: 2},
        {"task": "t", "payload": {}},
    ],
)
def test_mapping_item_that_is_not_a_put_call_is_type_error(item: Any) -> None:
    with pytest.raises(TypeError):
        put_op_from_mapping(item)


@SETTINGS
@given(
    st.dictionaries(
        st.sampled_from(["task_id", "payload", "key", "available_at", "max_attempts", "worker", "task", 1]),
        st.sampled_from(["t", {}, {"a": 1}, 0, 3, None]),
        max_size=5,
    )
)
def test_a_dict_item_is_judged_as_any_other_mapping(item: dict[Any, Any]) -> None:
    """The exact dict's shortcut (two names alone need no keys view) gives the general mapping path's answer."""
    answers = []
    for form in (item, types.MappingProxyType(item)):
        try:
            answers.append(put_op_from_mapping(form))
        except (TypeError, ValueError) as exc:
            answers.append((type(exc), str(exc)))
    assert answers[0] == answers[1]


# -- plan_puts -----------------------------------------------------------------------


def test_new_tasks_become_put_ops_in_input_order() -> None:
    state = State()
    put_ops = [put_op("b", {}), put_op("a", {}, key="ka")]
    plan, task_ids = plan_puts(state, put_ops)
    assert task_ids == ["b", "a"]
    assert plan.ops == put_ops and all(planned is given for planned, given in zip(plan.ops, put_ops, strict=True))
    commit(state, plan)
    assert state.lookup_key("ka") == "a"


def test_plan_puts_of_nothing_plans_nothing() -> None:
    assert plan_puts(State(), []) == (Plan([], []), [])


@pytest.mark.parametrize("status", [READY, LEASED, COMPLETED, DEAD])
def test_identical_retry_in_any_status_plans_no_op_and_returns_the_id(status: str) -> None:
    state = State()
    request = put_op("t", {"x": 1}, key="k", max_attempts=1)
    put_all(state, request)
    if status != READY:
        (token,) = reserve(state, "w", now=0, lease_seconds=5)
        if status == COMPLETED:
            commit(state, plan_ack(state, token, 1))
        elif status == DEAD:
            reserve(state, "w", now=5, lease_seconds=5)  # reaps: out of attempts
    assert view(state.tasks["t"]).status == status
    before = snapshot(state)
    assert plan_puts(state, [put_op("t", {"x": 1}, key="k", max_attempts=1)]) == (Plan([], []), ["t"])
    assert snapshot(state) == before


def test_known_key_with_another_identity_is_a_conflict() -> None:
    state = State()
    put_all(state, put_op("t", {"x": 1}, key="k"))
    for request in (
        put_op("t", {"x": 1.0}, key="k"),
        put_op("t", {"x": True}, key="k"),
        put_op("other", {"x": 1}, key="k"),
        put_op("t", {"x": 1}, key="k", available_at=1),
        put_op("t", {"x": 1}, key="k", max_attempts=4),
    ):
        with pytest.raises(KeyConflict):
            plan_puts(state, [request])


def test_new_key_for_an_existing_task_id_is_a_conflict() -> None:
    state = State()
    put_all(state, put_op("t", {}))
    with pytest.raises(KeyConflict):
        plan_puts(state, [put_op("t", {}, key="new-key")])


def test_completed_task_is_never_resurrected() -> None:
    state = State()
    put_all(state, put_op("t", {}))
    (token,) = reserve(state, "w", now=0, lease_seconds=5)
    commit(state, plan_ack(state, token, 1))
    with pytest.raises(KeyConflict):
        plan_puts(state, [put_op("t", {"again": True})])
    assert plan_puts(state, [put_op("t", {})]) == (Plan([], []), ["t"])


def test_identical_items_in_one_list_plan_one_op() -> None:
    state = State()
    plan, task_ids = plan_puts(state, [put_op("t", {}), put_op("u", {}), put_op("t", {})])
    assert task_ids == ["t", "u", "t"]
    assert [op["task"] for op in plan.ops] == ["t", "u"]
    commit(state, plan)


@pytest.mark.parametrize(
    "second",
    [
        put_op("t", {"x": 2}),  # same key, other identity
        put_op("t", {}, key="other"),  # same task id, new key
        put_op("u", {}, key="t"),  # key of the earlier item, other task
    ],
)
def test_conflict_with_an_earlier_item_fails_the_whole_list(second: Op) -> None:
    state = State()
    with pytest.raises(KeyConflict, match="item 2"):
        plan_puts(state, [put_op("a", {}), put_op("t", {}), second])
    assert len(state) == 0


@pytest.mark.parametrize(
    "item",
    [
        {"task_id": "t", "payload": {}},
        {**put_op("t", {}), "payload": {}},  # a put op whose payload is not put_op's carrier
        {"op": "ack", "task": "t", "generation": 1},
        ("t", {}),
    ],
)
def test_plan_puts_and_plan_put_take_only_put_ops(item: Any) -> None:
    with pytest.raises(TypeError, match="put_op"):
        plan_puts(State(), [item])
    with pytest.raises(TypeError, match="put_op"):
        plan_put(State(), item)


small_names = st.sampled_from(["a", "b", "c"])
#: Puts over three names and three payloads (1, 1.0 and True differ), so that retries and conflicts are common.
small_puts = st.builds(
    lambda task_id, key, value: put_op(task_id, {"v": value}, key=key),
    small_names,
    st.none() | small_names,
    st.sampled_from([1, 1.0, True]),
)


@SETTINGS
@given(
    st.lists(
        st.lists(small_puts, max_size=4),
        max_size=4,
    )
)
def test_plan_puts_agrees_with_a_model_and_its_ops_always_apply(batches: list[list[Op]]) -> None:
    state = State()
    model: dict[str, bytes] = {}  # key -> identity
    ids: set[str] = set()
    for batch in batches:
        scratch_model, scratch_ids = dict(model), set(ids)
        conflict = False
        for op in batch:
            if op["key"] in scratch_model:
                conflict = conflict or scratch_model[op["key"]] != identity(op)
            elif op["task"] in scratch_ids:
                conflict = True
            else:
                scratch_model[op["key"]] = identity(op)
                scratch_ids.add(op["task"])
        before = snapshot(state)
        if conflict:
            with pytest.raises(KeyConflict):
                plan_puts(state, batch)
            assert snapshot(state) == before
            continue
        task_ids = put_all(state, *batch)
        assert task_ids == [op["task"] for op in batch]
        model, ids = scratch_model, scratch_ids
        assert {record.key: state.identity(record.task_id) for record in map(view, state.tasks.values())} == model
    state.check_invariants()


# -- plan_reap -----------------------------------------------------------------------------


def leased_state(deadlines: dict[str, int]) -> State:
    state = State()
    put_all(state, *(put_op(task_id, {}) for task_id in deadlines))
    commit(
        state,
        [
            {"op": "lease", "task": task_id, "worker": "w", "generation": 1, "deadline": deadline}
            for task_id, deadline in deadlines.items()
        ],
    )
    return state


def test_reap_expires_every_overdue_lease_in_deadline_then_task_id_order() -> None:
    state = leased_state({"a": 5, "b": 3, "c": 3, "d": 9})
    before = snapshot(state)
    assert ops_of(plan_reap(state, 5, 3)) == [
        [
            {"op": "expire", "task": "b", "generation": 1},
            {"op": "expire", "task": "c", "generation": 1},
            {"op": "expire", "task": "a", "generation": 1},
        ]
    ]
    assert snapshot(state) == before
    assert ops_of(plan_reap(state, 2, 3)) == []


def test_reap_splits_only_where_one_transaction_would_exceed_the_frame_bound() -> None:
    state = leased_state({f"task-{i:03}": i for i in range(40)})
    everything = ops_of(plan_reap(state, 100, 3))[0]
    bound = 300
    transactions = ops_of(plan_reap(state, 100, 3, max_frame_bytes=bound))
    assert len(transactions) > 1
    assert [op for tx in transactions for op in tx] == everything
    for index, tx_ops in enumerate(transactions):
        assert body_size(tx_ops, 3 + index) <= bound
        if index + 1 < len(transactions):  # greedy: the next op would not have fit
            assert body_size(tx_ops + transactions[index + 1][:1], 3 + index) > bound
    for tx_ops in transactions:
        commit(state, tx_ops)
    assert state.counts()[READY] == 40


def test_reap_refuses_a_bound_too_small_for_one_op() -> None:
    state = leased_state({"a": 1})
    with pytest.raises(ValueError, match="cannot fit"):
        ops_of(plan_reap(state, 5, 3, max_frame_bytes=40))


def test_reap_refuses_a_bound_that_fits_an_op_only_under_a_shorter_sequence() -> None:
    state = leased_state({"a": 1, "b": 1})
    op_size = len(canonical_json({"op": "expire", "task": "a", "generation": 1}))
    bound = transaction_size([op_size], 9)  # one op fits as transaction 9, not as transaction 10
    with pytest.raises(ValueError, match="cannot fit"):
        ops_of(plan_reap(state, 5, 9, max_frame_bytes=bound))
    assert ops_of(plan_reap(state, 5, 8, max_frame_bytes=bound)) == [
        [{"op": "expire", "task": "a", "generation": 1}]
    ] + [[{"op": "expire", "task": "b", "generation": 1}]]


def test_reap_refuses_to_split_beyond_the_last_sequence() -> None:
    state = leased_state({"a": 1, "b": 1})
    assert len(ops_of(plan_reap(state, 5, MAX_INT))) == 1
    with pytest.raises(ValueError, match="exhausted"):
        ops_of(plan_reap(state, 5, MAX_INT, max_frame_bytes=80))


@SETTINGS
@given(
    st.dictionaries(st.text("abcé\x00", min_size=1, max_size=6), st.integers(0, 20), min_size=1, max_size=25),
    st.integers(0, 20),
    st.integers(110, 400),
    st.sampled_from([1, 9, 10, 99_999, MAX_INT - 30]),
)
def test_reap_transactions_respect_the_bound_and_apply_in_order(
    deadlines: dict[str, int], now: int, bound: int, first_seq: int
) -> None:
    state = leased_state(deadlines)
    transactions = ops_of(plan_reap(state, now, first_seq, max_frame_bytes=bound))
    expected = sorted((deadline, task_id) for task_id, deadline in deadlines.items() if deadline <= now)
    assert [op["task"] for tx in transactions for op in tx] == [task_id for _, task_id in expected]
    for index, tx_ops in enumerate(transactions):
        assert tx_ops and body_size(tx_ops, first_seq + index) <= bound
    for tx_ops in transactions:
        commit(state, tx_ops)
    assert state.peek_expired(now) == []


@SETTINGS
@given(
    st.lists(st.dictionaries(st.text(max_size=3), st.integers() | st.text(max_size=5)), max_size=6),
    st.integers(1, MAX_INT),
)
def test_transaction_size_is_the_exact_body_size(tx_ops: list[dict[str, Any]], seq: int) -> None:
    sizes = [len(canonical_json(op)) for op in tx_ops]
    assert transaction_size(sizes, seq) == body_size(tx_ops, seq)


@pytest.mark.parametrize(("now", "first_seq"), [(-1, 1), (True, 1), (0, 0), (0, 1.5)])
def test_reap_arguments_are_checked(now: Any, first_seq: Any) -> None:
    with pytest.raises((TypeError, ValueError)):
        ops_of(plan_reap(State(), now, first_seq))


# -- plan_lease ------------------------------------------------------------------------------


def ready_state(available: dict[str, int]) -> State:
    state = State()
    put_all(state, *(put_op(task_id, {}, available_at=at) for task_id, at in available.items()))
    return state


def test_lease_takes_due_tasks_in_available_at_then_task_id_order_up_to_limit() -> None:
    state = ready_state({"c": 1, "b": 2, "a": 2, "z": 0, "late": 10})
    before = snapshot(state)
    assert [op["task"] for op in plan_lease(state, "w", 2, 5, 10, 2).ops] == ["z", "c", "a", "b"]
    assert [op["task"] for op in plan_lease(state, "w", 2, 5, 2, 2).ops] == ["z", "c"]
    assert plan_lease(state, "w", 2, 5, 1, 2).ops == [
        {"op": "lease", "task": "z", "worker": "w", "generation": 1, "deadline": 7}
    ]
    assert snapshot(state) == before


def test_lease_of_nothing_due_plans_nothing() -> None:
    assert plan_lease(ready_state({"a": 5}), "w", 4, 5, 3, 2).ops == []
    assert plan_lease(State(), "w", 4, 5, 3, 1).ops == []


def test_lease_generation_is_one_more_than_the_tasks() -> None:
    state = ready_state({"t": 0})
    for generation in (1, 2, 3):
        (op,) = plan_lease(state, "w", generation * 10, 5, 1, state.last_seq + 1).ops
        assert op["generation"] == generation and op["deadline"] == generation * 10 + 5
        commit(state, [op])
        commit(state, [{"op": "release", "task": "t", "generation": generation, "available_at": 0}])


def test_lease_truncates_to_what_fits_in_one_frame() -> None:
    state = ready_state({f"task-{i:03}": i for i in range(30)})
    everything = plan_lease(state, "w", 100, 5, 30, 2).ops
    bound = 500
    fitting = plan_lease(state, "w", 100, 5, 30, 2, max_frame_bytes=bound).ops
    assert 0 < len(fitting) < len(everything)
    assert fitting == everything[: len(fitting)]
    assert body_size(fitting, 2) <= bound < body_size(everything[: len(fitting) + 1], 2)
    commit(state, fitting)
    assert state.counts()[LEASED] == len(fitting)


def test_lease_fills_a_frame_exactly_as_far_as_every_bound_allows() -> None:
    state = ready_state({f"t{i}": i for i in range(12)})
    everything = plan_lease(state, "worker", 100, 5, 12, 7).ops
    for bound in range(body_size(everything[:1], 7), body_size(everything, 7) + 2):
        fitting = plan_lease(state, "worker", 100, 5, 12, 7, max_frame_bytes=bound).ops
        assert fitting == everything[: len(fitting)]
        assert body_size(fitting, 7) <= bound
        if len(fitting) < len(everything):
            assert body_size(everything[: len(fitting) + 1], 7) > bound


def test_reap_splits_exactly_as_every_bound_requires() -> None:
    state = leased_state({f"t{i}": i for i in range(12)})
    (everything,) = ops_of(plan_reap(state, 100, 9))
    smallest = max(body_size([op], 9 + len(everything)) for op in everything)  # one op per transaction
    for bound in range(smallest, body_size(everything, 9) + 2):
        transactions = ops_of(plan_reap(state, 100, 9, max_frame_bytes=bound))
        assert [op for tx in transactions for op in tx] == everything
        for index, tx_ops in enumerate(transactions):
            assert body_size(tx_ops, 9 + index) <= bound
            if index + 1 < len(transactions):
                assert body_size(tx_ops + transactions[index + 1][:1], 9 + index) > bound


def test_the_op_size_bounds_that_skip_measuring_are_exact_worst_cases() -> None:
    worst_name = "\x01" * MAX_NAME_BYTES  # every byte a 6-byte escape
    lease_op = {"op": "lease", "task": worst_name, "worker": worst_name, "generation": MAX_INT, "deadline": MAX_INT}
    lease_op["at"] = MAX_INT  # a rate-limited queue's lease carries its time (lanes)
    assert len(canonical_json(lease_op)) == OP_KINDS["lease"].max_json
    expire_op = {"op": "expire", "task": worst_name, "generation": MAX_INT}
    assert len(canonical_json(expire_op)) == OP_KINDS["expire"].max_json


def test_lease_refuses_a_bound_too_small_for_one_op() -> None:
    with pytest.raises(ValueError, match="cannot fit"):
        plan_lease(ready_state({"a": 0}), "w", 0, 5, 1, 2, max_frame_bytes=50)


def test_reserve_reaps_first_so_an_expired_task_can_be_leased_again() -> None:
    state = ready_state({"t": 0})
    (first,) = reserve(state, "w1", now=0, lease_seconds=10)
    assert reserve(state, "w2", now=9, lease_seconds=10) == []
    (second,) = reserve(state, "w2", now=10, lease_seconds=10)
    assert (second.worker, second.generation, second.attempts, second.deadline) == ("w2", 2, 2, 20)
    assert view(state.tasks["t"]).available_at == 10  # the expiry moved it to the old deadline
    with pytest.raises(StaleLease):
        plan_ack(state, first, 11)


BAD_RESERVES: dict[str, tuple[type[Exception], tuple[Any, ...]]] = {
    "worker empty": (ValueError, ("", 0, 1, 1)),
    "worker not str": (TypeError, (None, 0, 1, 1)),
    "worker too long": (ValueError, ("w" * (MAX_NAME_BYTES + 1), 0, 1, 1)),
    "now negative": (ValueError, ("w", -1, 1, 1)),
    "now bool": (TypeError, ("w", False, 1, 1)),
    "lease_seconds zero": (ValueError, ("w", 0, 0, 1)),
    "lease_seconds float": (TypeError, ("w", 0, 1.0, 1)),
    "limit zero": (ValueError, ("w", 0, 1, 0)),
    "limit bool": (TypeError, ("w", 0, 1, True)),
}


@pytest.mark.parametrize(("error", "arguments"), BAD_RESERVES.values(), ids=BAD_RESERVES.keys())
def test_bad_reserve_arguments_are_refused(error: type[Exception], arguments: tuple[Any, ...]) -> None:
    with pytest.raises(error):
        validate_reserve_args(*arguments)
    with pytest.raises(error):
        worker, now, lease_seconds, limit = arguments
        plan_lease(ready_state({"a": 0}), worker, now, lease_seconds, limit, 2)


def test_largest_deadline_is_accepted() -> None:
    validate_reserve_args("w", MAX_INT - 1, 1, MAX_INT)
    (op,) = plan_lease(ready_state({"a": 0}), "w", MAX_INT - 1, 1, MAX_INT, 2).ops
    assert op["deadline"] == MAX_INT


# -- plan_ack / plan_release -------------------------------------------------------------------


def leased_token(max_attempts: int = 3) -> tuple[State, Lease]:
    state = State()
    put_all(state, put_op("t", {"x": 1}, max_attempts=max_attempts))
    (token,) = reserve(state, "w", now=10, lease_seconds=5)
    return state, token


def test_ack_and_release_of_a_live_lease_plan_one_op() -> None:
    state, token = leased_token()
    before = snapshot(state)
    assert plan_ack(state, token, 14).ops == [{"op": "ack", "task": "t", "generation": 1}]
    assert plan_release(state, token, 14).ops == [{"op": "release", "task": "t", "generation": 1, "available_at": 14}]
    assert plan_release(state, token, 14, 6).ops == [
        {"op": "release", "task": "t", "generation": 1, "available_at": 20}
    ]
    assert snapshot(state) == before


def test_only_task_id_worker_and_generation_of_the_token_matter() -> None:
    state, token = leased_token()
    altered = dataclasses.replace(token, deadline=10**6, attempts=99, payload={"forged": True})
    commit(state, plan_ack(state, altered, 14))
    assert view(state.tasks["t"]).status == COMPLETED


def test_release_at_the_last_attempt_kills_the_task() -> None:
    state, token = leased_token(max_attempts=1)
    commit(state, plan_release(state, token, 12, 3))
    found = state.get_task("t")
    assert found is not None and (found.status, found.available_at) == (DEAD, 15)


def _stale_cases() -> dict[str, Any]:
    def wrong_worker(state: State, token: Lease) -> Lease:
        return dataclasses.replace(token, worker="other")

    def wrong_generation(state: State, token: Lease) -> Lease:
        return dataclasses.replace(token, generation=2)

    def acked(state: State, token: Lease) -> Lease:
        commit(state, plan_ack(state, token, 11))
        return token

    def released(state: State, token: Lease) -> Lease:
        commit(state, plan_release(state, token, 11))
        return token

    def released_and_leased_again(state: State, token: Lease) -> Lease:
        commit(state, plan_release(state, token, 11))
        reserve(state, "w", now=12, lease_seconds=5)
        return token

    def expired(state: State, token: Lease) -> Lease:
        reserve(state, "other", now=15, lease_seconds=5)
        return token

    def unknown_task(state: State, token: Lease) -> Lease:
        return dataclasses.replace(token, task_id="nope")

    def overlong_names(state: State, token: Lease) -> Lease:
        return dataclasses.replace(token, task_id="t" * 5000, worker="w" * 5000)

    def surrogate_name(state: State, token: Lease) -> Lease:
        return dataclasses.replace(token, worker="\ud800")

    def task_id_not_str(state: State, token: Lease) -> Lease:
        return dataclasses.replace(token, task_id=["t"])  # type: ignore[arg-type]

    def worker_not_str(state: State, token: Lease) -> Lease:
        return dataclasses.replace(token, worker=None)  # type: ignore[arg-type]

    def generation_bool(state: State, token: Lease) -> Lease:
        return dataclasses.replace(token, generation=True)

    def generation_str(state: State, token: Lease) -> Lease:
        return dataclasses.replace(token, generation="1")  # type: ignore[arg-type]

    return {name: case for name, case in locals().items() if callable(case)}


STALE_CASES = _stale_cases()


@pytest.mark.parametrize("make_stale", STALE_CASES.values(), ids=STALE_CASES.keys())
@pytest.mark.parametrize("planner", ["ack", "release"])
def test_token_that_no_longer_owns_its_task_is_stale_and_changes_nothing(make_stale: Any, planner: str) -> None:
    state, token = leased_token()
    stale = make_stale(state, token)
    before = snapshot(state)
    with pytest.raises(StaleLease):
        if planner == "ack":
            plan_ack(state, stale, 14)
        else:
            plan_release(state, stale, 14, 1)
    assert snapshot(state) == before


@pytest.mark.parametrize("now", [15, 16, MAX_INT])
def test_ack_or_release_at_or_after_the_deadline_is_stale(now: int) -> None:
    state, token = leased_token()  # deadline 15
    with pytest.raises(StaleLease):
        plan_ack(state, token, now)
    with pytest.raises(StaleLease):
        plan_release(state, token, now)


def test_times_need_not_be_monotonic() -> None:
    state, token = leased_token()  # leased at 10, deadline 15
    commit(state, plan_release(state, token, 0, 2))
    assert view(state.tasks["t"]).available_at == 2


@pytest.mark.parametrize("lease", [None, {"task_id": "t"}, ("t", "w", 1)])
def test_a_token_that_is_not_a_lease_is_type_error(lease: Any) -> None:
    state, _ = leased_token()
    with pytest.raises(TypeError, match="Lease"):
        plan_ack(state, lease, 11)
    with pytest.raises(TypeError, match="Lease"):
        plan_release(state, lease, 11)


BAD_TIMES: dict[str, tuple[type[Exception], int | Any, int | Any]] = {
    "now negative": (ValueError, -1, 0),
    "now bool": (TypeError, True, 0),
    "now float": (TypeError, 11.0, 0),
    "delay negative": (ValueError, 11, -1),
    "delay bool": (TypeError, 11, False),
    "now + delay overflows": (ValueError, 11, MAX_INT - 10),
}


@pytest.mark.parametrize(("error", "now", "delay"), BAD_TIMES.values(), ids=BAD_TIMES.keys())
def test_bad_times_are_refused_before_staleness(error: type[Exception], now: Any, delay: Any) -> None:
    state, live = leased_token()
    stale = dataclasses.replace(live, worker="other")
    for token in (live, stale):
        with pytest.raises(error):
            plan_release(state, token, now, delay)
        if type(delay) is int and delay == 0:
            with pytest.raises(error):
                plan_ack(state, token, now)


def test_largest_release_time_is_accepted() -> None:
    state = State()
    put_all(state, put_op("t", {}))
    (token,) = reserve(state, "w", now=0, lease_seconds=MAX_INT)
    (op,) = plan_release(state, token, 5, MAX_INT - 5).ops
    assert op["available_at"] == MAX_INT
    commit(state, [op])


def test_planned_ops_use_the_stored_names() -> None:
    state, token = leased_token()
    (op,) = plan_ack(state, token, 11).ops
    assert op["task"] is view(state.tasks["t"]).task_id


# -- the planners and apply agree ---------------------------------------------------------------


@SETTINGS
@given(st.data())
def test_any_sequence_of_planned_operations_applies_cleanly(data: st.DataObject) -> None:
    state = State()
    tokens: list[Lease] = []
    now = 0
    for _ in range(data.draw(st.integers(1, 25))):
        now = data.draw(st.integers(0, 40))
        action = data.draw(st.sampled_from(["put", "reserve", "ack", "release"]))
        try:
            if action == "put":
                task_id = data.draw(st.sampled_from("abcdef"))
                request = put_op(
                    task_id, {"n": data.draw(st.integers(0, 2))}, available_at=data.draw(st.integers(0, 30))
                )
                put_all(state, request)
            elif action == "reserve":
                tokens += reserve(
                    state,
                    data.draw(st.sampled_from(["w1", "w2"])),
                    now,
                    data.draw(st.integers(1, 10)),
                    data.draw(st.integers(1, 3)),
                )
            elif tokens:
                token = data.draw(st.sampled_from(tokens))
                if action == "ack":
                    commit(state, plan_ack(state, token, now))
                else:
                    commit(state, plan_release(state, token, now, data.draw(st.integers(0, 5))))
        except (KeyConflict, StaleLease):
            pass
        except InvalidTransaction as exc:  # a planner produced an op apply refuses
            raise AssertionError(f"planned transaction refused: {exc}") from exc
        state.check_invariants()


def test_module_exports_what_the_queue_uses() -> None:
    for name in ops.__all__:
        assert hasattr(ops, name)


# -- a plan's frame body equals canonical JSON ----------------------------------------


json_payloads = st.dictionaries(
    st.text(max_size=5),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
        max_leaves=8,
    ),
    max_size=4,
)


@settings(max_examples=60, deadline=None)
@given(
    payloads=st.lists(json_payloads, min_size=1, max_size=4),
    seq=st.integers(min_value=1, max_value=2**63 - 1),
)
def test_a_plans_body_is_the_canonical_json_of_its_transaction(payloads: list[dict[str, Any]], seq: int) -> None:
    put_ops = [
        put_op(f"t\u00e9{index}", payload, key=f"k{index}" if index % 2 else None, available_at=index)
        for index, payload in enumerate(payloads)
    ]
    plan, _ = plan_puts(State(), put_ops)
    assert plan.body(seq) == canonical_json({"seq": seq, "ops": [plain(op) for op in plan.ops]})
    state = ready_state({'w"\\': 0, "\n": 1, "\u2028": 2})
    for lease in (plan_lease(state, 'w"\\', 5, seq - 5 if seq > 5 else 1, 3, 4), plan_lease(state, "w", 5, 1, 1, seq)):
        assert lease.ops and lease.body(seq) == canonical_json({"seq": seq, "ops": lease.ops})


# Names UTF-8 can encode: anything but lone surrogates.
storable_names = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=8)


@settings(max_examples=100, deadline=None)
@given(
    task_id=storable_names,
    key=st.none() | storable_names,
    payload=st.dictionaries(
        st.text(max_size=4),
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
        max_size=4,
    ),
    available_at=st.integers(min_value=0, max_value=2**63 - 1),
    max_attempts=st.integers(min_value=1, max_value=2**63 - 1),
    seq=st.integers(min_value=1, max_value=2**63 - 1),
)
def test_a_put_plans_op_json_is_its_canonical_json(
    task_id: str, key: str | None, payload: dict[str, Any], available_at: int, max_attempts: int, seq: int
) -> None:
    op = put_op(task_id, payload, key=key, available_at=available_at, max_attempts=max_attempts)
    plan = plan_put(State(), op)
    assert plan is not None
    assert plan.op_json == [canonical_json({**op, "payload": payload})]
    assert plan.body(seq) == canonical_json({"seq": seq, "ops": [{**op, "payload": payload}]})
    twice, _ = plan_puts(State(), [op, put_op(task_id + "2", payload, key=None if key is None else key + "2")])
    assert twice.body(seq) == canonical_json({"seq": seq, "ops": [plain(planned) for planned in twice.ops]})


@settings(max_examples=100, deadline=None)
@given(
    task_id=storable_names,
    payload=st.dictionaries(st.text(max_size=4), st.none() | st.integers() | st.text(), max_size=4),
)
def test_a_put_at_its_defaults_has_the_op_json_of_its_kinds_splice(task_id: str, payload: dict[str, Any]) -> None:
    usual = put_op(task_id, payload)  # every argument at its default: the op's JSON from the default put's template
    spliced = OP_KINDS["put"].splice(
        available_at=0,
        key=canonical_json(task_id),
        max_attempts=3,
        payload=canonical_json(payload),
        task=canonical_json(task_id),
    )
    assert plan_put(State(), usual) == Plan([usual], [spliced])
    assert spliced == canonical_json({**usual, "payload": payload})


PUT_ITEMS = st.fixed_dictionaries(
    {
        "task_id": st.sampled_from(["a", "b", "c"]) | st.just(""),
        "payload": st.dictionaries(st.sampled_from(["x", "y", "z"]), st.integers(0, 3) | st.text(max_size=3))
        | st.sampled_from([{"s": "\ud800"}, {"s": "},{"}, {"z": 1, "a": 2}, [], None]),
    },
    optional={"key": st.sampled_from(["k", "a"]), "max_attempts": st.integers(0, 2), "unknown": st.none()},
)


def _ops_or_error(build: Any, items: list[Any]) -> Any:
    try:
        return build(items)
    except (TypeError, ValueError) as exc:
        return type(exc), str(exc)


@settings(max_examples=150, deadline=None)
@given(st.lists(PUT_ITEMS | st.sampled_from([None, [("task_id", "a")]]), max_size=6))
def test_put_ops_of_a_batch_are_the_ops_of_its_items_one_by_one(items: list[Any]) -> None:
    """Encoding the batch's payloads together changes no op and no error (the first bad item's, as one by one)."""
    one_by_one = _ops_or_error(lambda items: [put_op_from_mapping(item) for item in items], items)
    assert _ops_or_error(ops.put_ops_from_mappings, items) == one_by_one


def test_queue_applies_only_plans_and_apply_refuses_a_carrier_outside_one() -> None:
    """A put op's payload carrier is admitted only with `_planned`: anywhere else it is not a JSON object."""
    op = put_op("t", {"x": 1})
    with pytest.raises(InvalidTransaction, match="payload must be a dict"):
        apply(State(), {"seq": 1, "ops": [op]})


@SETTINGS
@given(st.lists(small_puts, max_size=8))
def test_plan_put_answers_what_plan_puts_of_one_put_answers(put_ops: list[Op]) -> None:
    state = State()
    for given_op in put_ops:
        try:
            expected = plan_puts(state, [given_op])
        except KeyConflict as exc:
            with pytest.raises(KeyConflict, match=re.escape(str(exc))):
                plan_put(state, given_op)
            continue
        plan = plan_put(state, given_op)
        assert (Plan([], []) if plan is None else plan) == expected[0]
        if plan is not None:
            commit(state, plan)
