"""The worker's outcome lines name the engine's lifecycle event they committed, as the queue's event stream does."""

from __future__ import annotations

import json
import logging

import pytest
from worker_rig import FakeClock, Rig

from walqueue import Queue
from walqueue.engine import events
from walqueue.worker import Permanent
from walqueue.worker.report import LIFECYCLE, OUTCOMES


def test_every_mapped_outcome_is_an_outcome_and_every_name_is_an_engine_event() -> None:
    assert set(LIFECYCLE) <= set(OUTCOMES)
    assert set(LIFECYCLE.values()) <= set(events.EVENTS)
    assert "lost" not in LIFECYCLE  # the worker committed nothing: no event of its own


def test_each_outcome_line_carries_the_event_the_queue_logged_for_that_task(
    queue: Queue, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    for task_id, attempts in (("done", 3), ("again", 3), ("doomed", 3), ("last", 1)):
        queue.put(task_id, {}, max_attempts=attempts)
    rig = Rig(queue, clock)
    events.enable()
    try:
        with caplog.at_level(logging.INFO):
            runs = {run.job.id: run for run in rig.start(limit=4)}
            rig.settler.succeed(runs["done"])
            rig.settler.fail(runs["again"], ConnectionError("refused"))
            rig.settler.fail(runs["doomed"], Permanent("no such mailbox"))
            rig.settler.fail(runs["last"], ConnectionError("refused"))  # its last attempt: dead by a release
    finally:
        events.enable(False)
    worker_lines = {r.task: r for r in caplog.records if r.name == "walqueue.worker" and hasattr(r, "task")}
    queue_events: dict[str, set[str]] = {}
    for record in caplog.records:
        if record.name == "walqueue.events":
            queue_events.setdefault(record.fields["task_id"], set()).add(record.event)
    expected = {"done": "task.ack", "again": "task.release", "doomed": "task.death", "last": "task.death"}
    assert {task: line.lifecycle for task, line in worker_lines.items()} == expected
    for task, line in worker_lines.items():
        assert line.lifecycle in queue_events[task]
    as_json = json.loads(events.JsonLinesFormatter().format(worker_lines["again"]))
    assert (as_json["event"], as_json["lifecycle"]) == ("retried", "task.release")
