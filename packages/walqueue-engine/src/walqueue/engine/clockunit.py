"""The store's clock unit: recorded once by a "clock" op, read by every tool that reads a clock for the store.

The engine never reads a clock: every time it stores (`available_at`, a
deadline, an error's `at`) is a number in the caller's unit. Tools that
read a clock for a store (the worker, its scheduler, the shell's redrive,
the dashboard, /metrics) must agree on that unit, or a lease deadline in
milliseconds is shown as a date in the year 58899. So the unit is recorded
in the store, once (`Queue.set_clock`), and each of them checks its own
against it. A store that never recorded one is read in `DEFAULT_UNITS_PER_SECOND`
(docs/DECISIONS.md §38: what the worker has always written).
"""

from __future__ import annotations

from typing import Final

from walqueue.engine.ops import Plan
from walqueue.engine.state import OP_KINDS, State
from walqueue.engine.types import WalQueueError
from walqueue.engine.validate import check_int

__all__ = ["DEFAULT_UNITS_PER_SECOND", "ClockMismatch", "describe_unit", "plan_clock", "store_unit"]

#: The unit a store without a "clock" op is read in: milliseconds, the worker's default clock.
DEFAULT_UNITS_PER_SECOND: Final = 1000

_CLOCK = OP_KINDS["clock"]
_NAMES: Final = {1: "seconds", 1000: "milliseconds", 1_000_000: "microseconds", 1_000_000_000: "nanoseconds"}


class ClockMismatch(WalQueueError, ValueError):
    """A tool's clock unit differs from the one its store recorded; nothing was written."""


def describe_unit(units_per_second: int) -> str:
    """``milliseconds (1000 per second)``: a unit as a message names it."""
    name = _NAMES.get(units_per_second, "units")
    return f"{name} ({units_per_second} per second)"


def store_unit(recorded: int | None) -> int:
    """The unit a store's times are in: the recorded one, else `DEFAULT_UNITS_PER_SECOND`."""
    return DEFAULT_UNITS_PER_SECOND if recorded is None else recorded


def plan_clock(state: State, units_per_second: int) -> Plan | None:
    """The "clock" op recording `units_per_second`; None when the store already records that unit.

    `ClockMismatch` (a `ValueError`) when it records another: a store has one unit for good.
    """
    check_int(units_per_second, "units_per_second", 1)
    if state.clock == units_per_second:
        return None
    if state.clock is not None:
        raise ClockMismatch(
            f"the store's clock unit is {describe_unit(state.clock)}, not {describe_unit(units_per_second)};"
            " read its clock in its unit (a store's unit is recorded once, for good)"
        )
    op = {"op": "clock", "units_per_second": units_per_second}
    return Plan([op], [_CLOCK.encode(op)])
