"""A client's put time: the wall clock in the store's unit, stamped on a put that names none (DECISIONS §46).

The engine reads no clock, so a task's age can start only at a time its
producer gives (``put_at``). Both clients stamp their typed `put` and
`put_many` with it, read in the unit the store records (`stats()["clock"]`,
asked once and kept: a recorded unit never changes). A store that records
no unit keeps times in whatever unit its callers chose (a test's counter,
say), so nothing is stamped there; while it records none the question is
asked again at most every `RECHECK_SECONDS`. A put that names ``put_at``
(0: no time) is sent as it is. Sans I/O: the clients ask, this decides.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any, Final

from walqueue.protocol.storeclock import now_in

__all__ = ["RECHECK_SECONDS", "PutClock"]

#: How often a client asks again whether a store that recorded no unit has recorded one.
RECHECK_SECONDS: Final = 10.0


class PutClock:
    """What one client knows of its store's unit, and the stamping of its puts."""

    __slots__ = ("units", "asked_at")

    def __init__(self) -> None:
        #: The store's recorded unit (units per second), once known; None: not recorded (or not asked yet).
        self.units: int | None = None
        self.asked_at = -RECHECK_SECONDS

    def should_ask(self) -> bool:
        """Whether the client should ask the store's `stats()` before its next put."""
        return self.units is None and time.monotonic() - self.asked_at >= RECHECK_SECONDS

    def learn(self, stats: Mapping[str, Any]) -> None:
        """Keep the unit a `stats()` answer records (a server without units answers no ``clock``)."""
        self.asked_at = time.monotonic()
        recorded = stats.get("clock")
        if type(recorded) is int and recorded > 0:
            self.units = recorded

    def options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """`put`'s keyword options, with ``put_at`` now when the store records a unit and the caller gave none."""
        if self.units is None or "put_at" in options:
            return dict(options)
        return {**options, "put_at": now_in(self.units)}

    def items(self, tasks: Iterable[Any]) -> Iterable[Any]:
        """`put_many`'s items, each mapping without ``put_at`` given one (anything else is left for the check)."""
        if self.units is None or isinstance(tasks, (str, bytes, Mapping)) or not isinstance(tasks, Iterable):
            return tasks
        now = now_in(self.units)
        return [
            {**item, "put_at": now} if isinstance(item, Mapping) and "put_at" not in item else item for item in tasks
        ]
