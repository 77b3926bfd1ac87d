"""Shared by every workload: inputs, opening a backend, interleaved timing, figures and ratios."""

from __future__ import annotations

import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from walqueue import Queue

from .backends import FloorLog, PreallocatedFloorLog, SqliteQueue

WORKER = "worker-1"
NOW = 1_000
LEASE_SECONDS = 600
FILL_BATCH = 1_000

# -- inputs --------------------------------------------------------------------------


def payload(i: int) -> dict[str, Any]:
    """A realistic payload of about 110 bytes of canonical JSON."""
    return {
        "body": f"Your order #{i:08d} has shipped.",
        "kind": "email",
        "priority": i % 3,
        "to": f"customer{i:08d}@example.com",
    }


PAYLOAD_BYTES = len(json.dumps(payload(12_345_678), sort_keys=True, separators=(",", ":")).encode())


def task_id(prefix: str, i: int) -> str:
    return f"{prefix}-{i:09d}"


def puts(prefix: str, start: int, count: int) -> list[tuple[str, dict[str, Any]]]:
    return [(task_id(prefix, i), payload(i)) for i in range(start, start + count)]


def put_items(prefix: str, start: int, count: int) -> list[dict[str, Any]]:
    return [{"task_id": task_id(prefix, i), "payload": payload(i)} for i in range(start, start + count)]


# -- backends -------------------------------------------------------------------------


def open_backend(kind: str, directory: Path, *, durable: bool, compact_bytes: Any = "default") -> Any:
    directory.mkdir(parents=True, exist_ok=True)
    if kind == "walqueue":
        if compact_bytes == "default":
            return Queue(directory, sync=durable)
        return Queue(directory, sync=durable, compact_bytes=compact_bytes)
    if kind == "sqlite":
        return SqliteQueue(directory / "queue.sqlite", durable=durable)
    if kind == "floor":
        return FloorLog(directory / "floor.log", durable=durable)
    if kind == "prealloc":
        return PreallocatedFloorLog(directory / "prealloc.log", durable=durable)
    raise ValueError(kind)


def fill(backend: Any, prefix: str, count: int, start: int = 0) -> None:
    for first in range(start, start + count, FILL_BATCH):
        backend.put_many(put_items(prefix, first, min(FILL_BATCH, start + count - first)))


# -- timing ------------------------------------------------------------------------------

#: A chunk runs repetition `rep` of one backend and returns (wall seconds, CPU seconds).
Chunk = Callable[[int], tuple[float, float]]
Clock = tuple[float, float]


def clock() -> Clock:
    return time.perf_counter(), time.process_time()


def since(start: Clock) -> Clock:
    return time.perf_counter() - start[0], time.process_time() - start[1]


class Times:
    """Seconds per chunk, per backend, on both clocks."""

    def __init__(self, names: list[str]) -> None:
        self.wall: dict[str, list[float]] = {name: [] for name in names}
        self.cpu: dict[str, list[float]] = {name: [] for name in names}

    def on(self, which: str) -> dict[str, list[float]]:
        return self.wall if which == "wall" else self.cpu


def interleave(chunks: dict[str, Chunk], reps: int) -> Times:
    """Run each named chunk once per repetition, rotating the order (A B C, B C A, C A B, ...)."""
    names = list(chunks)
    times = Times(names)
    for rep in range(reps):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            gc.collect()
            wall, cpu = chunks[name](rep)
            times.wall[name].append(wall)
            times.cpu[name].append(cpu)
    return times


def summary(samples: list[float]) -> dict[str, Any]:
    median = statistics.median(samples)
    low, high = min(samples), max(samples)
    return {
        "median": median,
        "min": low,
        "max": high,
        "spread_pct": 100.0 * (high - low) / median if median else 0.0,
        "samples": samples,
    }


def figure(
    samples: list[float],
    unit: str,
    *,
    target: tuple[str, float] | None = None,
    better: str = "higher",
    note: str = "",
) -> dict[str, Any]:
    result = summary(samples)
    result["unit"] = unit
    result["better"] = better
    result["note"] = note
    if target is not None:
        op, bound = target
        value = result["median"]
        result["target"] = f"{op} {fmt_value(bound, unit)}"
        result["met"] = value >= bound if op == ">=" else value <= bound
    else:
        result["target"] = None
        result["met"] = None
    return result


def per_op(times: Times, ops: int, which: str) -> dict[str, list[float]]:
    """Seconds per operation on clock `which` ("wall" or "cpu")."""
    return {name: [t / ops for t in values] for name, values in times.on(which).items()}


def speed_ratio(per: dict[str, list[float]], mine: str, other: str) -> list[float]:
    """Per repetition: how many times faster `mine` is than `other` (their time / my time)."""
    return [b / a for a, b in zip(per[mine], per[other], strict=True)]


def time_ratio(per: dict[str, list[float]], mine: str, other: str) -> list[float]:
    """Per repetition: my time / their time (lower is better)."""
    return [a / b for a, b in zip(per[mine], per[other], strict=True)]


def backends_block(times: Times, ops: int, primary: str, unit: str = "s/op") -> dict[str, Any]:
    """Per backend: the primary clock's figure, with the other clock's summary under `other_clock`."""
    other = "cpu" if primary == "wall" else "wall"
    main, second = per_op(times, ops, primary), per_op(times, ops, other)
    block = {}
    for name, values in main.items():
        fig = figure(values, unit, better="lower")
        fig["clock"] = primary
        fig["other_clock"] = dict(summary(second[name]), clock=other)
        block[name] = fig
    return block


class Context:
    def __init__(self, root: Path, scale: dict[str, int], verbose: bool) -> None:
        self.root = root
        self.scale = scale
        self.verbose = verbose
        self._n = 0

    def dir(self, label: str) -> Path:
        self._n += 1
        path = self.root / f"{self._n:02d}-{label}"
        path.mkdir(parents=True)
        return path

    def log(self, text: str) -> None:
        if self.verbose:
            print(f"  .. {text}", file=sys.stderr, flush=True)


BACKENDS = ("walqueue", "sqlite", "floor")
#: The durable single-call workloads (a, b) also time the preallocated floor (pwrite + fdatasync per frame).
DURABLE_BACKENDS = (*BACKENDS, "prealloc")


def warm_puts(backend: Any, prefix: str, count: int = 5) -> None:
    for tid, body in puts(prefix, 0, count):
        backend.put(tid, body)


def put_chunk(backend: Any, inputs: list[list[tuple[str, dict[str, Any]]]]) -> Chunk:
    """A timed chunk of single puts: repetition `rep` puts `inputs[rep]`, one call each."""

    def run(rep: int) -> Clock:
        put = backend.put
        items = inputs[rep]
        start = clock()
        for tid, body in items:
            put(tid, body)
        return since(start)

    return run


def cycle_chunk(backend: Any, k: int) -> Chunk:
    def run(rep: int) -> Clock:
        reserve = backend.reserve
        ack = backend.ack
        start = clock()
        for _ in range(k):
            lease = reserve(WORKER, now=NOW, lease_seconds=LEASE_SECONDS)[0]
            ack(lease, now=NOW)
        return since(start)

    return run


def warm_cycles(backend: Any, count: int = 5) -> None:
    for _ in range(count):
        backend.ack(backend.reserve(WORKER, now=NOW, lease_seconds=LEASE_SECONDS)[0], now=NOW)


def fmt_value(value: float, unit: str) -> str:
    if unit.startswith("s/"):
        if value >= 1:
            return f"{value:.3f} s"
        if value >= 1e-3:
            return f"{value * 1e3:.3f} ms"
        return f"{value * 1e6:.1f} us"
    if unit in ("x", "x time"):
        return f"{value:.2f}x"
    if unit == "share":
        return f"{100 * value:.1f}%"
    if unit == "fsyncs/op":
        return f"{value:.2f} fsyncs/op"
    if unit == "compactions":
        return f"{value:.0f} compactions"
    if unit in ("tx/s", "tasks/s"):
        return f"{value:,.0f} {unit}"
    if unit == "bytes":
        return f"{value:,.0f} B"
    return f"{value:g} {unit}"


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend, or None: a tool-only dependency, imported only to plot."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def run_forked(target: Callable[..., None], args: tuple[Any, ...], processes: int, per_process: int) -> list[Any]:
    """What each of `processes` forked processes put on their results queue, once all have exited cleanly.

    Process n runs ``target(*args, f"p{n}", per_process, barrier, results)``:
    it waits at the barrier (so all start together), does its share and puts
    one item (its timings) on `results`. A process that dies, or a run past
    ten minutes, kills the others and raises `RuntimeError`.
    """
    import multiprocessing
    import queue as queue_module

    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(processes), context.Queue()
    workers = [
        context.Process(target=target, args=(*args, f"p{n}", per_process, barrier, results)) for n in range(processes)
    ]
    for worker in workers:
        worker.start()
    items: list[Any] = []
    give_up = time.monotonic() + 600
    while len(items) < processes:
        try:
            items.append(results.get(timeout=1))
        except queue_module.Empty:
            failed = [w.exitcode for w in workers if w.exitcode not in (None, 0)]
            if failed or time.monotonic() > give_up:
                for worker in workers:
                    worker.kill()
                raise RuntimeError(f"forked processes failed (exit codes {failed})") from None
    for worker in workers:
        worker.join(60)
        if worker.exitcode != 0:
            raise RuntimeError(f"a forked process exited {worker.exitcode}")
    return items
