"""What the model holds and how it counts transactions, and the two views of a record it hands out.

`ModelState` is the base the groups of calls build on (puts.py, leases.py,
lanes.py, results.py, reads.py: `Model` is all of them); `BodySize` sizes a
transaction's frame body as ops are added, for the frame bound; `lease_of`
and `task_of` are a record as the `Lease` and the `Task` a call returns.
"""

from __future__ import annotations

import copy
from typing import Any, Self

from walqueue import Lease, Task
from walqueue.format.canonical import canonical_json

from .rules import MAX_FRAME_BYTES, check_int, copy_json


class ModelState:
    """What the model holds, its transactions and the store's clock: the base of every group of calls.

    State: `_tasks` maps a task id to a record (a plain dict with the fields of
    a snapshot record, `identity` as the canonical bytes of the put), `_keys`
    maps an idempotency key to its task id, `_last_seq` counts transactions.
    """

    def __init__(self) -> None:
        self._tasks: dict[str, dict[str, Any]] = {}
        self._keys: dict[str, str] = {}
        self._last_seq = 0
        #: The store's clock unit once `set_clock` recorded it (format extension "clock").
        self.clock: int | None = None
        self._results: dict[str, tuple[int, Any]] = {}  # complete's results: task id -> (expires, value)
        #: queue name -> {"concurrency", "rate" ([n, window] or None), "paused", "recent" (the last n lease times)}
        self._queues: dict[str, dict[str, Any]] = {}

    # -- bookkeeping ------------------------------------------------------

    @property
    def last_seq(self) -> int:
        """The sequence of the last transaction (0 when none)."""
        return self._last_seq

    def clone(self) -> Self:
        """An independent copy (the same as `copy.deepcopy(model)`)."""
        return copy.deepcopy(self)

    def compact(self) -> None:
        """Compaction never changes what the queue answers."""

    def _next_body(self) -> BodySize:
        return BodySize(self._last_seq + 1)

    def _commit(self) -> None:
        self._last_seq += 1

    def set_clock(self, units_per_second: int) -> None:
        """Record the store's clock unit once; the same again writes nothing, another is a ValueError."""
        check_int(units_per_second, "units_per_second", 1)
        if self.clock == units_per_second:
            return
        if self.clock is not None:
            raise ValueError(f"the store's clock unit is {self.clock} per second, not {units_per_second}")
        self._commit()
        self.clock = units_per_second


class BodySize:
    """The length of one transaction's frame body `{"ops":[...],"seq":S}`, grown op by op.

    Computed incrementally (the canonical JSON of the whole body is the base
    plus every op plus one comma between ops) so that a reserve of thousands
    of tasks stays linear.
    """

    def __init__(self, seq: int) -> None:
        self.size = len(canonical_json({"ops": [], "seq": seq}))
        self.count = 0

    def add(self, op: dict[str, Any]) -> bool:
        """Add `op` if the body stays within the frame bound; tell whether it did."""
        grown = self.size + len(canonical_json(op)) + (1 if self.count else 0)
        if grown > MAX_FRAME_BYTES:
            return False
        self.size = grown
        self.count += 1
        return True


def lease_of(record: dict[str, Any]) -> Lease:
    """The lease a reserve or an extend hands out: the record's holder, token, lane and payload (copied)."""
    held = {name: record[name] for name in ("worker", "generation", "deadline", "attempts", "queue", "priority")}
    return Lease(task_id=record["task"], payload=copy_json(record["payload"]), **held)


def task_of(record: dict[str, Any]) -> Task:
    return Task(
        task_id=record["task"],
        key=record["key"],
        status=record["status"],
        payload=copy_json(record["payload"]),
        available_at=record["available_at"],
        max_attempts=record["max_attempts"],
        attempts=record["attempts"],
        generation=record["generation"],
        worker=record["worker"],
        deadline=record["deadline"],
        last_error=None if record["last_error"] is None else dict(record["last_error"]),
        queue=record["queue"],
        priority=record["priority"],
    )
