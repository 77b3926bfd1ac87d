"""The table of op kinds: `OP_KINDS`, the one declaration of every kind of op the log holds.

A row (`OpKind`, optable.py) names a kind, its fields, the status its task
must have and its transition (transitions.py); keys, dispatch, the JSON
template, the field checks and the size bound follow from it (optable.py),
and `state.apply` admits every op by its row. Apart from the state machine
so that the table reads as one declaration, and stays the one place a new
kind is declared.

The transitions, as data (CONTRACT §3, and `OP_KINDS` below, which is the one
declaration of each kind); every op names its task and is valid only from
the status in the second column:

=========  ========  ==========================  ================================
op         from      to                          also
=========  ========  ==========================  ================================
put        (new)     ready                       attempts 0, generation 0
lease      ready     leased                      G == generation + 1; attempts += 1
expire     leased    dead if attempts >= max,    available_at = old deadline;
                     else ready                  last error LeaseExpired
ack        leased    completed                   payload dropped (a tombstone)
release    leased    dead if attempts >= max,    available_at = A
                     else ready
extend     leased    leased                      same generation; deadline = D
redrive    dead      ready                       available_at = A; max_attempts =
                                                 M > the old one
cancel     ready or  dead                        worker, deadline cleared
           leased
fail       leased    dead                        same generation (fenced)
error      ready or  (same)                      last error = type, message,
           leased                                attempts, at
give_back  leased    ready                       G == generation (fenced); the
                                                 lease undone: attempts and
                                                 generation -= 1
=========  ========  ==========================  ================================

`worker` and `deadline` are set exactly while a task is leased. Anything
else is an `InvalidTransaction`, raised before the state is touched. Every
transition but ack keeps the task's last error unless it sets one; an
error op comes just before the release, fail or cancel it explains, in
the same transaction.

Adding an op kind: one row in `OP_KINDS` (name, fields, from-status, and
the counter and event if it has them), its transition function in
transitions.py under the kind's name, its name in
`walqueue.format.transaction.OP_NAMES`, and a planner in ops.py with the
`Queue` method that commits the planner's output. Keys, dispatch, the JSON
template and the size bound follow from the row (optable.py).

The format layer owns the list of op names (`OP_NAMES`, which replay and
`walqueue-fsck` check every frame against), since it cannot import the
engine; this module (and so the engine) refuses to import unless
`OP_KINDS` has exactly those names.
"""

from __future__ import annotations

from typing import Any

from walqueue.engine import transitions
from walqueue.engine.optable import Field, OpKind
from walqueue.engine.rows import DEAD, LEASED, READY
from walqueue.engine.validate import DEFAULT_QUEUE
from walqueue.format.transaction import OP_NAMES

__all__ = ["OP_KEYS", "OP_KINDS"]

# The fields several kinds share, each declared once: (name, kind).
_GENERATION = ("generation", Field.POSITIVE_INT)
_AVAILABLE_AT = ("available_at", Field.INT)
_MAX_ATTEMPTS = ("max_attempts", Field.POSITIVE_INT)
_DEADLINE = ("deadline", Field.INT)
_AT = ("at", Field.INT)
#: A task not yet done: what a cancel takes, and what an error or a traceback explains.
_OPEN = (READY, LEASED)


def _kind(
    name: str,
    fields: tuple[tuple[str, Field], ...],
    from_status: str | tuple[str, ...] | None,
    counter: str | None = None,
    event: str | None = None,
    **declared: Any,
) -> OpKind:
    """A row of `OP_KINDS`: its transition is the function of transitions.py named for the kind."""
    transition = getattr(transitions, name, None)
    if not callable(transition):
        raise ImportError(f"op kind {name!r} has no transition: declare it as walqueue.engine.transitions.{name}")
    return OpKind(name, fields, from_status, transition, counter=counter, event=event, **declared)


#: The one declaration of every op kind (CONTRACT §3): name, fields besides ``op`` and ``task``, the
#: status its task must have (None: it creates the task), and the metrics counter and lifecycle event
#: it is counted and logged as (neither, when left out); its transition is `transitions.<name>`.
OP_KINDS: dict[str, OpKind] = {
    kind.name: kind
    for kind in (
        _kind(
            "put",
            (("key", Field.NAME), ("payload", Field.PAYLOAD), _AVAILABLE_AT, _MAX_ATTEMPTS),
            None,
            "puts",
            "task.put",
            optional=(
                ("queue", Field.QUEUE, DEFAULT_QUEUE),
                ("priority", Field.PRIORITY, 0),
                # the producer's time of the put (FORMAT "A put's time"): due from then; never in its identity
                ("put_at", Field.INT, 0),
            ),
        ),
        _kind(
            "lease",
            (("worker", Field.NAME), _GENERATION, _DEADLINE),
            READY,
            "reserves",
            "task.lease",
            optional=(("at", Field.INT, None),),
        ),
        _kind("expire", (_GENERATION,), LEASED, "expiries", "task.expiry"),
        _kind("ack", (_GENERATION,), LEASED, "acks", "task.ack"),
        _kind("release", (_GENERATION, _AVAILABLE_AT), LEASED, "releases", "task.release"),
        _kind("extend", (_GENERATION, _DEADLINE), LEASED, "extends", "task.extend"),
        _kind("redrive", (_AVAILABLE_AT, _MAX_ATTEMPTS), DEAD, "redrives", "task.redrive"),
        _kind("cancel", (), _OPEN, "cancels", "task.cancel"),
        _kind("fail", (_GENERATION,), LEASED, event="task.death"),
        _kind("error", (("type", Field.ERROR_TYPE), ("message", Field.ERROR_MESSAGE), _AT), _OPEN),
        # -- format extensions (docs/FORMAT.md); add rows, never reorder --
        _kind("clock", (("units_per_second", Field.POSITIVE_INT),), None, store=True),
        _kind("traceback", (("text", Field.TRACEBACK),), _OPEN),
        _kind("give_back", (_GENERATION,), LEASED, event="task.give_back"),
        _kind("result", (_GENERATION, _AT, ("expires", Field.INT), ("value", Field.RESULT)), LEASED),
        # lanes (docs/FORMAT.md "Queue settings"): a queue's whole settings, each omitted at its default.
        _kind(
            "configure",
            (),
            None,
            optional=(
                ("concurrency", Field.POSITIVE_INT, None),
                ("rate", Field.POSITIVE_INT, None),
                ("window", Field.POSITIVE_INT, None),
                ("paused", Field.TRUE, None),
            ),
            subject=("queue", Field.QUEUE),
        ),
    )
}
if frozenset(OP_KINDS) != OP_NAMES:
    # The format layer owns the list of names every reader of the log accepts
    # (it cannot import the engine); a kind added here alone would be refused
    # by replay and by walqueue-fsck. Refuse to run instead.
    raise ImportError(
        "the engine's op kinds and walqueue.format.transaction.OP_NAMES differ: "
        f"{sorted(frozenset(OP_KINDS) ^ OP_NAMES)}; declare the kind in both"
    )

#: op name -> the exact keys of that op (CONTRACT §3), derived from `OP_KINDS`.
OP_KEYS: dict[str, frozenset[str]] = {name: kind.keys for name, kind in OP_KINDS.items()}
