"""`WorkerSettings`: every option of a `Worker` in one checked value, and the keywords that map onto it.

Why one object: the roles (fetch, execute, complete, keep alive,
lifecycle) each read a few options, and a `Worker` used to take them as 17
keyword arguments checked in its constructor. One frozen value, checked
once where it is made, is what each role is given; `Worker(source, handler,
concurrency=8)` still works, as ``settings=WorkerSettings(concurrency=8)``
(the keywords are `WorkerOptions`, a `TypedDict` of the same fields, so
mypy checks them too). Every time is in the units of `clock`.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

from walqueue.engine.validate import check_queues_filter
from walqueue.worker.clock import MILLISECONDS, Clock, milliseconds
from walqueue.worker.retry import RetryPolicy
from walqueue.worker.source import Grouping

if TYPE_CHECKING:  # annotations only: a worker without a schedule never imports the scheduler (tomllib, cron)
    from walqueue.worker.schedule import Periodic

__all__ = [
    "DEFAULT_GRACE",
    "DEFAULT_HEARTBEAT",
    "DEFAULT_IDLE_WAIT",
    "DEFAULT_LEASE",
    "Grouping",
    "WorkerOptions",
    "WorkerSettings",
]

#: Defaults in milliseconds (the default clock's unit); docs/DECISIONS.md says why.
DEFAULT_LEASE = 30_000
DEFAULT_GRACE = 20_000
DEFAULT_IDLE_WAIT = 5_000
DEFAULT_HEARTBEAT = 1 / 3


def _default_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True, kw_only=True)
class WorkerSettings:
    """A worker's options, checked when made (`ValueError`/`TypeError` naming the option); see `Worker`.

    `prefetch=None` adapts (see `Worker`); `grouping=None` takes the
    source's own declaration (`source.grouping`); `name=None` is
    ``host:pid``; `queues=None` leases from every queue.
    """

    concurrency: int = 1
    prefetch: int | None = None
    lease: int = DEFAULT_LEASE
    timeout: int | None = None
    grace: int = DEFAULT_GRACE
    heartbeat: float = DEFAULT_HEARTBEAT
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    schedule: tuple[Periodic, ...] = ()
    clock: Clock = milliseconds
    units_per_second: int = MILLISECONDS
    idle_wait: int = DEFAULT_IDLE_WAIT
    name: str = field(default_factory=_default_name)
    hard_timeout: bool = False
    summary_every: float | None = None
    queues: tuple[str, ...] | None = None
    grouping: Grouping | None = None

    def __post_init__(self) -> None:
        for what, value, low in (
            ("concurrency", self.concurrency, 1),
            ("lease", self.lease, 1),
            ("grace", self.grace, 0),
            ("idle_wait", self.idle_wait, 1),
            ("units_per_second", self.units_per_second, 1),
        ):
            if type(value) is not int or value < low:
                raise ValueError(f"{what} must be an int >= {low}, not {value!r}")
        if self.prefetch is not None and (type(self.prefetch) is not int or self.prefetch < 0):
            raise ValueError(f"prefetch must be an int >= 0, not {self.prefetch!r}")
        if self.timeout is not None and (type(self.timeout) is not int or self.timeout < 1):
            raise ValueError(f"timeout must be None or an int >= 1 (clock units), not {self.timeout!r}")
        if not 0 < self.heartbeat < 1:
            raise ValueError(f"heartbeat is a fraction of the lease, between 0 and 1 exclusive, not {self.heartbeat!r}")
        if self.grouping not in (None, "pipeline", "batch", "none"):
            raise ValueError(f"grouping is 'pipeline', 'batch', 'none' or None, not {self.grouping!r}")
        # Any iterable is taken where a tuple is declared (the old keywords took lists); kept as a tuple.
        object.__setattr__(self, "schedule", tuple(self.schedule))
        if self.queues is not None:  # checked as `Queue.reserve` checks them
            object.__setattr__(self, "queues", tuple(check_queues_filter(list(self.queues)) or ()))

    @property
    def beat_every(self) -> int:
        """Clock units between two heartbeats of a running task: the `heartbeat` fraction of the lease."""
        return max(1, int(self.lease * self.heartbeat))

    def replace(self, **options: object) -> WorkerSettings:
        """These settings with `options` changed (checked again); `TypeError` naming an unknown option."""
        unknown = sorted(set(options) - {each.name for each in dataclasses.fields(self)})
        if unknown:
            raise TypeError(f"Worker() got unexpected keyword argument(s): {', '.join(unknown)}")
        return dataclasses.replace(self, **options)  # type: ignore[arg-type]


class WorkerOptions(TypedDict, total=False):
    """`WorkerSettings`' fields as `Worker(...)`'s keywords (iterables where the settings keep tuples)."""

    concurrency: int
    prefetch: int | None
    lease: int
    timeout: int | None
    grace: int
    heartbeat: float
    retry: RetryPolicy | None
    schedule: Iterable[Periodic]
    clock: Clock
    units_per_second: int
    idle_wait: int
    name: str | None
    hard_timeout: bool
    summary_every: float | None
    queues: Iterable[str] | None
    grouping: Grouping | None
