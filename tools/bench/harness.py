"""What every workload starts from: its stores' directories, the backends opened, filled and warmed, forked processes.

It also hands on, for the workloads' imports, the inputs (`inputs`), the
timing (`timing`) and the figures (`figures`); the store directories come
from tools/harness.py, shared with the torture harness.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from harness import Dirs

from walqueue import Queue

from .backends import FloorLog, PreallocatedFloorLog, SqliteQueue
from .figures import backends_block, figure, fmt_value, per_op, pyplot, speed_ratio, summary, time_ratio
from .inputs import FILL_BATCH, LEASE_SECONDS, NOW, PAYLOAD_BYTES, WORKER, payload, put_items, puts, task_id
from .timing import Chunk, Clock, Times, clock, cycle_chunk, interleave, put_chunk, since

__all__ = [
    "BACKENDS",
    "DURABLE_BACKENDS",
    "FILL_BATCH",
    "LEASE_SECONDS",
    "NOW",
    "PAYLOAD_BYTES",
    "WORKER",
    "Chunk",
    "Clock",
    "Context",
    "Times",
    "backends_block",
    "clock",
    "cycle_chunk",
    "figure",
    "fill",
    "fmt_value",
    "interleave",
    "open_backend",
    "opened",
    "payload",
    "per_op",
    "put_chunk",
    "put_items",
    "puts",
    "pyplot",
    "run_forked",
    "since",
    "speed_ratio",
    "summary",
    "task_id",
    "time_ratio",
    "warm_cycles",
    "warm_puts",
]


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


class Context:
    """A run's root directory, the workload's sizes (`scale`), and whether to say what it does."""

    def __init__(self, root: Path, scale: dict[str, int], verbose: bool) -> None:
        self.root = root
        self.scale = scale
        self.verbose = verbose
        self._dirs = Dirs(root)

    def dir(self, label: str) -> Path:
        """A new, empty store directory named ``NN-LABEL``."""
        return self._dirs.new(label=label)

    def log(self, text: str) -> None:
        if self.verbose:
            print(f"  .. {text}", file=sys.stderr, flush=True)


BACKENDS = ("walqueue", "sqlite", "floor")
#: The durable single-call workloads (a, b) also time the preallocated floor (pwrite + fdatasync per frame).
DURABLE_BACKENDS = (*BACKENDS, "prealloc")


@contextlib.contextmanager
def opened(ctx: Context, prefix: str, names: tuple[str, ...], *, durable: bool) -> Iterator[dict[str, Any]]:
    """Each named backend opened in a directory of its own (``PREFIX-NAME``), by name; all closed afterwards."""
    backends = {name: open_backend(name, ctx.dir(f"{prefix}-{name}"), durable=durable) for name in names}
    try:
        yield backends
    finally:
        for backend in backends.values():
            backend.close()


def warm_puts(backend: Any, prefix: str, count: int = 5) -> None:
    for tid, body in puts(prefix, 0, count):
        backend.put(tid, body)


def warm_cycles(backend: Any, count: int = 5) -> None:
    for _ in range(count):
        backend.ack(backend.reserve(WORKER, now=NOW, lease_seconds=LEASE_SECONDS)[0], now=NOW)


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
