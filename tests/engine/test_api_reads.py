"""CONTRACT §2 reads (`get`, `tasks`, `stats`, `last_seq`), payload copies, `compact()`.

Reads never write a frame; returned payloads are copies; `stats()` has the
documented keys; `compact()` changes no answer and, with nothing appended,
writes nothing.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from model import STATUSES, directory_digest, read_frames, view
from walqueue import Queue, Task
from walqueue.format.frame import encode_frame


def one_of_each(q: Queue) -> None:
    """Tasks "r" ready, "l" leased (to "w", deadline 100), "c" completed, "d" dead."""
    q.put_many(
        [
            {"task_id": "c", "payload": {"k": "c"}},
            {"task_id": "d", "payload": {"k": "d"}, "max_attempts": 1},
            {"task_id": "l", "payload": {"k": "l"}},
            {"task_id": "r", "payload": {"k": "r"}, "available_at": 500},
        ]
    )
    leases = {lease.task_id: lease for lease in q.reserve("w", now=0, lease_seconds=100, limit=3)}
    q.ack(leases["c"], now=1)
    q.release(leases["d"], now=2, delay=3)


# ---------------------------------------------------------------------------
# get


@pytest.mark.parametrize("task_id", ["never", "x" * 5000, "", "C", "c "])
def test_get_returns_none_for_any_id_never_stored(q: Queue, task_id: str) -> None:
    one_of_each(q)
    assert q.get(task_id) is None


def test_get_returns_every_field_in_every_status(q: Queue) -> None:
    one_of_each(q)
    assert q.get("r") == Task("r", "r", "ready", {"k": "r"}, 500, 3, 0, 0, None, None)
    assert q.get("l") == Task("l", "l", "leased", {"k": "l"}, 0, 3, 1, 1, "w", 100)
    assert q.get("c") == Task("c", "c", "completed", None, 0, 3, 1, 1, None, None)
    assert q.get("d") == Task("d", "d", "dead", {"k": "d"}, 5, 1, 1, 1, None, None)


def test_task_is_a_frozen_dataclass(q: Queue) -> None:
    q.put("t", {})
    task = q.get("t")
    assert task is not None
    with pytest.raises(dataclasses.FrozenInstanceError):
        task.status = "dead"  # type: ignore[misc]


# ---------------------------------------------------------------------------
# tasks


def test_tasks_are_ordered_by_task_id_as_python_str(q: Queue) -> None:
    ids = ["b", "B", "a10", "a9", "é", "z", "\U0001f600", "A", "_"]
    for i in ids:
        q.put(i, {})
    assert [t.task_id for t in q.tasks()] == sorted(ids)


def test_tasks_filter_by_status(q: Queue) -> None:
    one_of_each(q)
    for status in STATUSES:
        got = q.tasks(status)
        assert [t.status for t in got] == [status]
    assert [t.task_id for t in q.tasks("dead")] == ["d"]
    assert q.tasks("dead")[0].payload == {"k": "d"}  # the dead-letter list keeps payloads
    assert [t.task_id for t in q.tasks()] == ["c", "d", "l", "r"]
    assert q.tasks(None) == q.tasks()


@pytest.mark.parametrize("status", ["", "READY", "pending", "done", "ready ", "all"])
def test_tasks_with_an_unknown_status_is_value_error(q: Queue, status: str) -> None:
    with pytest.raises(ValueError):
        q.tasks(status)


@pytest.mark.parametrize("status", [1, b"ready", ["ready"]])
def test_tasks_with_a_non_str_status_is_refused(q: Queue, status: object) -> None:
    with pytest.raises((TypeError, ValueError)):
        q.tasks(status)  # type: ignore[arg-type]


def test_tasks_of_an_empty_queue_is_empty(q: Queue) -> None:
    assert q.tasks() == [] and all(q.tasks(s) == [] for s in STATUSES)


# ---------------------------------------------------------------------------
# reads never write


def test_reads_never_write_a_frame(q: Queue, qdir: Path) -> None:
    one_of_each(q)
    before, seq = directory_digest(qdir), q.last_seq
    for _ in range(3):
        q.get("r"), q.get("nope"), q.tasks(), q.stats(), q.last_seq
        for status in STATUSES:
            q.tasks(status)
    assert directory_digest(qdir) == before
    assert q.last_seq == seq


def test_reads_do_not_reap_expired_leases(q: Queue) -> None:
    one_of_each(q)
    # "l" is past its deadline for any later reserve, but reads take no `now`
    assert q.get("l").status == "leased"  # type: ignore[union-attr]
    assert q.stats()["counts"]["leased"] == 1


# ---------------------------------------------------------------------------
# payload copies


def test_mutating_a_returned_payload_changes_nothing_stored(q: Queue) -> None:
    q.put("t", {"list": [1], "obj": {"a": 1}})
    for task in (q.get("t"), q.tasks()[0], q.tasks("ready")[0]):
        assert task is not None and task.payload is not None
        task.payload["list"].append(2)
        task.payload["obj"]["a"] = 2
        task.payload["new"] = 3
    assert q.get("t").payload == {"list": [1], "obj": {"a": 1}}  # type: ignore[union-attr]
    [lease] = q.reserve("w", now=0, lease_seconds=5)
    lease.payload["list"].append(9)
    assert q.get("t").payload == {"list": [1], "obj": {"a": 1}}  # type: ignore[union-attr]
    q.release(
        lease,
        now=1,
        delay=0,
    )
    [again] = q.reserve("w", now=1, lease_seconds=5)
    assert again.payload == {"list": [1], "obj": {"a": 1}}


def test_mutating_the_payload_passed_to_put_changes_nothing_stored(q: Queue) -> None:
    payload = {"list": [1]}
    q.put("t", payload)
    payload["list"].append(2)
    assert q.get("t").payload == {"list": [1]}  # type: ignore[union-attr]


# ---------------------------------------------------------------------------
# stats and last_seq


def test_stats_counts_have_exactly_the_four_status_keys(q: Queue) -> None:
    assert q.stats()["counts"] == {"ready": 0, "leased": 0, "completed": 0, "dead": 0}
    one_of_each(q)
    assert q.stats()["counts"] == {"ready": 1, "leased": 1, "completed": 1, "dead": 1}


def test_stats_has_the_documented_keys(q: Queue) -> None:
    stats = q.stats()
    assert {"counts", "last_seq", "snapshot_seq", "wal_bytes", "segments"} <= set(stats)
    assert stats["last_seq"] == 0 and stats["snapshot_seq"] == 0 and stats["wal_bytes"] == 0
    for name in ("last_seq", "snapshot_seq", "wal_bytes", "segments"):
        assert type(stats[name]) is int


def test_last_seq_counts_committed_transactions(q: Queue) -> None:
    assert q.last_seq == 0
    one_of_each(q)
    assert q.last_seq == 4 == q.stats()["last_seq"]


def test_last_seq_is_read_only(q: Queue) -> None:
    with pytest.raises(AttributeError):
        q.last_seq = 5  # type: ignore[misc]


def test_wal_bytes_is_the_size_of_the_live_wal_after_the_snapshot(q: Queue, qdir: Path) -> None:
    one_of_each(q)
    # The frames' bytes, not the files' sizes: the newest segment is preallocated.
    live = sum(len(encode_frame(value)) for p in qdir.glob("wal-*.log") for _, value in read_frames(p))
    assert q.stats()["wal_bytes"] == live > 0


def test_compact_sets_snapshot_seq_and_empties_the_live_wal(q: Queue) -> None:
    one_of_each(q)
    before = view(q)
    q.compact()
    stats = q.stats()
    assert stats["snapshot_seq"] == stats["last_seq"] == 4
    assert stats["wal_bytes"] == 0
    assert stats["segments"] == 1
    assert view(q) == before
    q.put("x", {})
    stats = q.stats()
    assert stats["wal_bytes"] > 0 and stats["snapshot_seq"] == 4 and stats["last_seq"] == 5


def test_compact_does_not_change_any_read_or_later_answer(qdir: Path) -> None:
    with Queue(qdir, sync=False) as q:
        one_of_each(q)
        before = view(q)
        q.compact()
        assert view(q) == before
        [lease] = q.reserve("w2", now=100, lease_seconds=10, limit=5)  # reaps "l", leases it again
        assert (lease.task_id, lease.generation, lease.attempts) == ("l", 2, 2)
    with Queue(qdir, sync=False) as q:
        assert q.get("l").generation == 2  # type: ignore[union-attr]


def test_compact_with_nothing_appended_writes_nothing(q: Queue, qdir: Path) -> None:
    one_of_each(q)
    q.compact()
    before = directory_digest(qdir)
    stats = q.stats()
    q.compact()
    q.compact()
    assert directory_digest(qdir) == before
    assert q.stats() == stats


def test_compact_of_a_fresh_queue_writes_nothing(q: Queue, qdir: Path) -> None:
    before = directory_digest(qdir)
    q.compact()
    assert directory_digest(qdir) == before
    assert not list(qdir.glob("snapshot-*")) and not (qdir / "CURRENT").exists()


def test_compact_after_only_failed_calls_writes_nothing(q: Queue, qdir: Path) -> None:
    one_of_each(q)
    q.compact()
    before = directory_digest(qdir)
    q.reserve("w", now=1, lease_seconds=5)  # nothing ready yet at 1, nothing to reap
    q.put("r", {"k": "r"}, available_at=500)  # identical retry
    q.compact()
    assert directory_digest(qdir) == before


def test_compact_with_sync_true_survives_reopen(qdir: Path) -> None:
    with Queue(qdir, sync=True) as q:
        one_of_each(q)
        q.compact()
        q.put("after", {"n": 1})
        before = view(q)
    with Queue(qdir, sync=True) as q:
        assert view(q) == before
        assert q.stats()["snapshot_seq"] == 4


def test_automatic_compaction_happens_with_a_small_compact_bytes(qdir: Path) -> None:
    with Queue(qdir, sync=False, compact_bytes=1024) as q:
        q.put("t", {"pad": "x" * 100}, max_attempts=10**9)
        for now in range(300):
            [lease] = q.reserve("w", now=now, lease_seconds=1)
            q.release(lease, now=now)
        # The snapshot is written by a background thread that yields to active calls (autocompact.py), so
        # on a busy machine it may still be running when the loop ends: it must then publish on its own.
        deadline = time.monotonic() + 60
        while q.stats()["snapshot_seq"] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert q.stats()["snapshot_seq"] > 0
        before = view(q)
    with Queue(qdir, sync=False) as q:
        assert view(q) == before


def test_compact_bytes_none_never_compacts_automatically(qdir: Path) -> None:
    with Queue(qdir, sync=False, compact_bytes=None) as q:
        q.put("t", {"pad": "x" * 1000}, max_attempts=10**9)
        for now in range(200):
            [lease] = q.reserve("w", now=now, lease_seconds=1)
            q.release(lease, now=now)
        assert q.stats()["snapshot_seq"] == 0
        assert not (qdir / "CURRENT").exists()
