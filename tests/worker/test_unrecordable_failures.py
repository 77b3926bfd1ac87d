"""A failure the worker cannot record as raised is recorded truthfully anyway, and the worker goes on.

A handler may raise an exception whose ``str()`` raises, a class with an
empty name, or ask for a retry so far away that no clock can hold it. Each
is recorded (a fallback message, a placeholder type, the largest delay the
engine allows), and the executor thread survives to run the next task: a
broken handler never stops a worker.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from worker_rig import FakeClock, Rig

from walqueue import Queue
from walqueue.engine.validate import MAX_INT
from walqueue.worker import Retry, Worker
from walqueue.worker.source import error_of


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str() of this error fails")


Nameless = type("", (Exception,), {})


class OddMessage(Exception):
    def __str__(self) -> str:
        class Text(str):
            pass

        return Text("a str subclass")


def test_the_stored_form_of_any_exception_is_storable() -> None:
    assert error_of(Unprintable()) == {
        "type": "Unprintable",
        "message": "<str() of the Unprintable raised RuntimeError>",
    }
    assert error_of(Nameless("boom")) == {"type": "<unnamed exception>", "message": "boom"}
    stored = error_of(OddMessage())
    assert stored == {"type": "OddMessage", "message": "a str subclass"} and type(stored["message"]) is str


def test_a_retry_beyond_the_largest_time_is_clamped_to_it(queue: Queue, clock: FakeClock) -> None:
    queue.put("far", {})
    rig = Rig(queue, clock)
    [run] = rig.start()
    rig.settler.fail(run, Retry("see you never", delay=10**30))
    task = queue.get("far")
    assert task is not None and (task.status, task.available_at) == ("ready", MAX_INT)
    assert rig.counts()["retried"] == 1


@pytest.mark.parametrize(
    "failure",
    [Unprintable(), Nameless("boom"), Retry("far", delay=10**30), OddMessage()],
    ids=["str-raises", "empty-class-name", "huge-retry-delay", "str-subclass-message"],
)
@pytest.mark.timeout(60)
def test_an_unrecordable_failure_is_recorded_and_the_next_task_still_runs(queue: Queue, failure: Exception) -> None:
    ran: list[str] = []
    finished = threading.Event()

    def handle(job: Any, context: Any) -> None:
        ran.append(job.id)
        if job.id == "bad":
            raise failure
        finished.set()

    queue.put("bad", {}, max_attempts=2)
    queue.put("good", {}, available_at=1)  # after "bad" in the ready order
    worker = Worker(queue, handle, concurrency=1, prefetch=0)
    worker.start()
    try:
        assert finished.wait(20), f"the next task never ran (ran: {ran})"
    finally:
        worker.stop(now=True)
        assert worker.wait(20)
    bad = queue.get("bad")
    assert bad is not None and bad.last_error is not None and bad.status in ("ready", "dead")
    assert bad.last_error.type and bad.generation == 1
    good = queue.get("good")
    assert good is not None and good.status == "completed"
    assert worker.stats()["retried"] == 1
