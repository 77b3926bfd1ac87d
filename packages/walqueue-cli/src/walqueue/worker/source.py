"""Where tasks come from: a `Queue` in this process or a `Client` of walqueue-serve, behind one protocol.

Both have the same methods (the client mirrors the queue's API), so the
worker is written once against `Source`. The calls that record a failure
with its error live here, and only here: `release_failed` (retry later)
and `fail` (dead at once). They pass the error as
``{"type": ..., "message": ...}`` when the source's `release` takes an
`error` argument and it has a `fail` call (engines that keep the last
error); with an older source the error is only logged, and a permanent
failure falls back to `cancel`, which makes the task dead as `fail` would.

`ack_many` is the worker's busy path: the acks of the tasks that finished
since the last batch, together: one `ack_many` call (one transaction) where
the source has it. Should one of the leases be lost (`StaleLease`: that
call is all or nothing), or the call be refused (`ValueError`: a server
older than `ack_many` calls it a bad request), nothing was written, and the
acks are sent again one by one, so that one lost lease costs no other ack:
through a client's `pipeline()` in one round trip (which the server commits
together), on a `Queue` in a `batch()` (one fsync), otherwise as plain calls. `settle_acks` is the same fallback for an
`ack_many` the fetcher sent in the round trip of its reserve.
"""

from __future__ import annotations

import contextlib
import inspect
import traceback
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from walqueue import Lease, StaleLease, Task

__all__ = [
    "MAX_ERROR_CHARS",
    "UNNAMED_TYPE",
    "Source",
    "ack_many",
    "bounded_client",
    "error_of",
    "fail",
    "give_back",
    "release_failed",
    "settle_acks",
    "with_traceback",
]

#: The longest error message the worker sends (the engine bounds what it stores too).
MAX_ERROR_CHARS = 2000
#: The type recorded for an exception whose class has an empty name.
UNNAMED_TYPE = "<unnamed exception>"
_TRUNCATED = " [truncated]"


class Source(Protocol):
    """The calls of `Queue` (and `Client`) the worker uses."""

    def put(
        self,
        task_id: str,
        payload: dict[str, Any],
        *,
        key: str | None = ...,
        available_at: int = ...,
        max_attempts: int = ...,
        queue: str = ...,
        priority: int = ...,
    ) -> str: ...

    def put_many(self, tasks: Iterable[Mapping[str, Any]]) -> list[str]: ...

    def reserve(
        self, worker: str, *, now: int, lease_seconds: int, limit: int = ..., queues: list[str] | None = ...
    ) -> list[Lease]: ...

    def ack(self, lease: Lease, *, now: int) -> None: ...

    def release(self, lease: Lease, *, now: int, delay: int = ...) -> None: ...

    def extend(self, lease: Lease, *, now: int, lease_seconds: int) -> Lease: ...

    def cancel(self, task_id: str) -> None: ...

    def get(self, task_id: str) -> Task | None: ...

    def wait(self, timeout: float) -> bool: ...

    def stats(self) -> Any: ...


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


def _takes_error(source: Source) -> bool:
    try:
        return "error" in inspect.signature(source.release).parameters
    except (TypeError, ValueError):
        return False


def release_failed(source: Source, lease: Lease, *, now: int, delay: int, error: dict[str, str] | None) -> None:
    """Release `lease` for a retry after `delay`, recording `error` where the source keeps last errors."""
    if error is not None and _takes_error(source):
        source.release(lease, now=now, delay=delay, error=error)  # type: ignore[call-arg]
    else:
        source.release(lease, now=now, delay=delay)


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


def give_back(source: Source, lease: Lease, *, now: int) -> None:
    """Give back a lease whose handler never started, its attempt restored (`Queue.give_back`).

    A source without the call (an older engine or server, which calls it a
    bad request: `ValueError`) gets a plain release instead, which spends
    the attempt as it always did.
    """
    call = getattr(source, "give_back", None)
    if call is not None:
        try:
            call(lease, now=now)
        except ValueError:  # an older server: the call is unknown; nothing was written
            pass
        else:
            return
    source.release(lease, now=now)


def fail(source: Source, lease: Lease, *, now: int, error: dict[str, str]) -> None:
    """Make the leased task dead at once (a permanent failure), recording `error` where the source can."""
    fail_call = getattr(source, "fail", None)
    if fail_call is not None:
        fail_call(lease, now=now, error=error)
    else:
        source.cancel(lease.task_id)


def ack_many(source: Source, acks: list[Lease], *, now: int) -> list[BaseException | None]:
    """Ack every lease of `acks` together; each one's `StaleLease`, or None. Any other failure is raised.

    One `ack_many` call where the source has it; one by one (below) if that
    found a lease lost, or where it has no such call.
    """
    many = getattr(source, "ack_many", None)
    if many is None:
        return _ack_each(source, acks, now=now)
    try:
        many(acks, now=now)
    except (StaleLease, ValueError) as refused:
        return settle_acks(source, acks, refused, now=now)
    return [None] * len(acks)


def settle_acks(
    source: Source, acks: list[Lease], outcome: BaseException | None, *, now: int
) -> list[BaseException | None]:
    """What became of each lease of an `ack_many` call that ended with `outcome` (None: all acked).

    `StaleLease` or `ValueError` (refused: an older server): nothing was
    acked (all or nothing), so each is acked again alone, and only the lost
    ones fail. Any other failure (the answer was lost: `ConnectionError`)
    is every ack's.
    """
    if outcome is None:
        return [None] * len(acks)
    if isinstance(outcome, (StaleLease, ValueError)):
        return _ack_each(source, acks, now=now)
    return [outcome] * len(acks)


def _ack_each(source: Source, acks: list[Lease], *, now: int) -> list[BaseException | None]:
    """Ack each lease by itself, together: a client's pipeline (one round trip), a `Queue.batch` (one fsync)."""
    pipeline = getattr(source, "pipeline", None)
    if pipeline is not None:
        calls = pipeline()
        for lease in acks:
            calls.ack(lease, now=now)
        errors: list[BaseException | None] = []
        for result in calls.execute(raise_on_error=False):
            if isinstance(result, BaseException) and not isinstance(result, StaleLease):
                raise result
            errors.append(result if isinstance(result, BaseException) else None)
        return errors
    batch = getattr(source, "batch", None)
    errors = []
    with batch() if batch is not None else contextlib.nullcontext():
        for lease in acks:
            try:
                source.ack(lease, now=now)
            except StaleLease as error:
                errors.append(error)
            else:
                errors.append(None)
    return errors
