"""What a client call becomes before any I/O: its arguments checked by the engine's own rules, its request, its answer.

Both clients (`Client`, `AsyncClient`, and so `Pipeline`) shape every call
here, and all of it comes from the table of calls
(`walqueue.protocol.calltable`): the row's `check` runs the engine's own
checks in `Queue`'s order, so a bad argument raises the exception `Queue`
raises for it (type and message) before anything is sent, and the server
then refuses nothing for a reason `Queue` would not; the row builds the
request, converts the answer, and says whether a retry is safe. What
depends on the queue's state (`KeyConflict`, `StaleLease`, `WrongStatus`, a
redrive past the attempts bound) comes back from the server by name.

Nothing here is per call: a call added to the table is at once every
client's ``call(name, ...)``; a typed method is one line naming its row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypedDict

from walqueue.protocol.calltable import CALLS, Call

__all__ = ["CompleteOptions", "OutgoingCall", "PutOptions", "named", "outgoing"]


@dataclass(slots=True)
class OutgoingCall[T]:
    """One call, checked and ready to send: the request, how its answer becomes a result, whether a retry is safe.

    `extra_seconds`: how long the server may rightly take on top of the
    client's timeout (a ``wait``'s own timeout). Never changed once made,
    but not `frozen`: a frozen dataclass sets each field through
    `object.__setattr__`, and this is made for every call (with `Outcome`,
    about 5% of a client call's instructions).
    """

    request: dict[str, Any]
    convert: Callable[[dict[str, Any]], T]
    retry: bool
    extra_seconds: float = 0.0

    @property
    def op(self) -> str:
        return str(self.request["op"])


def outgoing[T](call: Call[T], *args: Any, **kwargs: Any) -> OutgoingCall[T]:
    """The call ``queue.NAME(*args, **kwargs)`` checked as `Queue` checks it, ready to send."""
    request = call.request(*args, **kwargs)
    return OutgoingCall(request, call.result, call.retry, call.blocks_for(request))


def named(name: str) -> Call[Any]:
    """The row of the call `name` (a client's generic ``call``), or `ValueError` naming the calls there are."""
    call = CALLS.get(name) if isinstance(name, str) else None
    if call is None:
        raise ValueError(f"no call named {name!r:.80}; the calls are {', '.join(CALLS)}")
    return call


class PutOptions(TypedDict, total=False):
    """`Queue.put`'s keyword arguments, declared once for both clients (defaults: None, 0, 3)."""

    key: str | None
    available_at: int
    max_attempts: int
    queue: str
    priority: int
    put_at: int


class CompleteOptions(TypedDict, total=False):
    """`Queue.complete`'s keywords after `now`, declared once for both clients (defaults: None, one day, ())."""

    result: Any
    result_ttl: int
    puts: Iterable[Mapping[str, Any]]


class QueueSettings(TypedDict, total=False):
    """`Queue.configure_queue`'s settings (omitted: unchanged; None: no limit), for both clients."""

    concurrency: int | None
    rate: tuple[int, int] | list[int] | None
    paused: bool
