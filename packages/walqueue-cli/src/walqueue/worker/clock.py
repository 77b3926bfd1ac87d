"""The worker's one clock: a callable returning an int, and how many of its units make a second.

The engine never reads a clock; every `now`, deadline and delay it is given
comes from the caller. The worker is that caller, so it reads exactly one
clock, passed in explicitly, and uses its unit for everything it hands the
engine: the lease length, heartbeats, retry delays, timeouts, the grace
period and the periodic firing times. Producers must use the same unit for
`available_at`, or their tasks come due a thousand times too early or late.

The clock's readings are only ever compared with each other and with the
engine's stored times; the real waits (a thread blocking until the next
heartbeat, say) convert units to seconds with `units_per_second`, which is
the only other fact the worker needs about the clock.

A store records its unit once (walqueue.engine.clockunit); every tool that
reads a clock for a store (the worker and its scheduler, the shell's
redrive, the dashboard, /metrics) goes through `agree_on_unit` or
`store_units`, so a mismatch is refused with a message, never shown as a date.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from walqueue.engine.clockunit import ClockMismatch, describe_unit, store_unit
from walqueue.protocol.storeclock import now_in, store_units

__all__ = [
    "MILLISECONDS",
    "Clock",
    "ClockMismatch",
    "agree_on_unit",
    "milliseconds",
    "now_in",
    "seconds_until",
    "store_units",
]

#: A clock: a callable with no arguments returning the current time as an int.
Clock = Callable[[], int]

#: `units_per_second` of the default clock.
MILLISECONDS = 1000


def milliseconds() -> int:
    """The default clock: wall-clock milliseconds since the Unix epoch (an int).

    Wall clock rather than monotonic because its readings are stored
    (`available_at`, deadlines) and compared by other processes and hosts,
    and by the same host after a reboot; a monotonic clock means nothing
    outside the process that read it.
    """
    return time.time_ns() // 1_000_000


def seconds_until(due: int, now: int, units_per_second: int) -> float:
    """Real seconds from `now` until `due` (both in clock units); never negative."""
    return max(0, due - now) / units_per_second


def agree_on_unit(source: Any, units_per_second: int, *, record: bool) -> None:
    """Check a tool's clock unit against its store's: `ClockMismatch` naming both if they differ.

    `record`: a store that recorded none gets this unit recorded (the
    worker does, being the writer of times); otherwise it is read in the
    default, which must then be this unit.
    """
    stats = dict(source.stats())
    recorded = stats.get("clock")
    if recorded is None and record and "clock" in stats:
        source.set_clock(units_per_second)
        return
    if store_unit(recorded) != units_per_second:
        whose = "records" if recorded is not None else "has recorded none, so it is read in"
        raise ClockMismatch(
            f"the store {whose} {describe_unit(store_unit(recorded))}, but this clock counts"
            f" {describe_unit(units_per_second)}; use a clock in the store's unit"
        )
