"""The engine's state machine, registered with the format layer for fsck's and salvage's replays.

`walqueue.format` never imports the engine (it is the layer below); it keeps
a registry instead (`walqueue.format.replay`), which this module fills when
`walqueue.engine` is imported. The calls are recovery's own: decoded
records and transactions, so a replay gives exactly opening's verdict.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

from walqueue.engine.state import InvalidTransaction, State, apply
from walqueue.format.replay import StateMachine, register_state_machine

__all__ = ["STATE_MACHINE"]


def dead_letters(state: State) -> Iterator[tuple[str, ...] | None]:
    """Each dead task's last error as (type, message[, traceback]), in task id order; None for one without."""
    for task in state.list_tasks("dead"):
        error = task.last_error
        if error is None:
            yield None
        else:
            yield (
                (error.type, error.message) if error.traceback is None else (error.type, error.message, error.traceback)
            )


STATE_MACHINE = StateMachine(
    new_state=State,
    from_records=functools.partial(State.from_records, decoded=True),
    apply=functools.partial(apply, decoded=True),
    invalid=InvalidTransaction,
    dead_letters=dead_letters,
)

register_state_machine(STATE_MACHINE)
