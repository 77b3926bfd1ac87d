"""Bad arguments: `TypeError` / `ValueError`, and in every case nothing is written.

Each bad call runs against a queue holding a ready task "r" and a task "l"
leased to "w" until 1000; the directory's bytes and `last_seq` must be the
same afterwards, and the queue must still work (a bad argument poisons
nothing). The team's documented bounds: ints are `int` but not `bool`, with
0 <= x < 2**63; names are non-empty `str` of at most 1,024 UTF-8 bytes;
payload nesting depth at most 64; a task must satisfy
len(payload) + len(task id) + len(key) (all canonical JSON) + 8192 <= 16 MiB.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from decimal import Decimal
from enum import IntEnum
from pathlib import Path
from typing import Any

import pytest

from model import MAX_FRAME_BYTES, Model, directory_digest, view
from walqueue import Lease, Queue, StaleLease
from walqueue.format.canonical import canonical_json

BIG = 2**63


class Color(IntEnum):
    RED = 1


class Name(str):
    """A str subclass: it may encode differently than it compares, so it is refused."""


class Items(list):  # type: ignore[type-arg]
    pass


TYPE_OR_VALUE = (TypeError, ValueError)


@pytest.fixture
def lease(q: Queue) -> Lease:
    q.put("l", {"n": 1})
    [token] = q.reserve("w", now=0, lease_seconds=1000)
    q.put("r", {"n": 2}, available_at=10**6)
    return token


def nested(depth: int) -> dict[str, Any]:
    """A payload whose containers nest `depth` levels (the payload itself is level 1)."""
    value: Any = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def deep_list(depth: int) -> dict[str, Any]:
    value: Any = []
    for _ in range(depth - 2):
        value = [value]
    return {"a": value}


Call = Callable[[Queue, Lease], Any]

BAD_CALLS: list[tuple[str, Call, type[Exception] | tuple[type[Exception], ...]]] = [
    # --- put: task_id
    ("put-task_id-int", lambda q, t: q.put(1, {}), TypeError),
    ("put-task_id-none", lambda q, t: q.put(None, {}), TypeError),
    ("put-task_id-bytes", lambda q, t: q.put(b"t", {}), TypeError),
    ("put-task_id-empty", lambda q, t: q.put("", {}), ValueError),
    ("put-task_id-1025-bytes", lambda q, t: q.put("x" * 1025, {}), ValueError),
    ("put-task_id-1026-utf8-bytes", lambda q, t: q.put("é" * 513, {}), ValueError),
    ("put-task_id-lone-surrogate", lambda q, t: q.put("\ud800", {}), ValueError),
    # --- put: key
    ("put-key-int", lambda q, t: q.put("t", {}, key=1), TypeError),
    ("put-key-empty", lambda q, t: q.put("t", {}, key=""), ValueError),
    ("put-key-1025-bytes", lambda q, t: q.put("t", {}, key="k" * 1025), ValueError),
    ("put-key-lone-surrogate", lambda q, t: q.put("t", {}, key="\udfff"), ValueError),
    # --- put: payload that is not a JSON object
    ("put-payload-list", lambda q, t: q.put("t", []), TYPE_OR_VALUE),
    ("put-payload-str", lambda q, t: q.put("t", "{}"), TYPE_OR_VALUE),
    ("put-payload-none", lambda q, t: q.put("t", None), TYPE_OR_VALUE),
    ("put-payload-int", lambda q, t: q.put("t", 1), TYPE_OR_VALUE),
    # --- put: payloads that do not survive a canonical JSON round trip
    ("put-payload-tuple", lambda q, t: q.put("t", {"a": (1, 2)}), TYPE_OR_VALUE),
    ("put-payload-nested-tuple", lambda q, t: q.put("t", {"a": [{"b": (1,)}]}), TYPE_OR_VALUE),
    ("put-payload-int-key", lambda q, t: q.put("t", {1: "a"}), TYPE_OR_VALUE),
    ("put-payload-bool-key", lambda q, t: q.put("t", {True: "a"}), TYPE_OR_VALUE),
    ("put-payload-none-key", lambda q, t: q.put("t", {None: "a"}), TYPE_OR_VALUE),
    ("put-payload-float-key", lambda q, t: q.put("t", {1.5: "a"}), TYPE_OR_VALUE),
    ("put-payload-nested-int-key", lambda q, t: q.put("t", {"a": {2: 1}}), TYPE_OR_VALUE),
    ("put-payload-nan", lambda q, t: q.put("t", {"a": float("nan")}), ValueError),
    ("put-payload-inf", lambda q, t: q.put("t", {"a": float("inf")}), ValueError),
    ("put-payload-minus-inf", lambda q, t: q.put("t", {"a": [float("-inf")]}), ValueError),
    ("put-payload-set", lambda q, t: q.put("t", {"a": {1, 2}}), TYPE_OR_VALUE),
    ("put-payload-frozenset", lambda q, t: q.put("t", {"a": frozenset()}), TYPE_OR_VALUE),
    ("put-payload-bytes", lambda q, t: q.put("t", {"a": b"x"}), TYPE_OR_VALUE),
    ("put-payload-object", lambda q, t: q.put("t", {"a": object()}), TYPE_OR_VALUE),
    ("put-payload-decimal", lambda q, t: q.put("t", {"a": Decimal("1.5")}), TYPE_OR_VALUE),
    ("put-payload-lone-surrogate-value", lambda q, t: q.put("t", {"a": "\ud800"}), ValueError),
    ("put-payload-lone-surrogate-key", lambda q, t: q.put("t", {"\ud800": 1}), ValueError),
    ("put-payload-int-over-14000-bits", lambda q, t: q.put("t", {"a": 2**14000}), ValueError),
    ("put-payload-negative-int-over-14000-bits", lambda q, t: q.put("t", {"a": [-(2**14000)]}), ValueError),
    ("put-payload-int-enum", lambda q, t: q.put("t", {"a": Color.RED}), TypeError),
    ("put-payload-str-subclass", lambda q, t: q.put("t", {"a": Name("x")}), TypeError),
    ("put-payload-dict-subclass", lambda q, t: q.put("t", OrderedDict(a=1)), TypeError),
    ("put-payload-list-subclass", lambda q, t: q.put("t", {"a": Items([1])}), TypeError),
    ("put-task_id-str-subclass", lambda q, t: q.put(Name("t"), {}), TypeError),
    ("put-payload-depth-100", lambda q, t: q.put("t", nested(100)), ValueError),
    ("put-payload-depth-65", lambda q, t: q.put("t", nested(65)), ValueError),
    ("put-payload-list-depth-65", lambda q, t: q.put("t", deep_list(65)), ValueError),
    ("put-payload-depth-5000", lambda q, t: q.put("t", nested(5000)), ValueError),
    # --- put: available_at
    ("put-available_at-negative", lambda q, t: q.put("t", {}, available_at=-1), ValueError),
    ("put-available_at-bool", lambda q, t: q.put("t", {}, available_at=True), TYPE_OR_VALUE),
    ("put-available_at-false", lambda q, t: q.put("t", {}, available_at=False), TYPE_OR_VALUE),
    ("put-available_at-float", lambda q, t: q.put("t", {}, available_at=1.0), TypeError),
    ("put-available_at-str", lambda q, t: q.put("t", {}, available_at="0"), TypeError),
    ("put-available_at-none", lambda q, t: q.put("t", {}, available_at=None), TypeError),
    ("put-available_at-2**63", lambda q, t: q.put("t", {}, available_at=BIG), ValueError),
    # --- put: max_attempts
    ("put-max_attempts-0", lambda q, t: q.put("t", {}, max_attempts=0), ValueError),
    ("put-max_attempts-negative", lambda q, t: q.put("t", {}, max_attempts=-3), ValueError),
    ("put-max_attempts-bool", lambda q, t: q.put("t", {}, max_attempts=True), TYPE_OR_VALUE),
    ("put-max_attempts-float", lambda q, t: q.put("t", {}, max_attempts=2.0), TypeError),
    ("put-max_attempts-none", lambda q, t: q.put("t", {}, max_attempts=None), TypeError),
    ("put-max_attempts-2**63", lambda q, t: q.put("t", {}, max_attempts=BIG), ValueError),
    # --- put: bad arguments on an otherwise identical retry of a stored task
    ("put-retry-with-nan", lambda q, t: q.put("r", {"n": float("nan")}, available_at=10**6), ValueError),
    (
        "put-retry-with-bool-max",
        lambda q, t: q.put("r", {"n": 2}, available_at=10**6, max_attempts=True),
        TYPE_OR_VALUE,
    ),
    # --- put_many
    ("put_many-int", lambda q, t: q.put_many(5), TypeError),
    ("put_many-none", lambda q, t: q.put_many(None), TypeError),
    ("put_many-a-mapping", lambda q, t: q.put_many({"task_id": "a", "payload": {}}), TypeError),
    ("put_many-an-empty-mapping", lambda q, t: q.put_many({}), TypeError),
    ("put_many-a-str", lambda q, t: q.put_many("abc"), TypeError),
    ("put_many-item-not-mapping", lambda q, t: q.put_many([{"task_id": "a", "payload": {}}, ["t", {}]]), TypeError),
    ("put_many-item-str", lambda q, t: q.put_many(["t"]), TypeError),
    ("put_many-unknown-key", lambda q, t: q.put_many([{"task_id": "a", "payload": {}, "delay": 1}]), TypeError),
    ("put_many-non-str-item-key", lambda q, t: q.put_many([{"task_id": "a", "payload": {}, 1: 1}]), TypeError),
    ("put_many-missing-payload", lambda q, t: q.put_many([{"task_id": "a"}]), TYPE_OR_VALUE),
    ("put_many-missing-task_id", lambda q, t: q.put_many([{"payload": {}}]), TYPE_OR_VALUE),
    (
        "put_many-bad-payload-later",
        lambda q, t: q.put_many([{"task_id": "a", "payload": {}}, {"task_id": "b", "payload": {"x": (1,)}}]),
        TYPE_OR_VALUE,
    ),
    (
        "put_many-bad-available_at",
        lambda q, t: q.put_many([{"task_id": "a", "payload": {}, "available_at": -1}]),
        ValueError,
    ),
    (
        "put_many-bool-max_attempts",
        lambda q, t: q.put_many([{"task_id": "a", "payload": {}, "max_attempts": True}]),
        TYPE_OR_VALUE,
    ),
    ("put_many-empty-key", lambda q, t: q.put_many([{"task_id": "a", "payload": {}, "key": ""}]), ValueError),
    # --- reserve
    ("reserve-worker-int", lambda q, t: q.reserve(1, now=0, lease_seconds=1), TypeError),
    ("reserve-worker-none", lambda q, t: q.reserve(None, now=0, lease_seconds=1), TypeError),
    ("reserve-worker-empty", lambda q, t: q.reserve("", now=0, lease_seconds=1), ValueError),
    ("reserve-worker-1025-bytes", lambda q, t: q.reserve("w" * 1025, now=0, lease_seconds=1), ValueError),
    ("reserve-worker-lone-surrogate", lambda q, t: q.reserve("\ud800", now=0, lease_seconds=1), ValueError),
    ("reserve-now-negative", lambda q, t: q.reserve("w", now=-1, lease_seconds=1), ValueError),
    ("reserve-now-bool", lambda q, t: q.reserve("w", now=True, lease_seconds=1), TYPE_OR_VALUE),
    ("reserve-now-float", lambda q, t: q.reserve("w", now=5.0, lease_seconds=1), TypeError),
    ("reserve-now-none", lambda q, t: q.reserve("w", now=None, lease_seconds=1), TypeError),
    ("reserve-now-2**63", lambda q, t: q.reserve("w", now=BIG, lease_seconds=1), ValueError),
    ("reserve-lease_seconds-0", lambda q, t: q.reserve("w", now=0, lease_seconds=0), ValueError),
    ("reserve-lease_seconds-negative", lambda q, t: q.reserve("w", now=0, lease_seconds=-5), ValueError),
    ("reserve-lease_seconds-bool", lambda q, t: q.reserve("w", now=0, lease_seconds=True), TYPE_OR_VALUE),
    ("reserve-lease_seconds-float", lambda q, t: q.reserve("w", now=0, lease_seconds=1.5), TypeError),
    ("reserve-lease_seconds-2**63", lambda q, t: q.reserve("w", now=0, lease_seconds=BIG), ValueError),
    ("reserve-limit-0", lambda q, t: q.reserve("w", now=0, lease_seconds=1, limit=0), ValueError),
    ("reserve-limit-negative", lambda q, t: q.reserve("w", now=0, lease_seconds=1, limit=-1), ValueError),
    ("reserve-limit-bool", lambda q, t: q.reserve("w", now=0, lease_seconds=1, limit=True), TYPE_OR_VALUE),
    ("reserve-limit-float", lambda q, t: q.reserve("w", now=0, lease_seconds=1, limit=1.0), TypeError),
    ("reserve-limit-none", lambda q, t: q.reserve("w", now=0, lease_seconds=1, limit=None), TypeError),
    # a reserve that would reap "l" (now >= 1000) must still refuse its bad argument first
    (
        "reserve-bad-limit-when-a-reap-is-due",
        lambda q, t: q.reserve("w", now=5000, lease_seconds=1, limit=0),
        ValueError,
    ),
    ("reserve-bad-worker-when-a-reap-is-due", lambda q, t: q.reserve("", now=5000, lease_seconds=1), ValueError),
    # --- ack / release
    ("ack-dict", lambda q, t: q.ack(t.to_dict(), now=1), TypeError),
    ("ack-none", lambda q, t: q.ack(None, now=1), TypeError),
    ("ack-now-negative", lambda q, t: q.ack(t, now=-1), ValueError),
    ("ack-now-bool", lambda q, t: q.ack(t, now=True), TYPE_OR_VALUE),
    ("ack-now-float", lambda q, t: q.ack(t, now=1.0), TypeError),
    ("ack-now-none", lambda q, t: q.ack(t, now=None), TypeError),
    ("ack-now-2**63", lambda q, t: q.ack(t, now=BIG), ValueError),
    ("ack_many-lease", lambda q, t: q.ack_many(t, now=1), TypeError),
    ("ack_many-dicts", lambda q, t: q.ack_many([t.to_dict()], now=1), TypeError),
    ("ack_many-none", lambda q, t: q.ack_many(None, now=1), TypeError),
    ("ack_many-now-negative", lambda q, t: q.ack_many([t], now=-1), ValueError),
    ("ack_many-now-float", lambda q, t: q.ack_many([t], now=1.0), TypeError),
    ("release-dict", lambda q, t: q.release(t.to_dict(), now=1), TypeError),
    ("release-now-negative", lambda q, t: q.release(t, now=-1), ValueError),
    ("release-now-bool", lambda q, t: q.release(t, now=False), TYPE_OR_VALUE),
    ("release-now-float", lambda q, t: q.release(t, now=1.0), TypeError),
    ("release-delay-negative", lambda q, t: q.release(t, now=1, delay=-1), ValueError),
    ("release-delay-bool", lambda q, t: q.release(t, now=1, delay=True), TYPE_OR_VALUE),
    ("release-delay-float", lambda q, t: q.release(t, now=1, delay=0.5), TypeError),
    ("release-delay-none", lambda q, t: q.release(t, now=1, delay=None), TypeError),
    ("release-delay-2**63", lambda q, t: q.release(t, now=1, delay=BIG), ValueError),
    ("release-available_at-overflows", lambda q, t: q.release(t, now=1, delay=BIG - 1), ValueError),
    # --- reads
    ("get-int", lambda q, t: q.get(1), TypeError),
    ("get-none", lambda q, t: q.get(None), TypeError),
    ("tasks-unknown-status", lambda q, t: q.tasks("pending"), ValueError),
    ("tasks-int-status", lambda q, t: q.tasks(1), TYPE_OR_VALUE),
]


@pytest.mark.parametrize(("call", "error"), [c[1:] for c in BAD_CALLS], ids=[c[0] for c in BAD_CALLS])
def test_bad_argument_raises_and_writes_nothing(
    q: Queue, qdir: Path, lease: Lease, call: Call, error: type[Exception] | tuple[type[Exception], ...]
) -> None:
    before_bytes, before_view = directory_digest(qdir), view(q)
    with pytest.raises(error):
        call(q, lease)
    assert directory_digest(qdir) == before_bytes, "a refused call changed the directory's bytes"
    assert view(q) == before_view
    # nothing is poisoned: the same queue goes on working
    q.put("after", {"ok": True})
    q.ack(lease, now=1)
    assert q.last_seq == before_view["last_seq"] + 2


@pytest.mark.parametrize(("call", "error"), [c[1:] for c in BAD_CALLS], ids=[c[0] for c in BAD_CALLS])
def test_the_model_refuses_the_same_bad_arguments(
    call: Call, error: type[Exception] | tuple[type[Exception], ...]
) -> None:
    model = Model()
    model.put("l", {"n": 1})
    [token] = model.reserve("w", now=0, lease_seconds=1000)
    model.put("r", {"n": 2}, available_at=10**6)
    before = view(model)
    with pytest.raises(error):
        call(model, token)  # type: ignore[arg-type]
    assert view(model) == before


# ---------------------------------------------------------------------------
# values that ARE accepted (the other side of the bounds)


@pytest.mark.parametrize(
    ("name", "payload"),
    [
        ("name-1024-bytes", {}),
        ("depth-64", nested(64)),
        ("list-depth-64", deep_list(64)),
        ("big-ints-and-floats", {"i": 2**200, "f": -0.0, "e": 1e300, "neg": -(2**70)}),
        ("int-of-14000-bits", {"i": 2**14000 - 1, "j": -(2**14000 - 1)}),
        ("unicode", {"é": "\U0001f600", "\u0000": "\x1f"}),
    ],
)
def test_values_inside_the_bounds_are_accepted_and_round_trip(qdir: Path, name: str, payload: dict[str, Any]) -> None:
    task_id = "x" * 1024 if name == "name-1024-bytes" else "t"
    with Queue(qdir, sync=False) as q:
        q.put(task_id, payload, key="é" * 512, available_at=BIG - 1, max_attempts=BIG - 1)
        task = q.get(task_id)
        assert task is not None and canonical_json(task.payload) == canonical_json(payload)
    with Queue(qdir, sync=False) as q:
        task = q.get(task_id)
        assert task is not None and canonical_json(task.payload) == canonical_json(payload)
        assert (task.available_at, task.max_attempts) == (BIG - 1, BIG - 1)


def test_a_lease_ending_at_the_end_of_time_can_be_reaped(q: Queue) -> None:
    """Deadlines are capped at 2**63-1, so reserve(now=2**63-1) is accepted and reaps every lease."""
    q.put("t", {}, max_attempts=2)
    [lease] = q.reserve("w", now=BIG - 5, lease_seconds=100)
    assert lease.deadline == BIG - 1
    before = q.last_seq
    [again] = q.reserve("w2", now=BIG - 1, lease_seconds=1)  # reaps, then leases the task again
    assert q.last_seq == before + 2
    assert (again.generation, again.deadline) == (2, BIG - 1)
    with pytest.raises(StaleLease):
        q.ack(again, now=BIG - 1)  # granted at the end of time: already due
    assert q.reserve("w3", now=BIG - 1, lease_seconds=1) == []  # reaped: out of attempts
    assert q.get("t").status == "dead"  # type: ignore[union-attr]


def test_the_largest_lease_deadline_is_accepted(q: Queue) -> None:
    q.put("t", {})
    [lease] = q.reserve("w", now=BIG - 2, lease_seconds=1)
    assert lease.deadline == BIG - 1
    q.release(lease, now=BIG - 2, delay=1)
    assert q.get("t").available_at == BIG - 1  # type: ignore[union-attr]


# ---------------------------------------------------------------------------
# the size bound of one task


def _bound_payload(task_id: str, key: str, extra: int) -> dict[str, str]:
    """A payload making the task exactly `extra` bytes over the documented bound."""
    fixed = len(canonical_json(task_id)) + len(canonical_json(key)) + 8192 + len(canonical_json({"p": ""}))
    return {"p": "y" * (MAX_FRAME_BYTES - fixed + extra)}


@pytest.mark.parametrize(
    ("task_id", "key"),
    [("t", "t"), ("\x01" * 1024, "\x02" * 1024)],  # control characters: 6-byte escapes
    ids=["plain-names", "control-character-names"],
)
def test_a_task_one_byte_over_the_size_bound_is_value_error_and_writes_nothing(
    q: Queue, qdir: Path, lease: Lease, task_id: str, key: str
) -> None:
    payload = _bound_payload(task_id, key, 1)
    before = directory_digest(qdir), q.last_seq
    with pytest.raises(ValueError):
        q.put(task_id, payload, key=key)
    with pytest.raises(ValueError):
        q.put_many([{"task_id": task_id, "payload": payload, "key": key}])
    assert (directory_digest(qdir), q.last_seq) == before
    q.ack(lease, now=1)


def test_a_task_exactly_at_the_size_bound_is_stored_leased_snapshotted_and_reopened(qdir: Path) -> None:
    task_id, key, worker = "\x01" * 1024, "\x02" * 1024, "\x03" * 1024
    payload = _bound_payload(task_id, key, 0)
    with Queue(qdir, sync=False, compact_bytes=None) as q:
        assert q.put(task_id, payload, key=key) == task_id
        [lease] = q.reserve(worker, now=0, lease_seconds=10)
        q.compact()  # the leased record (payload, names, worker) must fit one snapshot frame
        q.release(lease, now=1)
        q.compact()
        before = view(q)
    with Queue(qdir, sync=False) as q:
        assert view(q) == before
        [lease] = q.reserve(worker, now=1, lease_seconds=10)
        assert lease.generation == 2


# ---------------------------------------------------------------------------
# the error classes


def test_error_classes_form_the_documented_hierarchy() -> None:
    import walqueue
    import walqueue.format

    for name in ("KeyConflict", "StaleLease", "CorruptStore", "DirectoryLocked", "QueueClosed"):
        assert issubclass(getattr(walqueue, name), walqueue.WalQueueError), name
    assert issubclass(walqueue.InjectedCrash, Exception)
    assert not issubclass(walqueue.InjectedCrash, walqueue.WalQueueError)
    assert walqueue.CorruptStore is walqueue.format.CorruptStore
    assert not issubclass(walqueue.WalQueueError, (TypeError, ValueError))
    error = walqueue.CorruptStore("/x/CURRENT", 12, "bad digest")
    assert (error.path, error.offset, error.reason) == ("/x/CURRENT", 12, "bad digest")
