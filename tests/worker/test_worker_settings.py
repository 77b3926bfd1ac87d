"""A worker's options as one `WorkerSettings`: the keywords map onto it, it is checked once, grouping is declared."""

from __future__ import annotations

import time
from typing import Any

import pytest

from walqueue import Queue
from walqueue.worker import RetryPolicy, Worker, WorkerSettings


def _noop(job: Any, context: Any) -> None:
    return None


def test_the_keywords_and_a_settings_object_make_the_same_worker(queue: Queue) -> None:
    by_keywords = Worker(queue, _noop, concurrency=3, lease=9_000, grace=100, name="w", queues=["mail"])
    settings = WorkerSettings(concurrency=3, lease=9_000, grace=100, name="w", queues=("mail",))
    by_settings = Worker(queue, _noop, settings=settings)
    assert by_keywords.settings == by_settings.settings
    assert (by_settings.concurrency, by_settings.lease, by_settings.queues, by_settings.name) == (
        3,
        9_000,
        ["mail"],
        "w",
    )


def test_a_keyword_overrides_the_settings_and_none_means_the_default(queue: Queue) -> None:
    settings = WorkerSettings(concurrency=2, retry=RetryPolicy(base=5))
    worker = Worker(queue, _noop, settings=settings, concurrency=5, name=None)
    assert (worker.settings.concurrency, worker.settings.retry) == (5, settings.retry)
    assert worker.name == settings.name  # host:pid, as before


def test_settings_are_checked_where_they_are_made_naming_the_option() -> None:
    with pytest.raises(ValueError, match="concurrency must be an int >= 1"):
        WorkerSettings(concurrency=0)
    with pytest.raises(ValueError, match="heartbeat is a fraction"):
        WorkerSettings(heartbeat=1.5)
    with pytest.raises(ValueError, match="grouping is"):
        WorkerSettings(grouping="sometimes")  # type: ignore[arg-type]


def test_an_unknown_keyword_is_a_type_error_naming_it(queue: Queue) -> None:
    with pytest.raises(TypeError, match="concurency"):
        Worker(queue, _noop, concurency=2)  # type: ignore[call-arg]


def test_the_grouping_is_the_sources_unless_the_settings_say_otherwise(queue: Queue) -> None:
    assert Worker(queue, _noop).grouping == "batch"
    assert Worker(queue, _noop, grouping="none").grouping == "none"


def test_a_source_that_declares_no_grouping_is_refused_unless_the_settings_declare_one(queue: Queue) -> None:
    class Undeclared:
        pass

    with pytest.raises(TypeError, match="declares no grouping"):
        Worker(Undeclared(), _noop)  # type: ignore[arg-type]


@pytest.mark.timeout(60)
def test_a_worker_whose_settings_say_none_acks_each_task_by_its_own_thread(queue: Queue) -> None:
    queue.put_many([{"task_id": f"t{n:02}", "payload": {}} for n in range(20)])
    worker = Worker(queue, _noop, settings=WorkerSettings(concurrency=3, grouping="none", idle_wait=50))
    worker.start()
    deadline = time.monotonic() + 30
    while queue.stats()["counts"]["completed"] < 20 and time.monotonic() < deadline:
        time.sleep(0.02)
    worker.stop()
    assert worker.wait(30)
    assert (worker.stats()["completed"], worker.stats()["lost"]) == (20, 0)
    assert not any(thread.name.endswith("acker") for thread in worker._threads)
