"""What a handler may raise to choose its task's fate, and what the worker raises into a handler.

A handler that returns has succeeded: its task is acked. Any other exception
is a failure that is retried after the retry policy's delay (until
`max_attempts` makes the task dead). These exceptions say something more
precise:

- `Retry(delay=...)`: retry, after exactly this delay (clock units);
- `Permanent(...)`: no retry can help; the task goes to the dead letters at once;
- `UnknownKind`: a `Router` found no handler for the task's kind (a `Permanent`);
- `LeaseLost`: raised by `Context.check()` when the task is no longer this
  worker's to finish (the lease was lost, the handler timed out, or the
  worker is shutting down and its grace is over). Whatever the handler
  does afterwards is discarded.

Like every error WALQueue raises or reads on purpose, they are
`WalQueueError`s: one ``except WalQueueError`` sees them all.
"""

from __future__ import annotations

from walqueue import WalQueueError

__all__ = ["LeaseLost", "Permanent", "Retry", "UnknownKind"]


class Retry(WalQueueError):  # noqa: N818 - it names what happens, as Celery's and Sidekiq's do
    """Fail this attempt and retry the task after `delay` clock units (None: the retry policy's delay).

    Example: ``raise Retry(delay=60_000, message="rate limited")``
    """

    def __init__(self, message: str = "", *, delay: int | None = None) -> None:
        if delay is not None and (type(delay) is not int or delay < 0):
            raise ValueError(f"Retry(delay=...) must be an int >= 0 (clock units), not {delay!r}")
        super().__init__(message or "retry requested")
        self.delay = delay


class Permanent(WalQueueError):  # noqa: N818 - a kind of failure, not an error in the worker
    """A failure no retry can fix: the task becomes dead at once, keeping this error as its last error."""


class UnknownKind(Permanent):
    """The task's payload names a kind (or none) that the router has no handler for."""


class LeaseLost(WalQueueError):  # noqa: N818 - the name of the event the handler is told about
    """This worker may no longer finish the task: its result would be discarded, so stop now."""
