"""`apply`'s staging of `plan_puts`' new tasks (`_fresh_puts`): the state and answers of `stage`'s, any batch."""

from __future__ import annotations

import re
import types
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walqueue.engine import ops
from walqueue.engine.ops import Plan, plan_puts, put_op_from_mapping
from walqueue.engine.records import view
from walqueue.engine.state import InvalidTransaction, State, apply
from walqueue.engine.types import KeyConflict

NAMES = st.sampled_from(["a", "b", "c", "d", "e", "f"])
ITEMS = st.fixed_dictionaries(
    {"task_id": NAMES, "payload": st.dictionaries(st.sampled_from(["x", "y"]), st.integers(0, 3), max_size=2)},
    optional={
        "key": NAMES,
        "available_at": st.integers(0, 5),
        "max_attempts": st.integers(1, 4),
        "queue": st.sampled_from(["default", "mail"]),
        "priority": st.integers(-1, 1),
        "put_at": st.integers(0, 7),
    },
)


def _state(history: list[dict[str, Any]]) -> State:
    """A state after `history` was put one item at a time (the conflicts among them skipped)."""
    state = State()
    for item in history:
        try:
            plan, _ = plan_puts(state, [put_op_from_mapping(item)])
        except KeyConflict:
            continue
        if plan.ops:
            apply(state, {"seq": state.last_seq + 1, "ops": plan.ops}, _planned=True)
    return state


def _plan(state: State, batch: list[dict[str, Any]]) -> Plan | None:
    """`plan_puts`' plan of `batch`'s items against `state`, or None for a `KeyConflict`."""
    try:
        return plan_puts(state, [put_op_from_mapping(item) for item in batch])[0]
    except KeyConflict:
        return None


@settings(max_examples=150, deadline=None)
@given(st.lists(ITEMS, max_size=6), st.lists(ITEMS, max_size=8))
def test_fresh_puts_leave_the_state_the_general_staging_leaves(
    history: list[dict[str, Any]], batch: list[dict[str, Any]]
) -> None:
    fresh, general = _state(history), _state(history)
    plan = _plan(fresh, batch)
    if plan is None or not plan.ops:
        return
    assert plan.fresh_puts
    tx = {"seq": fresh.last_seq + 1, "ops": plan.ops}
    created = apply(fresh, tx, _planned=True, _fresh_puts=True)
    assert list(created) == list(apply(general, dict(tx), _planned=True)) == [op["task"] for op in plan.ops]
    assert fresh == general
    assert fresh.indexes().lanes.describe(fresh.tasks) == general.indexes().lanes.describe(general.tasks)
    fresh.check_invariants()


# Items in the default lane without a put time: the batch `stage_new_puts` checks whole and builds column-wise.
MORE_NAMES = st.sampled_from(["a", "b", "g", "h", "i", "j", "k", "l"])  # (a few the history may know)
DEFAULT_LANE_ITEMS = st.fixed_dictionaries(
    {"task_id": MORE_NAMES, "payload": st.dictionaries(st.sampled_from(["x", "y"]), st.integers(0, 3), max_size=2)},
    optional={"key": MORE_NAMES, "available_at": st.integers(0, 5), "max_attempts": st.integers(1, 4)},
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(ITEMS, max_size=6),
    st.lists(DEFAULT_LANE_ITEMS, min_size=2, max_size=6, unique_by=lambda item: item.get("key", item["task_id"])),
)
def test_a_default_lane_batch_staged_whole_leaves_the_state_the_general_staging_leaves(
    history: list[dict[str, Any]], batch: list[dict[str, Any]]
) -> None:
    fresh, general = _state(history), _state(history)
    plan = _plan(fresh, batch)
    if plan is None or len(plan.ops) < 2:
        return
    tx = {"seq": fresh.last_seq + 1, "ops": plan.ops}
    assert list(apply(fresh, tx, _planned=True, _fresh_puts=True)) == list(apply(general, dict(tx), _planned=True))
    assert fresh == general
    assert [fresh.tasks[task_id] for task_id in fresh.tasks] == [general.tasks[task_id] for task_id in general.tasks]
    fresh.check_invariants()


@pytest.mark.parametrize(
    ("first", "second", "reason"),
    [
        ({"task_id": "t", "payload": {}}, {"task_id": "t", "payload": {"n": 1}}, "op 1 (put): task 't' already exists"),
        ({"task_id": "t", "payload": {}, "key": "k"}, {"task_id": "u", "payload": {}, "key": "k"}, "op 1 (put): key"),
    ],
)
def test_fresh_puts_refuse_what_the_state_refuses_and_change_nothing(
    first: dict[str, Any], second: dict[str, Any], reason: str
) -> None:
    # Planned against an empty state, applied to one that already holds the first item's task: the planner's
    # verdict is stale, and the staging still refuses the whole transaction.
    items = [{"task_id": "other", "payload": {}}, second]
    ops = plan_puts(State(), [put_op_from_mapping(item) for item in items])[0].ops
    state = _state([first])
    before = _state([first])
    with pytest.raises(InvalidTransaction, match=re.escape(f"transaction 2 {reason}")):
        apply(state, {"seq": 2, "ops": ops}, _planned=True, _fresh_puts=True)
    assert state == before
    state.check_invariants()


def _planned(state: State, batch: list[dict[str, Any]]) -> tuple[list[bytes], list[str]] | str:
    """What `plan_puts` makes of `batch`: the plan's op JSON and the task ids, or the conflict's message."""
    try:
        plan, task_ids = plan_puts(state, [put_op_from_mapping(item) for item in batch])
    except KeyConflict as exc:
        return str(exc)
    return plan.op_json, task_ids


@settings(max_examples=200, deadline=None)
@given(st.lists(ITEMS, max_size=6), st.lists(ITEMS, max_size=8))
def test_a_batch_judged_whole_gets_the_verdict_of_the_items_judged_one_by_one(
    history: list[dict[str, Any]], batch: list[dict[str, Any]]
) -> None:
    state = _state(history)
    whole = _planned(state, batch)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ops, "_fresh_batch", lambda state, put_ops: None)
        assert _planned(state, batch) == whole


@settings(max_examples=100, deadline=None)
@given(st.lists(ITEMS, max_size=6), st.lists(ITEMS, min_size=1, max_size=8))
def test_put_many_leaves_the_state_the_puts_one_by_one_leave(
    history: list[dict[str, Any]], batch: list[dict[str, Any]]
) -> None:
    plan, apart = _plan(together := _state(history), batch), _state(history)
    for count, item in enumerate(batch, 1):
        try:
            plan_puts(apart, [put_op_from_mapping(item)])
        except KeyConflict:
            assert plan is None  # a conflict one by one is a conflict of the batch
            return
        apart = _state([*history, *batch[:count]])
    assert plan is not None
    if plan.ops:
        apply(together, {"seq": together.last_seq + 1, "ops": plan.ops}, _planned=True, _fresh_puts=True)
    assert {task_id: view(record).fields() for task_id, record in together.tasks.items()} == {
        task_id: view(record).fields() for task_id, record in apart.tasks.items()
    }
    together.check_invariants()


@pytest.mark.parametrize(
    "spoil",
    [
        lambda op: {**op, "op": []},  # unhashable: refused by the loop's message, not by a set
        lambda op: {**op, "op": "lease"},
        lambda op: {key: value for key, value in op.items() if key != "payload"},
        lambda op: {**op, "payload": {"n": 1}},
        types.MappingProxyType,
    ],
)
def test_a_batch_with_an_op_not_from_put_op_is_refused_as_the_loop_refuses_it(spoil: Any) -> None:
    good, other = (put_op_from_mapping({"task_id": name, "payload": {}}) for name in ("a", "b"))
    with pytest.raises(TypeError, match="plan_puts takes put ops built by put_op"):
        plan_puts(State(), [good, spoil(other)])
