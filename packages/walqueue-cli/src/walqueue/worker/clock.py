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
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["MILLISECONDS", "Clock", "milliseconds", "seconds_until"]

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
