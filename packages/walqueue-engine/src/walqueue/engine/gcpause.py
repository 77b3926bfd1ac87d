"""Pausing the cyclic garbage collector while a state is built.

Opening a store allocates several tracked objects per task (records, heap
entries, decoded frames) and frees none of the records, so every collection
it triggers walks the growing state again for nothing; the garbage it does
make (decoded frames) holds no cycle and is freed by reference counting.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["paused_gc"]


@contextmanager
def paused_gc() -> Iterator[None]:
    """Disable `gc` for the block, and re-enable it afterwards (whatever happens) if it was enabled.

    The pause is process-wide: another thread's allocations go uncollected
    meanwhile, and a thread that toggles `gc` during the block may find it
    enabled again afterwards (docs/DECISIONS.md).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
