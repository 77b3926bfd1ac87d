"""Timing: both clocks, timed chunks, and running them interleaved so that drift hits every backend alike."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

from .inputs import LEASE_SECONDS, NOW, WORKER

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
