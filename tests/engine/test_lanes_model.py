"""Lanes against the reference model: queues, priorities, limits, pauses, in random programs.

The stateful machine of test_model_equivalence.py (every call of the lease
lifecycle, expiries through reserve's reap, compaction, reopen) gains puts
across queues and priorities, reserves limited to some queues, and queue
settings (concurrency, rate, pause) set and cleared at random; after every
step the whole state, `queues()` included, must equal the model's, and
every answer (which tasks a reserve leases, in which order) must too.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import rule
from test_model_equivalence import PAYLOADS, TASK_IDS, WORKERS, Harness, QueueVersusModel

from walqueue import Queue
from walqueue.engine import events

QUEUES = ["default", "mail", "bulk", "api"]
PRIORITIES = st.sampled_from([0, 0, 1, 5, -3, 100, -100])
UNCHANGED: Any = "unchanged"  # a strategy's marker: the argument is not passed at all

lane_items = st.fixed_dictionaries(
    {"task_id": st.sampled_from(TASK_IDS), "payload": st.sampled_from(PAYLOADS)},
    optional={
        "available_at": st.integers(0, 30),
        "queue": st.sampled_from(QUEUES),
        "priority": PRIORITIES,
        "put_at": st.integers(0, 30),  # a stamped put: due from then, FIFO within its lane
    },
)


class LanesVersusModel(QueueVersusModel):
    @rule(
        task_id=st.sampled_from(TASK_IDS),
        payload=st.sampled_from(PAYLOADS),
        available_at=st.integers(0, 30),
        queue=st.sampled_from(QUEUES),
        priority=PRIORITIES,
    )
    def put_in_lane(self, task_id: str, payload: dict[str, Any], available_at: int, queue: str, priority: int) -> None:
        self.h.same(
            f"put({task_id!r}, {payload!r}, available_at={available_at}, queue={queue!r}, priority={priority})",
            lambda q: q.put(task_id, payload, available_at=available_at, queue=queue, priority=priority),
        )

    @rule(items=st.lists(lane_items, max_size=4))
    def put_many_in_lanes(self, items: list[dict[str, Any]]) -> None:
        self.h.put_many(items)

    @rule(
        worker=st.sampled_from(WORKERS),
        step=st.integers(-3, 8),
        lease_seconds=st.integers(1, 10),
        limit=st.integers(1, 4),
        queues=st.none() | st.lists(st.sampled_from(QUEUES), min_size=1, max_size=3, unique=True),
    )
    def reserve_from(self, worker: str, step: int, lease_seconds: int, limit: int, queues: list[str] | None) -> None:
        h = self.h
        h.now = max(0, h.now + step)
        now = h.now
        leases = h.same(
            f"reserve({worker!r}, now={now}, lease_seconds={lease_seconds}, limit={limit}, queues={queues})",
            lambda q: q.reserve(worker, now=now, lease_seconds=lease_seconds, limit=limit, queues=queues),
        )
        h.leases.extend(leases or [])

    @rule(
        queue=st.sampled_from(QUEUES),
        concurrency=st.sampled_from([UNCHANGED, None, 1, 2, 3]),
        rate=st.sampled_from([UNCHANGED, None, (1, 5), (2, 3), (3, 10), (1, 1)]),
        paused=st.sampled_from([UNCHANGED, False, True]),
    )
    def configure(self, queue: str, concurrency: Any, rate: Any, paused: Any) -> None:
        given = {
            name: value
            for name, value in (("concurrency", concurrency), ("rate", rate), ("paused", paused))
            if value is not UNCHANGED
        }
        self.h.same(f"configure_queue({queue!r}, **{given})", lambda q: q.configure_queue(queue, **given))

    @rule(queue=st.sampled_from(QUEUES), status=st.sampled_from([None, "ready", "leased", "dead", "completed"]))
    def tasks_of_queue(self, queue: str, status: str | None) -> None:
        self.h.same(f"tasks({status!r}, queue={queue!r})", lambda q: q.tasks(status, queue=queue))

    @rule(
        call=st.sampled_from(
            [
                lambda q: q.put("a", {}, queue="a,b"),
                lambda q: q.put("a", {}, queue=""),
                lambda q: q.put("a", {}, priority=101),
                lambda q: q.put("a", {}, priority=True),
                lambda q: q.put("a", {}, priority=1.0),
                lambda q: q.put_many([{"task_id": "x", "payload": {}, "queue": 5}]),
                lambda q: q.reserve("w1", now=0, lease_seconds=1, queues=[]),
                lambda q: q.reserve("w1", now=0, lease_seconds=1, queues=["a", "a"]),
                lambda q: q.reserve("w1", now=0, lease_seconds=1, queues="mail"),
                lambda q: q.configure_queue("mail", concurrency=0),
                lambda q: q.configure_queue("mail", rate=(1, 0)),
                lambda q: q.configure_queue("mail", rate=(0, 5)),
                lambda q: q.configure_queue("mail", rate=5),
                lambda q: q.configure_queue("mail", paused=1),
                lambda q: q.configure_queue("a b", paused=True),
                lambda q: q.tasks(queue="a,b"),
            ]
        )
    )
    def bad_lane_call(self, call: Any) -> None:
        h = self.h
        h.log.append("bad lane call")
        before = h.queue.last_seq
        for target in (h.model, h.queue):
            try:
                call(target)
            except (TypeError, ValueError):
                pass
            else:
                raise AssertionError("a bad lane argument was accepted")
        assert h.queue.last_seq == before


LanesVersusModel.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestLanesVersusModel = LanesVersusModel.TestCase


def test_a_configure_op_logs_no_task_event_and_breaks_no_event_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    events.enable()
    try:
        with caplog.at_level(logging.INFO, logger="walqueue.events"), Queue(tmp_path / "q", sync=False) as queue:
            queue.configure_queue("mail", rate=(2, 10), paused=True)
            queue.put("m", {}, queue="mail")
            queue.configure_queue("mail", paused=False)
            assert [lease.task_id for lease in queue.reserve("w", now=0, lease_seconds=5)] == ["m"]
    finally:
        events.enable(False)
    logged = [record.getMessage().split()[0] for record in caplog.records if record.name == "walqueue.events"]
    assert logged == ["task.put", "task.lease"]


def test_a_resumed_queue_whose_rate_window_passed_while_paused_leases_again(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        queue.configure_queue("mail", rate=(1, 4))
        queue.put_many([{"task_id": f"m{n}", "payload": {}, "queue": "mail"} for n in range(2)])
        assert [lease.task_id for lease in queue.reserve("w", now=0, lease_seconds=100)] == ["m0"]  # window full
        queue.configure_queue("mail", paused=True)
        assert queue.reserve("w", now=10, lease_seconds=100) == []  # the window passed, but paused
        queue.configure_queue("mail", paused=False)
        assert [lease.task_id for lease in queue.reserve("w", now=10, lease_seconds=100)] == ["m1"]


def _random_lane_step(h: Harness, rng: random.Random) -> None:
    """One step of a seeded lanes program: puts across lanes, reserves (some queues), settles, settings, reopen."""
    roll = rng.random()
    if roll < 0.3:
        task_id, queue, priority = f"t{rng.randrange(40)}", rng.choice(QUEUES), rng.choice([0, 1, 5, -3])
        at = rng.choice([0, 0, h.now + rng.randrange(12)])
        h.same(
            f"put({task_id!r}, queue={queue!r}, priority={priority}, available_at={at})",
            lambda q: q.put(task_id, {}, queue=queue, priority=priority, available_at=at),
        )
    elif roll < 0.55:
        h.now = max(0, h.now + rng.choice([-6, -2, 0, 1, 3, 8]))
        now, limit, seconds = h.now, rng.choice([1, 2, 4]), rng.choice([2, 3, 7])
        queues = rng.choice([None, ["mail"], ["bulk", "default"], ["api", "mail", "bulk"]])
        leases = h.same(
            f"reserve(now={now}, limit={limit}, lease_seconds={seconds}, queues={queues})",
            lambda q: q.reserve("w1", now=now, lease_seconds=seconds, limit=limit, queues=queues),
        )
        h.leases.extend(leases or [])
    elif roll < 0.7 and h.leases:
        lease = rng.choice(h.leases)
        now, delay = max(0, lease.deadline - 1), rng.choice([0, 2, 5])
        if rng.random() < 0.5:
            h.same(f"ack({lease.task_id!r}, now={now})", lambda q: q.ack(lease, now=now))
        else:
            h.same(f"release({lease.task_id!r}, now={now})", lambda q: q.release(lease, now=now, delay=delay))
    elif roll < 0.8:
        queue = rng.choice(QUEUES)
        given = rng.choice(
            [
                {"concurrency": rng.choice([None, 1, 2, 3])},
                {"rate": rng.choice([None, (1, 4), (2, 6), (3, 2), (1, 1)])},
                {"paused": rng.random() < 0.4},
            ]
        )
        h.same(f"configure_queue({queue!r}, **{given})", lambda q: q.configure_queue(queue, **given))
    elif roll < 0.85:
        h.reopen()
    elif roll < 0.9:
        h.compact()


@pytest.mark.parametrize("seed", range(6))
def test_seeded_lanes_programs_give_the_models_answers_and_states(seed: int) -> None:
    rng = random.Random(f"lanes-{seed}")
    h = Harness(compact_bytes=700)
    try:
        for _ in range(300):
            _random_lane_step(h, rng)
            h.check()
        assert h.succeeded["configure_queue"] and h.succeeded["reserve"]
    finally:
        h.close()
