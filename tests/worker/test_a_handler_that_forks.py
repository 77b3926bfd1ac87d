"""A handler that forks leaves no second worker: its child ends where the handler returned, acking nothing.

Before, the child went on in the worker's loop: it acked the task from a
process that does not own the queue, then ran the prefetched tasks of its
copy of the hand-off, which the parent ran as well.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from walqueue import Queue
from walqueue.worker import Context, Job, Worker


@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded, use of fork:DeprecationWarning")
@pytest.mark.parametrize("child_does", ["return", "raise"])
def test_a_forked_child_that_returns_from_the_handler_exits_and_runs_nothing_else(
    queue: Queue, tmp_path: Path, child_does: str
) -> None:
    ran = tmp_path / "ran.log"
    statuses: list[int] = []
    done = threading.Event()

    def handle(job: Job, context: Context) -> None:
        with ran.open("a") as log:
            log.write(f"{job.id} {os.getpid()}\n")
        if job.id != "forks":
            return
        child = os.fork()
        if child == 0:
            if child_does == "raise":
                raise RuntimeError("the child fails")
            return  # the child returns into the worker, as a careless handler does
        give_up = time.monotonic() + 20
        while (reaped := os.waitpid(child, os.WNOHANG)) == (0, 0) and time.monotonic() < give_up:
            time.sleep(0.02)
        if reaped == (0, 0):
            os.kill(child, 9)
            os.waitpid(child, 0)
            statuses.append(-1)
        else:
            statuses.append(os.waitstatus_to_exitcode(reaped[1]))
        done.set()

    queue.put("forks", {})
    queue.put_many([{"task_id": f"later{n}", "payload": {}, "available_at": 1} for n in range(3)])
    worker = Worker(queue, handle, concurrency=1, prefetch=3)
    worker.start()
    try:
        assert done.wait(60)
        deadline = time.monotonic() + 30
        while queue.stats()["counts"]["completed"] < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        worker.stop()
        assert worker.wait(30)
    assert statuses == [0 if child_does == "return" else 1]
    lines = ran.read_text().splitlines()
    assert sorted(line.split()[0] for line in lines) == ["forks", "later0", "later1", "later2"]  # each once
    assert {line.split()[1] for line in lines} == {str(os.getpid())}  # all in the worker's process
    assert queue.stats()["counts"]["completed"] == 4
