"""The envelope of a WAL transaction: `{"seq": S, "ops": [op, ...]}`.

The format layer checks only the envelope (what any reader of the log needs
to order transactions); what each op means is checked by the engine's
state machine. Both the engine's recovery and `walqueue-fsck` use this.
"""

from __future__ import annotations

from typing import Any

from walqueue.format.errors import CorruptStore

__all__ = ["OP_NAMES", "transaction_seq"]

#: The op names of the log (CONTRACT §3): every reader accepts exactly these.
#:
#: Owned here, by the format layer, which must work without the engine (for
#: `walqueue-fsck`); the engine's table of kinds (`walqueue.engine.opkinds.OP_KINDS`)
#: refuses to import unless its names are exactly these. A new kind is
#: named here and declared there.
OP_NAMES = frozenset({"put", "lease", "expire", "ack", "release", "extend", "redrive", "cancel", "fail", "error"})
# -- format extensions (docs/FORMAT.md): each a row here and in the engine's OP_KINDS --
#: "clock": the store's clock unit, recorded once (a store-level op: it names no task).
OP_NAMES |= {"clock"}
#: "traceback": the traceback of a task's last error, just after the error op it belongs to.
OP_NAMES |= {"traceback"}
#: An unstarted lease undone (docs/FORMAT.md, "give_back"); older readers refuse it by name.
OP_NAMES |= {"give_back"}
#: "result": a task's return value, stored with its ack (docs/FORMAT.md, "Results").
OP_NAMES |= {"result"}
#: "configure": a queue's settings (lanes; docs/FORMAT.md "Queue settings").
OP_NAMES |= {"configure"}


def transaction_seq(value: Any, path: str | None, offset: int) -> int:
    """Return the sequence of a decoded WAL frame, or raise `CorruptStore` if its envelope is wrong.

    Replay calls this once per frame, so the usual case is kept cheap: two
    key lookups instead of building a set of the keys, and no `enumerate`
    in the op loop, the index being looked up only for an error. An op name is looked up in `OP_NAMES` only once it
    is known to be a string, since an unhashable one would escape as
    `TypeError` instead of `CorruptStore`.
    """
    if not isinstance(value, dict) or len(value) != 2 or "seq" not in value or "ops" not in value:
        raise CorruptStore(path, offset, "WAL frame is not a {seq, ops} transaction")
    seq = value["seq"]
    if type(seq) is not int or seq < 1:
        raise CorruptStore(path, offset, f"transaction sequence {seq!r} is not an int >= 1")
    ops = value["ops"]
    if not isinstance(ops, list) or not ops:
        raise CorruptStore(path, offset, f"transaction {seq} has no ops")
    for op in ops:
        if not isinstance(op, dict) or not isinstance(name := op.get("op"), str) or name not in OP_NAMES:
            index = next(index for index, item in enumerate(ops) if item is op)
            raise CorruptStore(path, offset, f"invalid transaction {seq}: op {index} is not a known op ({_name(op)})")
    return seq


def _name(op: object) -> str:
    """What a reader that does not know an op can say of it: its name, for a newer writer's new kind."""
    if not isinstance(op, dict):
        return f"not an object but {type(op).__name__}"
    name = op.get("op")
    return f"op name {name!r:.80}" if isinstance(name, str) else f"op name of type {type(name).__name__}"
