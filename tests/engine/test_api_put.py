"""CONTRACT §2 `put` and `put_many`: creation, identity, idempotent retries, conflicts.

Every failing or idempotent call is checked at the byte level: the directory's
files hash the same before and after, and `last_seq` does not move.
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model import MAX_FRAME_BYTES, Model, nothing_written, view, wal_bodies
from walqueue import KeyConflict, Queue
from walqueue.format.canonical import canonical_json


def drive_to(q: Queue, task_id: str, status: str, payload: dict[str, Any]) -> None:
    """Create `task_id` (max_attempts=1) and bring it to `status`."""
    q.put(task_id, payload, max_attempts=1)
    if status == "ready":
        return
    [lease] = q.reserve("w", now=0, lease_seconds=10)
    assert lease.task_id == task_id
    if status == "completed":
        q.ack(lease, now=1)
    elif status == "dead":
        q.release(lease, now=1)
    assert q.get(task_id).status == status  # type: ignore[union-attr]


# ---------------------------------------------------------------------------
# creation


def test_put_returns_task_id_and_creates_a_ready_task_with_zero_counters(q: Queue) -> None:
    assert q.put("t1", {"n": 1}, available_at=7, max_attempts=5) == "t1"
    task = q.get("t1")
    assert task is not None
    assert (task.task_id, task.key, task.status, task.payload) == ("t1", "t1", "ready", {"n": 1})
    assert (task.available_at, task.max_attempts, task.attempts, task.generation) == (7, 5, 0, 0)
    assert (task.worker, task.deadline) == (None, None)
    assert q.last_seq == 1


def test_key_defaults_to_the_task_id(q: Queue) -> None:
    q.put("t1", {})
    q.put("t2", {}, key="k2")
    assert q.get("t1").key == "t1"  # type: ignore[union-attr]
    assert q.get("t2").key == "k2"  # type: ignore[union-attr]


def test_default_available_at_is_0_and_default_max_attempts_is_3(q: Queue) -> None:
    q.put("t", {})
    task = q.get("t")
    assert task is not None and (task.available_at, task.max_attempts) == (0, 3)


def test_new_task_first_lease_has_generation_1(q: Queue) -> None:
    q.put("t", {})
    [lease] = q.reserve("w", now=0, lease_seconds=5)
    assert (lease.generation, lease.attempts) == (1, 1)


def test_put_writes_exactly_one_frame_holding_the_spec_put_op(q: Queue, qdir: Path) -> None:
    q.put("t1", {"b": [1, 2.5, None], "a": "é"}, key="k", available_at=3, max_attempts=2)
    expected = {
        "seq": 1,
        "ops": [
            {
                "op": "put",
                "task": "t1",
                "key": "k",
                "payload": {"a": "é", "b": [1, 2.5, None]},
                "available_at": 3,
                "max_attempts": 2,
            }
        ],
    }
    body = canonical_json(expected)
    frame = struct.pack(">I", len(body)) + body + hashlib.sha256(body).digest()
    segments = sorted(qdir.glob("wal-*.log"))
    written = b"".join(seg.read_bytes() for seg in segments)
    # The segment is preallocated: the frame, then zeros only (the end of the log).
    assert written[: len(frame)] == frame and written[len(frame) :].count(0) == len(written) - len(frame)
    assert q.stats()["wal_bytes"] == len(frame)


def test_put_is_durable_across_reopen_with_sync(qdir: Path) -> None:
    with Queue(qdir, sync=True) as q:
        q.put("t", {"x": [1, {"y": None}]}, key="k", available_at=4, max_attempts=9)
        before = view(q)
    with Queue(qdir, sync=True) as q:
        assert view(q) == before


# ---------------------------------------------------------------------------
# identical retries


@pytest.mark.parametrize("status", ["ready", "leased", "completed", "dead"])
def test_identical_retry_returns_id_and_writes_no_frame_whatever_the_status(q: Queue, qdir: Path, status: str) -> None:
    drive_to(q, "t", status, {"n": 1})
    before = view(q)
    with nothing_written(q, qdir):
        assert q.put("t", {"n": 1}, max_attempts=1) == "t"
    assert view(q) == before  # a completed or dead task is never resurrected


def test_identical_retry_after_ack_writes_no_frame(q: Queue, qdir: Path) -> None:
    q.put("t", {"n": 1}, key="k")
    [lease] = q.reserve("w", now=0, lease_seconds=10)
    q.ack(lease, now=1)
    with nothing_written(q, qdir):
        assert q.put("t", {"n": 1}, key="k") == "t"
    task = q.get("t")
    assert task is not None and task.status == "completed" and task.payload is None


def test_identical_retry_spelling_out_the_defaults_is_identical(q: Queue, qdir: Path) -> None:
    q.put("t", {"n": 1})
    with nothing_written(q, qdir):
        assert q.put("t", {"n": 1}, key="t", available_at=0, max_attempts=3) == "t"


def test_identical_retry_with_payload_keys_in_another_order_is_identical(q: Queue, qdir: Path) -> None:
    q.put("t", {"a": 1, "b": {"c": 2, "d": 3}})
    with nothing_written(q, qdir):
        assert q.put("t", {"b": {"d": 3, "c": 2}, "a": 1}) == "t"


def test_identical_retry_after_compaction_and_restart_writes_no_frame(qdir: Path) -> None:
    with Queue(qdir, sync=False) as q:
        q.put("done", {"n": 1}, key="k-done")
        q.put("open", {"n": 2}, key="k-open")
        [lease] = q.reserve("w", now=0, lease_seconds=10)
        q.ack(lease, now=1)
        q.compact()
    with Queue(qdir, sync=False) as q:
        with nothing_written(q, qdir):
            assert q.put("done", {"n": 1}, key="k-done") == "done"
            assert q.put("open", {"n": 2}, key="k-open") == "open"
        assert q.get("done").status == "completed"  # type: ignore[union-attr]


# ---------------------------------------------------------------------------
# conflicts


@pytest.mark.parametrize(
    "retry",
    [
        pytest.param({"task_id": "t", "payload": {"n": 2}}, id="other-payload"),
        pytest.param({"task_id": "t", "payload": {"n": 1}, "available_at": 1}, id="other-available_at"),
        pytest.param({"task_id": "t", "payload": {"n": 1}, "max_attempts": 4}, id="other-max_attempts"),
        pytest.param({"task_id": "u", "payload": {"n": 1}}, id="other-task_id"),
        pytest.param({"task_id": "t", "payload": {"n": 1, "m": None}}, id="extra-payload-key"),
    ],
)
def test_known_key_with_another_identity_is_key_conflict(q: Queue, qdir: Path, retry: dict[str, Any]) -> None:
    q.put("t", {"n": 1}, key="k")
    with nothing_written(q, qdir), pytest.raises(KeyConflict):
        q.put(key="k", **retry)
    assert q.get("u") is None


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"x": 1}, {"x": 1.0}),
        ({"x": 1}, {"x": True}),
        ({"x": 1.0}, {"x": True}),
        ({"x": 0}, {"x": False}),
        ({"x": [1]}, {"x": [1.0]}),
        ({"x": None}, {"x": 0}),
        ({"x": ""}, {"x": None}),
        ({"x": {}}, {"x": []}),
    ],
)
def test_values_equal_in_python_but_not_in_canonical_json_are_different_identities(
    q: Queue, qdir: Path, first: dict[str, Any], second: dict[str, Any]
) -> None:
    q.put("t", first)
    with nothing_written(q, qdir), pytest.raises(KeyConflict):
        q.put("t", second)
    assert canonical_json(q.get("t").payload) == canonical_json(first)  # type: ignore[union-attr]


def test_new_key_for_an_existing_task_id_is_key_conflict(q: Queue, qdir: Path) -> None:
    q.put("t", {"n": 1}, key="k1")
    with nothing_written(q, qdir), pytest.raises(KeyConflict):
        q.put("t", {"n": 1}, key="k2")
    with nothing_written(q, qdir), pytest.raises(KeyConflict):
        q.put("t", {"n": 1})  # default key "t" is new too


@pytest.mark.parametrize("status", ["ready", "leased", "completed", "dead"])
def test_keys_and_task_ids_stay_taken_whatever_the_status(q: Queue, qdir: Path, status: str) -> None:
    drive_to(q, "t", status, {"n": 1})
    with nothing_written(q, qdir):
        with pytest.raises(KeyConflict):
            q.put("other", {"n": 1}, key="t")
        with pytest.raises(KeyConflict):
            q.put("t", {"n": 1}, key="fresh")
        with pytest.raises(KeyConflict):
            q.put("t", {"n": 2}, max_attempts=1)


def test_task_ids_and_keys_are_never_reused_after_compaction_and_restart(qdir: Path) -> None:
    with Queue(qdir, sync=False) as q:
        q.put("t", {"n": 1}, key="k")
        [lease] = q.reserve("w", now=0, lease_seconds=10)
        q.ack(lease, now=1)
        q.compact()
    with Queue(qdir, sync=False) as q:
        with nothing_written(q, qdir):
            with pytest.raises(KeyConflict):
                q.put("t", {"n": 1}, key="k2")
            with pytest.raises(KeyConflict):
                q.put("t2", {"n": 1}, key="k")
            with pytest.raises(KeyConflict):
                q.put("t", {"n": 9}, key="k")


def test_keys_and_task_ids_are_separate_namespaces(q: Queue) -> None:
    q.put("a", {}, key="k")
    assert q.put("k", {}, key="a") == "k"  # key "a" and task "k" are both new
    assert q.get("k").key == "a"  # type: ignore[union-attr]


# ---------------------------------------------------------------------------
# payload copies


def test_mutating_the_payload_passed_in_changes_nothing_stored(q: Queue) -> None:
    payload: dict[str, Any] = {"list": [1, 2], "obj": {"a": 1}}
    q.put("t", payload)
    payload["list"].append(3)
    payload["obj"]["a"] = 99
    payload["new"] = True
    assert q.get("t").payload == {"list": [1, 2], "obj": {"a": 1}}  # type: ignore[union-attr]
    # and the identity is still the original one
    assert q.put("t", {"list": [1, 2], "obj": {"a": 1}}) == "t"
    assert q.last_seq == 1


def test_mutating_a_put_many_payload_afterwards_changes_nothing_stored(q: Queue) -> None:
    payload: dict[str, Any] = {"l": [1]}
    q.put_many([{"task_id": "t", "payload": payload}])
    payload["l"].append(2)
    assert q.get("t").payload == {"l": [1]}  # type: ignore[union-attr]


# ---------------------------------------------------------------------------
# put_many


def test_put_many_returns_ids_in_input_order_in_one_transaction(q: Queue, qdir: Path) -> None:
    ids = q.put_many(
        [
            {"task_id": "c", "payload": {"i": 0}},
            {"task_id": "a", "payload": {"i": 1}, "key": "ka", "available_at": 5, "max_attempts": 2},
            {"task_id": "b", "payload": {"i": 2}},
        ]
    )
    assert ids == ["c", "a", "b"]
    assert q.last_seq == 1
    [body] = wal_bodies(qdir)
    assert body["seq"] == 1
    assert sorted(op["task"] for op in body["ops"]) == ["a", "b", "c"]
    assert all(op["op"] == "put" for op in body["ops"])
    task_a = q.get("a")
    assert task_a is not None and (task_a.key, task_a.available_at, task_a.max_attempts) == ("ka", 5, 2)


def test_put_many_of_an_empty_list_writes_nothing(q: Queue, qdir: Path) -> None:
    with nothing_written(q, qdir):
        assert q.put_many([]) == []
        assert q.put_many(iter(())) == []


def test_put_many_of_identical_retries_only_writes_nothing(q: Queue, qdir: Path) -> None:
    q.put("a", {"n": 1})
    q.put("b", {"n": 2}, key="kb")
    with nothing_written(q, qdir):
        assert q.put_many(
            [{"task_id": "b", "payload": {"n": 2}, "key": "kb"}, {"task_id": "a", "payload": {"n": 1}}]
        ) == ["b", "a"]


def test_put_many_mixing_retries_and_new_tasks_writes_one_frame_of_new_ops_only(q: Queue, qdir: Path) -> None:
    q.put("a", {"n": 1})
    ids = q.put_many(
        [{"task_id": "a", "payload": {"n": 1}}, {"task_id": "b", "payload": {}}, {"task_id": "a", "payload": {"n": 1}}]
    )
    assert ids == ["a", "b", "a"]
    assert q.last_seq == 2
    last = wal_bodies(qdir)[-1]
    assert [op["task"] for op in last["ops"]] == ["b"]


def test_put_many_identical_items_inside_one_list_are_one_op(q: Queue, qdir: Path) -> None:
    item = {"task_id": "t", "payload": {"n": 1}, "key": "k"}
    assert q.put_many([item, dict(item), dict(item)]) == ["t", "t", "t"]
    assert q.last_seq == 1
    [body] = wal_bodies(qdir)
    assert len(body["ops"]) == 1


@pytest.mark.parametrize(
    "items",
    [
        pytest.param(
            [{"task_id": "new1", "payload": {}}, {"task_id": "old", "payload": {"n": 2}}],
            id="conflict-with-stored-key",
        ),
        pytest.param(
            [{"task_id": "new1", "payload": {}}, {"task_id": "old", "payload": {"n": 1}, "key": "fresh"}],
            id="new-key-for-stored-task",
        ),
        pytest.param(
            [{"task_id": "new1", "payload": {}, "key": "k"}, {"task_id": "new2", "payload": {}, "key": "k"}],
            id="same-key-two-identities-in-list",
        ),
        pytest.param(
            [{"task_id": "new1", "payload": {}, "key": "k1"}, {"task_id": "new1", "payload": {}, "key": "k2"}],
            id="same-task-two-keys-in-list",
        ),
        pytest.param(
            [{"task_id": "new1", "payload": {"v": 1}}, {"task_id": "new1", "payload": {"v": 1.0}}],
            id="same-key-one-vs-one-point-zero-in-list",
        ),
    ],
)
def test_put_many_conflict_anywhere_fails_the_whole_call(q: Queue, qdir: Path, items: list[dict[str, Any]]) -> None:
    q.put("old", {"n": 1})
    with nothing_written(q, qdir), pytest.raises(KeyConflict):
        q.put_many(items)
    assert q.get("new1") is None and q.get("new2") is None


def test_put_many_unknown_item_key_is_type_error_and_writes_nothing(q: Queue, qdir: Path) -> None:
    with nothing_written(q, qdir), pytest.raises(TypeError):
        q.put_many([{"task_id": "a", "payload": {}}, {"task_id": "b", "payload": {}, "colour": 1}])
    assert q.get("a") is None


@pytest.mark.parametrize("missing", ["task_id", "payload"])
def test_put_many_item_without_a_required_name_is_refused(q: Queue, qdir: Path, missing: str) -> None:
    item: dict[str, Any] = {"task_id": "b", "payload": {}}
    del item[missing]
    with nothing_written(q, qdir), pytest.raises((TypeError, ValueError)):
        q.put_many([{"task_id": "a", "payload": {}}, item])


def test_put_many_bad_item_after_good_ones_writes_nothing(q: Queue, qdir: Path) -> None:
    items = [{"task_id": "a", "payload": {}}, {"task_id": "b", "payload": {"x": float("nan")}}]
    with nothing_written(q, qdir), pytest.raises(ValueError):
        q.put_many(items)
    assert q.tasks() == []


def test_put_many_accepts_any_iterable_of_mappings(q: Queue) -> None:
    items = (MappingProxyType({"task_id": f"t{i}", "payload": {"i": i}}) for i in range(3))
    assert q.put_many(items) == ["t0", "t1", "t2"]
    assert q.last_seq == 1


def test_put_many_transaction_beyond_the_frame_bound_is_value_error_and_writes_nothing(q: Queue, qdir: Path) -> None:
    big = "x" * (MAX_FRAME_BYTES // 2)  # each task alone fits, two do not fit one frame
    items = [{"task_id": "a", "payload": {"s": big}}, {"task_id": "b", "payload": {"s": big}}]
    with nothing_written(q, qdir), pytest.raises(ValueError):
        q.put_many(items)
    # each alone is fine
    assert q.put_many(items[:1]) == ["a"]


# ---------------------------------------------------------------------------
# properties over many inputs

names = st.text(st.characters(codec="utf-8"), min_size=1, max_size=8)
json_scalars = (
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False) | names
)
payloads = st.dictionaries(
    names,
    st.recursive(
        json_scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
        max_leaves=8,
    ),
    max_size=4,
)


@settings(max_examples=40, deadline=None)
@given(
    payload=payloads,
    task_id=names,
    key=names | st.none(),
    available_at=st.integers(0, 2**63 - 1),
    max_attempts=st.integers(1, 2**63 - 1),
)
def test_put_stores_exactly_what_was_given_and_retry_is_free(
    tmp_path_factory: pytest.TempPathFactory,
    payload: dict[str, Any],
    task_id: str,
    key: str | None,
    available_at: int,
    max_attempts: int,
) -> None:
    qdir = tmp_path_factory.mktemp("q")
    with Queue(qdir, sync=False) as q:
        model = Model()
        assert q.put(task_id, payload, key=key, available_at=available_at, max_attempts=max_attempts) == task_id
        model.put(task_id, payload, key=key, available_at=available_at, max_attempts=max_attempts)
        assert view(q) == view(model)
        with nothing_written(q, qdir):
            assert q.put(task_id, payload, key=key, available_at=available_at, max_attempts=max_attempts) == task_id
    with Queue(qdir, sync=False) as q:
        assert view(q) == view(model)
