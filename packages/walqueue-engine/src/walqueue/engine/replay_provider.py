"""The engine's state machine, registered with the format layer for fsck's and salvage's replays.

`walqueue.format` never imports the engine (it is the layer below); it keeps
a registry instead (`walqueue.format.replay`), which this module fills when
`walqueue.engine` is imported. The calls are recovery's own: decoded
records and transactions, so a replay gives exactly opening's verdict.
"""

from __future__ import annotations

import functools

from walqueue.engine.state import InvalidTransaction, State, apply
from walqueue.format.replay import StateMachine, register_state_machine

__all__ = ["STATE_MACHINE"]

STATE_MACHINE = StateMachine(
    new_state=State,
    from_records=functools.partial(State.from_records, decoded=True),
    apply=functools.partial(apply, decoded=True),
    invalid=InvalidTransaction,
)

register_state_machine(STATE_MACHINE)
