"""Heartbeats and timeouts, with a fake clock: the monitor's `tick` against a real queue.

The lease is 3,000 units, so a beat is due every 1,000 (a third). Each beat
is an `extend` to ``now + lease``; a beat that finds the lease gone tells
the handler (`context.lost`, `check()` raises) and its result is never
acked. A run past its timeout is released with the retry policy's delay
and its late result discarded.
"""

from __future__ import annotations

import random

import pytest
from worker_rig import FakeClock, Rig

from walqueue import Queue
from walqueue.worker import LeaseLost, RetryPolicy


def deadline(queue: Queue, task_id: str) -> int | None:
    task = queue.get(task_id)
    assert task is not None
    return task.deadline


def test_a_running_task_is_extended_every_third_of_its_lease_and_never_between(queue: Queue, clock: FakeClock) -> None:
    queue.put("report", {})
    rig = Rig(queue, clock)
    [run] = rig.start()
    started = clock.now
    extends_at = []
    for _ in range(40):  # ten leases' worth of ticks, every 250 units
        clock.advance(250)
        before = deadline(queue, "report")
        due = rig.monitor.tick(clock.now)
        if deadline(queue, "report") != before:
            extends_at.append(clock.now - started)
            assert deadline(queue, "report") == clock.now + 3_000
        assert due == started + 1_000 * (len(extends_at) + 1)  # the next beat
    assert extends_at == [1_000 * beat for beat in range(1, 11)]
    assert run.context.heartbeats == 10 and not run.context.lease_lost


def test_a_late_tick_beats_once_and_counts_the_next_beat_from_then(queue: Queue, clock: FakeClock) -> None:
    queue.put("report", {})
    rig = Rig(queue, clock)
    [run] = rig.start()
    clock.advance(2_500)  # the beat at 1,000 came late (the process stalled), but before the deadline
    assert rig.monitor.tick(clock.now) == clock.now + 1_000
    assert run.context.heartbeats == 1 and deadline(queue, "report") == clock.now + 3_000


def test_a_cancelled_task_stops_its_handler_at_the_next_beat_and_is_never_acked(queue: Queue, clock: FakeClock) -> None:
    queue.put("report", {})
    rig = Rig(queue, clock)
    [run] = rig.start()
    clock.advance(500)
    queue.cancel("report")  # an operator
    run.context.check()  # nothing known yet
    clock.advance(500)
    rig.monitor.tick(clock.now)
    assert run.context.lease_lost and run.context.lost.is_set() and run.context.reason == "lease lost"
    with pytest.raises(LeaseLost):
        run.context.check()
    rig.settler.succeed(run)  # the handler returns anyway: the result is discarded
    task = queue.get("report")
    assert task is not None and task.status == "dead"
    assert rig.counts() == {"completed": 0, "retried": 0, "dead": 0, "lost": 1, "timed_out": 0, "interrupted": 0}


def test_a_lease_that_expired_and_was_taken_again_is_lost_to_its_first_holder(queue: Queue, clock: FakeClock) -> None:
    queue.put("report", {})
    rig = Rig(queue, clock)
    [run] = rig.start()
    clock.advance(3_000)  # the process stalled for a whole lease: no beat came in time
    [other] = queue.reserve("worker-2", now=clock.now, lease_seconds=3_000)
    rig.monitor.tick(clock.now)
    assert run.context.lease_lost
    rig.settler.fail(run, RuntimeError("late failure"))  # nothing sent for the old lease
    task = queue.get("report")
    assert task is not None and (task.status, task.worker, task.generation) == ("leased", "worker-2", other.generation)


def test_a_handler_past_its_timeout_is_released_with_the_policys_delay_and_its_result_discarded(
    queue: Queue, clock: FakeClock
) -> None:
    queue.put("slow", {})
    rig = Rig(queue, clock, lease=30_000, timeout=5_000, seed=3)
    [run] = rig.start()
    started = clock.now
    clock.advance(4_999)
    assert rig.monitor.tick(clock.now) == started + 5_000  # the timeout comes before the next beat (10,000)
    assert not run.context.lease_lost and run.context.time_left() == 1
    clock.advance(1)
    rig.monitor.tick(clock.now)
    assert run.context.reason == "timeout" and rig.timed_out == [run]
    expected_delay = RetryPolicy(rng=random.Random(3)).delay(1)
    task = queue.get("slow")
    assert task is not None and (task.status, task.available_at) == ("ready", clock.now + expected_delay)
    rig.settler.succeed(run)  # the handler finally returns: discarded
    task = queue.get("slow")
    assert task is not None and task.status == "ready"
    assert rig.counts()["timed_out"] == 1 and rig.counts()["completed"] == 0


def test_a_handler_that_finishes_in_time_is_acked_and_never_beaten_again(queue: Queue, clock: FakeClock) -> None:
    queue.put("quick", {})
    rig = Rig(queue, clock, timeout=5_000)
    [run] = rig.start()
    clock.advance(100)
    rig.settler.succeed(run)
    rig.monitor.remove(run)
    clock.advance(10_000)
    assert rig.monitor.tick(clock.now) is None
    task = queue.get("quick")
    assert task is not None and task.status == "completed"
    assert rig.counts()["completed"] == 1 and run.context.heartbeats == 0
