"""Where tasks come from, declared: `WorkerSource`, the calls every source the worker takes has.

A `Queue` in this process or a `Client` of walqueue-serve: both are
`QueueSource`s (walqueue.protocol.source) and have the calls below beyond
it, checked by construction (the typed assignments under `TYPE_CHECKING`
at the end fail `mypy --strict` if either drifts). So the worker calls
`fail`, `ack_many`, `give_back`, `complete` and `release(error=)` as
members: nothing is probed with `getattr`, `hasattr` or
`inspect.signature` (docs/DECISIONS.md §45).

How a source sends several calls together is declared too, by its
`grouping`: ``"pipeline"`` (a client: calls collected by `pipeline()`,
sent in one round trip, which the server commits together), ``"batch"``
(a `Queue`: calls made inside `batch()` share one fsync) or ``"none"``.
A worker's settings may say otherwise (`WorkerSettings.grouping`).

`ack_many` and `settle_acks` here are how a batch of acks goes out over a
source's grouping; the completer (complete.py) is their only caller. One
`ack_many` call (one transaction); should one of the leases be lost
(`StaleLease`: that call is all or nothing), or the call be refused
(`ValueError`: a server older than `ack_many` calls it a bad request;
`AttributeError`: an object from before it), nothing was written, and the
acks are sent again one by one, so that one lost lease costs no other ack:
in one group where the source has one, otherwise as plain calls.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

from walqueue import Lease, StaleLease
from walqueue.protocol.source import QueueSource

__all__ = [
    "MAX_ERROR_CHARS",
    "UNNAMED_TYPE",
    "Batched",
    "Grouping",
    "Pipelined",
    "Source",
    "WorkerSource",
    "ack_many",
    "bounded_client",
    "error_of",
    "settle_acks",
    "with_traceback",
]

#: How a source sends several calls together (the module's docstring): a client's `pipeline()` (one round
#: trip), a `Queue`'s `batch()` (one fsync), or one call each.
Grouping = Literal["pipeline", "batch", "none"]

#: The longest error message the worker sends (the engine bounds what it stores too).
MAX_ERROR_CHARS = 2000
#: The type recorded for an exception whose class has an empty name.
UNNAMED_TYPE = "<unnamed exception>"
_TRUNCATED = " [truncated]"


class WorkerSource(QueueSource, Protocol):
    """`QueueSource` and what the worker calls beyond it; `Queue` and `Client` both are one (see the end)."""

    @property
    def grouping(self) -> Grouping:
        """How this source sends several calls together (the module's docstring)."""
        ...

    def reserve(
        self, worker: str, *, now: int, lease_seconds: int, limit: int = 1, queues: list[str] | None = None
    ) -> list[Lease]: ...

    def give_back(self, lease: Lease, *, now: int) -> None: ...

    def complete(
        self,
        lease: Lease,
        *,
        now: int,
        result: Any = ...,
        result_ttl: int = ...,
        puts: Iterable[Mapping[str, Any]] = (),
    ) -> None: ...


#: The name the worker's modules have always used for it.
Source = WorkerSource


class PipelineCalls(Protocol):
    """The calls a pipeline collects for the worker, and `execute`, which sends them in one round trip."""

    def ack(self, lease: Lease, *, now: int) -> object: ...
    def ack_many(self, leases: Iterable[Lease], *, now: int) -> object: ...
    def reserve(
        self, worker: str, *, now: int, lease_seconds: int, limit: int = 1, queues: list[str] | None = None
    ) -> object: ...
    def execute(self, *, raise_on_error: bool = True) -> list[Any]: ...


class Pipelined(WorkerSource, Protocol):
    """A source whose `grouping` is ``"pipeline"`` (a `Client`)."""

    def pipeline(self) -> PipelineCalls: ...


class Batched(WorkerSource, Protocol):
    """A source whose `grouping` is ``"batch"`` (a `Queue`)."""

    def batch(self) -> AbstractContextManager[object]: ...


def error_of(error: BaseException) -> dict[str, str]:
    """The stored form of an exception: its class name and its message, bounded with a marker.

    Always storable, whatever the exception: a class with an empty name is
    `UNNAMED_TYPE`; a ``str()`` that raises gives a message saying so; a str
    subclass is read as a plain str. A failure is recorded, never lost to the
    recording of it (docs/DECISIONS.md §36).
    """
    error_type = str.__str__(type(error).__name__) or UNNAMED_TYPE
    try:
        message = str.__str__(str(error))
    except Exception as broken:  # noqa: BLE001 - the handler's own __str__: anything may come out
        message = f"<str() of the {error_type} raised {type(broken).__name__ or UNNAMED_TYPE}>"
    if len(message) > MAX_ERROR_CHARS:
        message = message[: MAX_ERROR_CHARS - len(_TRUNCATED)] + _TRUNCATED
    return {"type": error_type, "message": message}


def with_traceback(stored: dict[str, str], error: BaseException) -> dict[str, str]:
    """`stored` (error_of's) with the exception's formatted traceback, which the engine keeps with the last error.

    The engine cuts it to its bound (its end kept); a traceback that cannot be formatted is left out.
    """
    try:
        text = "".join(traceback.format_exception(error))
    except Exception:  # noqa: BLE001 - a broken exception must not stop the worker from recording it
        return stored
    return {**stored, "traceback": text}


def bounded_client(source: Source, seconds: float) -> Any:
    """Through walqueue-serve, a client of the same socket whose calls give up after `seconds`; else None.

    A heartbeat must never outlive the shutdown's grace: through a server
    that was SIGKILLed, a call of the worker's own client keeps reconnecting
    for its `reconnect_seconds` (10 s by default) while it holds the run's
    lock, and the stop waits for it. Heartbeats go through this one instead,
    bounded by the grace and the beat interval; at the stop, the shutdown's
    calls too, with no reconnecting at all (nobody restarts a server during
    a stop). docs/DECISIONS.md §36.
    """
    from walqueue.client import Client, Pipeline

    if not isinstance(source, Client) or isinstance(source, Pipeline):
        return None
    limit = min(seconds, source.reconnect_seconds)
    timeout = limit if source.timeout is None else min(limit, source.timeout)
    try:
        return type(source)(source.socket_path, timeout=timeout, reconnect_seconds=limit)
    except TypeError:  # a subclass made another way: its own client, unbounded, as before
        return None


def ack_many(
    source: Source, acks: list[Lease], *, now: int, grouping: Grouping | None = None
) -> list[BaseException | None]:
    """Ack every lease of `acks` together; each one's `StaleLease`, or None. Any other failure is raised.

    One `ack_many` call; one by one (below) if that found a lease lost, or the source refused the call.
    `grouping`: the worker's (`WorkerSettings.grouping`); None, the source's own.
    """
    try:
        source.ack_many(acks, now=now)
    except (StaleLease, ValueError, AttributeError) as refused:
        return settle_acks(source, acks, refused, now=now, grouping=grouping)
    return [None] * len(acks)


def settle_acks(
    source: Source, acks: list[Lease], outcome: BaseException | None, *, now: int, grouping: Grouping | None = None
) -> list[BaseException | None]:
    """What became of each lease of an `ack_many` call that ended with `outcome` (None: all acked).

    `StaleLease`, or the call refused (`ValueError`: an older server;
    `AttributeError`: an object from before the call): nothing was acked
    (all or nothing), so each is acked again alone, and only the lost ones
    fail. Any other failure (the answer was lost: `ConnectionError`) is
    every ack's.
    """
    if outcome is None:
        return [None] * len(acks)
    if isinstance(outcome, (StaleLease, ValueError, AttributeError)):
        return _ack_each(source, acks, now, source.grouping if grouping is None else grouping)
    return [outcome] * len(acks)


def _ack_each(source: Source, acks: list[Lease], now: int, grouping: Grouping) -> list[BaseException | None]:
    """Ack each lease by itself, in the source's group: a pipeline (one round trip), a batch (one fsync)."""
    if grouping == "pipeline":
        calls = cast(Pipelined, source).pipeline()
        for lease in acks:
            calls.ack(lease, now=now)
        errors: list[BaseException | None] = []
        for result in calls.execute(raise_on_error=False):
            if isinstance(result, BaseException) and not isinstance(result, StaleLease):
                raise result
            errors.append(result if isinstance(result, BaseException) else None)
        return errors
    errors = []
    with cast(Batched, source).batch() if grouping == "batch" else contextlib.nullcontext():
        for lease in acks:
            try:
                source.ack(lease, now=now)
            except StaleLease as error:
                errors.append(error)
            else:
                errors.append(None)
    return errors


if TYPE_CHECKING:  # both sources are worker sources (mypy --strict checks these lines)
    from walqueue.client import Client
    from walqueue.engine.queue import Queue

    _QUEUE_IS_A_WORKER_SOURCE: type[Batched] = Queue
    _CLIENT_IS_A_WORKER_SOURCE: type[Pipelined] = Client
