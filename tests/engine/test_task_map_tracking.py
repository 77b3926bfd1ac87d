"""The task map never comes back to the youngest generation, so young collections never walk every task.

A row is tracked when built (rows.py); an exact dict of untracked rows is
untracked by a full collection and tracked again, as a young object, by the
next new row: the next two young collections would each walk every task
(about 30 ms at a million). The state's map is never untracked (taskmap.py).
"""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from walqueue import Queue
from walqueue.engine.state import State
from walqueue.engine.taskmap import TaskMap


def _young(obj: object) -> bool:
    return any(o is obj for o in gc.get_objects(generation=0))


@pytest.mark.parametrize("reopened", [False, True])
def test_after_a_full_collection_a_put_leaves_the_task_map_old(tmp_path: Path, reopened: bool) -> None:
    queue = Queue(tmp_path / "q", sync=False, compact_bytes=None)
    for n in range(50):
        queue.put(f"t{n}", {"n": n})
    if reopened:
        queue.compact()  # the reopened state comes from a snapshot
        queue.close()
        queue = Queue(tmp_path / "q", sync=False, compact_bytes=None)
    try:
        tasks = queue._state.tasks
        gc.collect()
        gc.collect()  # a row is untracked by the second collection that sees it at the latest (rows.py)
        assert gc.is_tracked(tasks)  # a full collection leaves it tracked, in the oldest generation
        queue.put("new", {"n": -1})  # a new row, tracked when built
        queue.ack(queue.reserve("w", now=0, lease_seconds=60)[0], now=0)
        assert not _young(tasks)
        assert len(tasks) == 51 and tasks["t7"] is queue._state.tasks["t7"]
    finally:
        queue.close()


def test_the_task_map_is_a_dict_in_all_but_its_tracking() -> None:
    state = State()
    assert type(state.tasks) is TaskMap and isinstance(state.tasks, dict)
    assert state.tasks == {} and not hasattr(state.tasks, "__dict__")
