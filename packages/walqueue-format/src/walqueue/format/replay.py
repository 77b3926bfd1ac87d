"""The state machine that fsck and salvage replay a log with: injected by the engine, never imported here.

The format layer knows frames and files, not what a transaction means; only
`--replay` (and salvage, which stops before the first transaction the state
machine refuses) need that meaning. Rather than import the engine from
below (a layering inversion: the engine depends on this package), the
engine registers its state machine here when `walqueue.engine` is imported
(`walqueue.engine.replay_provider`), and `walqueue/__init__.py`, which only
the engine's distribution ships, imports the engine. So: with the engine
installed, the registry is filled before any of this package runs; without
it, `require_state_machine` raises `ReplayUnavailable` and everything else
works as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from walqueue.format.errors import WalQueueError

__all__ = [
    "ReplayState",
    "ReplayUnavailable",
    "StateMachine",
    "register_state_machine",
    "registered_state_machine",
    "require_state_machine",
]


class ReplayUnavailable(WalQueueError, RuntimeError):
    """A replay was asked for, but no state machine is registered (walqueue-engine is not installed)."""


class ReplayState(Protocol):
    """What a replayed state must tell: its last sequence and its counts by status."""

    @property
    def last_seq(self) -> int:
        """The sequence of the last transaction applied (or the snapshot's)."""
        ...

    def counts(self) -> dict[str, int]:
        """The number of tasks per status."""
        ...


@dataclass(frozen=True, slots=True)
class StateMachine:
    """The few entry points of a state machine that a replay uses, as recovery calls them.

    `from_records` and `apply` take decoded records and transactions (both
    come from the frame reader, as in recovery); `invalid` is the exception
    they raise for anything the state machine refuses.
    """

    new_state: Callable[[], ReplayState]
    #: ``from_records(seq, records, queues=...)``: `queues` is the header's queue settings (None: none);
    #: plus ``clock=`` when the snapshot header records one (docs/FORMAT.md).
    from_records: Callable[..., ReplayState]
    apply: Callable[[Any, Mapping[str, Any]], object]  # what it returns (the new task ids) is not used
    invalid: type[Exception]
    #: The last error of each dead letter of a state, in task id order: its (type, message[, traceback]), or None for
    #: a dead letter without one. None: this state machine cannot tell (fsck then reports no grouping).
    dead_letters: Callable[[Any], Iterable[tuple[str, ...] | None]] | None = None


_registered: list[StateMachine] = []


def register_state_machine(machine: StateMachine) -> None:
    """Make `machine` the one replays use (the engine calls this once, at import)."""
    _registered[:] = [machine]


def registered_state_machine() -> StateMachine | None:
    """The registered state machine, or ``None`` when the engine is not installed."""
    return _registered[0] if _registered else None


def require_state_machine(what: str = "--replay") -> StateMachine:
    """The registered state machine; `ReplayUnavailable` naming `what` needs it if there is none."""
    machine = registered_state_machine()
    if machine is None:
        raise ReplayUnavailable(
            f"{what} needs walqueue-engine, whose state machine is not installed (pip install walqueue-engine)"
        )
    return machine
