"""A store's task records are never tracked by the cyclic collector, so a full collection does not walk its tasks."""

from __future__ import annotations

import gc
from pathlib import Path

from walqueue import Queue
from walqueue.engine import rows
from walqueue.engine.putops import put_op_from_mapping, put_ops_from_mappings
from walqueue.engine.records import TaskRecord, Tombstone, view
from walqueue.engine.rows import Stored

ERROR = {"type": "ValueError", "message": "bad input", "traceback": "Traceback (most recent call last):\n  ..."}


def _every_shape(queue: Queue) -> None:
    """Tasks in every status and shape: lanes, own keys, leases, errors with tracebacks, tombstones."""
    queue.put("ready", {"n": 1})
    queue.put("keyed", {"n": 2}, key="its-own-key")
    queue.put("lane", {"n": 3}, queue="emails", priority=5)
    queue.put("leased", {"n": 4}, queue="bulk")
    queue.put("retried", {"n": 5})
    queue.put("dead", {"n": 6}, max_attempts=1)
    queue.put("done", {"n": 7}, key="done-key", queue="emails", priority=-3)
    queue.put_many([{"task_id": "many-1", "payload": {"n": 8}}, {"task_id": "many-2", "payload": {}, "key": "k"}])
    for lease in queue.reserve("worker-1", now=0, lease_seconds=60, limit=10):
        if lease.task_id == "retried":
            queue.release(lease, now=0, delay=5, error=ERROR)
        elif lease.task_id == "dead":
            queue.fail(lease, now=0, error=ERROR)
        elif lease.task_id == "done":
            queue.ack(lease, now=0)
        elif lease.task_id != "leased":
            queue.release(lease, now=0)


def _untracked_after_a_collection(queue: Queue) -> dict[str, Stored]:
    # A collection untracks an exact tuple whose items are untracked when it looks at it; a row holds tuples
    # (its heap entry, its error) that one collection may untrack only after it looked at the row: two suffice.
    gc.collect()
    gc.collect()
    stored = queue._state.indexes().tasks  # the state's own records, shared, not copied
    for task_id, record in stored.items():
        assert type(record) is tuple or type(record) is bytes, task_id
        assert not gc.is_tracked(record), task_id
    return stored


def test_no_stored_record_of_any_shape_is_tracked(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        _every_shape(queue)
        stored = _untracked_after_a_collection(queue)
        shown = {task_id: view(record) for task_id, record in stored.items()}
        assert {record.status for record in shown.values()} == {"ready", "leased", "dead", "completed"}
        assert {type(record) for record in shown.values()} == {TaskRecord, Tombstone}
        assert (shown["lane"].queue, shown["lane"].priority) == ("emails", 5)
        assert shown["retried"].traceback == ERROR["traceback"] and shown["keyed"].key == "its-own-key"
        indexes = queue._state.indexes()
        for entry in [*indexes.ready, *indexes.leases]:
            assert not gc.is_tracked(entry)
        fields = {task_id: record.fields() for task_id, record in shown.items()}
    with Queue(tmp_path / "q", sync=False) as reopened:  # records replayed from the log: the same, untracked
        replayed = _untracked_after_a_collection(reopened)
        assert {task_id: view(record).fields() for task_id, record in replayed.items()} == fields
        reopened.compact()
    with Queue(tmp_path / "q", sync=False) as reloaded:  # and loaded from a snapshot
        loaded = _untracked_after_a_collection(reloaded)
        assert {task_id: view(record).fields() for task_id, record in loaded.items()} == fields


def test_a_collection_walks_no_more_objects_for_more_tasks(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False, compact_bytes=None) as queue:
        queue.put_many([{"task_id": f"warm-{n}", "payload": {"n": n}} for n in range(100)])
        gc.collect()
        before = len(gc.get_objects())
        queue.put_many([{"task_id": f"t-{n:05d}", "payload": {"n": n}, "queue": f"q{n % 7}"} for n in range(5_000)])
        for lease in queue.reserve("w", now=0, lease_seconds=60, limit=1_000):
            if lease.task_id < "t-00500":
                queue.ack(lease, now=0)
        gc.collect()
        assert len(gc.get_objects()) - before < 200  # not one per task


def test_a_view_answers_each_field_from_its_position(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        _every_shape(queue)
        for row in queue._state.indexes().tasks.values():
            if type(row) is tuple:
                record = view(row)
                assert [getattr(record, name) for name in rows.FIELDS] == list(row[: rows.LANE])
                assert record.generation == row[rows.ATTEMPTS] and record.entry is row[rows.ENTRY]


def test_a_put_op_and_its_carrier_are_never_tracked() -> None:
    """A planned put is a dict of atomic values (its carrier is bytes): a put_many's ops are never promoted."""
    items = [
        {"task_id": "a", "payload": {"n": 1, "nested": {"list": [1, 2]}}},
        {"task_id": "b", "payload": {}, "key": "k", "available_at": 5, "max_attempts": 2},
        {"task_id": "c", "payload": {"z": 1, "a": 2}, "queue": "emails", "priority": 3, "put_at": 7},
    ]
    for op in [*put_ops_from_mappings(items), *(put_op_from_mapping(item) for item in items)]:
        assert not gc.is_tracked(op), op
        assert type(op["payload"]) is bytes
