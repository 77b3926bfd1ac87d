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
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from walqueue import Lease, StaleLease, Task

__all__ = ["MAX_ERROR_CHARS", "Source", "ack_many", "error_of", "fail", "release_failed", "settle_acks"]

#: The longest error message the worker sends (the engine bounds what it stores too).
MAX_ERROR_CHARS = 2000
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
    """The stored form of an exception: its class name and its message, bounded with a marker."""
    message = str(error)
    if len(message) > MAX_ERROR_CHARS:
        message = message[: MAX_ERROR_CHARS - len(_TRUNCATED)] + _TRUNCATED
    return {"type": type(error).__name__, "message": message}


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
