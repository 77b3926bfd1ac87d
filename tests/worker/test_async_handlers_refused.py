"""An `async def` handler is refused, never acked unrun: at start (a usage error) and if a call returns a coroutine.

Calling an async function runs none of its body; a worker that acked after
such a call would report work done that never happened.
"""

from __future__ import annotations

import functools
import os
import threading
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from walqueue import Queue
from walqueue.worker import Router, Worker

if TYPE_CHECKING:
    from conftest import RunPython


async def handle_async(job: Any, context: Any) -> None:
    raise AssertionError("never run")


async def handle_async_generator(job: Any, context: Any) -> AsyncIterator[None]:
    yield None


def handle_generator(job: Any, context: Any) -> Iterator[None]:
    yield None


class AsyncCallable:
    async def __call__(self, job: Any, context: Any) -> None:
        raise AssertionError("never run")


def handle_plain(job: Any, context: Any) -> None:
    return None


@pytest.mark.parametrize(
    "handler",
    [
        handle_async,
        handle_async_generator,
        handle_generator,
        AsyncCallable(),
        functools.partial(handle_async),
        Router({"plain": handle_plain, "mail": handle_async}),
    ],
    ids=["async-def", "async-generator", "generator", "async-call", "partial", "router-route"],
)
def test_a_handler_whose_call_would_not_run_its_body_is_refused_at_construction(queue: Queue, handler: Any) -> None:
    with pytest.raises(TypeError, match="never run"):
        Worker(queue, handler)
    assert queue.stats()["counts"]["ready"] == 0


@pytest.mark.timeout(60)
def test_a_handler_that_returns_a_coroutine_makes_its_task_dead_not_completed(queue: Queue) -> None:
    router = Router({"plain": handle_plain})
    queue.put("t", {"kind": "late"})
    worker = Worker(queue, router, concurrency=1)
    router.add("late", handle_async)  # after the start's check: only the returned coroutine shows it
    finished = threading.Event()
    worker.report.outcome = functools.partial(_then_set, worker.report.outcome, finished)  # type: ignore[method-assign]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "coroutine ... was never awaited"
        worker.start()
        try:
            assert finished.wait(20)
        finally:
            worker.stop(now=True)
            assert worker.wait(20)
    task = queue.get("t")
    assert task is not None and task.status == "dead" and task.last_error is not None
    assert task.last_error.type == "AsyncHandler" and "without running it" in task.last_error.message


def _then_set(outcome: Any, event: threading.Event, *args: Any, **kwargs: Any) -> None:
    outcome(*args, **kwargs)
    event.set()


ASYNC_HANDLERS = """
import functools
from walqueue.worker import Router

async def handle(job, context):
    pass

class Handler:
    async def __call__(self, job, context):
        pass

instance = Handler()

def plain(job, context):
    pass

router = Router({"plain": plain, "mail": handle})
"""


@pytest.mark.parametrize("spec", ["async_tasks:handle", "async_tasks:instance", "async_tasks:router"])
@pytest.mark.parametrize("processes", [[], ["--processes", "2"]])
def test_walqueue_worker_refuses_an_async_handler_as_a_usage_error_and_writes_nothing(
    run_python: RunPython, tmp_path: Path, spec: str, processes: list[str]
) -> None:
    (tmp_path / "async_tasks.py").write_text(ASYNC_HANDLERS)
    result = run_python(["-m", "walqueue.worker", str(tmp_path / "q"), spec, *processes], cwd=tmp_path)
    assert result.returncode == 64, result.stderr
    assert "never run" in result.stderr and "usage:" in result.stderr
    assert not (tmp_path / "q").exists() and set(os.listdir(tmp_path)) <= {"__pycache__", "async_tasks.py"}
