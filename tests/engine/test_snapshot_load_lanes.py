"""Loading a lanes store's records: the fast path for a queue already seen, and the lanes built around it.

`load_records` takes a record whose one optional member names a queue it
has already seen through a short path (one lookup by the name), and every
other record through `_optional_members`. These tests hold the short path
to the general one: a record loads to the same record, or is refused with
the same message, whether its queue was seen before or not. They also hold
the lanes built at the end (a queue's ready count from its heaps, heaps
left unsorted only when the times allow it) to the order `reserve` gives.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st
from test_snapshot_load import SETTINGS, damaged_records, decoded, fields_of, valid_records

from walqueue import Queue
from walqueue.engine.records import view
from walqueue.engine.state import READY, InvalidTransaction, State
from walqueue.engine.validate import MAX_INT

QUEUES = ["emails", "bulk"]
#: The first record's task id and key: below any other name.
PRIMER_ID = "\x00"
#: Queue values that no lookup by name may take as a known queue (unhashable ones among them).
ODD_QUEUES: list[Any] = ["emails ", "Emails", "default", "", None, 1, True, ["emails"], {"emails": 1}]


def _primer(queue: str) -> dict[str, Any]:
    """A valid ready record of `queue` whose task id sorts before any other."""
    return {
        "task": PRIMER_ID,
        "key": PRIMER_ID,
        "identity": "ab" * 32,
        "status": READY,
        "payload": {},
        "available_at": 0,
        "max_attempts": 1,
        "attempts": 0,
        "generation": 0,
        "worker": None,
        "deadline": None,
        "queue": queue,
    }


def _outcome(records: list[Any], is_decoded: bool) -> tuple[Any, ...]:
    """The last record as `from_records` builds it (its fields), or the message it is refused with (no index)."""
    try:
        state = State.from_records(1, records, decoded=is_decoded)
    except InvalidTransaction as exc:
        prefix = f"snapshot record {len(records) - 1}: "
        assert str(exc).startswith(prefix), exc
        return ("refused", str(exc)[len(prefix) :])
    state.check_invariants()
    return ("loaded", fields_of(view(state.tasks[records[-1]["task"]])))


@SETTINGS
@given(st.data())
def test_a_record_loads_alike_whether_its_queue_was_seen_before_or_not(data: st.DataObject) -> None:
    is_decoded = data.draw(st.booleans())
    value = data.draw(damaged_records(python_values=not is_decoded) | valid_records())
    queue = data.draw(st.sampled_from(QUEUES))
    if isinstance(value, dict) and data.draw(st.booleans()):
        value["queue"] = data.draw(st.sampled_from([queue, queue, *ODD_QUEUES]))
    if isinstance(value, dict):
        task, key = value.get("task"), value.get("key")
        assume(not (type(task) is str and task <= PRIMER_ID) and key != PRIMER_ID)
    if is_decoded:
        value = decoded(value)
    primer = decoded(_primer(queue)) if is_decoded else _primer(queue)
    alone = _outcome([value], is_decoded)  # the general path: the queue's name is new
    assert _outcome([primer, value], is_decoded) == alone  # the short path when the record names `queue` alone


@st.composite
def lane_snapshots(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Valid records in task-id order over a few queues and priorities, their times in order or not."""
    count = draw(st.integers(1, 24))
    in_order = draw(st.booleans())
    times = sorted(draw(st.lists(st.integers(0, 3), min_size=count, max_size=count)))
    if not in_order:
        times = draw(st.permutations(times))
    records = []
    for index, at in enumerate(times):
        record = draw(valid_records())
        record.pop("queue", None)
        record.pop("priority", None)
        record.update(task=f"t{index:03d}", key=f"t{index:03d}", available_at=at)
        lane = draw(st.sampled_from([("default", 0), ("default", 2), ("emails", 0), ("emails", -1), ("bulk", 0)]))
        if lane[0] != "default":
            record["queue"] = lane[0]
        if lane[1]:
            record["priority"] = lane[1]
        records.append(record)
    return records


@SETTINGS
@given(records=lane_snapshots(), is_decoded=st.booleans())
def test_lanes_load_to_reserve_order_and_per_queue_counts_whether_times_are_in_order_or_not(
    records: list[dict[str, Any]], is_decoded: bool
) -> None:
    values = decoded(records) if is_decoded else records
    state = State.from_records(2, values, decoded=is_decoded)
    state.check_invariants()  # every lane's heap, live count and seat; every queue's counts by status
    ready = sorted((-r.get("priority", 0), r["available_at"], r["task"]) for r in records if r["status"] == READY)
    assert state.peek_ready(MAX_INT, MAX_INT) == [task_id for *_, task_id in ready]
    for queue in ["default", *QUEUES]:
        mine = [r for r in records if r.get("queue", "default") == queue]
        expected = {status: sum(r["status"] == status for r in mine) for status in state.counts()}
        described = {q["name"]: q["counts"] for q in state._lanes.describe(state.tasks)}
        assert described.get(queue, dict.fromkeys(expected, 0)) == expected


def test_a_queue_whose_tasks_were_all_leased_at_the_snapshot_takes_them_back_after_reopening(tmp_path: Path) -> None:
    """Its priority 0 lane was made empty at the load; a release fills it, and reserve finds the tasks."""
    with Queue(tmp_path / "s", sync=False, compact_bytes=None) as queue:
        queue.put("a", {}, queue="emails")
        queue.put("b", {}, queue="emails", priority=3)
        leases = queue.reserve("w", now=1, lease_seconds=60, limit=2)
        queue.compact()
    with Queue(tmp_path / "s", sync=False, compact_bytes=None) as queue:
        by_task = {lease.task_id: lease for lease in queue.reserve("w", now=1, lease_seconds=60, limit=2)}
        assert by_task == {}
        for lease in leases:
            queue.release(lease, now=2)
        assert [lease.task_id for lease in queue.reserve("w", now=3, lease_seconds=60, limit=2)] == ["b", "a"]
        (emails,) = [q for q in queue.queues() if q["name"] == "emails"]
        assert emails["counts"][READY] == 0 and emails["counts"]["leased"] == 2
