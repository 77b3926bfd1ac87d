"""A worker's parts without its threads: a Settler and a Monitor on a real queue, driven by a fake clock."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from walqueue import Queue
from walqueue.worker import RetryPolicy
from walqueue.worker.monitor import Monitor
from walqueue.worker.report import Report
from walqueue.worker.running import Run, Settler

TIMEOUT_ERROR = {"type": "Timeout", "message": "the handler ran longer than its timeout"}


class FakeClock:
    """A clock that moves only when told: ``clock()`` reads it, ``clock.advance(n)`` moves it."""

    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, units: int) -> int:
        self.now += units
        return self.now


@dataclass
class Rig:
    queue: Queue
    clock: FakeClock
    lease: int = 3_000
    timeout: int | None = None
    seed: int = 1
    timed_out: list[Run] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.report = Report("worker-1")
        self.settler = Settler(self.queue, self.clock, RetryPolicy(rng=random.Random(self.seed)), self.report)
        self.monitor = Monitor(
            self.settler,
            lease=self.lease,
            beat_every=self.lease // 3,
            on_timeout=self.timed_out.append,
            timeout_error=lambda run: TIMEOUT_ERROR,
        )

    def start(self, limit: int = 1) -> list[Run]:
        """Reserve up to `limit` tasks now and register their runs, as the worker's fetcher does."""
        now = self.clock()
        runs = []
        for lease in self.queue.reserve("worker-1", now=now, lease_seconds=self.lease, limit=limit):
            run = Run.start(lease, self.clock, now, self.lease // 3, self.timeout)
            self.monitor.add(run)
            runs.append(run)
        return runs

    def counts(self) -> dict[str, int]:
        stats = self.report.snapshot(len(self.monitor))
        return {name: stats[name] for name in ("completed", "retried", "dead", "lost", "timed_out", "interrupted")}
