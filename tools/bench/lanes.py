"""lanes (alias m): queues and priorities against one lane: cycle CPU, reserve cost with blocked queues, memory, reopen.

Every figure is a ratio measured in the same run (sync off, CPU time):

- `cycle_lanes_vs_one_lane`: a reserve+ack cycle with the ready tasks spread
  over 100 queues x 5 priorities, over the same cycle with all of them in
  one lane (target <= 1.1).
- `reserve_{idle,paused,limited}_many_vs_1`: a reserve+release cycle of
  the one due task while `many` other queues have nothing due (idle), are
  paused with ready tasks, or are at their concurrency limit, over the same
  cycle with one such queue: the cost must not grow with them.
- `bytes_per_ready_task_lanes_minus_one_lane`: memory per ready task in 500
  lanes minus in the default lane (target <= 16); `bytes_per_ready_task_one_lane`
  is the default lane's own figure.
- `reopen_many_queues_vs_one`: opening a snapshot of N tasks in 1,000 queues
  over the same in one queue (target <= 1.1).
"""

from __future__ import annotations

import gc
import time
import tracemalloc
from pathlib import Path
from typing import Any

from walqueue import Queue

from .harness import LEASE_SECONDS, NOW, WORKER, Context, figure, payload

#: Sizes at each scale: `ctx.scale` during the run.
SCALES: dict[str, dict[str, int]] = {
    "tiny": {"reps": 3, "ready": 2_000, "cycles": 300, "many": 100, "memory_tasks": 2_000, "reopen_tasks": 2_000},
    "default": {
        "reps": 5,
        "ready": 200_000,
        "cycles": 5_000,
        "many": 10_000,
        "memory_tasks": 50_000,
        "reopen_tasks": 200_000,
    },
    "big": {
        "reps": 5,
        "ready": 200_000,
        "cycles": 20_000,
        "many": 10_000,
        "memory_tasks": 200_000,
        "reopen_tasks": 1_000_000,
    },
}
BATCH = 1_000


def _fill(queue: Queue, count: int, lanes: int, queues: int) -> None:
    """`count` ready tasks; with `lanes` > 1 spread round robin over `queues` queues x lanes/queues priorities."""
    priorities = max(1, lanes // queues)
    for first in range(0, count, BATCH):
        items = []
        for i in range(first, min(first + BATCH, count)):
            item: dict[str, Any] = {"task_id": f"t{i:08d}", "payload": payload(i)}
            if lanes > 1:
                item["queue"] = f"q{i % queues:05d}"
                item["priority"] = (i // queues) % priorities
            items.append(item)
        queue.put_many(items)


def _cpu_cycles(queue: Queue, cycles: int, settle: str) -> float:
    """CPU seconds per reserve + (ack or release) cycle."""
    gc.collect()
    start = time.process_time()
    for _ in range(cycles):
        (lease,) = queue.reserve(WORKER, now=NOW, lease_seconds=LEASE_SECONDS)
        if settle == "ack":
            queue.ack(lease, now=NOW)
        else:
            queue.release(lease, now=NOW)
    return (time.process_time() - start) / cycles


def _cycle_ratio(ctx: Context) -> list[float]:
    n, cycles = ctx.scale["ready"], ctx.scale["cycles"]
    one = Queue(ctx.dir("m-one-lane"), sync=False, compact_bytes=None)
    many = Queue(ctx.dir("m-lanes"), sync=False, compact_bytes=None)
    try:
        _fill(one, n, 1, 1)
        _fill(many, n, 500, 100)
        ratios = []
        for _ in range(ctx.scale["reps"]):  # interleaved, so that drift hits both alike
            single = _cpu_cycles(one, cycles, "ack")
            ratios.append(_cpu_cycles(many, cycles, "ack") / single)
        return ratios
    finally:
        one.close()
        many.close()


def _blocked_store(ctx: Context, kind: str, others: int) -> Queue:
    """One due task in the default queue and `others` queues that cannot lease (`kind`)."""
    queue = Queue(ctx.dir(f"m-{kind}-{others}"), sync=False, compact_bytes=None)
    queue.put("due", {}, max_attempts=10**15)  # released again and again
    for first in range(0, others, BATCH):
        names = [f"o{i:05d}" for i in range(first, min(first + BATCH, others))]
        at = NOW + 10**9 if kind == "idle" else 0
        queue.put_many([{"task_id": f"{name}-{j}", "payload": {}, "queue": name, "available_at": at}
                        for name in names for j in range(2)])  # fmt: skip
        for name in names:
            if kind == "paused":
                queue.configure_queue(name, paused=True)
            elif kind == "limited":
                queue.configure_queue(name, concurrency=1)
        if kind == "limited":  # one of each queue's two tasks leased: every one at its limit
            queue.reserve("holder", now=NOW, lease_seconds=10**9, limit=len(names), queues=names)
    return queue


def _blocked_ratios(ctx: Context) -> dict[str, list[float]]:
    ratios: dict[str, list[float]] = {}
    cycles = ctx.scale["cycles"]
    for kind in ("idle", "paused", "limited"):
        one, many = _blocked_store(ctx, kind, 1), _blocked_store(ctx, kind, ctx.scale["many"])
        try:
            samples = []
            for _ in range(ctx.scale["reps"]):
                single = _cpu_cycles(one, cycles, "release")
                samples.append(_cpu_cycles(many, cycles, "release") / single)
            ratios[kind] = samples
        finally:
            one.close()
            many.close()
    return ratios


def _bytes_per_ready(ctx: Context, lanes: int) -> float:
    n = ctx.scale["memory_tasks"]
    tracemalloc.start()
    try:
        queue = Queue(ctx.dir(f"m-memory-{lanes}"), sync=False, compact_bytes=None)
        queue.put("warm", {}, queue="q00000" if lanes > 1 else "default")
        gc.collect()
        base = tracemalloc.get_traced_memory()[0]
        _fill(queue, n, lanes, min(lanes, 100))
        gc.collect()
        used = tracemalloc.get_traced_memory()[0] - base
        queue.close()
    finally:
        tracemalloc.stop()
    return used / n


def _reopen_ratio(ctx: Context) -> list[float]:
    n = ctx.scale["reopen_tasks"]
    directories: dict[str, Path] = {}
    for label, lanes, queues in (("one", 1, 1), ("many", 1_000, 1_000)):
        directory = directories[label] = ctx.dir(f"m-reopen-{label}")
        with Queue(directory, sync=False, compact_bytes=None) as queue:
            _fill(queue, n, lanes, queues)
            queue.compact()
    samples = []
    for _ in range(ctx.scale["reps"]):
        times = {}
        for label, directory in directories.items():
            gc.collect()
            start = time.process_time()
            Queue(directory, sync=False).close()
            times[label] = time.process_time() - start
        samples.append(times["many"] / times["one"])
    return samples


def run(ctx: Context) -> dict[str, Any]:
    ratios: dict[str, Any] = {
        "cycle_lanes_vs_one_lane": figure(_cycle_ratio(ctx), "x", target=("<=", 1.1), better="lower"),
    }
    many = ctx.scale["many"]
    for kind, samples in _blocked_ratios(ctx).items():
        ratios[f"reserve_{kind}_many_vs_1"] = figure(
            samples, "x", target=("<=", 1.2), better="lower", note=f"{many} {kind} queues against 1"
        )
    one_lane = _bytes_per_ready(ctx, 1)
    lanes = _bytes_per_ready(ctx, 500)
    ratios["bytes_per_ready_task_one_lane"] = figure([one_lane], "bytes", better="lower", note="information")
    ratios["bytes_per_ready_task_lanes_minus_one_lane"] = figure(
        [lanes - one_lane], "bytes", target=("<=", 16), better="lower"
    )
    ratios["reopen_many_queues_vs_one"] = figure(_reopen_ratio(ctx), "x", target=("<=", 1.1), better="lower")
    return {
        "clock": "cpu",
        "title": "lanes: 100 queues x 5 priorities, blocked queues, memory and reopen against one lane",
        "params": dict(ctx.scale),
        "backends": {},
        "ratios": ratios,
    }
