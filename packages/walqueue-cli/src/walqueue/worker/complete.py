"""The complete role: the one place that acks, releases, fails or gives back a lease, and records how a run ended.

Every outcome of a run goes through the `Completer`: completed (an ack,
alone, in a batch or riding the fetcher's next reserve; an App's result
and follow-ups in one `complete`), retried, dead, lost, timed out,
interrupted, returned. The executor, the keep-alive (monitor.py) and the
lifecycle may each want to end the same run; each call here takes the
run's lock and only the first settles it (`Run.settled`), so a task is
acked or released at most once by this worker, and a result that arrives
after its lease was lost, timed out or released is discarded instead of
acked.

Every call is a declared member of the source (`WorkerSource`). A source
that predates one refuses it and nothing is written: an older server
answers `ValueError` (a bad request), an object from before it raises
`AttributeError`. Then a `give_back` becomes a plain release (the attempt
spent, as it always was), a `fail` a `cancel` (dead as `fail` would make
it, without the error), an `ack_many` acks one by one (source.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, cast

from walqueue import Lease, QueueClosed, StaleLease, Task
from walqueue.engine.validate import MAX_INT
from walqueue.worker.clock import MILLISECONDS, Clock
from walqueue.worker.completion import Completion
from walqueue.worker.errors import Permanent, Retry
from walqueue.worker.pending import Pending
from walqueue.worker.report import Report, log
from walqueue.worker.resend import applied, resend
from walqueue.worker.retry import RetryPolicy
from walqueue.worker.run import Run
from walqueue.worker.settings import Grouping
from walqueue.worker.source import Pipelined, Source, ack_many, error_of, settle_acks, with_traceback

__all__ = ["Completer", "describe_delay"]


def describe_delay(units: int, units_per_second: int) -> str:
    """A delay in clock units as a person reads it: ``747 ms``, ``12.5 s``, ``10 min``, ``2 h``, ``3 d``."""
    seconds = units / units_per_second
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


def _ignore(run: Run) -> None:
    """The default `Completer.sent`: nothing keeps the run (a completer driven by a test)."""


def _ignore_error(error: BaseException) -> None:
    """The default `Completer.fatal`: a completer driven by a test has no worker to stop."""


class Completer:
    """Ends runs: the only code that acks, releases, fails or gives back a lease (and then counts and logs it).

    `acks`: where a finished run's ack waits to be sent in a batch (by
    `run_acker`, or riding the fetcher's reserve: `reserve_with_acks`);
    None, each ack is sent at once by the thread that finished. `sent` is
    told of each run whose batched ack was sent (the keep-alive forgets it);
    `fatal` of a queue that closed under a batch.
    """

    def __init__(
        self,
        source: Source,
        clock: Clock,
        retry: RetryPolicy,
        report: Report,
        units_per_second: int = MILLISECONDS,
        *,
        grouping: Grouping | None = None,
        acks: Pending | None = None,
    ) -> None:
        self.source = source
        self.clock = clock
        self.retry = retry
        self.report = report
        self.units_per_second = units_per_second
        self.grouping: Grouping = source.grouping if grouping is None else grouping
        self.acks = acks
        self.sent: Callable[[Run], None] = _ignore
        self.fatal: Callable[[BaseException], None] = _ignore_error

    def _elapsed(self, run: Run) -> int:
        """The handler's own time in milliseconds: until it returned (not the wait for a batched ack), or now."""
        end = run.ended if run.ended is not None else self.clock()
        return max(0, end - run.started) * 1000 // self.units_per_second

    def _record(self, run: Run, event: str, message: str = "", **extra: Any) -> None:
        self.report.outcome(event, run.job.id, run.job.attempts, self._elapsed(run), message, **extra)

    def succeed(self, run: Run) -> None:
        """The handler returned: ack now, unless the run was settled meanwhile (then the result is discarded)."""
        if self.claim(run):
            self._ack(run)

    def claim(self, run: Run) -> bool:
        """Settle a run whose handler returned, for an ack sent now or in the fetcher's next batch.

        False (and the result is discarded) if it was settled meanwhile. A
        claimed run gets no more heartbeats; its ack follows at once.
        """
        with run.lock:
            if run.settled:
                log.debug("result of %s discarded: %s", run.job.id, run.context.reason)
                return False
            run.settled = True
            return True

    def acked(self, run: Run, error: BaseException | None) -> None:
        """Count and log the ack of a claimed run: done, or `error` (`StaleLease`, a lost answer)."""
        if error is None:
            self._record(run, "completed")
        elif isinstance(error, StaleLease):
            run.context.lose("lease lost")
            self._record(run, "lost", f"finished, but the lease was lost before the ack: {error}")
        else:  # the server went away: the ack may or may not have happened
            self._record(run, "lost", f"the ack's answer was lost ({error}); the task may run again")

    def finished(self, run: Run, outcome: object) -> bool:
        """The handler returned `outcome`: its ack (or `complete`) now, or queued; True if it waits in `acks`."""
        if not self.claim(run):
            return False
        if isinstance(outcome, Completion) and not outcome.plain:  # an App's result or follow-ups: one `complete`
            try:
                self._deliver(run.lease, "complete", functools.partial(self._complete, run.lease, outcome))
            except Exception as error:  # noqa: BLE001 - refused whole (too large for a frame): it runs again
                lost = error if isinstance(error, StaleLease | OSError) else ConnectionError(f"refused: {error}")
                self.acked(run, lost)
            else:
                self.acked(run, None)
            return False
        if self.acks is not None:
            self.acks.queue_ack(run)
            return True
        self._ack(run)
        return False

    def _complete(self, lease: Lease, completion: Completion, now: int) -> None:
        """The ack, the result and the follow-ups in one transaction; with no result, the store's default TTL."""
        if completion.result_expires is None:  # nothing stored: the TTL means nothing, and None is no int
            self.source.complete(lease, now=now, result=completion.result, puts=completion.puts)
            return
        ttl = max(1, completion.result_expires - now)
        self.source.complete(lease, now=now, result=completion.result, result_ttl=ttl, puts=completion.puts)

    def _ack(self, run: Run) -> None:
        try:
            self._deliver(run.lease, "ack", functools.partial(self._ack_at, run.lease))
        except (StaleLease, OSError) as error:
            self.acked(run, error)
        else:
            self.acked(run, None)

    def _ack_at(self, lease: Lease, now: int) -> None:
        self.source.ack(lease, now=now)

    def _deliver(self, lease: Lease, call: str, send: Callable[[int], None]) -> None:
        """`send(now)`, a completion `call` of `lease`; its answer lost, sent again at the same `now` (resend.py)."""
        now = self.clock()
        try:
            send(now)
        except ConnectionError as lost:
            self._resend(lease, call, send, now, lost)

    def _resend(self, lease: Lease, call: str, send: Callable[[int], None], now: int, lost: ConnectionError) -> None:
        """`send(now)` again after its answer was `lost`: returns once applied, else raises (resend.py)."""
        task_id = lease.task_id
        log.warning("the answer to %s of %s was lost (%s): sent again", call, task_id, lost, extra={"resent": call})
        resend(lambda: send(now), lost, lambda: applied(self._read(lease.task_id), lease, call, now))

    def _read(self, task_id: str) -> Task | None:
        """The task as the source has it now; None when it cannot be read (then nothing counts as applied)."""
        try:
            return self.source.get(task_id)
        except Exception:  # noqa: BLE001 - only whether a lost answer's call was applied depends on it
            return None

    def run_acker(self, linger: float) -> None:
        """The acker thread's body: send the waiting acks in batches, each all that came in meanwhile, until closed."""
        assert self.acks is not None
        while (runs := self.acks.next_acks(linger)) is not None:
            leases, now = [run.lease for run in runs], self.clock()
            self._acks_sent(
                runs, functools.partial(ack_many, self.source, leases, now=now, grouping=self.grouping), now
            )

    def reserve_with_acks(self, worker: str, *, now: int, lease_seconds: int, limit: int, **lanes: Any) -> list[Lease]:
        """`reserve`, with every ack waiting now in the same round trip (one `ack_many`, one pipeline).

        For a source grouped by pipeline (walqueue-serve). The acks' outcome
        is recorded here; the reserve's leases are returned, or its error raised.
        """
        runs = self.acks.take_acks() if self.acks is not None else []
        if not runs:
            return self.source.reserve(worker, now=now, lease_seconds=lease_seconds, limit=limit, **lanes)
        calls = _pipelined(self.source).pipeline()
        leases = [run.lease for run in runs]
        calls.ack_many(leases, now=now)
        calls.reserve(worker, now=now, lease_seconds=lease_seconds, limit=limit, **lanes)
        try:
            acked, reserved = calls.execute(raise_on_error=False)
        except Exception as error:  # noqa: BLE001 - the client closed, say: the acks' fate is the reserve's
            acked = reserved = error
        send = functools.partial(settle_acks, self.source, leases, acked, now=now, grouping=self.grouping)
        self._acks_sent(runs, send, now)
        if isinstance(reserved, BaseException):
            raise reserved
        result: list[Lease] = reserved
        return result

    def _acks_sent(self, runs: list[Run], send: Callable[[], list[BaseException | None]], now: int) -> None:
        """Count and log the outcome of each run's ack, as `send()` returns them (or raises, for all).

        An ack whose answer was lost (`ConnectionError`) is sent again alone, at the same `now` (resend.py).
        """
        try:
            errors = send()
        except Exception as error:  # noqa: BLE001 - a lost connection, or a poisoned queue: the acks' fate is unknown
            if isinstance(error, QueueClosed):
                self.fatal(error)
            errors = [error if isinstance(error, OSError) else OSError(f"{type(error).__name__}: {error}")]
            errors *= len(runs)
        for run, ack_error in zip(runs, errors, strict=True):
            self.acked(run, self._ack_again(run.lease, now, ack_error))
            self.sent(run)

    def _ack_again(self, lease: Lease, now: int, error: BaseException | None) -> BaseException | None:
        """`error`, a batched ack's outcome; when its answer was lost, the outcome of that ack sent again alone."""
        if not isinstance(error, ConnectionError):
            return error
        try:
            self._resend(lease, "ack", functools.partial(self._ack_at, lease), now, error)
        except (StaleLease, OSError) as final:
            return final
        return None

    def fail(self, run: Run, error: BaseException) -> None:
        """The handler raised `error`: dead at once (`Permanent`), or released for a retry after a delay."""
        with run.lock:
            if run.settled:
                log.debug("failure of %s discarded (%r): %s", run.job.id, error, run.context.reason)
                return
            run.settled = True
            stored = with_traceback(error_of(error), error)
            if "traceback" in stored:  # the failure's whole story, logged where it happened
                log.info("task %s attempt %d raised:\n%s", run.job.id, run.job.attempts, stored["traceback"])
            if isinstance(error, Permanent):
                self._send(run, "dead", lambda now: self._fail(run.lease, now, stored), stored)
                return
            if isinstance(error, Retry) and error.delay is not None:
                delay = error.delay
            elif type(chosen := getattr(error, "walqueue_retry_delay", None)) is int:  # a task's own policy (app.py)
                delay = chosen
            else:
                delay = self.retry.delay(run.job.attempts)
            self._release(run, "retried", delay, stored)

    def abandon(self, run: Run, event: str, reason: str, delay: int, error: dict[str, str]) -> bool:
        """Take the task back from a handler still running (timeout, shutdown): tell it, then release.

        Returns False when the run was already settled (nothing done).
        """
        with run.lock:
            if run.settled:
                return False
            run.settled = True
            run.context.lose(reason)
            self._release(run, event, delay, error)
            return True

    def withdraw(self, run: Run, reason: str = "shutdown") -> bool:
        """Give back a prefetched lease whose handler never started: at once, its attempt restored, no error.

        `give_back` undoes the lease, so a task is never dead without a run
        that used its last attempt, and its last error stays its last run's.
        """
        with run.lock:
            if run.settled or run.begun:
                return False
            run.settled = True
            run.context.lose(reason)
            try:
                self._give_back(run.lease, self.clock())
            except (StaleLease, OSError) as error:
                self._record(run, "lost", f"not started; giving it back failed ({error})")
            else:
                self._record(run, "returned", f"not started: given back at {reason}, its attempt restored")
            return True

    def lose(self, run: Run, error: BaseException) -> None:
        """A heartbeat found the lease gone (called with the run's lock held): tell the handler, log it."""
        run.settled = True
        run.context.lose("lease lost")
        self._record(run, "lost", f"the lease was lost while the handler ran ({error}); its result will be discarded")

    def _release(self, run: Run, event: str, delay: int, error: dict[str, str]) -> None:
        now = self.clock()
        delay = max(0, min(delay, MAX_INT - now))  # a retry beyond the largest time waits until it

        def release(now: int) -> None:
            self.source.release(run.lease, now=now, delay=min(delay, MAX_INT - now), error=error)

        self._send(run, event, release, error, delay=delay)

    def _send(self, run: Run, event: str, call: Any, error: dict[str, str], delay: int | None = None) -> None:
        try:
            self._deliver(run.lease, "fail" if event == "dead" else "release", call)
        except StaleLease as stale:
            run.context.lose("lease lost")
            self._record(run, "lost", f"{error['type']}: {error['message']}; then the lease was lost ({stale})")
            return
        except OSError as lost:
            self._record(run, "lost", f"{error['type']}: {error['message']}; the answer was lost ({lost})")
            return
        if event == "retried" and self._release_buried(run):
            event = "dead"  # that was its last attempt
        extra: dict[str, Any] = {"error": error}
        message = f"{error['type']}: {error['message']}"
        if delay is not None and event != "dead":
            extra["delay"] = delay
            message += f"; next attempt in {describe_delay(delay, self.units_per_second)}"
        self._record(run, event, message, **extra)

    def _fail(self, lease: Lease, now: int, error: dict[str, str]) -> None:
        """Dead at once; a source from before `fail` (it refuses it, nothing written) gets `cancel`, as dead."""
        try:
            self.source.fail(lease, now=now, error=error)
        except AttributeError:
            self.source.cancel(lease.task_id)

    def _give_back(self, lease: Lease, now: int) -> None:
        """Its attempt restored (`give_back`); a source from before the call gets a release, as it always did."""
        try:
            self.source.give_back(lease, now=now)
        except (ValueError, AttributeError):  # refused by an older server or object: nothing was written
            self.source.release(lease, now=now)

    def _release_buried(self, run: Run) -> bool:
        """Whether this very release made the task dead (its last attempt).

        Dead with this lease's generation: a task retried, leased again by
        another thread and buried by that one's release has a later one.
        """
        try:
            task = self.source.get(run.lease.task_id)
        except Exception:  # noqa: BLE001 - only the log line's word depends on it
            return False
        return task is not None and task.status == "dead" and task.generation == run.lease.generation


def _pipelined(source: Source) -> Pipelined:
    """`source` as the pipeline-grouped source its `grouping` declares it is (`reserve_with_acks` is for those)."""
    return cast(Pipelined, source)  # declared by its `grouping`, not probed
