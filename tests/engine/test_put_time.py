"""A put's time (``put_at``): the producer's time, from which the task is due and ages; never in its identity."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walqueue import Queue
from walqueue.engine.state import OP_KINDS

UNITS = 1000  # the tests' store counts milliseconds, as a worker records


def test_a_stamped_put_is_due_from_its_put_time_and_keeps_what_it_was_given(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as q:
        q.put("a", {}, put_at=5_000)
        q.put("b", {}, available_at=9_000, put_at=5_000)  # a later available_at wins
        assert q.get("a").available_at == 5_000
        assert q.get("b").available_at == 9_000
        assert q.reserve("w", now=4_999, lease_seconds=10) == []
        assert [lease.task_id for lease in q.reserve("w", now=5_000, lease_seconds=10)] == ["a"]
    with Queue(tmp_path / "q", sync=False) as q:  # replayed from the log: the same due time
        assert q.get("b").available_at == 9_000
        q.compact()
    with Queue(tmp_path / "q", sync=False) as q:  # and from a snapshot
        assert q.get("b").available_at == 9_000


def test_stamped_puts_are_reserved_in_the_order_they_were_put(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as q:
        for task_id, at in (("z", 1_000), ("y", 2_000), ("x", 3_000)):
            q.put(task_id, {}, put_at=at)
        leases = q.reserve("w", now=10_000, lease_seconds=10, limit=3)
        assert [lease.task_id for lease in leases] == ["z", "y", "x"]  # FIFO, not by id


def test_a_retry_with_a_later_put_time_is_identical_and_writes_nothing(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as q:
        assert q.put("a", {"n": 1}, key="k", put_at=1_000) == "a"
        seq = q.last_seq
        assert q.put("a", {"n": 1}, key="k", put_at=2_000) == "a"
        assert q.put("a", {"n": 1}, key="k") == "a"
        assert q.put_many([{"task_id": "a", "payload": {"n": 1}, "key": "k", "put_at": 7}]) == ["a"]
        assert q.last_seq == seq
        assert q.get("a").available_at == 1_000


def test_an_unstamped_put_is_byte_for_byte_what_it_was() -> None:
    put = OP_KINDS["put"]
    op = {"op": "put", "task": "a", "key": "a", "payload": None, "available_at": 0, "max_attempts": 3}
    assert b"put_at" not in put.splice(available_at=0, key=b'"a"', max_attempts=3, payload=b"{}", task=b'"a"')
    stamped = put.splice(available_at=0, key=b'"a"', max_attempts=3, payload=b"{}", task=b'"a"', put_at=12)
    assert stamped == b'{"available_at":0,"key":"a","max_attempts":3,"op":"put","payload":{},"put_at":12,"task":"a"}'
    with pytest.raises(ValueError, match="put_at is omitted at its default 0"):
        put.check_fields({**op, "put_at": 0})


@pytest.mark.parametrize(
    ("put_at", "error"),
    [(-1, ValueError), (True, TypeError), (1.5, TypeError), ("5", TypeError), (2**63, ValueError), (None, TypeError)],
)
def test_a_bad_put_time_names_put_at_and_writes_nothing(tmp_path: Path, put_at: object, error: type) -> None:
    with Queue(tmp_path / "q", sync=False) as q:
        with pytest.raises(error, match="put_at"):
            q.put("a", {}, put_at=put_at)  # type: ignore[arg-type]
        with pytest.raises(error, match="put_at"):
            q.put_many([{"task_id": "b", "payload": {}, "put_at": put_at}])
        assert q.last_seq == 0 and q.get("a") is None


def test_the_oldest_ready_age_counts_from_the_put_time_and_leaves_undated_tasks_out(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as q:
        q.set_clock(UNITS)
        now = 1_750_000_000_000
        q.put("undated", {})
        gauges = q.metrics(now=now)["gauges"]
        assert gauges["oldest_ready_age"] is None  # never now - 0: the seconds since 1970
        assert gauges["undated_ready"] == 1
        q.put("stamped", {}, put_at=now - 4_000, queue="mail")
        gauges = q.metrics(now=now)["gauges"]
        assert gauges["oldest_ready_age"] == 4_000 and gauges["undated_ready"] == 1
        by_name = {item["name"]: item for item in q.queues()}
        assert by_name["default"]["oldest_ready_at"] is None and by_name["default"]["undated_ready"] == 1
        assert by_name["mail"]["oldest_ready_at"] == now - 4_000 and by_name["mail"]["undated_ready"] == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 50), st.booleans()), max_size=40))
def test_the_ages_agree_with_a_scan_of_every_ready_task(tmp_path_factory: pytest.TempPathFactory, puts: list) -> None:  # type: ignore[type-arg]
    """Whatever the puts and leases, the heap walk finds what a scan of the ready tasks finds."""
    with Queue(tmp_path_factory.mktemp("q") / "q", sync=False) as q:
        for index, (at, lease) in enumerate(puts):
            q.put(f"t{index:03}", {}, put_at=at)
            if lease:
                q.reserve("w", now=at, lease_seconds=100)
        ready = [t.available_at for t in q.tasks("ready")]
        gauges = q.metrics(now=1_000)["gauges"]
        dated = [at for at in ready if at]
        assert gauges["undated_ready"] == ready.count(0)
        assert gauges["oldest_ready_age"] == (None if not dated else 1_000 - min(dated))


def test_lifecycle_counters_by_queue(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as q:
        q.put("a", {})
        q.put("b", {}, queue="mail")
        q.put("c", {}, queue="mail")
        for lease in q.reserve("w", now=0, lease_seconds=10, limit=3):
            q.ack(lease, now=1)
        by_queue = q.metrics()["queue_counters"]
        assert by_queue["mail"]["puts"] == 2 and by_queue["mail"]["acks"] == 2 and by_queue["mail"]["reserves"] == 2
        assert by_queue["default"]["puts"] == 1 and by_queue["default"]["acks"] == 1
        counters = q.metrics()["counters"]
        assert all(sum(c[name] for c in by_queue.values()) == counters[name] for name in by_queue["mail"])


def test_a_store_without_lanes_counts_everything_in_the_default_queue(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as q:
        assert q.metrics()["queue_counters"] == {"default": dict.fromkeys(q.metrics()["queue_counters"]["default"], 0)}
        q.put("a", {})
        assert list(q.metrics()["queue_counters"]) == ["default"]


def test_counters_by_queue_after_a_reopen_count_the_tasks_own_queue(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as q:
        q.put("a", {}, queue="mail")
    with Queue(tmp_path / "q", sync=False) as q:  # opened knowing the lane: its lease and ack count as mail
        (lease,) = q.reserve("w", now=0, lease_seconds=10)
        q.ack(lease, now=1)
        by_queue = q.metrics()["queue_counters"]
        assert by_queue["mail"]["reserves"] == 1 and by_queue["mail"]["acks"] == 1 and "default" not in by_queue
