"""The map of a state's tasks (task id -> row or tombstone): a dict the cyclic collector never untracks.

Why a subclass: a row is an exact tuple, tracked when it is built and
untracked only later, by a collection (rows.py). An exact dict that holds
only untracked values is untracked by a full collection, and the next
insertion of a new row tracks it again, *in the youngest generation*: the
next two young collections then walk all of its entries (about 30 ms at a
million tasks, in whichever call triggers them), after every full
collection. CPython only ever untracks exact dicts, so an instance of this
class stays tracked and, once old, is walked by full collections alone
(docs/DECISIONS.md §60). Nothing else differs from a dict.
"""

from __future__ import annotations

from walqueue.engine.rows import Stored

__all__ = ["TaskMap"]


class TaskMap(dict[str, Stored]):
    """`State.tasks`: task id -> stored record, never untracked (see the module)."""

    __slots__ = ()
