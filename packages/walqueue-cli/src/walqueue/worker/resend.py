"""A completion whose answer was lost, sent again: the same lease, the same `now`, the same error.

Through walqueue-serve, a completion (`ack`, `complete`, `release`,
`fail`) whose line reached the server but whose answer did not (the server
was killed, the connection dropped) may or may not have been applied; the
client raises `ConnectionError` and never sends it again by itself
(walqueue.client). Dropping it loses the run's outcome: an ack, and the
task runs again; a failure, and the task ends with ``LeaseExpired``
instead of its handler's error. So the completer sends it again, as an
identical retry: the lease fences it (only the run's own generation is
accepted), and the `now` is the first try's, the time the run ended, so a
lease still held is not judged expired by the time the server is back.

The engine answers an identical retry of a call that was applied with
`StaleLease` (the lease no longer holds its task). The task itself says
which it was (`applied`): acked or completed under this generation, or
failed or released with an error recorded at this very `now` for this
attempt (an expiry records the lease's deadline, which is later). Then the
retry counts as answered; otherwise the lease was really lost, and the
`StaleLease` stands. docs/DECISIONS.md §54.

`give_back` is never sent again: it lowers the generation, so a retry
could give back a later lease of the same worker and generation (the
lease expires instead, as before).
"""

from __future__ import annotations

from collections.abc import Callable

from walqueue import Lease, StaleLease, Task

__all__ = ["RESENDS", "applied", "resend"]

#: How many times a completion whose answer was lost is sent again (each waits for the server as long as the
#: client reconnects: 10 s by default; at a stop, not at all).
RESENDS = 3
#: The completions that leave a task completed (the others record an error).
ACKING = frozenset({"ack", "complete"})


def resend(send: Callable[[], None], lost: ConnectionError, done: Callable[[], bool]) -> None:
    """Send again the completion `send` whose answer was `lost`; return once it is applied, else raise.

    Up to `RESENDS` times while each answer is lost too (then the last
    `ConnectionError`). A `StaleLease` answer is a success when `done()`
    (a read of the task: `applied`) shows an earlier try was applied.
    """
    for _ in range(RESENDS):
        try:
            send()
        except StaleLease:
            if done():
                return
            raise
        except ConnectionError as again:
            lost = again
            continue
        return
    raise lost


def applied(task: Task | None, lease: Lease, call: str, now: int) -> bool:
    """Whether `task`, read after a `StaleLease` answer to a resent `call` of `lease` at `now`, shows it applied.

    An ack or a complete: completed under the lease's generation (no later
    lease reaches that generation again: only `give_back` lowers it, and
    only the holder gives back). A fail or a release: its error recorded for
    the lease's attempt at `now`, never a later lease's (which is at least
    as late as the deadline this `now` was before).
    """
    if task is None:
        return False
    if call in ACKING:
        return task.status == "completed" and task.generation == lease.generation
    error = task.last_error
    return (
        error is not None
        and error.at == now
        and error.attempt == lease.attempts
        and error.type != "LeaseExpired"
        and task.generation >= lease.generation
    )
