"""The check that every index of a `State` agrees with its records (`State.check_invariants`).

O(n): for tests and offline checks (`walqueue-fsck --replay`), never on a
live path. Kept out of state.py, which holds what changes a task; this only
reads the records and the indexes the state hands it, in the shape the
snapshot loader builds them (`snapshot_load.Loaded`): it imports nothing of
state.py, so the two form no circle. It raises explicitly, so that
``python -O`` cannot turn it into a silent no-op.
"""

from __future__ import annotations

from collections.abc import Callable

from walqueue.engine.heaps import pruned
from walqueue.engine.records import view
from walqueue.engine.rows import COMPLETED, DEAD, DIGEST_BYTES, LEASED, READY, STATUSES, status_of
from walqueue.engine.snapshot_load import Loaded

__all__ = ["check_invariants"]


def check_invariants(indexes: Loaded, lookup_key: Callable[[str], str | None]) -> None:
    """Verify every index of a state (`State.indexes`) against its tasks; `AssertionError` names the first broken one.

    `lookup_key` is the state's own, so that what readers are answered is checked too.
    """
    tasks, key_owner, ready, leases, counts, dead, results = indexes[:7]

    def require(condition: bool, what: str) -> None:
        if not condition:
            raise AssertionError(f"state invariant broken: {what}")

    found = dict.fromkeys(STATUSES, 0)
    for task_id in results:
        require(
            task_id in tasks and status_of(tasks[task_id]) == COMPLETED, f"result of {task_id!r} has no completed task"
        )
    live_ready = {id(entry) for entry in ready}
    live_leases = {id(entry) for entry in leases}
    for task_id, stored in tasks.items():
        # An exact tuple or exact bytes, of atomic values: what the cyclic collector need not track.
        require(type(stored) is tuple or type(stored) is bytes, f"task {task_id!r} is stored as {type(stored)}")
        record = view(stored)
        require(record.task_id == task_id, f"task {task_id!r} is filed under another id")
        found[record.status] += 1
        require(lookup_key(record.key) == task_id, f"key of task {task_id!r} does not lead back to it")
        leased = record.status == LEASED
        require((record.worker is not None) == leased, f"worker of {record.status} task {task_id!r}")
        require((record.deadline is not None) == leased, f"deadline of {record.status} task {task_id!r}")
        require(
            (len(record.digest_and_payload) == DIGEST_BYTES) == (record.status == COMPLETED),
            f"payload of {record.status} task {task_id!r}",
        )
        if record.status == READY:
            require(
                record.entry == (record.available_at, task_id) and id(record.entry) in live_ready,
                f"ready task {task_id!r} is not in the ready heap",
            )
        elif leased:
            require(
                record.entry == (record.deadline, task_id) and id(record.entry) in live_leases,
                f"leased task {task_id!r} is not in the lease heap",
            )
        else:
            require(record.entry is None, f"{record.status} task {task_id!r} is still in a heap")
    require(found == counts, f"counts {dict(counts)} differ from the records' {found}")
    dead_ids = {task_id for task_id, stored in tasks.items() if status_of(stored) == DEAD}
    require(dead_ids == dead, "the set of dead tasks differs from the records")
    custom_keys = sum(1 for task_id, stored in tasks.items() if view(stored).key != task_id)
    require(len(key_owner) == custom_keys, "the key index holds keys of no task")
    require(pruned(leases, tasks, found[LEASED]) is leases, "the lease heap holds too many stale entries")
    lanes = indexes.lanes
    if lanes is not None:  # each lane: its live count, its bound on stale entries, its seat
        for q in lanes.iter_queues():
            for lane in q.lanes.values():
                live = [e for e in lane.heap if view(tasks[e[1]]).entry is e]
                require(
                    lane.live == len(live), f"lane ({q.name}, {lane.priority}) counts {lane.live} live, not {len(live)}"
                )
                require(len(lane.heap) <= 2 * lane.live + 64, f"lane ({q.name}, {lane.priority}) is not pruned")
                require(
                    all(
                        view(tasks[e[1]]).queue == q.name and view(tasks[e[1]]).priority == lane.priority for e in live
                    ),
                    f"lane ({q.name}, {lane.priority}) holds another lane's task",
                )
                head = min(live, default=None)
                seat = lane.entry
                require(
                    seat is None if (head is None or q.blocked()) else (seat is not None and seat[-3:-1] == head),
                    f"lane ({q.name}, {lane.priority}) is seated by {seat and seat[-3:-1]}, not its head {head}",
                )
            found_q = dict.fromkeys(STATUSES, 0)
            for stored in tasks.values():
                record = view(stored)
                if record.queue == q.name:
                    found_q[record.status] += 1
            require(found_q == q.counts, f"queue {q.name} counts {q.counts}, not {found_q}")
            require(q.limited == q.configured(), f"queue {q.name}'s limited flag is {q.limited}, not its settings'")
        rated = {q.name for q in lanes.iter_queues() if q.rate is not None}
        require(lanes.rated == rated, f"the lanes' rate-limited queues are {sorted(lanes.rated)}, not {sorted(rated)}")
