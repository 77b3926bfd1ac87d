"""A task that returns None but enqueues follow-ups: its ack and its follow-ups commit together, once.

With nothing to store, the completion has no result expiry; the worker
must not send that absence as the result's TTL (the store refuses a None
TTL, so the task was never acked and ran again after every lease).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from walqueue import Queue
from walqueue.worker import App, Worker, current

app = App()
ran: list[str] = []


@app.task
def notify(user: str) -> None:
    ran.append(user)


@app.task
def fan_out(users: list[str]) -> None:  # returns None: there is no result to keep
    for user in users:
        current().enqueue(notify, user)


@pytest.mark.timeout(60)
def test_a_task_returning_none_with_follow_ups_completes_once_and_puts_them(tmp_path: Path) -> None:
    ran.clear()
    with Queue(tmp_path / "q") as queue:
        app.bind(queue)
        handle = fan_out.enqueue(["ada", "bob"])
        worker = Worker(queue, app, concurrency=1, idle_wait=50)
        worker.start()
        deadline = time.monotonic() + 30
        while sorted(ran) != ["ada", "bob"] and time.monotonic() < deadline:
            time.sleep(0.02)
        worker.stop()
        assert worker.wait(30)
        parent = queue.get(handle.id)
        assert parent is not None and (parent.status, parent.attempts) == ("completed", 1)
        assert sorted(ran) == ["ada", "bob"]
        assert (worker.stats()["completed"], worker.stats()["lost"]) == (3, 0)
