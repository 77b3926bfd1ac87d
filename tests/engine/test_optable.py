"""The table of op kinds (`state.OP_KINDS`) and what optable.py derives from each row.

Every test here iterates over the table itself, so a new kind is covered
the moment it is declared: its keys, its JSON template against
`canonical_json`, its worst-case size, and that `apply` refuses a wrong
value in each of its fields.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walqueue.engine.optable import CARRIER_SEPARATOR, Field, OpKind
from walqueue.engine.state import OP_KEYS, OP_KINDS, STATUSES, InvalidTransaction, State, apply
from walqueue.engine.validate import (
    ERROR_MESSAGE_BYTES,
    ERROR_TYPE_BYTES,
    MAX_INT,
    MAX_NAME_BYTES,
    MAX_RESULT_BYTES,
    TRACEBACK_BYTES,
)
from walqueue.format import OP_NAMES
from walqueue.format.canonical import canonical_json

KINDS = list(OP_KINDS.values())


class _Carrier:
    """A stand-in for a planned put's payload carrier: what `OpKind.encode` reads from it."""

    def __init__(self, payload: Any) -> None:
        self.payload = payload
        self.canonical = canonical_json(payload)


class _PutCarrier(bytes):
    """A stand-in for a planned put's carrier (putops.py): what `OpKind.encode` reads after its separator."""

    payload: Any


def _put_carrier(payload: Any) -> _PutCarrier:
    carrier = _PutCarrier(b"{}" + CARRIER_SEPARATOR + bytes(32) + canonical_json(payload))
    carrier.payload = payload
    return carrier


names = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=8) | st.sampled_from(
    ['"', "\\", "\x00", "\u2028", "%", "%d", "é" * 3]
)
payloads = st.dictionaries(
    st.text(max_size=4), st.none() | st.booleans() | st.integers() | st.text(max_size=4), max_size=3
)
VALUES: dict[Field, st.SearchStrategy[Any]] = {
    Field.NAME: names,
    Field.INT: st.integers(0, MAX_INT),
    Field.POSITIVE_INT: st.integers(1, MAX_INT),
    Field.PAYLOAD: payloads.map(_put_carrier),
    Field.ERROR_TYPE: names,
    Field.ERROR_MESSAGE: st.text(st.characters(exclude_categories=["Cs"]), max_size=8) | st.sampled_from(["", "%s"]),
    Field.TRACEBACK: st.text(st.characters(exclude_categories=["Cs"]), max_size=8) | st.sampled_from(["", "%s"]),
    Field.RESULT: (payloads | st.lists(st.integers(), max_size=3) | st.text(max_size=4) | st.none()).map(_Carrier),
    Field.QUEUE: st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}", fullmatch=True),
    Field.PRIORITY: st.integers(-100, 100),
    Field.TRUE: st.just(True),
}
#: The worst case of each field kind that has one (`OpKind.max_json`).
WORST: dict[Field, Any] = {
    Field.NAME: "\x01" * MAX_NAME_BYTES,
    Field.INT: MAX_INT,
    Field.POSITIVE_INT: MAX_INT,
    Field.ERROR_TYPE: "\x01" * ERROR_TYPE_BYTES,
    Field.ERROR_MESSAGE: "\x01" * ERROR_MESSAGE_BYTES,
    Field.TRACEBACK: "\x01" * TRACEBACK_BYTES,
    Field.RESULT: "x" * (MAX_RESULT_BYTES - 2),
    Field.QUEUE: "q" * 64,
    Field.PRIORITY: -100,
    Field.TRUE: True,
}
#: A value of the right JSON shape that each kind refuses (checked outside a planner).
WRONG: dict[Field, list[Any]] = {
    Field.NAME: ["", 1, None, "x" * (MAX_NAME_BYTES + 1)],
    Field.INT: [-1, True, 1.0, MAX_INT + 1, None],
    Field.POSITIVE_INT: [0, True, 1.0, MAX_INT + 1, None],
    Field.PAYLOAD: [[], None, 1, "{}"],
    Field.RESULT: [{1, 2}, float("nan"), "x" * MAX_RESULT_BYTES],
    Field.ERROR_TYPE: ["", 1, None, "x" * (ERROR_TYPE_BYTES + 1), "\ud800"],
    Field.ERROR_MESSAGE: [None, 1, b"", "x" * (ERROR_MESSAGE_BYTES + 1), "é" * (ERROR_MESSAGE_BYTES // 2 + 1)],
    Field.TRACEBACK: [None, 1, b"", "x" * (TRACEBACK_BYTES + 1), "\ud800"],
    Field.QUEUE: ["", 1, None, "a,b", "q" * 65, "-a", "é"],
    Field.PRIORITY: [101, -101, True, 1.0, None, "1"],
    Field.TRUE: [False, 1, None, "true"],
}


def _plain(op: dict[str, Any]) -> dict[str, Any]:
    return {name: value.payload if isinstance(value, (_Carrier, _PutCarrier)) else value for name, value in op.items()}


def test_the_format_layers_op_names_are_the_tables() -> None:
    """The one list kept in step by hand (see state.py's WARNING)."""
    assert frozenset(OP_KINDS) == OP_NAMES


def test_every_kind_has_its_name_task_and_declared_fields_as_keys() -> None:
    for name, kind in OP_KINDS.items():
        assert kind.name == name
        subject = () if kind.store else (kind.subject[0],)  # a store-level kind's ops name nothing
        assert kind.keys == {"op", *subject, *(field for field, _ in kind.fields)}
        assert kind.all_keys == kind.keys | {field for field, _, _ in kind.optional}
        assert OP_KEYS[name] == kind.keys
        assert kind.statuses is None or (kind.statuses and kind.statuses <= set(STATUSES))


@pytest.mark.parametrize("kind", KINDS, ids=[kind.name for kind in KINDS])
@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_every_kinds_encoding_is_the_canonical_json_of_its_op(kind: OpKind, data: st.DataObject) -> None:
    op = {"op": kind.name} if kind.store else {"op": kind.name, kind.subject[0]: data.draw(VALUES[kind.subject[1]])}
    for field, field_kind in kind.fields:
        op[field] = data.draw(VALUES[field_kind])
    for field, field_kind, default in kind.optional:  # present (and not its default) or absent
        if data.draw(st.booleans()):
            op[field] = data.draw(VALUES[field_kind].filter(lambda value, d=default: value != d))
    encoded = kind.encode(op)
    assert encoded == canonical_json(_plain(op))
    assert json.loads(encoded) == _plain(op)
    if kind.max_json is not None:
        assert len(encoded) <= kind.max_json


@pytest.mark.parametrize("kind", KINDS, ids=[kind.name for kind in KINDS])
def test_every_bounded_kinds_size_bound_is_its_exact_worst_case(kind: OpKind) -> None:
    kinds = dict(kind.fields)
    if Field.PAYLOAD in kinds.values():
        assert kind.max_json is None  # a payload's size is bounded by the frame, not by the kind
        return
    worst = {"op": kind.name, **({} if kind.store else {kind.subject[0]: WORST[kind.subject[1]]})}
    worst.update({field: WORST[k] for field, k in kinds.items()})
    worst.update({field: WORST[k] for field, k, _ in kind.optional})
    if kind.store or kind.subject[1] is Field.NAME:
        assert kind.max_json == len(canonical_json(worst))
    else:  # a queue name is ASCII: its bound is its 64 characters and quotes
        assert kind.max_json is not None and kind.max_json >= len(canonical_json(worst))


#: The ops that must follow an op of a kind in its transaction.
_COMPANIONS: dict[str, list[dict[str, Any]]] = {"result": [{"op": "ack", "task": "t", "generation": 1}]}


def _valid_op(kind: OpKind) -> tuple[State, dict[str, Any]]:
    """A state and a hand-written op of `kind` that `apply` accepts, by driving one task to the kind's status."""
    state = State()
    put = {"op": "put", "task": "t", "key": "t", "payload": {}, "available_at": 0, "max_attempts": 3}
    lease = {"op": "lease", "task": "t", "worker": "w", "generation": 1, "deadline": 10}
    first = None if kind.statuses is None else min(kind.statuses, key=["ready", "leased", "dead"].index)
    # A dead task (its one attempt expired) takes a redrive of more attempts than that one.
    values: dict[Field, Any] = {Field.NAME: "w", Field.INT: 5, Field.POSITIVE_INT: 2 if first == "dead" else 1}
    values[Field.PAYLOAD] = {}
    values[Field.RESULT] = [1, "two"]
    values[Field.ERROR_TYPE], values[Field.ERROR_MESSAGE] = "ValueError", "bad input"
    values[Field.TRACEBACK] = "Traceback (most recent call last):"
    expire = {"op": "expire", "task": "t", "generation": 1}
    steps = {None: [], "ready": [put], "leased": [put, lease], "dead": [{**put, "max_attempts": 1}, lease, expire]}
    if kind.name == "traceback":  # a traceback belongs to a last error: the task needs one
        steps[first] = [*steps[first], {"op": "error", "task": "t", "type": "E", "message": "m", "at": 1}]
    for step in steps[first]:
        apply(state, {"seq": state.last_seq + 1, "ops": [step]})
    if kind.store:
        return state, {"op": kind.name, **{field: values[k] for field, k in kind.fields}}
    if kind.subject[0] != "task":
        return state, {"op": kind.name, kind.subject[0]: "q", **{field: values[k] for field, k in kind.fields}}
    return state, {"op": kind.name, "task": "t", **{field: values[k] for field, k in kind.fields}}


@pytest.mark.parametrize("kind", KINDS, ids=[kind.name for kind in KINDS])
def test_apply_refuses_a_wrong_value_in_every_field_of_every_kind(kind: OpKind) -> None:
    state, op = _valid_op(kind)
    scratch = State.from_records(state.last_seq, [json.loads(line) for line in state.iter_record_json()])
    after = _COMPANIONS.get(kind.name, [])  # a result op is valid only before its task's ack
    apply(scratch, {"seq": state.last_seq + 1, "ops": [op, *after]})  # the op itself is valid
    subject = [] if kind.store else [kind.subject]
    for field, field_kind in [*subject, *kind.fields, *((n, k) for n, k, _ in kind.optional)]:
        for wrong in WRONG[field_kind]:
            with pytest.raises(InvalidTransaction, match=rf"\({kind.name}\)"):
                apply(state, {"seq": state.last_seq + 1, "ops": [{**op, field: wrong}, *after]})
    missing = "units_per_second" if kind.store else kind.subject[0]  # a store-level kind's ops name nothing
    for extra in ({**op, "extra": 1}, {name: value for name, value in op.items() if name != missing}):
        with pytest.raises(InvalidTransaction, match="keys must be exactly"):
            apply(state, {"seq": state.last_seq + 1, "ops": [extra]})


def test_a_new_kind_gets_its_template_keys_and_bound_from_its_declaration_alone() -> None:
    """What docs/ARCHITECTURE.md promises of the next kind: declare it, and the rest follows."""
    extend = OpKind("extend", (("generation", Field.POSITIVE_INT), ("deadline", Field.INT)), "leased", lambda: None)
    assert extend.keys == {"op", "task", "generation", "deadline"}
    assert extend.template == b'{"deadline":%d,"generation":%d,"op":"extend","task":%b}'
    op = {"op": "extend", "task": 'a"b', "generation": 2, "deadline": 30}
    assert extend.encode(op) == canonical_json(op)
    worst = {"op": "extend", "task": WORST[Field.NAME], "generation": MAX_INT, "deadline": MAX_INT}
    assert extend.max_json == len(canonical_json(worst))
    with pytest.raises(ValueError, match="unique"):
        OpKind("bad", (("task", Field.NAME),), None, lambda: None)
