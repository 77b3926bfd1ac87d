"""The wall clock in a store's unit: what the tools that read a clock for a store share.

The engine never reads a clock, and a store records its unit once
(walqueue.engine.clockunit). The worker, the shell's redrive and any other
tool that needs "now" for a store asks the store for its unit
(`store_units`, through `stats()` on a `Queue` or a client) and reads the
wall clock in that unit (`now_in`), so no tool assumes seconds where the
store keeps milliseconds. It sits in the protocol layer because both the
worker and the shell use it and neither may import the other.
"""

from __future__ import annotations

import time
from typing import Any

from walqueue.engine.clockunit import store_unit

__all__ = ["now_in", "store_units"]


def now_in(units_per_second: int) -> int:
    """Wall-clock time since the epoch in `units_per_second` (a store's unit), as an int."""
    return time.time_ns() * units_per_second // 1_000_000_000


def store_units(source: Any) -> int:
    """The unit `source`'s store keeps its times in: the recorded one, else the documented default.

    A server that predates recorded units answers a `stats()` without
    ``clock``: its store is read in the default, as one that recorded none.
    """
    return store_unit(dict(source.stats()).get("clock"))
