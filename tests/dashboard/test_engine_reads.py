"""The engine's side of the dashboard: `Queue.page` (bounded reads), `Queue.metrics`, and the lifecycle events."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walqueue import Queue, StaleLease
from walqueue.engine import events
from walqueue.protocol.calltable import CALLS

NOW = 1_000


@pytest.fixture
def queue(tmp_path: Path) -> Queue:
    opened = Queue(tmp_path / "q", sync=False, compact_bytes=None)
    yield opened  # type: ignore[misc]
    opened.close()


def test_pages_walk_a_status_in_id_order_without_gaps_or_repeats(queue: Queue) -> None:
    queue.put_many([{"task_id": f"t{i:03d}", "payload": {"i": i}} for i in range(250)])
    queue.reserve("w", now=NOW, lease_seconds=60, limit=40)
    for status in ("ready", "leased"):
        seen: list[str] = []
        after = None
        while page := queue.page(status, after=after, limit=17):
            assert len(page) <= 17
            seen.extend(task.task_id for task in page)
            after = page[-1].task_id
        assert seen == [task.task_id for task in queue.tasks(status)]


@settings(max_examples=30, deadline=None)
@given(
    ids=st.sets(st.text(alphabet="abcz09-", min_size=1, max_size=6), max_size=40),
    after=st.one_of(st.none(), st.text(alphabet="abcz09-", max_size=6)),
    limit=st.integers(1, 50),
)
def test_a_page_is_the_next_ids_after_the_cursor(
    tmp_path_factory: pytest.TempPathFactory, ids: set[str], after: str | None, limit: int
) -> None:
    with Queue(tmp_path_factory.mktemp("q") / "q", sync=False) as queue:
        if ids:
            queue.put_many([{"task_id": task_id, "payload": {}} for task_id in ids])
        expected = sorted(task_id for task_id in ids if after is None or task_id > after)[:limit]
        assert [task.task_id for task in queue.page("ready", after=after, limit=limit)] == expected
        assert queue.page("dead", after=after, limit=limit) == []


def test_a_page_holds_the_same_tasks_as_the_full_read(queue: Queue) -> None:
    queue.put("a", {"x": [1, 2]}, max_attempts=1)
    (lease,) = queue.reserve("w", now=NOW, lease_seconds=60)
    queue.release(lease, now=NOW)
    queue.put("b", {})
    (lease,) = queue.reserve("w", now=NOW, lease_seconds=60)
    queue.ack(lease, now=NOW)
    for status in ("ready", "leased", "completed", "dead"):
        assert queue.page(status, limit=10) == queue.tasks(status)


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"status": "redy"}, ValueError),
        ({"status": None}, ValueError),
        ({"status": "ready", "limit": 0}, ValueError),
        ({"status": "ready", "limit": 10_001}, ValueError),
        ({"status": "ready", "limit": True}, TypeError),
        ({"status": "ready", "after": 5}, TypeError),
    ],
)
def test_a_bad_page_request_is_refused(queue: Queue, arguments: dict[str, object], error: type[Exception]) -> None:
    status = arguments.pop("status")
    with pytest.raises(error):
        queue.page(status, **arguments)  # type: ignore[arg-type]


def test_metrics_count_from_zero_at_every_opening(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        queue.put("a", {}, max_attempts=1)
        (lease,) = queue.reserve("w", now=NOW, lease_seconds=60)
        queue.release(lease, now=NOW)
        assert queue.metrics()["counters"]["deaths"] == 1
    with Queue(tmp_path / "q", sync=False) as queue:
        reading = queue.metrics(now=NOW)
        assert all(value == 0 for value in reading["counters"].values())
        assert reading["gauges"]["tasks"]["dead"] == 1
        assert reading["gauges"]["oldest_ready_age"] is None
        queue.redrive("a", available_at=NOW - 5)
        assert queue.metrics(now=NOW)["gauges"]["oldest_ready_age"] == 5
        assert queue.metrics(now=NOW)["counters"]["deaths"] == 0
    with pytest.raises(TypeError):
        Queue(tmp_path / "q", sync=False).metrics(now=1.5)  # type: ignore[arg-type]


def test_metrics_and_page_are_calls_of_the_table() -> None:
    assert not CALLS["metrics"].writes and CALLS["metrics"].retry
    assert not CALLS["page"].writes and CALLS["page"].retry


@pytest.fixture
def listening() -> Iterator[None]:
    events.enable()
    try:
        yield
    finally:
        events.enable(False)


@pytest.mark.usefixtures("listening")
def test_every_lifecycle_step_is_an_event_with_its_fields(queue: Queue, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="walqueue.events"):
        queue.put("a", {}, max_attempts=1)
        queue.put("b", {})
        leases = {lease.task_id: lease for lease in queue.reserve("w1", now=NOW, lease_seconds=10, limit=2)}
        queue.extend(leases["b"], now=NOW, lease_seconds=20)
        queue.release(leases["a"], now=NOW + 1, error={"type": "OSError", "message": "disk <full>"})
        queue.reserve("w2", now=NOW + 100, lease_seconds=10)  # b expires, and is leased again
        queue.redrive("a", available_at=NOW)
        queue.cancel("a")
        (lease,) = queue.reserve("w3", now=NOW + 200, lease_seconds=10)
        queue.ack(lease, now=NOW + 201)
        with pytest.raises(StaleLease):
            queue.ack(lease, now=NOW + 202)
        queue.put("c", {})
        (lease,) = queue.reserve("w4", now=NOW + 300, lease_seconds=10)
        queue.fail(lease, now=NOW + 301, error={"type": "Permanent", "message": "no handler"})
    steps = [(record.event, record.fields["task_id"]) for record in caplog.records]  # type: ignore[attr-defined]
    assert steps == [
        ("task.put", "a"),
        ("task.put", "b"),
        ("task.lease", "a"),
        ("task.lease", "b"),
        ("task.extend", "b"),
        ("task.release", "a"),
        ("task.death", "a"),
        ("task.expiry", "b"),
        ("task.lease", "b"),
        ("task.redrive", "a"),
        ("task.cancel", "a"),
        ("task.expiry", "b"),
        ("task.lease", "b"),
        ("task.ack", "b"),
        ("task.put", "c"),
        ("task.lease", "c"),
        ("task.death", "c"),
    ]
    fields = {(r.event, r.fields["task_id"]): r.fields for r in caplog.records}  # type: ignore[attr-defined]
    assert fields[("task.ack", "b")]["worker"] == "w3"
    assert fields[("task.death", "a")]["after"] == "release"
    error = {"type": "OSError", "message": "disk <full>", "attempt": 1, "at": NOW + 1}
    assert fields[("task.release", "a")]["error"] == error and fields[("task.death", "a")]["error"] == error
    assert fields[("task.death", "c")]["after"] == "fail"
    assert fields[("task.death", "c")]["error"]["type"] == "Permanent"
    assert fields[("task.lease", "a")] | {} == {
        "task_id": "a",
        "worker": "w1",
        "generation": 1,
        "attempt": 1,
        "deadline": NOW + 10,
        "seq": 3,
    }
    assert {record.event for record in caplog.records} <= set(events.EVENTS)  # type: ignore[attr-defined]
    for record in caplog.records:
        json.loads(events.JsonLinesFormatter().format(record))


def test_a_queue_logs_no_event_until_the_stream_is_enabled(queue: Queue, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="walqueue.events"):
        queue.put("a", {})
    assert caplog.records == []  # the logger's level alone does not turn the stream on: events.enable() does
