"""The size of a transaction body around its ops: what a planner measures before it splits or cuts a plan.

Kept apart from ops.py (which imports these under its former private names)
so that the planners stay within the house's module size.
"""

from __future__ import annotations

from collections.abc import Iterable

from walqueue.engine.optable import INT_JSON_MAX

__all__ = ["fixed_size", "surely_fits", "transaction_size"]

#: What a transaction body ``{"ops":[...],"seq":S}`` costs besides its ops, their commas and S's digits.
TX_FIXED = len(b'{"ops":[],"seq":}')
#: The same, whatever its sequence.
FIXED_WORST = TX_FIXED + INT_JSON_MAX


def transaction_size(op_sizes: Iterable[int], seq: int) -> int:
    """The exact size of the body ``{"ops":[op,...],"seq":S}`` whose ops encode to `op_sizes` bytes."""
    count = total = 0
    for size in op_sizes:
        total += size
        count += 1
    return fixed_size(seq) + total + max(count - 1, 0)


def fixed_size(seq: int) -> int:
    """What a transaction body costs before its ops (and the commas between them)."""
    return TX_FIXED + len(str(seq))


def surely_fits(count: int, op_max: int | None, max_frame_bytes: int) -> bool:
    """Whether `count` ops of at most `op_max` bytes surely fit in one frame, whatever the sequence."""
    return op_max is not None and FIXED_WORST + count * (op_max + 1) <= max_frame_bytes
