"""The consumer's protocol (CONTRACT §6) without a process or a directory.

A small fake queue stands in for `Queue`: it records every call, so each test
can prove both the answer and that a refused line never reached the queue.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from walqueue import KeyConflict, LastError, Lease, Queue, QueueClosed, StaleLease, Task, WrongStatus
from walqueue.engine.validate import MAX_NAME_BYTES, MAX_PAYLOAD_DEPTH
from walqueue.protocol.calltable import CALLS
from walqueue.protocol.requests import (
    MAX_DEPTH,
    NO_ID,
    OPS,
    BadRequest,
    Reply,
    Request,
    encode_answer,
    is_blank,
    parse_request,
    respond,
)

LEASE = Lease(task_id="t1", worker="w", generation=1, deadline=130, attempts=1, payload={"n": 1})
EXTENDED = Lease(task_id="t1", worker="w", generation=1, deadline=170, attempts=1, payload={"n": 1})
#: All a lease object needs: the other fields are informational.
TOKEN = {"task_id": "t1", "worker": "w", "generation": 1}
TASK = Task(
    task_id="t1",
    key="k1",
    status="leased",
    payload={"n": 1},
    available_at=0,
    max_attempts=3,
    attempts=1,
    generation=1,
    worker="w",
    deadline=130,
)
STATS = {
    "counts": {"ready": 0, "leased": 1, "completed": 0, "dead": 0},
    "last_seq": 2,
    "snapshot_seq": 0,
    "wal_bytes": 300,
    "segments": 1,
}


class FakeQueue:
    """Records calls as (method, args, kwargs); raises `error` from every call when set."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.error = error

    def _record(self, method: str, *args: Any, **kwargs: Any) -> None:
        self.calls.append((method, args, kwargs))
        if self.error is not None:
            raise self.error

    def put(self, task_id: str, payload: Any, **options: Any) -> str:
        self._record("put", task_id, payload, **options)
        return task_id

    def put_many(self, tasks: Any) -> list[str]:
        self._record("put_many", tasks)
        return [item["task_id"] for item in tasks]

    def reserve(self, worker: str, **options: Any) -> list[Lease]:
        self._record("reserve", worker, **options)
        return [LEASE]

    def ack(self, lease: Lease, **options: Any) -> None:
        self._record("ack", lease, **options)

    def release(self, lease: Lease, **options: Any) -> None:
        self._record("release", lease, **options)

    def extend(self, lease: Lease, **options: Any) -> Lease:
        self._record("extend", lease, **options)
        return EXTENDED

    def redrive(self, task_id: str, **options: Any) -> None:
        self._record("redrive", task_id, **options)

    def cancel(self, task_id: str) -> None:
        self._record("cancel", task_id)

    def get(self, task_id: str) -> Task | None:
        self._record("get", task_id)
        return TASK if task_id == "t1" else None

    def tasks(self, *args: Any) -> list[Task]:
        self._record("tasks", *args)
        return [TASK]

    def stats(self) -> dict[str, Any]:
        self._record("stats")
        return STATS

    def compact(self) -> None:
        self._record("compact")


def answer_to(request: Any, queue: FakeQueue | None = None) -> dict[str, Any]:
    """Send one request (a value to encode, or a raw line) and return the decoded answer line."""
    line = request if isinstance(request, bytes) else json.dumps(request).encode()
    reply = respond(line, queue if queue is not None else FakeQueue())
    encoded = encode_answer(reply.answer)
    assert encoded.endswith(b"\n") and encoded.count(b"\n") == 1
    decoded: dict[str, Any] = json.loads(encoded)
    assert decoded == reply.answer
    return decoded


def assert_bad_request(request: Any, *words: str) -> dict[str, Any]:
    """The request is refused as a BadRequest whose message holds every word, and the queue is untouched."""
    queue = FakeQueue()
    answer = answer_to(request, queue)
    assert answer["ok"] is False and answer["error"] == "BadRequest", answer
    for word in words:
        assert word in answer["message"], (word, answer["message"])
    assert queue.calls == []
    return answer


# -- success answers and the calls behind them -----------------------------------------


def test_put_passes_required_arguments_and_answers_the_task_id() -> None:
    queue = FakeQueue()
    answer = answer_to({"op": "put", "task_id": "a", "payload": {"x": [1, 2.5]}}, queue)
    assert answer == {"ok": True, "task_id": "a"}
    assert queue.calls == [("put", ("a", {"x": [1, 2.5]}), {})]


def test_put_passes_only_the_optional_arguments_that_were_given() -> None:
    queue = FakeQueue()
    request = {"op": "put", "task_id": "a", "payload": {}, "key": "k", "available_at": 5, "max_attempts": 2}
    answer_to(request, queue)
    assert queue.calls == [("put", ("a", {}), {"key": "k", "available_at": 5, "max_attempts": 2})]


def test_put_with_null_key_means_the_default_key() -> None:
    queue = FakeQueue()
    answer_to({"op": "put", "task_id": "a", "payload": {}, "key": None}, queue)
    assert queue.calls == [("put", ("a", {}), {"key": None})]


def test_put_many_passes_checked_items_in_order_and_answers_task_ids() -> None:
    queue = FakeQueue()
    items = [{"task_id": "b", "payload": {}}, {"task_id": "a", "payload": {"n": 1}, "max_attempts": 1}]
    answer = answer_to({"op": "put_many", "tasks": items}, queue)
    assert answer == {"ok": True, "task_ids": ["b", "a"]}
    assert queue.calls == [("put_many", (items,), {})]


def test_put_many_of_an_empty_list_is_a_valid_request() -> None:
    assert answer_to({"op": "put_many", "tasks": []}) == {"ok": True, "task_ids": []}


def test_reserve_answers_lease_objects() -> None:
    queue = FakeQueue()
    answer = answer_to({"op": "reserve", "worker": "w", "now": 100, "lease_seconds": 30, "limit": 4}, queue)
    assert answer == {"ok": True, "leases": [LEASE.to_dict()]}
    assert queue.calls == [("reserve", ("w",), {"now": 100, "lease_seconds": 30, "limit": 4})]


def test_reserve_without_limit_leaves_the_default_to_the_queue() -> None:
    queue = FakeQueue()
    answer_to({"op": "reserve", "worker": "w", "now": 0, "lease_seconds": 1}, queue)
    assert queue.calls == [("reserve", ("w",), {"now": 0, "lease_seconds": 1})]


def test_ack_passes_the_lease_object_back_as_a_lease() -> None:
    queue = FakeQueue()
    answer = answer_to({"op": "ack", "lease": LEASE.to_dict(), "now": 110}, queue)
    assert answer == {"ok": True}
    assert queue.calls == [("ack", (LEASE,), {"now": 110})]


def test_release_passes_lease_now_and_delay() -> None:
    queue = FakeQueue()
    assert answer_to({"op": "release", "lease": LEASE.to_dict(), "now": 110, "delay": 7}, queue) == {"ok": True}
    assert queue.calls == [("release", (LEASE,), {"now": 110, "delay": 7})]


def test_release_without_delay_leaves_the_default_to_the_queue() -> None:
    queue = FakeQueue()
    answer_to({"op": "release", "lease": LEASE.to_dict(), "now": 110}, queue)
    assert queue.calls == [("release", (LEASE,), {"now": 110})]


def test_extend_passes_lease_now_and_lease_seconds_and_answers_the_new_lease() -> None:
    queue = FakeQueue()
    answer = answer_to({"op": "extend", "lease": LEASE.to_dict(), "now": 120, "lease_seconds": 50}, queue)
    assert answer == {"ok": True, "lease": EXTENDED.to_dict()}
    assert queue.calls == [("extend", (LEASE,), {"now": 120, "lease_seconds": 50})]


def test_redrive_passes_only_the_optional_arguments_that_were_given() -> None:
    queue = FakeQueue()
    assert answer_to({"op": "redrive", "task_id": "t1", "available_at": 9}, queue) == {"ok": True}
    answer_to({"op": "redrive", "task_id": "t1", "available_at": 0, "extra_attempts": 4}, queue)
    assert queue.calls == [
        ("redrive", ("t1",), {"available_at": 9}),
        ("redrive", ("t1",), {"available_at": 0, "extra_attempts": 4}),
    ]


def test_cancel_passes_the_task_id() -> None:
    queue = FakeQueue()
    assert answer_to({"op": "cancel", "task_id": "t1", "id": 4}, queue) == {"id": 4, "ok": True}
    assert queue.calls == [("cancel", ("t1",), {})]


@pytest.mark.parametrize(
    "request_",
    [
        {"op": "ack", "lease": TOKEN, "now": 110},
        {"op": "release", "lease": TOKEN, "now": 110},
        {"op": "extend", "lease": TOKEN, "now": 110, "lease_seconds": 5},
    ],
)
def test_a_lease_object_of_only_task_id_worker_and_generation_is_enough(request_: dict[str, Any]) -> None:
    queue = FakeQueue()
    assert answer_to(request_, queue)["ok"] is True
    [(_, (lease,), _)] = queue.calls
    assert lease == Lease(task_id="t1", worker="w", generation=1)


@pytest.mark.parametrize(
    ("extra", "word"), [({"deadline": "130"}, "deadline"), ({"attempts": 1.0}, "attempts"), ({"payload": 3}, "payload")]
)
@pytest.mark.parametrize("op", ["ack", "release", "extend"])
def test_informational_lease_fields_are_type_checked_when_present(op: str, extra: dict[str, Any], word: str) -> None:
    request = {"op": op, "lease": {**TOKEN, **extra}, "now": 1}
    if op == "extend":
        request["lease_seconds"] = 1
    assert_bad_request(request, "'lease'", word)


def test_get_answers_a_task_object_or_null() -> None:
    assert answer_to({"op": "get", "task_id": "t1"}) == {"ok": True, "task": TASK.to_dict()}
    assert answer_to({"op": "get", "task_id": "never"}) == {"ok": True, "task": None}


def test_tasks_passes_the_status_only_when_given() -> None:
    queue = FakeQueue()
    assert answer_to({"op": "tasks"}, queue) == {"ok": True, "tasks": [TASK.to_dict()]}
    answer_to({"op": "tasks", "status": "dead"}, queue)
    answer_to({"op": "tasks", "status": None}, queue)
    assert queue.calls == [("tasks", (), {}), ("tasks", ("dead",), {}), ("tasks", (None,), {})]


def test_stats_and_compact_answer_their_fields() -> None:
    queue = FakeQueue()
    assert answer_to({"op": "stats"}, queue) == {"ok": True, "stats": STATS}
    assert answer_to({"op": "compact"}, queue) == {"ok": True}
    assert [call[0] for call in queue.calls] == ["stats", "compact"]


def test_every_op_of_the_spec_table_is_known() -> None:
    # CONTRACT §6's table, plus `wait` (the server's long poll) and extend, redrive, cancel.
    spec = {"put", "put_many", "reserve", "ack", "release", "get", "tasks", "stats", "compact"}
    assert spec | {"wait", "extend", "redrive", "cancel"} <= set(OPS)
    assert set(OPS) == set(CALLS)


#: One valid request of every call, in an order in which each succeeds on one real queue.
EVERY_CALL = [
    {"op": "configure_queue", "name": "default", "concurrency": 6, "rate": [10, 5], "paused": False},
    {
        "op": "put",
        "task_id": "a",
        "payload": {"n": 1},
        "key": "ka",
        "available_at": 0,
        "max_attempts": 1,
        "queue": "default",
        "priority": 0,
        "put_at": 0,
    },
    {
        "op": "put_many",
        "tasks": [{"task_id": t, "payload": {}} for t in "bcdef"],
    },
    {"op": "reserve", "worker": "w", "now": 1, "lease_seconds": 10, "limit": 6, "queues": None},
    {"op": "give_back", "lease": {"task_id": "f", "worker": "w", "generation": 1}, "now": 2},
    {"op": "extend", "lease": {"task_id": "a", "worker": "w", "generation": 1}, "now": 2, "lease_seconds": 5},
    {"op": "ack", "lease": {"task_id": "b", "worker": "w", "generation": 1}, "now": 2},
    {"op": "ack_many", "leases": [{"task_id": "d", "worker": "w", "generation": 1}], "now": 2},
    {
        "op": "complete",
        "lease": {"task_id": "e", "worker": "w", "generation": 1},
        "now": 2,
        "result": {"sum": 3},
        "result_ttl": 100,
        "puts": [{"task_id": "e/1", "payload": {}}],
    },
    {"op": "result", "task_id": "e", "now": 3},
    {
        "op": "fail",
        "lease": {"task_id": "c", "worker": "w", "generation": 1},
        "now": 2,
        "error": {"type": "KeyError", "message": "no handler"},
    },
    {
        "op": "release",
        "lease": {"task_id": "a", "worker": "w", "generation": 1},
        "now": 3,
        "delay": 0,
        "error": None,
    },
    {"op": "redrive", "task_id": "a", "available_at": 4, "extra_attempts": 1},
    {"op": "cancel", "task_id": "a", "error": {"type": "Cancelled", "message": "by ops"}, "now": 5},
    {"op": "get", "task_id": "a"},
    {"op": "tasks", "status": "ready", "queue": None},
    {"op": "queues"},
    {"op": "stats"},
    {"op": "set_clock", "units_per_second": 1000},
    {"op": "metrics", "now": 5},
    {"op": "page", "status": "ready", "after": "a", "limit": 3, "queue": "default"},
    {"op": "compact"},
    {"op": "wait", "timeout": 0},
]


def test_the_protocol_answers_every_call_of_the_table_on_a_real_queue(tmp_path: Path) -> None:
    assert sorted(request["op"] for request in EVERY_CALL) == sorted(CALLS), "a request for every call"
    with Queue(tmp_path / "q", sync=False) as queue:
        for request in EVERY_CALL:
            call = CALLS[request["op"]]
            assert {arg.name for arg in call.args} == set(request) - {"op"}, "a request with every argument"
            reply = respond(json.dumps(request).encode(), queue, lambda timeout: False)
            assert reply.answer["ok"] is True, reply.answer
            field = call.answer.field
            assert set(reply.answer) == {"ok"} | ({field} if field else set())
        failed, cancelled = queue.get("c"), queue.get("a")
        assert (
            failed is not None
            and failed.status == "dead"
            and failed.last_error == LastError("KeyError", "no handler", 1, 2)
        )
        assert cancelled is not None and cancelled.last_error == LastError("Cancelled", "by ops", 1, 5)
        given_back = queue.get("f")
        assert given_back is not None and (given_back.status, given_back.attempts) == ("ready", 0)
        task = respond(b'{"op":"get","task_id":"c"}', queue).answer["task"]
        assert task["last_error"] == {"type": "KeyError", "message": "no handler", "attempt": 1, "at": 2}


@pytest.mark.parametrize(
    ("error", "words"),
    [
        ("boom", ("'error'", "an object", "string 'boom'")),
        ({"type": "E"}, ("'error'", "keys")),
        ({"type": "", "message": "m"}, ("'error'", "empty")),
        ({"type": "E", "message": 1}, ("'error'", "str")),
    ],
)
def test_a_bad_error_is_a_bad_request_naming_the_field(error: Any, words: tuple[str, ...]) -> None:
    for request in (
        {"op": "release", "lease": TOKEN, "now": 1, "error": error},
        {"op": "fail", "lease": TOKEN, "now": 1, "error": error},
        {"op": "cancel", "task_id": "t1", "now": 1, "error": error},
    ):
        assert_bad_request(request, *words)


def test_a_name_longer_than_the_engines_byte_bound_is_refused_before_the_queue() -> None:
    long_name = "é" * (MAX_NAME_BYTES // 2 + 1)
    assert_bad_request({"op": "put", "task_id": long_name, "payload": {}}, "'task_id'", str(MAX_NAME_BYTES))
    assert_bad_request({"op": "reserve", "worker": long_name, "now": 0, "lease_seconds": 1}, "'worker'")
    assert isinstance(parse_request(json.dumps({"op": "cancel", "task_id": "é" * (MAX_NAME_BYTES // 2)})), Request)


# -- the id ------------------------------------------------------------------------------


@pytest.mark.parametrize("request_id", [7, -1.5, "abc", None, True, {"a": [1, {}]}, [1, "x", None], 10**40])
def test_id_of_any_json_type_is_echoed_in_success_answers(request_id: Any) -> None:
    answer = answer_to({"op": "stats", "id": request_id})
    assert answer["ok"] is True and "id" in answer and answer["id"] == request_id


@pytest.mark.parametrize("request_id", [7, "abc", None, {"a": 1}, [1, 2]])
def test_id_is_echoed_in_bad_request_answers(request_id: Any) -> None:
    answer = assert_bad_request({"op": "nope", "id": request_id}, "unknown op")
    assert "id" in answer and answer["id"] == request_id


def test_a_request_without_id_gets_an_answer_without_id() -> None:
    assert "id" not in answer_to({"op": "stats"})
    assert "id" not in assert_bad_request({"op": "nope"})


def test_null_id_is_echoed_as_null_not_dropped() -> None:
    answer = answer_to({"op": "stats", "id": None})
    assert "id" in answer and answer["id"] is None


def test_id_with_a_lone_surrogate_is_echoed_as_the_same_escape() -> None:
    line = b'{"op":"stats","id":"a\\ud800b"}'
    encoded = encode_answer(respond(line, FakeQueue()).answer)
    encoded.decode("utf-8")  # still valid UTF-8
    assert json.loads(encoded)["id"] == "a\ud800b"


def test_non_ascii_text_is_written_as_utf8() -> None:
    encoded = encode_answer(respond('{"op":"stats","id":"é\u2028"}'.encode(), FakeQueue()).answer)
    assert "é\u2028".encode() in encoded and encoded.count(b"\n") == 1


# -- lines that are not requests ------------------------------------------------------------


@pytest.mark.parametrize("line", [b"{", b"put a", b"{'op': 'stats'}", b'{"op":"stats"} x', b"\x0c"])
def test_a_line_that_is_not_json_is_a_bad_request_without_id(line: bytes) -> None:
    answer = assert_bad_request(line, "not JSON")
    assert "id" not in answer


@pytest.mark.parametrize(
    ("line", "kind"), [(b"[1, 2]", "array"), (b"3", "integer"), (b'"x"', "string"), (b"null", "null")]
)
def test_a_json_value_that_is_not_an_object_is_a_bad_request_without_id(line: bytes, kind: str) -> None:
    answer = assert_bad_request(line, "must be a JSON object", kind)
    assert "id" not in answer


def test_bytes_that_are_not_utf8_are_a_bad_request_naming_the_offset() -> None:
    answer = assert_bad_request(b'{"op":"stats","id":"\xff"}', "not UTF-8", "0xff", "offset 20")
    assert "id" not in answer


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_literals_are_not_json(literal: str) -> None:
    assert_bad_request(f'{{"op":"put","task_id":"a","payload":{{"x":{literal}}}}}'.encode(), "not JSON", literal)


def test_a_number_out_of_the_range_of_a_double_is_refused_with_the_id() -> None:
    answer = assert_bad_request(b'{"op":"put","task_id":"a","payload":{"x":1e400},"id":3}', "1e400", "out of range")
    assert answer["id"] == 3


def test_an_id_out_of_the_range_of_a_double_cannot_be_echoed() -> None:
    answer = assert_bad_request(b'{"op":"stats","id":[1e400]}', "id", "out of range")
    assert "id" not in answer


def test_a_duplicate_field_is_refused_with_the_id() -> None:
    answer = assert_bad_request(b'{"op":"get","task_id":"a","task_id":"b","id":1}', "duplicate field 'task_id'")
    assert answer["id"] == 1


def test_a_duplicate_field_inside_a_payload_is_refused() -> None:
    assert_bad_request(b'{"op":"put","task_id":"a","payload":{"x":1,"x":2}}', "duplicate field 'x'")


def test_a_duplicate_id_is_refused_without_echoing_either() -> None:
    answer = assert_bad_request(b'{"op":"stats","id":1,"id":2}', "duplicate field 'id'")
    assert "id" not in answer


def test_nesting_deeper_than_the_limit_is_refused_with_the_id() -> None:
    payload = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    line = f'{{"op":"put","task_id":"a","payload":{{"x":{payload}}},"id":"deep"}}'.encode()
    answer = assert_bad_request(line, "nested too deeply")
    assert answer["id"] == "deep"


def test_nesting_beyond_what_json_can_decode_is_refused() -> None:
    assert_bad_request(b"[" * 100_000 + b"]" * 100_000, "nested too deeply")


def test_an_id_nested_up_to_the_line_limit_is_echoed() -> None:
    request_id = "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)
    line = f'{{"op":"stats","id":{request_id}}}'.encode()
    assert isinstance(parse_request(line), Request)


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    # The count of '[' and '{' only decides whether the depth is walked; the walk decides.
    line = json.dumps({"op": "put", "task_id": "a", "payload": {"s": "[{" * MAX_DEPTH}, "id": "[" * MAX_DEPTH})
    parsed = parse_request(line.encode())
    assert isinstance(parsed, Request)
    assert parsed.request_id == "[" * MAX_DEPTH


@pytest.mark.parametrize("depth", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1])
def test_the_depth_limit_holds_at_its_edge_with_or_without_padding(depth: int) -> None:
    # The request object is one level: a payload value nested `depth - 1` more makes the request `depth` deep.
    for padding in ("", ',"pad":"' + "{" * MAX_DEPTH + '"'):
        inner = "[" * (depth - 2) + "]" * (depth - 2)
        line = f'{{"op":"stats","x":{{"y":{inner}}}{padding}}}'.encode()
        parsed = parse_request(line)
        assert isinstance(parsed, BadRequest)
        assert ("nested too deeply" in parsed.message) == (depth > MAX_DEPTH)


def test_a_leading_byte_order_mark_is_refused_by_name() -> None:
    assert_bad_request('\ufeff{"op":"stats"}'.encode(), "not JSON: Unexpected UTF-8 BOM")


def test_a_refused_line_leaves_nothing_for_the_next_one() -> None:
    assert_bad_request(b'{"op":"stats","x":1e999,"x":2}', "out of range")
    assert isinstance(parse_request(b'{"op":"stats","id":1}'), Request)


def test_a_payload_nested_as_deep_as_the_engine_allows_is_accepted() -> None:
    inner = "[" * (MAX_PAYLOAD_DEPTH - 1) + "]" * (MAX_PAYLOAD_DEPTH - 1)
    line = f'{{"op":"put","task_id":"a","payload":{{"x":{inner}}}}}'.encode()
    assert isinstance(parse_request(line), Request)


def test_a_payload_nested_deeper_than_the_engine_allows_is_refused_before_the_queue() -> None:
    inner = "[" * MAX_PAYLOAD_DEPTH + "]" * MAX_PAYLOAD_DEPTH
    line = f'{{"op":"put","task_id":"a","payload":{{"x":{inner}}},"id":1}}'.encode()
    answer = assert_bad_request(line, "'payload'", f"deeper than {MAX_PAYLOAD_DEPTH}")
    assert answer["id"] == 1
    items = f'{{"op":"put_many","tasks":[{{"task_id":"a","payload":{{"x":{inner}}}}}]}}'.encode()
    assert_bad_request(items, "'tasks[0].payload'", f"deeper than {MAX_PAYLOAD_DEPTH}")


# -- the envelope: op and unknown fields ---------------------------------------------------


def test_a_missing_op_is_a_bad_request() -> None:
    assert_bad_request({"task_id": "a", "id": 1}, "missing field 'op'")


def test_an_op_that_is_not_a_string_is_a_bad_request() -> None:
    assert_bad_request({"op": 5}, "field 'op' must be a string", "integer 5")


def test_an_unknown_op_is_a_bad_request_listing_the_known_ones() -> None:
    assert_bad_request({"op": "delete"}, "unknown op 'delete'", "put_many", "reserve")


def test_an_unknown_field_is_a_bad_request_naming_it() -> None:
    assert_bad_request({"op": "stats", "verbose": True}, "unknown field 'verbose'")
    assert_bad_request({"op": "put", "task_id": "a", "payload": {}, "zzz": 1, "aaa": 2}, "unknown fields 'aaa', 'zzz'")


def test_an_argument_of_another_op_is_an_unknown_field() -> None:
    assert_bad_request({"op": "get", "task_id": "a", "now": 1}, "unknown field 'now'")


# -- arguments ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "missing"),
    [
        ({"op": "put", "payload": {}}, "'task_id'"),
        ({"op": "put", "task_id": "a"}, "'payload'"),
        ({"op": "put"}, "missing fields 'task_id', 'payload'"),
        ({"op": "put_many"}, "'tasks'"),
        ({"op": "reserve", "worker": "w", "now": 1}, "'lease_seconds'"),
        ({"op": "ack", "lease": LEASE.to_dict()}, "'now'"),
        ({"op": "release", "now": 1}, "'lease'"),
        ({"op": "get"}, "'task_id'"),
        ({"op": "extend", "lease": TOKEN, "now": 1}, "'lease_seconds'"),
        ({"op": "extend", "now": 1, "lease_seconds": 1}, "'lease'"),
        ({"op": "redrive", "task_id": "t1"}, "'available_at'"),
        ({"op": "redrive", "available_at": 1}, "'task_id'"),
        ({"op": "cancel"}, "'task_id'"),
    ],
)
def test_a_missing_argument_is_a_bad_request_naming_it(request_: dict[str, Any], missing: str) -> None:
    assert_bad_request(request_, "missing field", missing)


@pytest.mark.parametrize(
    ("request_", "words"),
    [
        ({"op": "put", "task_id": 1, "payload": {}}, ("'task_id'", "string", "integer 1")),
        ({"op": "put", "task_id": "", "payload": {}}, ("'task_id'", "empty")),
        ({"op": "put", "task_id": "a", "payload": {}, "key": ""}, ("'key'", "empty")),
        ({"op": "put", "task_id": "a", "payload": {}, "key": 3}, ("'key'", "string")),
        ({"op": "reserve", "worker": ["w"], "now": 1, "lease_seconds": 1}, ("'worker'", "an array")),
        ({"op": "get", "task_id": None}, ("'task_id'", "string", "null")),
        ({"op": "tasks", "status": "running"}, ("'status'", "'ready'", "'dead'", "string 'running'")),
        ({"op": "wait", "timeout": -1}, ("'timeout'", "86400")),
        ({"op": "wait", "timeout": 86_401}, ("'timeout'", "86400")),
        ({"op": "wait", "timeout": "1"}, ("'timeout'", "number of seconds", "string")),
        ({"op": "tasks", "status": 1}, ("'status'", "integer 1")),
        ({"op": "put_many", "tasks": {"task_id": "a"}}, ("'tasks'", "array", "an object")),
        ({"op": "cancel", "task_id": 7}, ("'task_id'", "string", "integer 7")),
        ({"op": "cancel", "task_id": ""}, ("'task_id'", "empty")),
        ({"op": "redrive", "task_id": None, "available_at": 1}, ("'task_id'", "string", "null")),
        ({"op": "extend", "lease": "t1", "now": 1, "lease_seconds": 1}, ("'lease'", "string")),
        ({"op": "cancel", "task_id": "t1", "delay": 1}, ("unknown field 'delay'",)),
        ({"op": "cancel", "task_id": "t1", "now": -1}, ("'now'", "0")),
        ({"op": "redrive", "task_id": "t1", "available_at": 1, "max_attempts": 2}, ("unknown field 'max_attempts'",)),
    ],
)
def test_an_ill_typed_argument_is_a_bad_request_saying_what_was_expected(
    request_: dict[str, Any], words: tuple[str, ...]
) -> None:
    assert_bad_request(request_, *words)


@pytest.mark.parametrize(
    "request_",
    [
        {"op": "reserve", "worker": "w", "now": True, "lease_seconds": 1},
        {"op": "reserve", "worker": "w", "now": 1, "lease_seconds": True},
        {"op": "reserve", "worker": "w", "now": 1, "lease_seconds": 1, "limit": False},
        {"op": "put", "task_id": "a", "payload": {}, "available_at": False},
        {"op": "put", "task_id": "a", "payload": {}, "max_attempts": True},
        {"op": "ack", "lease": LEASE.to_dict(), "now": True},
        {"op": "release", "lease": LEASE.to_dict(), "now": 1, "delay": True},
        {"op": "extend", "lease": TOKEN, "now": 1, "lease_seconds": True},
        {"op": "redrive", "task_id": "t1", "available_at": False},
        {"op": "redrive", "task_id": "t1", "available_at": 1, "extra_attempts": True},
    ],
)
def test_a_bool_where_an_int_is_expected_is_a_bad_request(request_: dict[str, Any]) -> None:
    assert_bad_request(request_, "must be an integer", "boolean")


@pytest.mark.parametrize("number", ["1.0", "1e2", "0.5", "-0.0"])
def test_a_json_number_with_a_fraction_or_exponent_is_not_an_int(number: str) -> None:
    line = f'{{"op":"reserve","worker":"w","now":{number},"lease_seconds":1}}'.encode()
    assert_bad_request(line, "'now' must be an integer", "number")


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        ({"op": "reserve", "worker": "w", "now": -1, "lease_seconds": 1}, "'now'"),
        ({"op": "ack", "lease": LEASE.to_dict(), "now": -5}, "'now'"),
        ({"op": "release", "lease": LEASE.to_dict(), "now": -1}, "'now'"),
        ({"op": "release", "lease": LEASE.to_dict(), "now": 1, "delay": -1}, "'delay'"),
        ({"op": "put", "task_id": "a", "payload": {}, "available_at": -1}, "'available_at'"),
        ({"op": "extend", "lease": TOKEN, "now": -1, "lease_seconds": 1}, "'now'"),
        ({"op": "redrive", "task_id": "t1", "available_at": -1}, "'available_at'"),
    ],
)
def test_a_negative_time_is_a_bad_request(request_: dict[str, Any], field: str) -> None:
    assert_bad_request(request_, field, ">= 0")


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        ({"op": "reserve", "worker": "w", "now": 1, "lease_seconds": 0}, "'lease_seconds'"),
        ({"op": "reserve", "worker": "w", "now": 1, "lease_seconds": 1, "limit": 0}, "'limit'"),
        ({"op": "put", "task_id": "a", "payload": {}, "max_attempts": 0}, "'max_attempts'"),
        ({"op": "extend", "lease": TOKEN, "now": 1, "lease_seconds": 0}, "'lease_seconds'"),
        ({"op": "redrive", "task_id": "t1", "available_at": 1, "extra_attempts": 0}, "'extra_attempts'"),
    ],
)
def test_a_count_below_one_is_a_bad_request(request_: dict[str, Any], field: str) -> None:
    assert_bad_request(request_, field, ">= 1")


def test_a_time_at_or_beyond_two_to_the_63_is_a_bad_request() -> None:
    assert_bad_request({"op": "reserve", "worker": "w", "now": 2**63, "lease_seconds": 1}, "'now'", "2**63")
    assert isinstance(
        parse_request(json.dumps({"op": "reserve", "worker": "w", "now": 2**63 - 1, "lease_seconds": 1})), Request
    )


@pytest.mark.parametrize("payload", [[], "x", 1, None, True])
def test_a_payload_that_is_not_an_object_is_a_bad_request(payload: Any) -> None:
    assert_bad_request({"op": "put", "task_id": "a", "payload": payload}, "'payload'", "JSON object")


@pytest.mark.parametrize(
    ("lease", "words"),
    [
        ({k: v for k, v in LEASE.to_dict().items() if k != "generation"}, ("'lease'", "missing", "generation")),
        ({**LEASE.to_dict(), "extra": 1}, ("'lease'", "unknown", "extra")),
        ({**LEASE.to_dict(), "generation": "1"}, ("'lease'", "generation")),
        ({**LEASE.to_dict(), "generation": True}, ("'lease'", "generation")),
        ({**LEASE.to_dict(), "payload": []}, ("'lease'", "payload")),
        ([1, 2], ("'lease'", "an array")),
        ("t1", ("'lease'", "string")),
    ],
)
def test_a_malformed_lease_object_is_a_bad_request(lease: Any, words: tuple[str, ...]) -> None:
    assert_bad_request({"op": "ack", "lease": lease, "now": 1}, *words)


@pytest.mark.parametrize(
    ("item", "words"),
    [
        ({"task_id": "a", "payload": {}, "op": "put"}, ("tasks[1]", "unknown field 'op'")),
        ({"task_id": "a"}, ("tasks[1]", "missing field 'payload'")),
        ({"task_id": "a", "payload": {}, "max_attempts": 1.0}, ("tasks[1].max_attempts", "integer")),
        ({"task_id": "a", "payload": 3}, ("tasks[1].payload", "JSON object")),
        ("a", ("tasks[1]", "put object", "string")),
    ],
)
def test_a_bad_put_many_item_is_a_bad_request_naming_its_index(item: Any, words: tuple[str, ...]) -> None:
    assert_bad_request({"op": "put_many", "tasks": [{"task_id": "ok", "payload": {}}, item]}, *words)


# -- outcomes of the queue call --------------------------------------------------------------


def test_the_queues_type_and_value_errors_are_bad_requests_with_the_id() -> None:
    for error in (TypeError("payload must be a dict"), ValueError("task_id is longer than 1024 UTF-8 bytes")):
        reply = respond(b'{"op":"put","task_id":"a","payload":{},"id":9}', FakeQueue(error))
        assert reply == Reply({"id": 9, "ok": False, "error": "BadRequest", "message": str(error)})


def test_key_conflict_and_stale_lease_keep_their_names_and_the_consumer_goes_on() -> None:
    put = b'{"op":"put","task_id":"a","payload":{},"id":"p"}'
    reply = respond(put, FakeQueue(KeyConflict("key 'a' is taken")))
    assert reply == Reply({"id": "p", "ok": False, "error": "KeyConflict", "message": "key 'a' is taken"})
    ack = json.dumps({"op": "ack", "lease": LEASE.to_dict(), "now": 5, "id": "q"}).encode()
    reply = respond(ack, FakeQueue(StaleLease("")))
    assert reply == Reply({"id": "q", "ok": False, "error": "StaleLease", "message": "StaleLease"})


def test_wrong_status_keeps_its_name_although_it_is_a_value_error() -> None:
    assert issubclass(WrongStatus, ValueError)
    for request in ({"op": "cancel", "task_id": "t1", "id": 1}, {"op": "redrive", "task_id": "t1", "available_at": 0}):
        reply = respond(json.dumps(request).encode(), FakeQueue(WrongStatus("cancel: task 't1' is completed")))
        assert reply.fatal is False
        assert reply.answer["error"] == "WrongStatus" and reply.answer["message"] == "cancel: task 't1' is completed"
        assert reply.answer.get("id") == request.get("id")


def test_a_subclass_of_a_named_error_is_answered_with_the_documented_name() -> None:
    class RacedAway(WrongStatus):
        pass

    reply = respond(b'{"op":"cancel","task_id":"t1"}', FakeQueue(RacedAway("gone")))
    assert reply.answer == {"ok": False, "error": "WrongStatus", "message": "gone"}


def test_stale_lease_of_extend_keeps_its_name() -> None:
    line = json.dumps({"op": "extend", "lease": TOKEN, "now": 1, "lease_seconds": 1}).encode()
    assert respond(line, FakeQueue(StaleLease("expired"))).answer["error"] == "StaleLease"


@pytest.mark.parametrize(
    "error", [OSError(28, "No space left on device"), QueueClosed("poisoned"), RuntimeError("bug")]
)
def test_any_other_failure_of_an_operation_is_fatal_with_the_id(error: Exception) -> None:
    reply = respond(b'{"op":"put","task_id":"a","payload":{},"id":[1]}', FakeQueue(error))
    assert reply.fatal is True
    assert reply.answer["ok"] is False and reply.answer["error"] == "Fatal" and reply.answer["id"] == [1]
    assert type(error).__name__ in reply.answer["message"]


def test_only_a_fatal_reply_asks_the_consumer_to_stop() -> None:
    assert respond(b'{"op":"stats"}', FakeQueue()).fatal is False
    assert respond(b"nonsense", FakeQueue()).fatal is False
    assert respond(b'{"op":"stats"}', FakeQueue(KeyConflict("x"))).fatal is False


def test_parse_request_keeps_absent_and_null_ids_apart() -> None:
    assert parse_request('{"op":"stats"}') == Request("stats", {}, NO_ID)
    assert parse_request('{"op":"stats","id":null}') == Request("stats", {}, None)
    assert parse_request("[]") == BadRequest("a request must be a JSON object, not an array")


@pytest.mark.parametrize(
    ("line", "blank"), [(b"\n", True), (b"  \t\r\n", True), (b"", True), (b"\x0c\n", False), (b"{}\n", False)]
)
def test_only_json_whitespace_makes_a_line_blank(line: bytes, blank: bool) -> None:
    assert is_blank(line) is blank


# -- fuzz: any line gets exactly one answer of the documented shape ---------------------------

JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
JSON_VALUES = st.recursive(
    JSON_SCALARS, lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
)
FIELD_NAMES = st.sampled_from(
    ["op", "id", "bogus", *sorted({arg.name for call in CALLS.values() for arg in call.args})]
)
FIELD_VALUES = (
    JSON_VALUES
    | st.sampled_from(sorted(OPS))
    | st.integers(min_value=-2, max_value=2**64)
    | st.just(LEASE.to_dict())
    | st.just(TOKEN)
    | st.sampled_from(["ready", "dead", "t1", ""])
    | st.lists(st.fixed_dictionaries({"task_id": st.text(), "payload": st.just({})}), max_size=3)
)
REQUEST_OBJECTS = st.dictionaries(FIELD_NAMES, FIELD_VALUES, max_size=7)


def assert_documented_shape(answer: dict[str, Any]) -> None:
    assert isinstance(answer.get("ok"), bool)
    if answer["ok"]:
        assert "error" not in answer and "message" not in answer
    else:
        assert set(answer) - {"id"} == {"ok", "error", "message"}
        assert answer["error"] in {"BadRequest", "KeyConflict", "StaleLease", "Fatal"}
        assert isinstance(answer["message"], str) and answer["message"]
    line = encode_answer(answer)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == answer


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=200) | st.text(max_size=200).map(lambda text: text.encode("utf-8", "surrogatepass")))
def test_any_bytes_get_exactly_one_well_formed_answer(line: bytes) -> None:
    assert_documented_shape(respond(line, FakeQueue()).answer)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(JSON_VALUES)
def test_any_json_value_gets_exactly_one_well_formed_answer(value: Any) -> None:
    reply = respond(json.dumps(value).encode(), FakeQueue())
    assert_documented_shape(reply.answer)
    if not isinstance(value, dict):
        assert reply.answer["error"] == "BadRequest" and "id" not in reply.answer


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(REQUEST_OBJECTS, st.booleans())
def test_any_object_gets_one_answer_that_echoes_its_id(request_: dict[str, Any], ascii_only: bool) -> None:
    queue = FakeQueue()
    reply = respond(json.dumps(request_, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass"), queue)
    assert_documented_shape(reply.answer)
    assert reply.fatal is False
    if "id" in request_:
        assert "id" in reply.answer and json.dumps(reply.answer["id"]) == json.dumps(request_["id"])
    else:
        assert "id" not in reply.answer
    if not reply.answer["ok"]:
        assert queue.calls == []
