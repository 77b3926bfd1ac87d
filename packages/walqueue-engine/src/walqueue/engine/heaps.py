"""The ready and lease orders: heaps of ``(time, task id)`` entries with lazy deletion.

An entry is live only while it is the very tuple its task's record points
at (``record.entry is entry``), so a transition never searches a heap: it
gives the record a new entry (or none) and leaves the old one behind, to be
dropped when it reaches the top or when the heap is rebuilt. Pure, like the
state that owns the heaps: these functions only read the records, and
change nothing but the heap they are handed.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from walqueue.engine.rows import ENTRY, HeapEntry, Stored

__all__ = ["HEAP_SLACK", "due", "first_time", "live_ids", "pruned"]

#: A heap is rebuilt from its live entries once its dead entries outnumber the
#: live ones by this much, so stale entries (of tasks acked or released long
#: before their deadline) cost amortized O(1) and memory stays bounded.
HEAP_SLACK = 64


def pruned(heap: list[HeapEntry], tasks: Mapping[str, Stored], live: int) -> list[HeapEntry]:
    """`heap` itself, or a new heap of its live entries once it holds more than 2 x `live` + `HEAP_SLACK`.

    The statement of that bound: the invariant check asks whether this
    would rebuild, and the commit calls it when it would (WARNING: the
    commit restates the test, to save a call per transaction; see
    `State._commit`).
    """
    if len(heap) <= 2 * live + HEAP_SLACK:
        return heap
    rebuilt = [entry for entry in heap if tasks[entry[1]][ENTRY] is entry]
    heapq.heapify(rebuilt)
    return rebuilt


def live_ids(heap: list[HeapEntry], tasks: Mapping[str, Stored]) -> list[str]:
    """The task ids of the live entries, unordered (at most 2k + `HEAP_SLACK` entries for k live ones)."""
    return [entry[1] for entry in heap if tasks[entry[1]][ENTRY] is entry]


def first_time(heap: list[HeapEntry], tasks: Mapping[str, Stored]) -> int | None:
    """The time of the first live entry (None: there is none), once the stale entries above it are dropped."""
    while heap:
        entry = heap[0]
        if tasks[entry[1]][ENTRY] is entry:
            time: int = entry[0]
            return time
        heapq.heappop(heap)
    return None


def due(heap: list[HeapEntry], tasks: Mapping[str, Stored], now: int, limit: int) -> list[str]:
    """Up to `limit` task ids of live entries with ``time <= now``, in (time, task id) order.

    O(k log n) for k results: the first entries are popped and pushed back
    (stale entries met on the way are dropped for good).
    """
    # Once the stale entries at the top are gone, the usual answer (nothing due,
    # or the one due entry a reserve of one asks for) needs no pop and push back.
    first = first_time(heap, tasks)
    if first is None or first > now:
        return []
    if limit == 1:
        return [heap[0][1]]
    live: list[HeapEntry] = []
    while heap and len(live) < limit:
        entry = heap[0]
        if tasks[entry[1]][ENTRY] is not entry:
            heapq.heappop(heap)
            continue
        if entry[0] > now:
            break
        live.append(heapq.heappop(heap))
    for entry in live:
        heapq.heappush(heap, entry)
    return [entry[1] for entry in live]
