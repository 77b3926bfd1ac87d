"""The Worker with its threads, on a real queue and the real clock (milliseconds).

No assertion here is about speed: waits are bounded only so that a bug
fails the test instead of hanging it. Handlers block on events the test
controls, so "running", "stopped" and "released" are states, not timings.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from support.waiting import wait_until
from walqueue import Queue
from walqueue.worker import Context, Job, Permanent, Retry, Router, Worker, milliseconds

WAIT = 20.0  # seconds: only a broken worker takes this long


def counts(queue: Queue) -> dict[str, int]:
    return dict(queue.stats()["counts"])


class CountingQueue:
    """A queue whose reserve and wait calls are counted (to show that an idle worker does not spin)."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.reserves = 0
        self.waits = 0

    def reserve(self, *args: Any, **kwargs: Any) -> Any:
        self.reserves += 1
        return self.queue.reserve(*args, **kwargs)

    def wait(self, timeout: float) -> bool:
        self.waits += 1
        return self.queue.wait(timeout)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.queue, name)


@pytest.mark.timeout(60)
def test_a_worker_runs_every_task_and_a_router_dead_letters_unknown_kinds_without_stopping(queue: Queue) -> None:
    done: list[str] = []
    router = Router({"ok": lambda job, context: done.append(job.id)})
    queue.put_many([{"task_id": f"t{n:03}", "payload": {"kind": "ok" if n % 5 else "fax"}} for n in range(50)])
    worker = Worker(queue, router, concurrency=4)
    worker.start()
    wait_until(lambda: counts(queue)["completed"] + counts(queue)["dead"] == 50)
    worker.stop()
    assert worker.wait(WAIT)
    assert counts(queue) == {"ready": 0, "leased": 0, "completed": 40, "dead": 10}
    assert sorted(done) == [f"t{n:03}" for n in range(50) if n % 5]
    dead = queue.get("t005")
    assert dead is not None and dead.last_error is not None and dead.last_error.type == "UnknownKind"
    stats = worker.stats()
    assert (stats["completed"], stats["dead"], stats["processed"], stats["running"]) == (40, 10, 50, 0)


@pytest.mark.timeout(60)
def test_a_handler_that_raises_is_retried_until_max_attempts_and_retry_and_permanent_are_obeyed(queue: Queue) -> None:
    calls: dict[str, int] = {}

    def handle(job: Job, context: Context) -> None:
        calls[job.id] = calls.get(job.id, 0) + 1
        if job.id == "always":
            raise RuntimeError("boom")
        if job.id == "twice" and job.attempts < 3:
            raise Retry(delay=0)
        if job.id == "never":
            raise Permanent("cannot ever work")

    for task_id in ("always", "twice", "never"):
        queue.put(task_id, {}, max_attempts=3)
    from walqueue.worker import RetryPolicy

    worker = Worker(queue, handle, concurrency=2, retry=RetryPolicy(base=0, cap=0))
    worker.start()
    wait_until(lambda: counts(queue)["ready"] + counts(queue)["leased"] == 0)
    worker.stop()
    assert worker.wait(WAIT)
    assert calls == {"always": 3, "twice": 3, "never": 1}
    statuses = {task.task_id: (task.status, task.attempts) for task in queue.tasks()}
    assert statuses == {"always": ("dead", 3), "twice": ("completed", 3), "never": ("dead", 1)}
    stats = worker.stats()
    assert (stats["retried"], stats["dead"], stats["completed"]) == (4, 2, 1)


@pytest.mark.timeout(60)
def test_stop_gives_running_handlers_the_grace_then_releases_their_leases(queue: Queue) -> None:
    started = threading.Semaphore(0)
    contexts: list[Context] = []

    def handle(job: Job, context: Context) -> None:
        contexts.append(context)
        started.release()
        context.lost.wait(WAIT)  # a handler that would run for long, but listens to its context

    queue.put_many([{"task_id": f"t{n}", "payload": {}} for n in range(5)])
    worker = Worker(queue, handle, concurrency=2, prefetch=1, grace=200)
    worker.start()
    for _ in range(2):
        assert started.acquire(timeout=WAIT)
    wait_until(lambda: counts(queue)["leased"] == 3)  # two running, one prefetched
    worker.stop()
    assert worker.wait(WAIT)
    # Stopped reserving at once: only those three were ever leased; all three were given back.
    assert counts(queue) == {"ready": 5, "leased": 0, "completed": 0, "dead": 0}
    assert sorted(task.attempts for task in queue.tasks()) == [0, 0, 0, 1, 1]  # the unstarted one: undone
    assert [context.reason for context in contexts] == ["shutdown", "shutdown"]
    released = [task for task in queue.tasks() if task.last_error is not None]
    assert len(released) == 2 and all(task.last_error.type == "Shutdown" for task in released)  # type: ignore[union-attr]
    stats = worker.stats()
    assert (stats["interrupted"], stats["returned"], stats["processed"]) == (2, 1, 2)


@pytest.mark.timeout(60)
def test_a_handler_that_finishes_within_the_grace_is_acked(queue: Queue) -> None:
    started, finish = threading.Event(), threading.Event()

    def handle(job: Job, context: Context) -> None:
        started.set()
        assert finish.wait(WAIT)

    queue.put("t", {})
    worker = Worker(queue, handle, grace=60_000)
    worker.start()
    assert started.wait(WAIT)
    worker.stop()
    assert not worker.wait(0.2)  # still in its grace
    finish.set()
    assert worker.wait(WAIT)
    assert counts(queue)["completed"] == 1


@pytest.mark.timeout(60)
def test_a_second_stop_releases_at_once_without_waiting_for_the_grace(queue: Queue) -> None:
    started = threading.Event()
    never = threading.Event()

    def handle(job: Job, context: Context) -> None:
        started.set()
        never.wait(WAIT)  # ignores its context: a stuck handler

    queue.put("stuck", {})
    worker = Worker(queue, handle, grace=3_600_000)  # an hour
    worker.start()
    assert started.wait(WAIT)
    worker.stop()
    worker.stop(now=True)
    assert worker.wait(WAIT)
    task = queue.get("stuck")
    assert task is not None and task.status == "ready" and task.worker is None
    never.set()


@pytest.mark.timeout(60)
def test_an_idle_worker_blocks_instead_of_polling_and_wakes_for_a_put_and_for_a_due_time(queue: Queue) -> None:
    counting = CountingQueue(queue)
    done: list[str] = []
    worker = Worker(counting, lambda job, context: done.append(job.id), idle_wait=60_000)
    worker.start()
    time.sleep(1.0)
    assert counting.reserves <= 2 and counting.waits <= 2  # one look, then one long wait
    queue.put("now", {})
    wait_until(lambda: done == ["now"])
    queue.put("later", {}, available_at=milliseconds() + 300)  # no commit will come when it is due
    wait_until(lambda: done == ["now", "later"])
    worker.stop()
    assert worker.wait(WAIT)
    assert counting.reserves <= 10


@pytest.mark.timeout(60)
def test_a_timed_out_thread_is_replaced_so_the_next_task_runs_while_it_is_stuck(queue: Queue) -> None:
    stuck = threading.Event()
    seen: dict[str, Context] = {}

    def handle(job: Job, context: Context) -> None:
        seen[job.id] = context
        if job.id == "a-slow":
            stuck.wait(WAIT)

    queue.put("a-slow", {}, max_attempts=1)
    queue.put("b-quick", {}, available_at=1)
    worker = Worker(queue, handle, concurrency=1, timeout=300)
    worker.start()
    wait_until(lambda: counts(queue)["completed"] == 1)  # b-quick ran on the replacement thread
    slow = queue.get("a-slow")
    assert slow is not None and slow.status == "dead"  # its one attempt timed out
    assert slow.last_error is not None and slow.last_error.type == "Timeout"
    assert seen["a-slow"].reason == "timeout"
    stuck.set()
    worker.stop()
    assert worker.wait(WAIT)
    assert worker.stats()["timed_out"] == 1 and worker.stats()["completed"] == 1


@pytest.mark.timeout(60)
def test_a_worker_given_a_directory_opens_it_and_closes_it_when_done(tmp_path: Path) -> None:
    with Queue(tmp_path / "q") as producer:
        producer.put("t", {})
    done: list[str] = []
    worker = Worker(tmp_path / "q", lambda job, context: done.append(job.id))
    worker.start()
    wait_until(lambda: done == ["t"])
    worker.stop()
    assert worker.wait(WAIT)
    with Queue(tmp_path / "q") as reopened:  # the lock was given back
        assert reopened.stats()["counts"]["completed"] == 1


class PlainSource:
    """A source with neither `batch` nor `pipeline` (an older one): each thread then acks by itself."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue

    def __getattr__(self, name: str) -> Any:
        if name in ("batch", "pipeline", "fail"):
            raise AttributeError(name)
        return getattr(self.queue, name)


@pytest.mark.timeout(60)
def test_a_source_without_batches_is_acked_by_each_thread_and_permanent_falls_back_to_cancel(queue: Queue) -> None:
    def handle(job: Job, context: Context) -> None:
        if job.payload.get("bad"):
            raise Permanent("no")

    queue.put_many([{"task_id": f"t{n:02}", "payload": {"bad": n == 3}} for n in range(20)])
    worker = Worker(PlainSource(queue), handle, concurrency=3)  # type: ignore[arg-type]
    worker.start()
    wait_until(lambda: counts(queue)["ready"] + counts(queue)["leased"] == 0)
    worker.stop()
    assert worker.wait(WAIT)
    assert counts(queue) == {"ready": 0, "leased": 0, "completed": 19, "dead": 1}
    assert (worker.stats()["completed"], worker.stats()["dead"]) == (19, 1)


@pytest.mark.timeout(60)
def test_one_lost_lease_in_a_batch_of_acks_costs_no_other_ack(queue: Queue) -> None:
    from walqueue.worker.source import ack_many

    queue.put_many([{"task_id": f"t{n}", "payload": {}} for n in range(3)])
    leases = queue.reserve("w", now=1, lease_seconds=100, limit=3)
    queue.cancel("t1")  # its lease is lost: the batch's ack_many refuses them all, then each goes alone
    errors = ack_many(queue, leases, now=2)
    assert [type(error).__name__ if error else None for error in errors] == [None, "StaleLease", None]
    assert counts(queue) == {"ready": 0, "leased": 0, "completed": 2, "dead": 1}


class OlderServer(CountingQueue):
    """A source whose ack_many is refused as a bad request, as a server that predates the call refuses it."""

    def ack_many(self, leases: Any, *, now: int) -> None:
        raise ValueError("unknown op 'ack_many'")


@pytest.mark.timeout(60)
def test_a_worker_whose_source_refuses_ack_many_acks_each_task_alone(queue: Queue) -> None:
    queue.put_many([{"task_id": f"t{n:02}", "payload": {}} for n in range(20)])
    worker = Worker(OlderServer(queue), lambda job, context: None, concurrency=3)  # type: ignore[arg-type]
    worker.start()
    wait_until(lambda: counts(queue)["completed"] == 20)
    worker.stop()
    assert worker.wait(WAIT)
    assert (worker.stats()["completed"], worker.stats()["lost"]) == (20, 0)
