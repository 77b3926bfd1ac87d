"""`Queue`'s calls for the queues themselves (lanes, docs/DECISIONS.md §32): `configure_queue` and `queues`.

A base class of `Queue`, so that queue.py stays within the house's module
size; it uses only what `Queue` gives every call: the guard, the state and
the one write path.
"""

from __future__ import annotations

from typing import Any

from walqueue.engine import ops
from walqueue.engine.callguard import CallGuard
from walqueue.engine.laneplans import UNCHANGED, plan_configure
from walqueue.engine.paging import check_page_args
from walqueue.engine.records import check_status_filter
from walqueue.engine.state import State
from walqueue.engine.validate import check_queue_name, check_queues_filter

__all__ = ["LaneCalls", "check_page", "check_reserve", "check_tasks"]


class LaneCalls:
    """What `Queue` provides to these calls, declared for the type checker, and the calls."""

    __slots__ = ()

    _guard: CallGuard
    _state: State

    def _check_open(self) -> None:
        raise NotImplementedError

    def _commit(self, plan: ops.Plan) -> None:
        raise NotImplementedError

    def configure_queue(
        self, name: str, *, concurrency: Any = UNCHANGED, rate: Any = UNCHANGED, paused: Any = UNCHANGED
    ) -> None:
        """Set queue `name`'s limits, durably: `concurrency` (at most N leased at once), `rate` (``(n, window)``:
        at most n leases per window of `now` units), `paused` (leases nothing, still takes puts).

        An omitted argument leaves its setting as it is; None clears a limit. Writes nothing when nothing
        changes. `TypeError`/`ValueError` names a bad argument (nothing written); `QueueClosed`.

        Example: ``queue.configure_queue("partner-api", concurrency=4, rate=(10, 1))``
        """
        self._check_open()
        with self._guard:
            planned = plan_configure(self._state, name, concurrency, rate, paused)
            if planned is not None:
                self._commit(ops.Plan([planned[0]], [planned[1]]))

    def queues(self) -> list[dict[str, Any]]:
        """Every queue that holds a task or has a setting, by name: ``name``, ``concurrency``, ``rate``
        (``[n, window]`` or None), ``paused``, ``counts`` (by status) and ``oldest_ready_at``. Writes nothing."""
        with self._guard:
            return self._state.queues()


# -- the state-free checks of the calls that gained a lane argument (the call table's `check`) ------------


def check_reserve(worker: object, now: object, lease_seconds: object, limit: object, queues: object) -> None:
    """`Queue.reserve`'s checks, in its order."""
    ops.validate_reserve_args(worker, now, lease_seconds, limit)
    check_queues_filter(queues)


def check_tasks(status: object, queue: object) -> None:
    """`Queue.tasks`'s checks, in its order."""
    check_status_filter(status)
    if queue is not None:
        check_queue_name(queue)


def check_page(status: object, after: object, limit: object, queue: object) -> None:
    """`Queue.page`'s checks, in its order."""
    check_page_args(status, after, limit)
    if queue is not None:
        check_queue_name(queue)
