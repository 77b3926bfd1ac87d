"""CONTRACT §2 `reserve`: the reap transaction, then the lease transaction.

Ordering by (available_at, task_id) with Python str comparison, `limit`,
availability, attempts/generation, expiry to ready or dead, and the exact
number of transactions each call writes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model import Model, nothing_written, read_frames, render, view, wal_bodies
from walqueue import Queue

# ---------------------------------------------------------------------------
# what is leased, in which order


def test_reserve_leases_in_available_at_then_task_id_order(q: Queue) -> None:
    q.put("b", {}, available_at=5)
    q.put("a", {}, available_at=5)
    q.put("z", {}, available_at=1)
    q.put("c", {}, available_at=3)
    leases = q.reserve("w", now=10, lease_seconds=5, limit=10)
    assert [lease.task_id for lease in leases] == ["z", "c", "a", "b"]


def test_task_ids_compare_as_python_str(q: Queue) -> None:
    ids = ["b", "B", "a10", "a9", "é", "z", "e\u0301", "\U0001f600", "A", "a", "ab", "_", "0"]
    q.put_many([{"task_id": i, "payload": {}} for i in ids])
    leases = q.reserve("w", now=0, lease_seconds=5, limit=100)
    assert [lease.task_id for lease in leases] == sorted(ids)


def test_limit_caps_the_number_of_leases(q: Queue) -> None:
    q.put_many([{"task_id": f"t{i}", "payload": {}} for i in range(5)])
    assert [lease.task_id for lease in q.reserve("w", now=0, lease_seconds=5, limit=2)] == ["t0", "t1"]
    assert [lease.task_id for lease in q.reserve("w", now=0, lease_seconds=5)] == ["t2"]
    assert [lease.task_id for lease in q.reserve("w", now=0, lease_seconds=5, limit=99)] == ["t3", "t4"]


def test_only_tasks_with_available_at_le_now_are_leased(q: Queue) -> None:
    q.put("now", {}, available_at=10)
    q.put("later", {}, available_at=11)
    assert [lease.task_id for lease in q.reserve("w", now=10, lease_seconds=5, limit=5)] == ["now"]
    assert q.get("later").status == "ready"  # type: ignore[union-attr]
    assert [lease.task_id for lease in q.reserve("w", now=11, lease_seconds=5, limit=5)] == ["later"]


def test_completed_dead_and_leased_tasks_are_never_leased(q: Queue) -> None:
    q.put_many([{"task_id": t, "payload": {}, "max_attempts": 1} for t in ("done", "dead", "held")])
    leases = {lease.task_id: lease for lease in q.reserve("w", now=0, lease_seconds=100, limit=3)}
    q.ack(leases["done"], now=1)
    q.release(leases["dead"], now=1)
    assert q.reserve("w2", now=2, lease_seconds=5, limit=10) == []


def test_lease_carries_worker_generation_deadline_attempts_and_payload(q: Queue) -> None:
    q.put("t", {"job": [1, 2]}, available_at=3)
    [lease] = q.reserve("worker-1", now=7, lease_seconds=11)
    assert (lease.task_id, lease.worker, lease.generation, lease.deadline, lease.attempts) == (
        "t",
        "worker-1",
        1,
        18,
        1,
    )
    assert lease.payload == {"job": [1, 2]}
    task = q.get("t")
    assert task is not None
    assert (task.status, task.worker, task.deadline, task.attempts, task.generation) == ("leased", "worker-1", 18, 1, 1)
    assert task.available_at == 3  # a lease leaves available_at unchanged


def test_reserve_with_nothing_to_reap_or_lease_writes_nothing(q: Queue, qdir: Path) -> None:
    q.put("future", {}, available_at=100)
    q.put("held", {})
    q.reserve("w", now=0, lease_seconds=50)
    with nothing_written(q, qdir):
        assert q.reserve("w", now=49, lease_seconds=5, limit=10) == []


def test_reserve_on_an_empty_queue_writes_nothing(q: Queue, qdir: Path) -> None:
    with nothing_written(q, qdir):
        assert q.reserve("w", now=0, lease_seconds=1) == []


def test_lease_of_many_tasks_is_one_transaction(q: Queue, qdir: Path) -> None:
    q.put_many([{"task_id": f"t{i}", "payload": {}} for i in range(5)])
    q.reserve("w", now=0, lease_seconds=5, limit=5)
    assert q.last_seq == 2
    last = wal_bodies(qdir)[-1]
    assert last["seq"] == 2
    assert sorted(op["task"] for op in last["ops"]) == [f"t{i}" for i in range(5)]
    assert {op["op"] for op in last["ops"]} == {"lease"}
    assert {(op["worker"], op["generation"], op["deadline"]) for op in last["ops"]} == {("w", 1, 5)}


# ---------------------------------------------------------------------------
# the reap


def test_reap_and_lease_are_two_separate_transactions(q: Queue, qdir: Path) -> None:
    q.put("old", {})
    q.reserve("w1", now=0, lease_seconds=10)  # seq 2, deadline 10
    q.put("new", {})  # seq 3
    leases = q.reserve("w2", now=10, lease_seconds=5, limit=5)
    assert q.last_seq == 5  # +2: one reap, one lease
    reap, lease = wal_bodies(qdir)[-2:]
    assert (reap["seq"], lease["seq"]) == (4, 5)
    assert reap["ops"] == [{"op": "expire", "task": "old", "generation": 1}]
    assert {op["op"] for op in lease["ops"]} == {"lease"}
    # the reaped task is ready at its old deadline (10 <= now), so it is leased again
    assert [(x.task_id, x.generation, x.attempts) for x in leases] == [("new", 1, 1), ("old", 2, 2)]


def test_nothing_to_reap_writes_no_reap_frame(q: Queue, qdir: Path) -> None:
    q.put("held", {})
    q.reserve("w", now=0, lease_seconds=10)
    q.put("t", {})
    seq = q.last_seq
    [lease] = q.reserve("w", now=9, lease_seconds=10)
    assert lease.task_id == "t"
    assert q.last_seq == seq + 1
    assert [op["op"] for op in wal_bodies(qdir)[-1]["ops"]] == ["lease"]


def test_reap_with_nothing_to_lease_writes_only_the_reap_frame(q: Queue, qdir: Path) -> None:
    q.put("t", {}, max_attempts=1)
    q.reserve("w", now=0, lease_seconds=10)
    seq = q.last_seq
    assert q.reserve("w", now=10, lease_seconds=10) == []
    assert q.last_seq == seq + 1
    assert wal_bodies(qdir)[-1]["ops"] == [{"op": "expire", "task": "t", "generation": 1}]
    assert q.get("t").status == "dead"  # type: ignore[union-attr]


def test_all_expired_leases_are_reaped_in_one_transaction(q: Queue, qdir: Path) -> None:
    q.put_many([{"task_id": f"t{i}", "payload": {}, "max_attempts": 1} for i in range(4)])
    q.reserve("w", now=0, lease_seconds=10, limit=2)  # t0, t1: deadline 10
    q.reserve("w", now=5, lease_seconds=1, limit=1)  # t2: deadline 6
    q.reserve("w", now=5, lease_seconds=100, limit=1)  # t3: deadline 105
    seq = q.last_seq
    q.reserve("w", now=10, lease_seconds=5)
    assert q.last_seq == seq + 1
    ops = wal_bodies(qdir)[-1]["ops"]
    assert sorted(op["task"] for op in ops) == ["t0", "t1", "t2"]
    assert q.get("t3").status == "leased"  # type: ignore[union-attr]


def test_a_deadline_equal_to_now_is_expired(q: Queue) -> None:
    q.put("t", {}, max_attempts=1)
    q.reserve("w", now=0, lease_seconds=10)
    q.reserve("w", now=9, lease_seconds=10)
    assert q.get("t").status == "leased"  # type: ignore[union-attr]
    q.reserve("w", now=10, lease_seconds=10)
    assert q.get("t").status == "dead"  # type: ignore[union-attr]


def test_expired_task_becomes_ready_with_available_at_its_old_deadline(q: Queue) -> None:
    q.put("x", {}, max_attempts=3)
    q.reserve("w", now=0, lease_seconds=10)  # x: deadline 10
    q.put("early", {}, available_at=1)
    [lease] = q.reserve("w", now=20, lease_seconds=5)  # reaps x, then leases "early" (1 < 10)
    assert lease.task_id == "early"
    task = q.get("x")
    assert task is not None
    assert (task.status, task.available_at, task.attempts, task.generation) == ("ready", 10, 1, 1)
    assert (task.worker, task.deadline) == (None, None)


def test_expired_task_with_spent_attempts_becomes_dead_with_available_at_its_old_deadline(q: Queue) -> None:
    q.put("x", {"keep": 1}, max_attempts=1, available_at=2)
    q.reserve("w", now=3, lease_seconds=10)  # deadline 13
    assert q.reserve("w", now=50, lease_seconds=5) == []
    task = q.get("x")
    assert task is not None
    assert (task.status, task.available_at, task.attempts, task.generation) == ("dead", 13, 1, 1)
    assert task.payload == {"keep": 1}  # dead tasks keep their payload
    assert (task.worker, task.deadline) == (None, None)


def test_each_reservation_increments_attempts_and_generation_until_dead(q: Queue) -> None:
    q.put("t", {}, max_attempts=3)
    seen = []
    now = 0
    for _ in range(3):
        [lease] = q.reserve("w", now=now, lease_seconds=2)
        seen.append((lease.attempts, lease.generation))
        now = lease.deadline
    assert seen == [(1, 1), (2, 2), (3, 3)]
    assert q.reserve("w", now=now, lease_seconds=2) == []
    task = q.get("t")
    assert task is not None and (task.status, task.attempts, task.generation) == ("dead", 3, 3)


def test_same_worker_reserving_again_after_expiry_gets_a_new_generation(q: Queue) -> None:
    q.put("t", {})
    [first] = q.reserve("w", now=0, lease_seconds=5)
    [second] = q.reserve("w", now=5, lease_seconds=5)
    assert (first.generation, second.generation) == (1, 2)
    assert second.deadline == 10


def test_times_need_not_be_monotonic(q: Queue) -> None:
    q.put("t", {}, available_at=60)
    assert q.reserve("w", now=100, lease_seconds=10) != []  # deadline 110
    assert q.reserve("w", now=50, lease_seconds=10) == []  # nothing reaped at 50 < 110
    assert q.get("t").status == "leased"  # type: ignore[union-attr]


def test_reserve_with_sync_true_survives_reopen(qdir: Path) -> None:
    with Queue(qdir, sync=True) as q:
        q.put("t", {"n": 1})
        [lease] = q.reserve("w", now=0, lease_seconds=10)
    with Queue(qdir, sync=True) as q:
        task = q.get("t")
        assert task is not None and (task.status, task.worker, task.generation) == ("leased", "w", 1)
        q.ack(lease, now=5)


# ---------------------------------------------------------------------------
# the frame bound: "leases as many as fit" and reaps split only where needed


def test_lease_and_reap_transactions_stay_within_the_frame_bound(qdir: Path) -> None:
    # Names made of control characters are written as 6-byte escapes, so each
    # lease op is ~12 KiB and one frame holds only ~1,350 of them.
    def name(i: int) -> str:
        return "\x01" * 1016 + f"{i:08d}"

    worker = "\x02" * 1024
    count = 2800
    model = Model()
    with Queue(qdir, sync=False, compact_bytes=None) as q:
        for start in range(0, count, 1000):
            items = [{"task_id": name(i), "payload": {}} for i in range(start, min(count, start + 1000))]
            assert q.put_many(items) == model.put_many(items)
        first = q.reserve(worker, now=0, lease_seconds=10, limit=count)
        assert render(first) == render(model.reserve(worker, now=0, lease_seconds=10, limit=count))
        assert 0 < len(first) < count  # as many as fit, not all, not none
        while len(q.tasks("ready")):
            got = q.reserve(worker, now=0, lease_seconds=10, limit=count)
            assert render(got) == render(model.reserve(worker, now=0, lease_seconds=10, limit=count))
        seq = q.last_seq
        assert render(q.reserve("w", now=10, lease_seconds=10, limit=1)) == render(
            model.reserve("w", now=10, lease_seconds=10, limit=1)
        )
        # 2,800 expire ops of ~6 KiB do not fit one frame: the reap is split
        assert q.last_seq == model.last_seq > seq + 2
        assert view(q) == view(model)
        for segment in sorted(qdir.glob("wal-*.log")):
            for _, body in read_frames(segment):
                assert 0 < len(body["ops"])
        assert all(segment.stat().st_size > 0 for segment in qdir.glob("wal-*.log"))


# ---------------------------------------------------------------------------
# properties


@settings(max_examples=40, deadline=None)
@given(
    tasks=st.dictionaries(
        st.text(st.characters(codec="utf-8"), min_size=1, max_size=4),
        st.integers(0, 20),
        max_size=12,
    ),
    now=st.integers(0, 25),
    limit=st.integers(1, 15),
)
def test_reserve_picks_exactly_the_first_limit_available_tasks_by_available_at_then_id(
    tmp_path_factory: pytest.TempPathFactory, tasks: dict[str, int], now: int, limit: int
) -> None:
    qdir = tmp_path_factory.mktemp("q")
    with Queue(qdir, sync=False) as q:
        q.put_many([{"task_id": t, "payload": {}, "available_at": a} for t, a in tasks.items()])
        leases = q.reserve("w", now=now, lease_seconds=3, limit=limit)
        expected = sorted((a, t) for t, a in tasks.items() if a <= now)[:limit]
        assert [lease.task_id for lease in leases] == [t for _, t in expected]
        assert q.last_seq == (1 if tasks else 0) + (1 if expected else 0)
