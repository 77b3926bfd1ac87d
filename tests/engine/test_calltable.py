"""The table of calls: its kinds accept exactly what `Queue` accepts, and its rows say what a client sends.

`Queue`'s methods are written by hand (they are the API); everything that
speaks for them elsewhere (the protocol, the clients, `--help`) is derived
from `CALLS`. That a row and its methods take the same parameters is held
by construction (test_call_signatures.py); these tests hold the kinds to
`Queue`'s rules.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walqueue import Lease, Queue, Task
from walqueue.engine.validate import MAX_INT, MAX_NAME_BYTES, MAX_PAYLOAD_DEPTH
from walqueue.protocol.callkinds import ANSWER_KINDS, KINDS, BadArgument
from walqueue.protocol.calltable import CALLS, Arg, Call

#: Public members of `Queue` that are not calls of the protocol, each for a reason.
NOT_CALLS = {
    "close": "the front end owns the queue's life",
    "batch": "a front end's own grouping of calls",
    "grouping": "a declaration for the worker (its calls go together in batch()), not a call",
    "last_seq": "a property; clients derive it from stats",
    "attach_request_seconds": "the serving front end shows its own request durations in metrics()",
    "replication": "the replicator's seat beside the writer, in the writer's process",
}


def test_every_public_member_of_queue_is_a_call_or_known_not_to_be() -> None:
    public = {name for name in dir(Queue) if not name.startswith("_")}
    assert public == set(CALLS) | set(NOT_CALLS)


def test_every_call_is_declared_with_a_summary_and_known_kinds() -> None:
    for name, call in CALLS.items():
        assert call.name == name and call.summary
        assert call.answer.kind in ANSWER_KINDS.values() or call.answer.field is None
        for arg in call.args:
            assert arg.kind.name in KINDS or arg.kind.name == "put_items"
        optional = [arg.required for arg in call.args if not arg.keyword]
        assert optional == sorted(optional, reverse=True), "a required positional after an optional one"


def test_a_call_that_writes_is_retried_only_if_a_second_run_changes_nothing() -> None:
    retried_writes = {name for name, call in CALLS.items() if call.writes and call.retry}
    assert retried_writes == {"put", "put_many", "set_clock"}  # idempotent by their key; the same unit writes nothing
    assert all(call.retry for call in CALLS.values() if not call.writes)


# -- the kinds accept what Queue accepts ----------------------------------------------------


def _queue_accepts_name(queue: Queue, value: Any) -> bool:
    try:
        queue.put(value, {})
    except (TypeError, ValueError):
        return False
    return True


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=1100) | st.text(alphabet="é€", min_size=340, max_size=520))
def test_a_name_is_accepted_by_the_kind_exactly_when_queue_accepts_it(value: str) -> None:
    try:
        KINDS["name"].check(value, "task_id")
        accepted = True
    except BadArgument:
        accepted = False
    assert accepted == _valid_name(value)


def _valid_name(value: str) -> bool:
    try:
        return 0 < len(value.encode("utf-8")) <= MAX_NAME_BYTES
    except UnicodeEncodeError:
        return False


def test_the_name_rule_is_the_engines_byte_bound(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        for value in ("a", "é" * (MAX_NAME_BYTES // 2), "é" * (MAX_NAME_BYTES // 2 + 1), "", "a\ud800"):
            try:
                KINDS["name"].check(value, "task_id")
                kind_accepts = True
            except BadArgument:
                kind_accepts = False
            assert kind_accepts == _queue_accepts_name(queue, value), value


def _nested(depth: int) -> dict[str, Any]:
    payload: dict[str, Any] = {}
    for _ in range(depth - 1):
        payload = {"x": payload}
    return payload


@pytest.mark.parametrize("depth", [1, MAX_PAYLOAD_DEPTH, MAX_PAYLOAD_DEPTH + 1, 200])
def test_a_payload_is_accepted_by_the_kind_exactly_when_queue_accepts_it(tmp_path: Path, depth: int) -> None:
    payload = json.loads(json.dumps(_nested(depth)))  # as a front end's decoder builds it
    with Queue(tmp_path / "q", sync=False) as queue:
        try:
            queue.put("t", payload)
            queue_accepts = True
        except ValueError:
            queue_accepts = False
    try:
        KINDS["payload"].check(payload, "payload")
        kind_accepts = True
    except BadArgument as error:
        kind_accepts = False
        assert "'payload'" in str(error)
    assert kind_accepts == queue_accepts == (depth <= MAX_PAYLOAD_DEPTH)


@pytest.mark.parametrize(("kind", "low"), [("time", 0), ("count", 1)])
def test_times_and_counts_have_the_engines_bounds(kind: str, low: int) -> None:
    for value in (low, MAX_INT):
        assert KINDS[kind].check(value, "n") == value
    for value in (low - 1, MAX_INT + 1, 10**50):
        with pytest.raises(BadArgument, match="'n'"):
            KINDS[kind].check(value, "n")
    for value in (True, 1.0, None, "1"):
        with pytest.raises(BadArgument, match="must be an integer"):
            KINDS[kind].check(value, "n")


# -- what a client sends and reads -----------------------------------------------------------


def test_a_lease_travels_as_its_owners_three_fields() -> None:
    lease = Lease("t1", "w", 3, deadline=99, attempts=2, payload={"big": "x" * 1000})
    assert CALLS["ack"].request(lease, now=5) == {
        "op": "ack",
        "lease": {"task_id": "t1", "worker": "w", "generation": 3},
        "now": 5,
    }


def test_a_request_holds_only_the_arguments_given() -> None:
    assert CALLS["put"].request("a", {"n": 1}) == {"op": "put", "task_id": "a", "payload": {"n": 1}}
    assert CALLS["put"].request(task_id="a", payload={}, max_attempts=2) == {
        "op": "put",
        "task_id": "a",
        "payload": {},
        "max_attempts": 2,
    }
    assert CALLS["put_many"].request([{"task_id": "a", "payload": {}}]) == {
        "op": "put_many",
        "tasks": [{"task_id": "a", "payload": {}}],
    }
    assert CALLS["stats"].request() == {"op": "stats"}


@pytest.mark.parametrize(
    ("name", "args", "kwargs"),
    [
        ("put", ("a",), {}),  # missing payload
        ("put", ("a", {}, None), {}),  # key is keyword-only
        ("put", ("a", {}), {"colour": 1}),
        ("put", ("a", {}), {"task_id": "b"}),
        ("put", (1, {}), {}),
        ("put", ("a", {"x": object()}), {}),
        ("ack", ({"task_id": "t", "worker": "w", "generation": 1},), {"now": 1}),
        ("put_many", ({"task_id": "a", "payload": {}},), {}),
        ("put_many", ([{"task_id": "a"}],), {}),
    ],
)
def test_a_client_call_with_bad_python_arguments_is_a_type_error(
    name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    with pytest.raises(TypeError):
        CALLS[name].request(*args, **kwargs)


@pytest.mark.parametrize(
    ("name", "args", "kwargs"),
    [
        ("put", ("", {}), {}),
        ("put", ("a", {}), {"available_at": -1}),
        ("reserve", ("w",), {"now": 0, "lease_seconds": 0}),
        ("put", ("a", _nested(MAX_PAYLOAD_DEPTH + 1)), {}),
        ("tasks", ("running",), {}),
        ("tasks", (3,), {}),  # Queue.tasks(3) is a ValueError too: the row's check runs Queue's rule first
        ("wait", (-1,), {}),
    ],
)
def test_a_client_call_with_a_bad_value_is_a_value_error_as_queue_raises(
    name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    with pytest.raises(ValueError):
        CALLS[name].request(*args, **kwargs)


def _answer_round_trip(call: Call[Any], result: Any) -> Any:
    return call.result(json.loads(json.dumps(call.answer_fields(result))))


def test_every_answer_kind_comes_back_as_the_queue_returned_it(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        queue.put("a", {"n": [1, 2.5, None]})
        results = {
            "put": queue.put("a", {"n": [1, 2.5, None]}),
            "put_many": queue.put_many([{"task_id": "b", "payload": {}}]),
            "reserve": queue.reserve("w", now=0, lease_seconds=10, limit=2),
            "get": queue.get("a"),
            "tasks": queue.tasks(),
            "stats": queue.stats(),
            "metrics": queue.metrics(now=5),
            "page": queue.page("ready", after="a", limit=5),
            "wait": False,
            "compact": queue.compact(),
            "set_clock": queue.set_clock(1000),
        }
        lease = results["reserve"][0]
        results["extend"] = queue.extend(lease, now=1, lease_seconds=20)
        results["ack"] = queue.ack(lease, now=2)
        results["ack_many"] = queue.ack_many([], now=2)
        results["release"] = None
        results["fail"] = None
        results["give_back"] = None
        results["redrive"] = None
        results["cancel"] = None
        results["complete"] = None
        results["result"] = {"value": [1, {"a": None}], "expires": 9}
        results["configure_queue"] = queue.configure_queue("bulk", concurrency=2, rate=(5, 10))
        queue.put("c", {}, queue="bulk", priority=-3)
        results["queues"] = queue.queues()
        queue.release(results["reserve"][1], now=3, error={"type": "ValueError", "message": "bad input"})
        errored = queue.get(results["reserve"][1].task_id)
    assert errored is not None and errored.last_error is not None
    assert _answer_round_trip(CALLS["get"], errored) == errored  # its last error a LastError again
    assert set(results) == set(CALLS)
    for name, result in results.items():
        assert _answer_round_trip(CALLS[name], result) == result, name
    assert isinstance(_answer_round_trip(CALLS["get"], results["get"]), Task)
    assert _answer_round_trip(CALLS["get"], None) is None


def test_only_a_blocking_call_tells_a_client_how_long_it_may_block() -> None:
    assert [name for name, call in CALLS.items() if call.blocks] == ["wait"]
    assert CALLS["wait"].blocks_for(CALLS["wait"].request(2.5)) == 2.5
    assert CALLS["stats"].blocks_for(CALLS["stats"].request()) == 0.0


def test_a_row_whose_check_is_whole_sends_only_plain_kinds() -> None:
    lease_arg = Arg("lease", KINDS["lease"])  # encoded as its owner's fields: never passed on as given
    with pytest.raises(ValueError, match="plain kinds only"):
        Call(
            "x", (lease_arg,), CALLS["ack"].answer, writes=True, summary="", check=lambda lease: None, whole_check=True
        )
    with pytest.raises(ValueError, match="needs a check"):
        Call("y", (), CALLS["stats"].answer, writes=False, summary="", whole_check=True)


def test_a_put_sends_exactly_what_the_kinds_would_send() -> None:
    put = CALLS["put"]
    for args, kwargs in ((("a", {"n": [1.5]}), {}), (("a", {}), {"key": "k", "available_at": 3, "max_attempts": 1})):
        given = put.bind(args, kwargs)
        assert put.request(*args, **kwargs) == put.encode(given)  # the fast path and the kinds agree
