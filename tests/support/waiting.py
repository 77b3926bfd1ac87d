"""`wait_until`: poll a condition another thread or process makes true, with a deadline (never a bare sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["wait_until"]


def wait_until(predicate: Callable[[], object], seconds: float = 30.0, what: str = "condition") -> None:
    """Return once `predicate()` is true; `AssertionError` naming `what` after `seconds` (only a defect waits)."""
    give_up = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < give_up, f"timed out waiting for {what}"
        time.sleep(0.01)
