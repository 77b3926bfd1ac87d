"""Tasks as Python functions: App, @app.task, enqueue, options, handles, results, follow-ups and async tasks."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import functions_app as tasks
import pytest

from walqueue import Queue
from walqueue.worker import App, TaskFailed, TaskHandle, Worker, chain, current

WAIT = 20.0


@contextlib.contextmanager
def running(queue: Queue, app: App, concurrency: int = 2) -> Iterator[Worker]:
    worker = Worker(queue, app, concurrency=concurrency, idle_wait=50)
    worker.start()
    try:
        yield worker
    finally:
        worker.stop(now=True)
        assert worker.wait(WAIT)


@pytest.fixture
def bound(queue: Queue) -> Iterator[Queue]:
    tasks.app.bind(queue)
    yield queue


def test_enqueue_puts_the_name_and_the_arguments_and_returns_a_handle(bound: Queue) -> None:
    handle = tasks.greet.enqueue("ada", punctuation="?")
    assert isinstance(handle, TaskHandle) and handle.status() == "ready"
    task = bound.get(handle.id)
    assert task is not None and task.payload == {"kind": "greet", "args": ["ada"], "kwargs": {"punctuation": "?"}}
    assert tasks.app.handle(handle.id) == handle


def test_the_default_name_is_module_and_qualname_and_a_name_is_registered_once() -> None:
    assert tasks.add.name == "functions_app.add"
    with pytest.raises(ValueError, match="already registered"):
        tasks.app.task(name="greet")(lambda: None)


def test_calling_the_function_runs_it_here() -> None:
    assert tasks.add(2, 3) == 5 and tasks.greet("bob") == "hello bob!"


@pytest.mark.parametrize(
    ("args", "kwargs", "named"),
    [(({1, 2},), {}, "argument 0"), ((1,), {"b": float("nan")}, "argument 'b'"), (((1, 2),), {}, "argument 0")],
)
def test_an_argument_that_is_not_json_is_a_type_error_naming_it_and_nothing_is_written(
    bound: Queue, args: tuple[Any, ...], kwargs: dict[str, Any], named: str
) -> None:
    seq = bound.last_seq
    with pytest.raises(TypeError, match=named):
        tasks.add.enqueue(*args, **kwargs)
    assert bound.last_seq == seq


def test_arguments_that_do_not_fit_the_signature_are_a_type_error(bound: Queue) -> None:
    with pytest.raises(TypeError, match="functions_app.add"):
        tasks.add.enqueue(1, 2, 3)
    assert bound.last_seq == 0


def test_an_app_opens_nothing_until_it_is_used_and_binds_later(tmp_path: Path) -> None:
    app = App(tmp_path / "store")
    double = app.task(name="double")(lambda x: 2 * x)
    assert not (tmp_path / "store").exists()
    handle = double.enqueue(4)
    assert (tmp_path / "store").exists() and handle.status() == "ready"
    app.close()
    unbound = App()
    with pytest.raises(RuntimeError, match="no source"):
        unbound.task(name="x")(lambda: 1).enqueue()
    with pytest.raises(TypeError):
        App(42)


def test_a_key_makes_enqueue_idempotent_and_a_delay_sets_the_time(bound: Queue) -> None:
    first = tasks.add.options(key="order-7").enqueue(1, 2)
    again = tasks.add.options(key="order-7", delay=60).enqueue(1, 2)
    assert first.id == again.id == "order-7" and bound.stats()["counts"]["ready"] == 1
    later = tasks.add.options(delay=60).enqueue(1)
    task = bound.get(later.id)
    assert task is not None and task.available_at >= int(time.time() * 1000) + 59_000
    with pytest.raises(ValueError, match="not both"):
        tasks.add.options(delay=1, at=5.0)


def test_an_unknown_option_is_refused_by_name_before_anything_is_put(bound: Queue) -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'dely'"):
        tasks.add.options(dely=60)  # type: ignore[call-arg]
    assert bound.stats()["counts"]["ready"] == 0


@pytest.mark.timeout(60)
def test_a_worker_runs_the_app_and_a_handle_reads_results_and_failures(bound: Queue) -> None:
    added, greeted = tasks.add.enqueue(2, b=40), tasks.greet.enqueue("ada")
    broken, refused, huge = tasks.broken.enqueue("no disk"), tasks.refused.enqueue(), tasks.huge.enqueue()
    unknown = bound.put("u", {"kind": "not.a.task", "args": [], "kwargs": {}})
    with running(bound, tasks.app):
        assert added.result(timeout=WAIT) == 42 and greeted.result(timeout=WAIT) == "hello ada!"
        with pytest.raises(TaskFailed) as failed:
            broken.result(timeout=WAIT)
        assert failed.value.last_error is not None and failed.value.last_error.type == "ValueError"
        assert "no disk" in failed.value.last_error.message
        with pytest.raises(TaskFailed, match="Permanent"):
            refused.result(timeout=WAIT)
        with pytest.raises(TaskFailed, match="ResultTooLarge"):
            huge.result(timeout=WAIT)
        with pytest.raises(TaskFailed, match="UnknownKind"):
            tasks.app.handle(unknown).result(timeout=WAIT)


def test_result_times_out_while_the_task_waits_for_a_worker(bound: Queue) -> None:
    handle = tasks.add.enqueue(1)
    began = time.monotonic()
    with pytest.raises(TimeoutError):
        handle.result(timeout=0.2)
    assert time.monotonic() - began >= 0.2


def test_a_function_returning_none_is_acked_as_before_with_no_result_op(bound: Queue, tmp_path: Path) -> None:
    handle = tasks.nothing.enqueue()
    with running(bound, tasks.app):
        assert handle.result(timeout=WAIT) is None
    log = b"".join(path.read_bytes() for path in sorted((tmp_path / "q").rglob("wal-*")))
    assert b'"op":"result"' not in log


@pytest.mark.timeout(60)
def test_followups_are_committed_with_the_ack_under_parent_ids(bound: Queue) -> None:
    first = tasks.step.enqueue(1, 3)
    with running(bound, tasks.app):
        grandchild = tasks.app.handle(f"{first.id}/1/1")
        deadline = time.monotonic() + WAIT
        while grandchild.status() != "completed":
            assert time.monotonic() < deadline
            bound.wait(0.1)
    assert tasks.app.handle(f"{first.id}/1").result(timeout=1) == 2 and grandchild.result(timeout=1) == 3
    assert bound.get(f"{first.id}/1/1/1") is None


@pytest.mark.timeout(60)
def test_a_chain_stops_at_the_step_that_dies_and_a_redrive_resumes_it(bound: Queue) -> None:
    tasks.BROKEN.add(2)
    first = tasks.fragile_step.enqueue(1, 3)
    second, third = tasks.app.handle(f"{first.id}/1"), tasks.app.handle(f"{first.id}/1/1")
    with running(bound, tasks.app):
        with pytest.raises(TaskFailed, match="step 2 broke") as failed:
            second.result(timeout=WAIT)
        assert failed.value.task_id == second.id and third.status() is None  # nothing after the dead step
        tasks.BROKEN.discard(2)
        bound.redrive(second.id, available_at=0)
        assert third.result(timeout=WAIT) == 3 and second.result(timeout=WAIT) == 2


@pytest.mark.timeout(60)
def test_current_names_the_running_task_its_function_and_this_attempt(queue: Queue) -> None:
    app = App(queue)

    @app.task(name="whoami")
    def whoami() -> list[Any]:
        here = current()
        return [here.id, here.name, here.attempts]

    handle = whoami.options(key="me").enqueue()
    with running(queue, app):
        assert handle.result(timeout=WAIT) == ["me", "whoami", 1]


def test_current_outside_a_task_is_a_runtime_error() -> None:
    with pytest.raises(RuntimeError, match="inside a task"):
        current()


@pytest.mark.timeout(60)
def test_async_tasks_run_on_one_loop_and_a_timeout_cancels_only_that_coroutine(bound: Queue) -> None:
    tasks.CALLS.clear()
    stuck = tasks.sleeps_too_long.enqueue()
    doubles = [tasks.slow_double.enqueue(n, 0.05) for n in range(6)]
    with running(bound, tasks.app, concurrency=4):
        assert [handle.result(timeout=WAIT) for handle in doubles] == [0, 2, 4, 6, 8, 10]
        assert stuck.status() == "leased"  # the others ran on the loop while it was stuck
        with pytest.raises(TaskFailed, match="TimeoutError"):
            stuck.result(timeout=WAIT)
    assert "cancelled" in tasks.CALLS  # its finally ran: the coroutine was cancelled, not abandoned


@pytest.mark.timeout(60)
def test_chain_passes_each_result_to_the_next_step_and_its_handle_is_the_last_steps(bound: Queue) -> None:
    handle = chain(tasks.add.s(1, 2), tasks.add.s(10), tasks.add.s(b=100)).enqueue()
    assert handle.id.endswith("/then/then")
    with running(bound, tasks.app):
        assert handle.result(timeout=WAIT) == 113
    first = bound.get(handle.id.removesuffix("/then/then"))
    assert first is not None and first.status == "completed"


def test_a_chains_steps_are_checked_before_anything_is_written(bound: Queue) -> None:
    with pytest.raises(TypeError, match="functions_app.add"):
        chain(tasks.add.s(1), tasks.add.s(1, 2)).enqueue()  # the second step gets the result too: 3 arguments
    with pytest.raises(TypeError, match="argument 'b'"):
        chain(tasks.add.s(1), tasks.add.s(b={1})).enqueue()
    with pytest.raises(TypeError, match="one or more"):
        chain()
    assert bound.last_seq == 0


@pytest.mark.timeout(60)
def test_a_chain_stops_at_a_dead_step_and_its_redrive_resumes_the_chain(bound: Queue) -> None:
    tasks.BROKEN.add(7)
    handle = chain(tasks.add.s(3, 4), tasks.fragile_step.s(9), tasks.add.s(1)).enqueue()
    middle = tasks.app.handle(handle.id.removesuffix("/then"))
    with running(bound, tasks.app):
        with pytest.raises(TaskFailed, match="step 7 broke"):
            middle.result(timeout=WAIT)
        assert handle.status() is None
        tasks.BROKEN.discard(7)
        bound.redrive(middle.id, available_at=0)
        assert handle.result(timeout=WAIT) == 8


@pytest.mark.timeout(60)
def test_current_works_in_a_coroutine_and_its_follow_up_is_committed_with_the_ack(bound: Queue) -> None:
    handles = [tasks.async_parent.enqueue(n) for n in range(3)]
    with running(bound, tasks.app, concurrency=3):
        assert [tasks.app.handle(f"{h.id}/1").result(timeout=WAIT) for h in handles] == [1, 2, 3]
        assert [h.result(timeout=WAIT) for h in handles] == [0, 1, 2]


def test_the_async_runner_cancels_a_coroutine_once_the_worker_takes_its_task_back() -> None:
    import asyncio
    import threading

    from walqueue.worker.aio import AsyncRunner

    finished: list[str] = []

    async def forever() -> None:
        try:
            await asyncio.sleep(60)
        finally:
            finished.append("cleaned up")

    runner, lost = AsyncRunner(), threading.Event()
    threading.Timer(0.1, lost.set).start()
    try:
        with pytest.raises(asyncio.CancelledError):
            runner.run(forever(), None, lost)
        assert finished == ["cleaned up"]
        assert runner.run(asyncio.sleep(0, result=5), 1.0) == 5  # the loop goes on
    finally:
        runner.close()
