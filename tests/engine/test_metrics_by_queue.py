"""Metrics count each op by its task's queue, read before the transaction applies (a task never changes lane)."""

from __future__ import annotations

from typing import Any

from walqueue.engine.metrics import Metrics
from walqueue.engine.state import State, apply


def _commit(metrics: Metrics, state: State, *ops: dict[str, Any]) -> None:
    """What `Queue._commit` does: count, then apply."""
    metrics.counted(list(ops), state)
    apply(state, {"seq": state.last_seq + 1, "ops": list(ops)})


def _put(task: str, **lane: Any) -> dict[str, Any]:
    return {"op": "put", "task": task, "key": task, "payload": {}, "available_at": 0, "max_attempts": 3, **lane}


def test_ops_count_by_the_queue_of_their_task_even_once_it_is_a_tombstone_or_created_in_the_same_transaction() -> None:
    metrics, state = Metrics(0), State()
    lease = {"op": "lease", "task": "e", "worker": "w", "generation": 1, "deadline": 9}
    _commit(metrics, state, _put("d"), _put("e", queue="emails", priority=2), lease)
    _commit(metrics, state, {"op": "ack", "task": "e", "generation": 1})
    _commit(metrics, state, _put("f", queue="emails"))
    emails = metrics.by_queue["emails"]
    assert (emails["put"], emails["lease"], emails["ack"]) == (2, 1, 1)
    assert set(metrics.by_queue) == {"emails"} and metrics.ops["put"] == 3


def test_a_store_without_lanes_counts_by_kind_only() -> None:
    metrics, state = Metrics(0), State()
    _commit(metrics, state, _put("d"), {"op": "lease", "task": "d", "worker": "w", "generation": 1, "deadline": 9})
    assert metrics.by_queue == {} and not metrics.lanes and metrics.ops["lease"] == 1
