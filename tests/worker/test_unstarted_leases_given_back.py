"""A lease the worker never started is given back with its attempt restored: no task dies of a run that never was.

At shutdown a worker holds prefetched leases whose handlers never began.
They go back with `give_back`, so a task on its last attempt (one just
redriven, say) is ready again, attempts as before, its last error still
its last real run's; only a run that used the last attempt makes a task dead.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from walqueue import Queue
from walqueue.worker import Context, Job, Worker

WAIT = 20.0


def run_one_then_stop(queue: Queue, source: Any, prefetch: int) -> tuple[Worker, str]:
    """Start a one-thread worker with `prefetch`, let one handler start, stop it; the started task's id."""
    started: list[str] = []
    running = threading.Event()

    def handle(job: Job, context: Context) -> None:
        started.append(job.id)
        running.set()
        context.lost.wait(WAIT)

    worker = Worker(source, handle, concurrency=1, prefetch=prefetch, grace=100)
    worker.start()
    assert running.wait(WAIT)
    give_up = threading.Event()
    while queue.stats()["counts"]["leased"] < 1 + prefetch and not give_up.wait(0.01):
        pass
    worker.stop()
    assert worker.wait(WAIT)
    return worker, started[0]


@pytest.mark.timeout(60)
def test_prefetched_tasks_on_their_last_attempt_are_ready_after_a_shutdown_not_dead(queue: Queue) -> None:
    queue.put_many([{"task_id": f"t{n}", "payload": {}, "max_attempts": 1} for n in range(4)])
    queue.put("redriven", {}, max_attempts=1, available_at=1)
    [lease] = queue.reserve("earlier", now=2, lease_seconds=10)
    assert lease.task_id == "t0"
    queue.release(lease, now=3, error={"type": "Boom", "message": "the run before the redrive"})
    queue.redrive("t0", available_at=0)  # one attempt left, an older last error
    worker, ran = run_one_then_stop(queue, queue, prefetch=3)
    assert worker.stats()["returned"] == 3
    for task in queue.tasks():
        if task.task_id == ran:
            continue  # interrupted: that run did use an attempt
        assert task.status == "ready", task
        if task.task_id == "t0":
            assert task.attempts == 1 and task.last_error is not None
            assert task.last_error.message == "the run before the redrive"
        else:
            assert task.attempts == 0 and task.last_error is None
    dead = [task for task in queue.tasks("dead")]
    assert all(task.task_id == ran for task in dead)


class WithoutGiveBack:
    """A source from before give_back (an older engine or server): the worker releases as it used to."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.released = 0

    def release(self, *args: Any, **kwargs: Any) -> None:
        self.released += 1
        self.queue.release(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name == "give_back":
            raise AttributeError(name)
        return getattr(self.queue, name)


@pytest.mark.timeout(60)
def test_a_source_without_give_back_gets_a_release_for_an_unstarted_lease(queue: Queue) -> None:
    queue.put_many([{"task_id": f"t{n}", "payload": {}} for n in range(3)])
    source = WithoutGiveBack(queue)
    worker, _ = run_one_then_stop(queue, source, prefetch=1)
    assert worker.stats()["returned"] == 1 and source.released >= 2  # the returned one, the interrupted one
    assert queue.stats()["counts"]["leased"] == 0
