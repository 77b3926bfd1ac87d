"""The lanes' planners (docs/DECISIONS.md §32): a put's queue and priority, a lease's time, a queue's settings.

Pure, like ops.py, whose put and lease planners call the first two.
"""

from __future__ import annotations

from typing import Any

from walqueue.engine.optable import Op
from walqueue.engine.records import queue_of
from walqueue.engine.state import OP_KINDS, State
from walqueue.engine.validate import DEFAULT_QUEUE, check_int, check_priority, check_queue_name, check_rate

__all__ = ["UNCHANGED", "lane_fields", "plan_configure", "stamp_lease_times"]

_CONFIGURE = OP_KINDS["configure"]


class _Unchanged:
    """The default of `configure_queue`'s settings: leave this one as it is (None would clear a limit)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED: Any = _Unchanged()


def lane_fields(op: Op, queue: object, priority: object) -> None:
    """Check a put's `queue` and `priority` and add each to its op only where it differs from its default."""
    if queue is not DEFAULT_QUEUE or priority != 0 or type(priority) is not int:
        if check_queue_name(queue) != DEFAULT_QUEUE:
            op["queue"] = queue
        if check_priority(priority):
            op["priority"] = priority


def stamp_lease_times(state: State, planned: list[Op], now: int) -> None:
    """Give each lease of a rate-limited queue its reserve's `now` (``at``): the limiter reads it from the log.

    Its caller skips it while no queue has a rate (`State.rated` empty), the usual store.
    """
    tasks, rated = state.tasks, state.rated
    for op in planned:
        if queue_of(tasks[op["task"]]) in rated:
            op["at"] = now


def check_configure_args(name: object, concurrency: object, rate: object, paused: object) -> None:
    """`configure_queue`'s arguments, state-free (a client runs this too); `TypeError`/`ValueError` names the flaw."""
    check_queue_name(name, "name")
    if concurrency is not UNCHANGED and concurrency is not None:
        check_int(concurrency, "concurrency", 1)
    if rate is not UNCHANGED and rate is not None:
        check_rate(rate)
    if paused is not UNCHANGED and type(paused) is not bool:
        raise TypeError(f"paused must be a bool, not {type(paused).__name__}")


def plan_configure(
    state: State, name: str, concurrency: object, rate: object, paused: object
) -> tuple[Op, bytes] | None:
    """The configure op that gives queue `name` its new settings (omitted arguments kept); None if nothing changes."""
    check_configure_args(name, concurrency, rate, paused)
    current = state.queue_settings(name)
    new: dict[str, Any] = {
        "concurrency": current["concurrency"] if concurrency is UNCHANGED else concurrency,
        "rate": current["rate"] if rate is UNCHANGED else (None if rate is None else list(check_rate(rate))),
        "paused": current["paused"] if paused is UNCHANGED else paused,
    }
    if new == current:
        return None
    op: Op = {"op": "configure", "queue": name}
    if new["concurrency"] is not None:
        op["concurrency"] = new["concurrency"]
    if new["rate"] is not None:
        op["rate"], op["window"] = new["rate"]
    if new["paused"]:
        op["paused"] = True
    return op, _CONFIGURE.encode(op)
