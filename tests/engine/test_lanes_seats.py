"""The lanes' seats on the reserve+ack cycle: what the usual cycle costs them, and a reserve that goes back in time.

A lane whose head a reserve's `now` has reached is seated in `due` at once
(lanes.py `Lanes.place`), and a reserve of one reads the best lane off the
top of `due` without popping it. These tests hold the cost of the usual
cycle in heap operations (counted, never timed) and hold the order to the
contract when a reserve's `now` is earlier than the last one's.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from walqueue import Queue
from walqueue.engine import lanes as lanes_module


class CountingHeapq:
    """Stands for the `heapq` module in lanes.py and counts each function's calls."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        function = getattr(heapq, name)

        def counted(*args: Any) -> Any:
            self.calls[name] += 1
            return function(*args)

        return counted


def _cycle(queue: Queue, now: int) -> str:
    (lease,) = queue.reserve("w", now=now, lease_seconds=60)
    queue.ack(lease, now=now)
    return lease.task_id


@pytest.mark.parametrize("lanes", [1, 6])
def test_a_reserve_and_ack_cycle_costs_the_lanes_two_heap_operations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lanes: int
) -> None:
    """The leased head is popped off its lane and the lane's seat replaced at the top of `due`: nothing else."""
    with Queue(tmp_path / "store", sync=False) as queue:
        queue.put_many(
            [
                {"task_id": f"t{n:04d}", "payload": {}, "queue": f"q{n % lanes // 2}", "priority": n % 2}
                if lanes > 1
                else {"task_id": f"t{n:04d}", "payload": {}}
                for n in range(600)
            ]
        )
        for _ in range(3):  # the first reserve promotes every lane
            _cycle(queue, 100)
        counting = CountingHeapq()
        monkeypatch.setattr(lanes_module, "heapq", counting)
        for _ in range(50):
            _cycle(queue, 100)
        assert counting.calls == {"heappop": 50, "heapreplace": 50}


def test_a_reserve_earlier_than_the_last_leases_only_what_its_now_makes_due(tmp_path: Path) -> None:
    """A head seated in `due` by a later reserve's `now` is not due for an earlier one (it waits again)."""
    with Queue(tmp_path / "store", sync=False) as queue:
        for task_id, at, lane in [("a", 0, "x"), ("b", 5, "x"), ("c", 8, "x"), ("d", 6, "y"), ("e", 2, "y")]:
            queue.put(task_id, {}, available_at=at, queue=lane, priority=1 if lane == "y" else 0)
        assert _cycle(queue, 10) == "e"  # priority 1 first; lane y's head d is now seated as due
        assert _cycle(queue, 10) == "d"
        assert _cycle(queue, 4) == "a"  # b (5) and c (8) are not due at 4
        assert queue.reserve("w", now=4, lease_seconds=60) == []
        assert queue.reserve("w", now=7, lease_seconds=60, limit=5)[0].task_id == "b"
        assert queue.reserve("w", now=7, lease_seconds=60) == []
        assert _cycle(queue, 8) == "c"
