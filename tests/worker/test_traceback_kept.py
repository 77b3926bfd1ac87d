"""Why a task died: the worker records the handler's traceback with the last error, and logs it at the failure."""

from __future__ import annotations

import logging

import pytest

from walqueue import Queue
from walqueue.worker import Permanent, Worker


def _broken(payload: dict[str, object], context: object) -> None:
    def inner() -> None:
        raise Permanent("bad input")

    inner()


def test_a_failed_task_keeps_the_handlers_traceback_and_the_worker_logs_it(
    queue: Queue, caplog: pytest.LogCaptureFixture
) -> None:
    queue.put("job", {})
    worker = Worker(queue, _broken, concurrency=1)
    with caplog.at_level(logging.INFO, logger="walqueue.worker"):
        worker.start()
        deadline = 200
        while queue.get("job").status != "dead" and deadline:  # type: ignore[union-attr]
            queue.wait(0.05)
            deadline -= 1
        worker.stop(now=True)
        worker.wait(10)
    task = queue.get("job")
    assert task is not None and task.status == "dead" and task.last_error is not None
    traceback = task.last_error.traceback
    assert traceback is not None and "in inner" in traceback and "Permanent" in traceback
    assert any("in inner" in record.getMessage() and "raised" in record.getMessage() for record in caplog.records)
