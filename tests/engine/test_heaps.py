"""Unit tests of engine/heaps.py: lazy-deletion heaps answer as a sorted filter of their live entries."""

from __future__ import annotations

import heapq

from hypothesis import given
from hypothesis import strategies as st

from walqueue.engine.heaps import HEAP_SLACK, due, first_time, live_ids, pruned
from walqueue.engine.rows import ENTRY, HeapEntry


def _holder(entry: HeapEntry) -> tuple[object, ...]:
    """Stands in for a stored row: all the heap functions read is its entry (at `ENTRY`)."""
    return (None,) * ENTRY + (entry,)


def _build(pushes: list[tuple[int, int]]) -> tuple[list[HeapEntry], dict[str, tuple[object, ...]]]:
    """Push (time, task number) entries in order; a task's later push makes its earlier entry stale."""
    heap: list[HeapEntry] = []
    tasks: dict[str, tuple[object, ...]] = {}
    for time, number in pushes:
        task_id = f"t{number}"
        entry = (time, task_id)
        tasks[task_id] = _holder(entry)
        heapq.heappush(heap, entry)
    return heap, tasks


def _live(heap: list[HeapEntry], tasks: dict[str, tuple[object, ...]]) -> list[HeapEntry]:
    return sorted(entry for entry in heap if tasks[entry[1]][ENTRY] is entry)


pushes = st.lists(st.tuples(st.integers(0, 20), st.integers(0, 15)), max_size=200)  # past HEAP_SLACK: rebuilds happen


@given(pushes, st.integers(0, 25), st.integers(1, 20))
def test_due_is_the_sorted_live_entries_up_to_now_and_limit(
    entries: list[tuple[int, int]], now: int, limit: int
) -> None:
    heap, tasks = _build(entries)
    expected = [task_id for time, task_id in _live(heap, tasks) if time <= now][:limit]
    assert due(heap, tasks, now, limit) == expected  # type: ignore[arg-type]
    # Asking again gives the same answer: what was popped was pushed back, only stale entries went.
    assert due(heap, tasks, now, limit) == expected  # type: ignore[arg-type]
    assert _live(heap, tasks) == _live(*_build(entries))


@given(pushes)
def test_first_time_and_live_ids_read_only_live_entries(entries: list[tuple[int, int]]) -> None:
    heap, tasks = _build(entries)
    live = _live(heap, tasks)
    assert sorted(live_ids(heap, tasks)) == sorted(task_id for _, task_id in live)  # type: ignore[arg-type]
    assert first_time(heap, tasks) == (live[0][0] if live else None)  # type: ignore[arg-type]
    assert _live(heap, tasks) == live


@given(pushes)
def test_pruned_rebuilds_only_an_overgrown_heap_and_keeps_every_live_entry(entries: list[tuple[int, int]]) -> None:
    heap, tasks = _build(entries)
    live = _live(heap, tasks)
    for count in (len(live), 0):
        result = pruned(heap, tasks, count)  # type: ignore[arg-type]
        if len(heap) > 2 * count + HEAP_SLACK:
            assert result is not heap and sorted(result) == live
            assert result[0] == live[0]  # a heap again
        else:
            assert result is heap


def test_the_bound_is_twice_the_live_count_plus_the_slack() -> None:
    tasks = {"x": _holder((0, "x"))}
    at_bound: list[HeapEntry] = [(0, "x")] * (2 * 5 + HEAP_SLACK)
    assert pruned(at_bound, tasks, 5) is at_bound  # type: ignore[arg-type]
    over = [*at_bound, (0, "x")]
    assert pruned(over, tasks, 5) is not over  # type: ignore[arg-type]
