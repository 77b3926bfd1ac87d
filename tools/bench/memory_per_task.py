"""memory_per_task (alias g): memory retained per stored task and per tombstone."""

from __future__ import annotations

import gc
import time
import tracemalloc
from typing import Any

from walqueue import Queue

from .harness import FILL_BATCH, LEASE_SECONDS, NOW, PAYLOAD_BYTES, WORKER, Context, figure, fill

#: Sizes at each scale (with the run's `reps` unless set here): `ctx.scale` during the run.
SCALES: dict[str, dict[str, int]] = {
    "tiny": {"tasks": 300},
    "default": {"tasks": 5000},
    "big": {"tasks": 100_000},
}


def _traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def _collection_seconds() -> float:
    """The fastest of three full collections (`gc.collect()`): what the cyclic collector walks, timed."""
    times = []
    for _ in range(3):
        start = time.perf_counter()
        gc.collect()
        times.append(time.perf_counter() - start)
    return min(times)


def run(ctx: Context) -> dict[str, Any]:
    n = ctx.scale["tasks"]
    directory = ctx.dir("g-walqueue")
    tracemalloc.start()
    try:
        queue = Queue(directory, sync=False, compact_bytes=None)
        empty_collection = _collection_seconds()
        base = _traced()
        fill(queue, "g", n)
        ready = _traced() - base
        full_collection = _collection_seconds()
        while True:
            leases = queue.reserve(WORKER, now=NOW, lease_seconds=LEASE_SECONDS, limit=FILL_BATCH)
            if not leases:
                break
            for lease in leases:
                queue.ack(lease, now=NOW)
            del lease, leases
        tombstones = _traced() - base
        assert queue.stats()["counts"]["completed"] == n
        queue.close()
        del queue

        # The same ready state loaded back from a snapshot (strings now come from the JSON decoder).
        directory = ctx.dir("g-walqueue-reopen")
        queue = Queue(directory, sync=False, compact_bytes=None)
        fill(queue, "g", n)
        queue.compact()
        queue.close()
        del queue
        base = _traced()
        queue = Queue(directory, sync=False)
        reloaded = _traced() - base
        queue.close()
        del queue
    finally:
        tracemalloc.stop()
    return {
        "clock": None,
        "title": f"memory per stored task ({PAYLOAD_BYTES}-byte payload) and per tombstone",
        "params": {"tasks": n, "payload_bytes": PAYLOAD_BYTES, "method": "tracemalloc, after gc.collect()"},
        "backends": {},
        "ratios": {
            "bytes_per_ready_task": figure([ready / n], "bytes", target=("<=", 450), better="lower"),  # issue 37 (g)
            "bytes_per_tombstone": figure([tombstones / n], "bytes", target=("<=", 200), better="lower"),
            "full_collection_over_empty": figure(
                [full_collection / empty_collection],
                "x time",
                target=("<=", 2.0),
                better="lower",
                note=f"a full gc.collect() with {n} ready tasks over one with none (tracemalloc on)",
            ),
            "bytes_per_ready_task_after_reopen": figure(
                [reloaded / n], "bytes", better="lower", note="information: state loaded from a snapshot"
            ),
        },
    }
