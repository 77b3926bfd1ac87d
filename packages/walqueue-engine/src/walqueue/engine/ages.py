"""A ready task's age: from its real start, and which tasks have none (docs/DECISIONS.md §46).

A ready task's start is its `available_at`: the time it came due, which a
stamped put (``put_at``) makes the producer's time of the put when that is
later. A task put with neither (`available_at` 0, no ``put_at``) has no
known start: counting its age from 0 would report the seconds since 1970,
so it is *undated*, counted apart and left out of every age.

Why no index of its own: undated entries key ``(0, id)``, the least key, so
in a lane's heap they form a subtree holding the root (a parent is never
greater than its child). Walking that subtree counts them, and the
entries just below it are the only candidates for the oldest dated one,
which a small frontier heap finds past the stale entries of lazy deletion.
The cost is the undated and stale entries, not the ready count. Pure, like
lanes.py: no clock, no file.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping

from walqueue.engine.rows import ENTRY, HeapEntry, Stored

__all__ = ["ReadyAges", "ready_ages"]

#: The oldest dated ready time (None: none) and how many ready tasks are undated.
ReadyAges = tuple[int | None, int]


def ready_ages(heaps: Iterable[list[HeapEntry]], tasks: Mapping[str, Stored]) -> ReadyAges:
    """The oldest `available_at` among the live entries of `heaps` that is not 0, and how many are 0."""
    oldest: int | None = None
    undated = 0
    for heap in heaps:
        dated, zeros = _heap_ages(heap, tasks)
        undated += zeros
        if dated is not None and (oldest is None or dated < oldest):
            oldest = dated
    return oldest, undated


def _heap_ages(heap: list[HeapEntry], tasks: Mapping[str, Stored]) -> ReadyAges:
    size = len(heap)
    undated = 0
    frontier: list[tuple[HeapEntry, int]] = []
    stack = [0] if size else []
    while stack:  # the subtree of undated keys, from the root
        index = stack.pop()
        entry = heap[index]
        if entry[0] > 0:
            frontier.append((entry, index))
            continue
        if tasks[entry[1]][ENTRY] is entry:
            undated += 1
        stack.extend(child for child in (2 * index + 1, 2 * index + 2) if child < size)
    heapq.heapify(frontier)
    while frontier:  # below it, in key order: the first live entry is the oldest dated one
        entry, index = heapq.heappop(frontier)
        if tasks[entry[1]][ENTRY] is entry:
            return entry[0], undated
        for child in (2 * index + 1, 2 * index + 2):
            if child < size:
                heapq.heappush(frontier, (heap[child], child))
    return None, undated
