"""Lanes in the worker: `Worker(queues=...)`, ``--queues a,b``, and a schedule entry's queue and priority."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from walqueue import Queue
from walqueue.worker import Periodic, Worker
from walqueue.worker.cli import main
from walqueue.worker.schedule import Scheduler, load_schedule


@pytest.mark.timeout(60)
def test_a_worker_given_queues_leases_only_from_them(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        for n in range(5):
            queue.put(f"m{n}", {}, queue="mail")
            queue.put(f"b{n}", {}, queue="bulk")
        done: list[str] = []
        worker = Worker(queue, lambda job, context: done.append(job.id), queues=["mail"])
        worker.start()
        give_up = time.monotonic() + 20
        while queue.queues()[1]["counts"]["completed"] < 5:  # bulk, mail: by name
            assert time.monotonic() < give_up
            time.sleep(0.01)
        worker.stop()
        assert worker.wait(20)
        assert sorted(done) == [f"m{n}" for n in range(5)]
        assert [q["counts"]["ready"] for q in queue.queues()] == [5, 0]


@pytest.mark.parametrize("queues", [[], ["a,b"], ["mail", "mail"], [""]])
def test_a_worker_refuses_bad_queues(tmp_path: Path, queues: list[str]) -> None:
    with Queue(tmp_path / "q", sync=False) as queue, pytest.raises((TypeError, ValueError)):
        Worker(queue, lambda job, context: None, queues=queues)


@pytest.mark.parametrize("value", ["", "mail,,bulk", "a b", "mail,mail"])
def test_walqueue_worker_queues_is_a_usage_error_when_bad(
    tmp_path: Path, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([str(tmp_path / "q"), "json:dumps", "--queues", value])
    assert exit_.value.code == 64
    assert "--queues" in capsys.readouterr().err
    assert not (tmp_path / "q").exists()


def test_a_schedule_entry_puts_its_firings_in_its_queue_at_its_priority(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        entry = Periodic("report", {}, every=1_000, queue="reports", priority=7)
        Scheduler([entry], queue, units_per_second=1_000).tick(10_500)
        (task,) = queue.tasks()
        assert (task.task_id, task.queue, task.priority) == ("cron:report:10000", "reports", 7)
    as_json = tmp_path / "s.json"
    as_json.write_text(json.dumps([{"name": "t", "every": 60, "queue": "mail", "priority": -1}]))
    assert load_schedule(as_json, 1_000) == [Periodic("t", {}, every=60_000, queue="mail", priority=-1)]
    as_json.write_text(json.dumps([{"name": "t", "every": 60, "queue": "a,b"}]))
    with pytest.raises(ValueError, match="queue"):
        load_schedule(as_json, 1_000)


@pytest.mark.timeout(60)
def test_a_worker_whose_queues_are_all_at_their_limit_sleeps_and_wakes_for_the_commit_that_reopens_one(
    tmp_path: Path,
) -> None:
    from test_worker_threads import CountingQueue

    from support.waiting import wait_until
    from walqueue.worker import milliseconds

    with Queue(tmp_path / "q", sync=False) as queue:
        queue.configure_queue("api", concurrency=1)
        queue.put_many([{"task_id": f"a{n}", "payload": {}, "queue": "api"} for n in range(2)])
        (held,) = queue.reserve("holder", now=milliseconds(), lease_seconds=600_000, queues=["api"])
        counting = CountingQueue(queue)
        done: list[str] = []
        worker = Worker(counting, lambda job, context: done.append(job.id), queues=["api"], idle_wait=60_000)
        worker.start()
        time.sleep(1.0)
        assert done == [] and counting.reserves <= 2 and counting.waits <= 2  # one look, then one long wait
        queue.ack(held, now=milliseconds())  # frees the slot: this commit wakes the worker
        wait_until(lambda: len(done) == 1)
        worker.stop()
        assert worker.wait(20)
        assert counting.reserves <= 6
