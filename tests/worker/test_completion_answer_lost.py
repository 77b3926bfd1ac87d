"""A completion whose answer is lost is sent again with the same lease and `now`; one already applied counts as done.

Through walqueue-serve the server may die between receiving an ack, a
fail or a release and answering it. The worker sends the call again (an
identical retry, fenced by the lease's generation); when the engine
answers `StaleLease` because the first try was applied, the task shows it
(completed under this generation, or this error recorded at this `now`),
and the run counts as completed, dead or retried, not lost. A lease that
was really lost meanwhile stays lost. Driven here through a `Queue` whose
answers a wrapper loses on purpose, before or after applying the call;
test_completion_across_a_server_restart.py does it to a real server.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from worker_rig import FakeClock

from walqueue import Queue
from walqueue.worker import Permanent, RetryPolicy
from walqueue.worker.complete import Completer
from walqueue.worker.report import Report
from walqueue.worker.run import Run

LEASE = 3_000


class LosingSource:
    """`queue`, whose next call named `op` loses its answer: before it is applied (`applied=False`) or after."""

    grouping = "none"

    def __init__(self, queue: Queue, op: str, *, applied: bool, times: int = 1, away: int = 0) -> None:
        """`away`: clock units that pass (on `clock`, given later) while the answer is lost."""
        self.queue, self.op, self.applied, self.left, self.away = queue, op, applied, times, away
        self.calls: list[str] = []
        self.clock: FakeClock | None = None

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.queue, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            if name != self.op or self.left == 0:
                return method(*args, **kwargs)
            self.left -= 1
            if self.applied:
                method(*args, **kwargs)
            if self.clock is not None:
                self.clock.advance(self.away)
            raise ConnectionError(f"the connection was lost during {name!r}: it may or may not have happened")

        return call


def _started(queue: Queue, clock: FakeClock, source: LosingSource, task_id: str) -> tuple[Completer, Run]:
    source.clock = clock
    completer = Completer(source, clock, RetryPolicy(rng=random.Random(1)), Report("w1"))  # type: ignore[arg-type]
    [lease] = queue.reserve("w1", now=clock(), lease_seconds=LEASE)
    assert lease.task_id == task_id
    run = Run.start(lease, clock, clock(), LEASE // 3, None)
    run.begin(clock(), None)
    clock.advance(10)
    run.end(clock())
    return completer, run


def _counts(completer: Completer) -> dict[str, int]:
    stats = completer.report.snapshot(0)
    return {name: stats[name] for name in ("completed", "retried", "dead", "lost") if stats.get(name)}


@pytest.mark.parametrize("applied", [False, True], ids=["lost-before-applied", "lost-after-applied"])
def test_an_ack_whose_answer_was_lost_is_sent_again_and_the_task_is_completed(
    queue: Queue, clock: FakeClock, applied: bool
) -> None:
    queue.put("t", {})
    source = LosingSource(queue, "ack", applied=applied)
    completer, run = _started(queue, clock, source, "t")
    completer.succeed(run)
    task = queue.get("t")
    assert task is not None and task.status == "completed"
    assert source.calls.count("ack") == 2  # the first, lost; the same ack again
    assert _counts(completer) == {"completed": 1}


FAILURES = [
    pytest.param("fail", Permanent("no such mailbox"), "dead", id="permanent-by-fail"),
    pytest.param("release", RuntimeError("smtp: 421 try later"), "ready", id="retried-by-release"),
]


@pytest.mark.parametrize(("call", "error", "status"), FAILURES)
@pytest.mark.parametrize("applied", [False, True], ids=["lost-before-applied", "lost-after-applied"])
def test_a_failure_whose_answer_was_lost_is_recorded_once_with_its_error_and_time(
    queue: Queue, clock: FakeClock, applied: bool, call: str, error: Exception, status: str
) -> None:
    queue.put("t", {}, max_attempts=3)
    # The server is away longer than the lease: the retry carries the time of the first try, a lease still held.
    source = LosingSource(queue, call, applied=applied, away=LEASE * 5)
    completer, run = _started(queue, clock, source, "t")
    ended = clock()
    completer.fail(run, error)
    task = queue.get("t")
    assert task is not None and task.status == status and task.last_error is not None
    assert (task.last_error.type, task.last_error.message) == (type(error).__name__, str(error))
    assert (task.last_error.attempt, task.last_error.at, task.generation) == (1, ended, 1)
    assert source.calls.count(call) == 2  # the first, lost; the same call again
    assert _counts(completer) == {"dead" if status == "dead" else "retried": 1}


def test_a_lease_lost_while_the_answer_was_lost_stays_lost(queue: Queue, clock: FakeClock) -> None:
    queue.put("t", {}, max_attempts=1)
    source = LosingSource(queue, "fail", applied=False)
    completer, run = _started(queue, clock, source, "t")
    queue.reserve("w2", now=clock() + LEASE, lease_seconds=LEASE)  # another worker reaps the expired lease
    completer.fail(run, Permanent("too late"))
    task = queue.get("t")
    assert task is not None and task.status == "dead" and task.last_error is not None
    assert task.last_error.type == "LeaseExpired"  # the truth: nobody recorded the failure in time
    assert _counts(completer) == {"lost": 1}


def test_answers_lost_every_time_give_up_after_a_few_resends(queue: Queue, clock: FakeClock) -> None:
    queue.put("t", {})
    source = LosingSource(queue, "ack", applied=False, times=100)
    completer, run = _started(queue, clock, source, "t")
    completer.succeed(run)
    assert source.calls.count("ack") == 4  # the first try and three resends
    assert _counts(completer) == {"lost": 1}
    task = queue.get("t")
    assert task is not None and task.status == "leased"  # it expires, and runs again


def test_a_give_back_whose_answer_was_lost_is_not_sent_again(queue: Queue, clock: FakeClock) -> None:
    # A give_back lowers the generation: sent again, it could give back a later lease of the same worker.
    queue.put("t", {})
    source = LosingSource(queue, "give_back", applied=True)
    completer = Completer(source, clock, RetryPolicy(rng=random.Random(1)), Report("w1"))  # type: ignore[arg-type]
    [lease] = queue.reserve("w1", now=clock(), lease_seconds=LEASE)
    run = Run.start(lease, clock, clock(), LEASE // 3, None)
    assert completer.withdraw(run)
    assert source.calls.count("give_back") == 1
