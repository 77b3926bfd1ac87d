"""group_commit_threads (alias h): threads sharing one Queue (group commit), against SQLite and a locked floor."""

from __future__ import annotations

import gc
import os
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any

from .backends import FloorLog
from .figures import figure, pyplot, speed_ratio, wall_block
from .harness import Context, fill, open_backend, warm_cycles, warm_puts
from .inputs import LEASE_SECONDS, NOW, puts
from .server_processes import SQLITE_BUSY_MS, open_for_processes

#: Sizes at each scale (with the run's `reps` unless set here): `ctx.scale` during the run.
SCALES: dict[str, dict[str, int]] = {
    "tiny": {"ops": 32, "reps": 1},
    "default": {"ops": 480, "reps": 5},
    "big": {"ops": 1920, "reps": 5},
}


#
# Durable puts, then reserve+ack cycles, from 1, 2, 4, 8 and 16 threads of this process: for
# walqueue all of them share ONE `Queue(sync=True)` (group commit lets one fsync cover the
# frames that several threads wrote while the previous fsync ran); for SQLite each thread has
# its own connection to one database file (WAL, synchronous=FULL, busy_timeout, as in server_processes);
# the floor is one `FloorLog` whose every commit (append + fsync) runs under one lock, so
# however many threads call it, it is one writer paying one fsync per operation: what a WAL
# queue without group commit can do at best. Every configuration does the same total number
# of operations per phase, split evenly over its threads; a phase's time runs from the first
# thread's start (after a barrier) to the last one's end. Configurations rotate in each
# repetition, as elsewhere.

THREADS = (1, 2, 4, 8, 16)
THREAD_BACKENDS = ("walqueue", "sqlite", "floor", "prealloc")


class _LockedFloor:
    """The floor shared by threads: each commit (append + fsync) under one lock, one after the other."""

    def __init__(self, floor: FloorLog, lock: threading.Lock) -> None:
        self._floor = floor
        self._lock = lock

    def put(self, task_id: str, body: dict[str, Any]) -> str:
        with self._lock:
            return self._floor.put(task_id, body)

    def reserve(self, worker: str, *, now: int, lease_seconds: int, limit: int = 1) -> list[Any]:
        with self._lock:
            return self._floor.reserve(worker, now=now, lease_seconds=lease_seconds, limit=limit)

    def ack(self, lease: Any, *, now: int) -> None:
        with self._lock:
            self._floor.ack(lease, now=now)


#: The syncs counted: the queue's WAL and the preallocated floor use `fdatasync`, the append floor `fsync`.
_SYNC_CALLS = ("fsync", "fdatasync")


class _FsyncCounter:
    """Counts `os.fsync`/`os.fdatasync` calls made from Python while installed (the queue's and the floors' syncs).

    SQLite syncs in C and is not counted. Installed only around group_commit_threads's timed
    phases; the wrapper adds a Python call and a lock to each fsync, nothing
    to the rest.
    """

    def __init__(self) -> None:
        self._real = {name: getattr(os, name) for name in _SYNC_CALLS if hasattr(os, name)}
        self._lock = threading.Lock()
        self._calls = 0

    def __enter__(self) -> _FsyncCounter:
        for name, real in self._real.items():
            setattr(os, name, self._counting(real))
        return self

    def _counting(self, real: Any) -> Any:
        lock = self._lock

        def counting_sync(fd: Any) -> None:
            with lock:
                self._calls += 1
            real(fd)

        return counting_sync

    def __exit__(self, *exc: object) -> None:
        for name, real in self._real.items():
            setattr(os, name, real)

    def take(self) -> int:
        """fsyncs since the last `take`."""
        with self._lock:
            calls, self._calls = self._calls, 0
        return calls


def _timed_phase(callers: list[Any], phase: str, prefix: str, total: int) -> tuple[float, float]:
    """Wall seconds for `total` operations of `phase` ("puts" or "cycles"), split over one thread per caller,
    and the CPU seconds the caller threads spent meanwhile (`time.thread_time`, theirs alone, summed)."""
    count = total // len(callers)
    barrier = threading.Barrier(len(callers))
    spans: list[tuple[float, float, float] | None] = [None] * len(callers)
    errors: list[BaseException] = []

    def run(index: int, caller: Any) -> None:
        items = puts(f"{prefix}t{index}", 0, count) if phase == "puts" else []
        worker = f"w-{prefix}t{index}"
        try:
            barrier.wait()
            start, cpu = time.perf_counter(), time.thread_time()
            if phase == "puts":
                put = caller.put
                for tid, body in items:
                    put(tid, body)
            else:
                reserve, ack = caller.reserve, caller.ack
                for _ in range(count):
                    ack(reserve(worker, now=NOW, lease_seconds=LEASE_SECONDS)[0], now=NOW)
            spans[index] = (start, time.perf_counter(), time.thread_time() - cpu)
        except BaseException as error:  # reported by the main thread
            errors.append(error)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(i, c), name=f"bench-h-{i}") for i, c in enumerate(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    done = [span for span in spans if span is not None]
    return max(span[1] for span in done) - min(span[0] for span in done), sum(span[2] for span in done)


@dataclass
class _Measured:
    """Seconds per operation, fsyncs per operation and CPU share, per phase and configuration."""

    puts_per: dict[str, list[float]]
    cycles_per: dict[str, list[float]]
    fsyncs: dict[str, dict[str, list[float]]]
    cpu_share: dict[str, dict[str, list[float]]]


def _open_configurations(ctx: Context, fill_count: int, closers: list[Any]) -> dict[str, list[Any]]:
    """Per configuration ("walqueue_8", ...), what each of its threads calls; every store filled and warm."""
    callers: dict[str, list[Any]] = {}
    for n in THREADS:
        queue = open_backend("walqueue", ctx.dir(f"h-walqueue-{n}"), durable=True)
        closers.append(queue)
        callers[f"walqueue_{n}"] = [queue] * n
        path = str(ctx.dir(f"h-sqlite-{n}") / "queue.sqlite")
        connections = [open_for_processes("sqlite", path) for _ in range(n)]
        closers.extend(connections)
        callers[f"sqlite_{n}"] = connections
        for kind in ("floor", "prealloc"):
            floor = open_backend(kind, ctx.dir(f"h-{kind}-{n}"), durable=True)
            closers.append(floor)
            callers[f"{kind}_{n}"] = [_LockedFloor(floor, threading.Lock())] * n
    for name in [f"{backend}_{n}" for n in THREADS for backend in THREAD_BACKENDS]:
        first = callers[name][0]
        target = first._floor if isinstance(first, _LockedFloor) else first
        fill(target, "hfill", fill_count)  # every cycle of every repetition finds a ready task
        warm_puts(target, "warm")
        warm_cycles(target)
    ctx.log(f"group_commit_threads: {len(callers)} stores filled with {fill_count} tasks each")
    return callers


def _measure(ctx: Context, callers: dict[str, list[Any]], total: int, reps: int) -> _Measured:
    """Both phases of every configuration once per repetition, the order rotating."""
    names = [f"{backend}_{n}" for n in THREADS for backend in THREAD_BACKENDS]
    measured = _Measured(
        {name: [] for name in names},
        {name: [] for name in names},
        {"puts": {}, "cycles": {}},
        {"puts": {}, "cycles": {}},
    )
    with _FsyncCounter() as counter:
        for rep in range(reps):
            shift = rep % len(names)
            for name in names[shift:] + names[:shift]:
                for phase, per in (("puts", measured.puts_per), ("cycles", measured.cycles_per)):
                    gc.collect()
                    counter.take()
                    seconds, cpu = _timed_phase(callers[name], phase, f"r{rep}", total)
                    synced = counter.take()
                    per[name].append(seconds / total)
                    measured.cpu_share[phase].setdefault(name, []).append(cpu / seconds)
                    if not name.startswith("sqlite"):
                        measured.fsyncs[phase].setdefault(name, []).append(synced / total)
                ctx.log(
                    f"group_commit_threads: rep {rep} {name}: {1 / measured.puts_per[name][-1]:,.0f} puts/s,"
                    f" {1 / measured.cycles_per[name][-1]:,.0f} cycles/s"
                )
    return measured


def _ratios(measured: _Measured) -> dict[str, Any]:
    ratios: dict[str, Any] = {}
    for label, per in (("puts", measured.puts_per), ("cycles", measured.cycles_per)):
        ratios[f"{label}_walqueue8_vs_walqueue1"] = figure(
            speed_ratio(per, "walqueue_8", "walqueue_1"), "x", target=(">=", 4.0)
        )
        ratios[f"{label}_walqueue8_vs_sqlite8"] = figure(
            speed_ratio(per, "walqueue_8", "sqlite_8"), "x", target=(">=", 4.0)
        )
        ratios[f"{label}_walqueue8_vs_floor8"] = figure(
            speed_ratio(per, "walqueue_8", "floor_8"),
            "x",
            note="information: against one writer paying one fsync per operation",
        )
        ratios[f"{label}_walqueue8_vs_prealloc8"] = figure(
            speed_ratio(per, "walqueue_8", "prealloc_8"),
            "x",
            note="information: against one writer paying one pwrite + fdatasync per operation in preallocated room",
        )
        ratios[f"{label}_walqueue1_fsyncs_per_op"] = figure(
            measured.fsyncs[label]["walqueue_1"],
            "fsyncs/op",
            better="lower",
            note="information: os.fsync/os.fdatasync calls per operation with one thread"
            + (" (a cycle commits twice)" if label == "cycles" else ""),
        )
        ratios[f"{label}_walqueue8_fsyncs_per_op"] = figure(
            measured.fsyncs[label]["walqueue_8"],
            "fsyncs/op",
            better="lower",
            note="information: os.fsync calls per operation with 8 threads: how many operations one fsync covered",
        )
        for n in (1, 8):
            ratios[f"{label}_walqueue{n}_cpu_share"] = figure(
                measured.cpu_share[label][f"walqueue_{n}"],
                "share",
                better="lower",
                note=f"information: CPU time of the {n} caller thread(s), summed, over the phase's wall time"
                " (the interpreter lock lets about 100% run Python at once)",
            )
    return ratios


def run(ctx: Context) -> dict[str, Any]:
    s = ctx.scale
    total, reps = s["ops"], s["reps"]
    if total % max(THREADS):
        raise SystemExit(f"scale error: group_commit_threads ops {total} must split evenly over {max(THREADS)} threads")
    closers: list[Any] = []
    try:
        callers = _open_configurations(ctx, total * reps + 50, closers)
        measured = _measure(ctx, callers, total, reps)
    finally:
        for backend in closers:
            backend.close()
    backends = {"puts": wall_block(measured.puts_per), "cycles": wall_block(measured.cycles_per)}
    return {
        "clock": "wall",
        "title": f"group commit: {total} durable puts, then {total} reserve+ack, from 1-16 threads",
        "params": {
            "ops_per_config": total,
            "reps": reps,
            "threads": list(THREADS),
            "walqueue": "all threads share one Queue(sync=True)",
            "sqlite": f"one connection per thread, WAL, synchronous=FULL, busy_timeout={SQLITE_BUSY_MS} ms",
            "floor": "one FloorLog, each commit (append + fsync) under one lock: one fsync per operation",
            "prealloc": "one PreallocatedFloorLog, each commit (pwrite into room + fdatasync) under one lock",
            "fsyncs_per_op": {
                label: {name: statistics.median(values) for name, values in per.items()}
                for label, per in measured.fsyncs.items()
            },
            "cpu_share": {
                label: {name: statistics.median(values) for name, values in per.items()}
                for label, per in measured.cpu_share.items()
            },
        },
        "series": {"puts": measured.puts_per, "cycles": measured.cycles_per},
        "backends": backends,
        "ratios": _ratios(measured),
    }


def plot(result: dict[str, Any], path: str) -> str:
    """The throughput against the number of threads, one line per backend (needs matplotlib)."""
    plt = pyplot()
    if plt is None:
        return f"group_commit_threads plot skipped: matplotlib is not installed (pip install matplotlib) for {path}"
    threads = result["params"]["threads"]
    figure_, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    for axis, (label, title) in zip(
        axes, (("puts", "durable puts"), ("cycles", "durable reserve+ack cycles")), strict=True
    ):
        per = result["series"][label]
        for backend in THREAD_BACKENDS:
            runs = [per[f"{backend}_{n}"] for n in threads]
            rates = [1 / statistics.median(samples) for samples in runs]
            errors = [
                [r - 1 / max(samples) for r, samples in zip(rates, runs, strict=True)],
                [1 / min(samples) - r for r, samples in zip(rates, runs, strict=True)],
            ]
            axis.errorbar(threads, rates, yerr=errors, marker="o", capsize=3, label=backend)
        axis.set_xscale("log", base=2)
        axis.set_xticks(threads, [str(n) for n in threads])
        axis.set_ylim(bottom=0)
        axis.set_xlabel("threads")
        axis.set_ylabel("operations per second (median, min..max)")
        axis.set_title(title)
        axis.grid(alpha=0.3)
        axis.legend()
    figure_.suptitle("one walqueue.Queue shared by N threads vs SQLite (a connection each) vs the floor")
    figure_.tight_layout()
    figure_.savefig(path, dpi=110)
    plt.close(figure_)
    return f"group_commit_threads plot written to {path}"
