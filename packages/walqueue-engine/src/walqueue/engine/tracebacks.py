"""A last error's traceback: the "traceback" op (a format extension) a planner adds after its error op.

Why a kind of its own and not a field of the error op: an op's keys are
exact, so a new field would make every error op of an older store a
different shape; a new kind leaves the error op byte for byte as it was and
is refused by its name by an older reader. Why cut and not refused: a
traceback describes a failure that already happened, and recording the
failure must never fail; so it is cut to `TRACEBACK_BYTES` (its end kept,
where the exception is) and, for a task whose payload leaves no room beside
it (within a few KiB of the frame bound), left out.
"""

from __future__ import annotations

from walqueue.engine.optable import Op
from walqueue.engine.records import check_error_fits
from walqueue.engine.rows import TASK_ID, ErrorFields, Row
from walqueue.engine.state import OP_KINDS
from walqueue.engine.validate import TRACEBACK_BYTES, cut_text_tail

__all__ = ["traceback_op"]

_TRACEBACK = OP_KINDS["traceback"]


def traceback_op(record: Row, last_error: ErrorFields, text: str) -> tuple[Op, bytes] | tuple[()]:
    """The traceback op (and its JSON) for `record` once its last error is `last_error`; ``()`` if it cannot fit."""
    text = cut_text_tail(text, TRACEBACK_BYTES)
    try:
        check_error_fits(record, last_error, text)
    except ValueError:
        return ()
    op: Op = {"op": "traceback", "task": record[TASK_ID], "text": text}
    return op, _TRACEBACK.encode(op)
