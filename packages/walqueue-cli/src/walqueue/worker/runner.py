"""`Worker`: runs a handler for each task of a queue, on N threads of this process, until it is stopped.

The threads, and why each exists:

- the fetcher reserves tasks, as many as there is room for (the threads
  plus a prefetch, one `reserve` call for all of them: by default as
  many as the threads run in about a tenth of a second, as measured, so
  that a worker with slow handlers takes no more than it starts at
  once), and hands them out; through walqueue-serve it reserves only
  once half its leases are used, and sends the acks waiting then in the
  same round trip (one `ack_many` and the `reserve` in one pipeline);
  when nothing is due it blocks in the source's `wait` until a commit or
  the next due time (`stats()`'s `next_available_at` and
  `next_deadline`), at most `idle_wait` clock units: an idle worker costs
  a wake-up per `idle_wait`, never a spin;
- N executors run the handler, then release a failure through the
  `Settler`, and hand a success to the acker;
- the acker sends the acks in batches (`pending.py`), each one `ack_many`
  (one transaction): those no reserve took, through a client; all of
  them, in one fsync, on a `Queue` (without `pipeline` or `batch`, the
  executors ack by themselves);
- the monitor sends heartbeats and takes back timed-out tasks (`monitor.py`);
- the scheduler, with a schedule, puts the periodic firings (`schedule.py`);
- the lifecycle thread waits for `stop()` and then shuts down in order:
  no more reserves at once, running handlers get `grace` clock units to
  finish, then their leases are released (so another worker takes them
  now rather than when the lease runs out) and the worker is done, holding
  no lease. A second `stop(now=True)` cuts the grace short.

Threads cannot be killed: a handler that overruns its timeout, or the
grace, keeps running in its thread, but its lease is released and whatever
it does afterwards is discarded (its context says so: `context.check()`
raises `LeaseLost`). A replacement executor takes its place, so a stuck
handler does not shrink the pool. With processes (`supervisor.py`), a
timeout is hard: the process exits and a new one is started.
"""

from __future__ import annotations

import functools
import logging
import os
import queue as queue_module
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from walqueue import Lease, Queue, QueueClosed, StaleLease
from walqueue.engine.validate import check_queues_filter
from walqueue.worker.clock import MILLISECONDS, Clock, ClockMismatch, agree_on_unit, milliseconds, seconds_until
from walqueue.worker.completion import Completion, send_completion
from walqueue.worker.forks import leave_if_forked
from walqueue.worker.pending import Pending
from walqueue.worker.report import Report, log
from walqueue.worker.retry import RetryPolicy
from walqueue.worker.router import Handler
from walqueue.worker.running import Run, Settler
from walqueue.worker.schedule import Periodic, Scheduler
from walqueue.worker.source import Source, ack_many, bounded_client, settle_acks
from walqueue.worker.sync_only import refuse_async, refuse_awaitable

__all__ = ["DEFAULT_GRACE", "DEFAULT_IDLE_WAIT", "DEFAULT_LEASE", "EXIT_HARD_TIMEOUT", "Worker"]

#: Defaults in milliseconds (the default clock's unit); docs/DECISIONS.md says why.
DEFAULT_LEASE = 30_000
DEFAULT_GRACE = 20_000
DEFAULT_IDLE_WAIT = 5_000
DEFAULT_HEARTBEAT = 1 / 3
#: The exit status of a worker process that ended itself because a handler overran a hard timeout.
EXIT_HARD_TIMEOUT = 75
#: After a failed call to the source (the server is away), the fetcher waits this long, doubling up to the cap.
_BACKOFF_SECONDS = (0.05, 2.0)
#: At most this many leases prefetched per thread when the source is a client of walqueue-serve (docs/DECISIONS.md).
_PREFETCH_THROUGH_A_SERVER = 31
#: By default a worker holds only as many leases as its threads run in this long (their mean run time, measured).
_PREFETCH_WINDOW_SECONDS = 0.1
#: Through a server, how long a finished task's ack may wait for the fetcher's next reserve to carry it
#: (at most a tenth of the lease: a claimed run gets no more heartbeats).
_ACK_LINGER_SECONDS = 0.02
#: How long a stopping worker waits for its last batch of acks (a server that stopped answering).
_ACKER_JOIN_SECONDS = 60.0


def _default_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Worker:
    """Run `handler(job, context)` for each task of `source` until stopped.

    `source`: a `Queue` (used as is, not closed), a `walqueue.cli.Client`
    (through walqueue-serve), or a directory path (opened as a `Queue` on
    `start` and closed when the worker is done). `handler`: a callable, or
    a `Router`. Every time (`lease`, `timeout`, `grace`, `idle_wait`, the
    retry policy's delays, `Retry(delay=)`) is in the units of `clock`
    (default: milliseconds since the epoch), of which `units_per_second`
    make a second. `timeout=None`: no timeout. `heartbeat`: the fraction of
    the lease after which a running task's lease is extended. `prefetch`:
    leases held beyond one per thread, so that a thread that finishes finds
    its next task ready (0: none). By default (None) it adapts: as many as
    the threads run in about 0.1 s (their handlers' mean time, measured;
    one per thread until then), at most one per thread, or 31 through a
    client of walqueue-serve, where each reserve costs a round trip (it
    reserves again once half are used). Every lease held, started or not,
    gets its heartbeats; at shutdown the unstarted ones are given back at
    once (`Queue.give_back`: their attempts restored).

    Example: ``Worker("/var/lib/app/queue", handle, concurrency=8).run()``
    """

    def __init__(
        self,
        source: Source | str | os.PathLike[str],
        handler: Handler,
        *,
        concurrency: int = 1,
        prefetch: int | None = None,
        lease: int = DEFAULT_LEASE,
        timeout: int | None = None,
        grace: int = DEFAULT_GRACE,
        heartbeat: float = DEFAULT_HEARTBEAT,
        retry: RetryPolicy | None = None,
        schedule: Iterable[Periodic] = (),
        clock: Clock = milliseconds,
        units_per_second: int = MILLISECONDS,
        idle_wait: int = DEFAULT_IDLE_WAIT,
        name: str | None = None,
        hard_timeout: bool = False,
        summary_every: float | None = None,
        queues: Iterable[str] | None = None,
    ) -> None:
        if not callable(handler):
            raise TypeError(f"the handler must be callable, not {handler!r}")
        refuse_async(handler)  # an `async def` handler would be acked unrun (sync_only.py)
        for what, value, low in (
            ("concurrency", concurrency, 1),
            ("lease", lease, 1),
            ("grace", grace, 0),
            ("idle_wait", idle_wait, 1),
            ("units_per_second", units_per_second, 1),
        ):
            if type(value) is not int or value < low:
                raise ValueError(f"{what} must be an int >= {low}, not {value!r}")
        self._adaptive = prefetch is None
        if prefetch is None:  # at most one per thread; 31 through a server, where each reserve is a round trip
            prefetch = concurrency * (_PREFETCH_THROUGH_A_SERVER if hasattr(source, "pipeline") else 1)
        if type(prefetch) is not int or prefetch < 0:
            raise ValueError(f"prefetch must be an int >= 0, not {prefetch!r}")
        if timeout is not None and (type(timeout) is not int or timeout < 1):
            raise ValueError(f"timeout must be None or an int >= 1 (clock units), not {timeout!r}")
        if not 0 < heartbeat < 1:
            raise ValueError(f"heartbeat is a fraction of the lease, between 0 and 1 exclusive, not {heartbeat!r}")
        self._directory = os.fspath(source) if isinstance(source, str | os.PathLike) else None
        self.source: Source | None = None if self._directory is not None else source  # type: ignore[assignment]
        self.handler = handler
        self.concurrency = concurrency
        self.prefetch = prefetch
        self.lease = lease
        self.timeout = timeout
        self.grace = grace
        self.beat_every = max(1, int(lease * heartbeat))
        self.retry = retry if retry is not None else RetryPolicy()
        self.schedule = list(schedule)
        self.clock = clock
        self.units_per_second = units_per_second
        self.idle_wait = idle_wait
        self.name = name if name is not None else _default_name()
        self.hard_timeout = hard_timeout
        self.summary_every = summary_every
        #: The queues this worker leases from (None: every queue); checked as `Queue.reserve` checks them.
        self.queues = None if queues is None else list(check_queues_filter(list(queues)) or ())
        self._lanes: dict[str, list[str]] = {} if self.queues is None else {"queues": self.queues}
        self.report = Report(self.name)
        self.fatal: BaseException | None = None  # what stopped the worker on its own, if anything
        self._stopping = threading.Event()  # no more reserves
        self._stop_requested = threading.Event()
        self._hurry = threading.Event()  # release at once, no more grace
        self._done = threading.Event()
        self._reserving = threading.Lock()
        # Through a server the acks ride on the reserves, which wait until half the leases are free.
        self._acks_ride_reserves = hasattr(source, "pipeline")
        self._mean_run_seconds: float | None = None  # the handlers' mean run time (a moving average)
        self._pending = Pending(self._capacity(), halve=self._acks_ride_reserves)
        self._ack_linger = min(_ACK_LINGER_SECONDS, lease / units_per_second / 10) if self._acks_ride_reserves else 0.0
        self._handoff: queue_module.SimpleQueue[Run | None] = queue_module.SimpleQueue()
        self._started = False
        self._monitor_stop = threading.Event()
        self._next_summary = time.monotonic() + (summary_every or 0)
        self._settler: Settler | None = None
        self._batched_acks = False
        self._acker_thread: threading.Thread | None = None
        self._monitor: Any = None
        self._threads: list[threading.Thread] = []
        self._pid = os.getpid()
        self._bounded: Any = None  # through a server: a client whose calls give up in time (`bounded_client`)

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Open the source (for a directory) and start the threads; returns at once."""
        from walqueue.worker.monitor import Monitor

        if self._started:
            raise RuntimeError("a Worker is started once")
        self._started = True
        self._pid = os.getpid()  # a process forked by a handler is not this worker (`leave_if_forked`)
        if self._directory is not None:
            self.source = Queue(self._directory)
        assert self.source is not None
        try:  # ClockMismatch before any thread starts
            agree_on_unit(self.source, self.units_per_second, record=True)
        except ClockMismatch:
            if isinstance(self.source, Queue) and self._directory is not None:
                self.source.close()
            raise
        self._settler = Settler(self.source, self.clock, self.retry, self.report, self.units_per_second)
        # Acks go to the acker thread only where its batches make one round trip or one fsync;
        # otherwise each thread acks by itself, and the queue's group commit joins their fsyncs.
        self._batched_acks = hasattr(self.source, "pipeline") or hasattr(self.source, "batch")
        bound = max(0.05, min(self.beat_every, max(self.grace, 1)) / self.units_per_second)
        self._bounded = bounded_client(self.source, bound)  # heartbeats never outlive the grace
        self._monitor = Monitor(
            self._settler,
            lease=self.lease,
            beat_every=self.beat_every,
            on_timeout=self._on_timeout,
            timeout_error=self._timeout_error,
            beats=self._bounded,
        )
        for number in range(self.concurrency):
            self._spawn(self._executor, f"executor-{number}")
        self._spawn(self._monitor_thread, "monitor")
        if self.schedule:
            scheduler = Scheduler(self.schedule, self.source, units_per_second=self.units_per_second)
            self._spawn(lambda: scheduler.run_forever(self.clock, self._stopping), "scheduler")
        if self._batched_acks:
            self._acker_thread = self._spawn(self._acker, "acker")
        self._spawn(self._fetcher, "fetcher")
        self._spawn(self._lifecycle, "lifecycle")
        log.info(
            "worker %s started: %d thread(s), lease %d, timeout %s",
            self.name,
            self.concurrency,
            self.lease,
            self.timeout,
        )

    def _spawn(self, target: Any, name: str) -> threading.Thread:
        thread = threading.Thread(target=target, name=f"walqueue-worker {name}", daemon=True)
        self._threads.append(thread)
        thread.start()
        return thread

    def stop(self, *, now: bool = False) -> None:
        """Stop reserving at once; running handlers get the grace, then are released (`now`: no grace)."""
        self._stopping.set()
        if now:
            self._hurry.set()
        self._stop_requested.set()
        self._pending.wake()
        if self._monitor is not None:
            self._monitor.wake()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the worker is done (True) or `timeout` seconds pass (False)."""
        return self._done.wait(timeout)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def run(self) -> None:
        """Start, and block until stopped; Ctrl-C stops it (a second Ctrl-C: no grace).

        Raises what stopped the worker on its own (a poisoned queue), once it is done.
        """
        self.start()
        while True:
            try:
                if self.wait(None):
                    break
            except KeyboardInterrupt:
                self.stop(now=self._stopping.is_set())
        if self.fatal is not None:
            raise self.fatal

    def stats(self) -> dict[str, Any]:
        """The counters of every outcome (`report.OUTCOMES`), `processed`, `running` and `rate` (tasks/s)."""
        return self.report.snapshot(self._running())

    def _running(self) -> int:
        """Handlers running now (prefetched leases waiting for a thread are not counted)."""
        if self._monitor is None:
            return 0
        return sum(1 for run in self._monitor.runs() if run.begun and not run.finished)

    # -- the threads -----------------------------------------------------------------------

    def _fetcher(self) -> None:
        assert self.source is not None
        backoff = _BACKOFF_SECONDS[0]
        while True:
            room = self._pending.wait_room(self._stopping)
            if room == 0:
                return
            try:
                with self._reserving:
                    if self._stopping.is_set():
                        return
                    now = self.clock()
                    leases = self._reserve(now, room)
                    for lease in leases:
                        self._dispatch(lease, now)
                if not leases:
                    self._idle()
                backoff = _BACKOFF_SECONDS[0]
            except OSError as error:  # the server is away (the client reconnects on its own for a while)
                if self._stopping.is_set():
                    return
                log.warning("cannot reach the queue (%s); trying again in %.2f s", error, backoff)
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, _BACKOFF_SECONDS[1])
            except QueueClosed as error:
                if not self._stopping.is_set():
                    self._fail_worker(error)
                return
            except Exception as error:  # a bug: stop rather than spin on it
                log.exception("the fetcher failed")
                self._fail_worker(error)
                return

    def _reserve(self, now: int, room: int) -> list[Lease]:
        """Reserve up to `room` leases; through a server, with the acks waiting now, in one round trip."""
        source = self.source
        assert source is not None
        runs = self._pending.take_acks() if self._acks_ride_reserves else []
        if not runs:
            return source.reserve(self.name, now=now, lease_seconds=self.lease, limit=room, **self._lanes)
        calls = source.pipeline()  # type: ignore[attr-defined]  # a client's (`_acks_ride_reserves`)
        leases = [run.lease for run in runs]
        calls.ack_many(leases, now=now)
        calls.reserve(self.name, now=now, lease_seconds=self.lease, limit=room, **self._lanes)
        try:
            acked, reserved = calls.execute(raise_on_error=False)
        except Exception as error:  # noqa: BLE001 - the client closed, say: the acks' fate is the reserve's
            acked = reserved = error
        self._settle_acks(runs, functools.partial(settle_acks, source, leases, acked, now=now))
        if isinstance(reserved, BaseException):
            raise reserved
        result: list[Lease] = reserved
        return result

    def _acker(self) -> None:
        """Send the acks of finished tasks in batches: all that came in while the previous batch was sent."""
        source = self.source
        assert source is not None
        while (acks := self._pending.next_acks(self._ack_linger)) is not None:
            self._settle_acks(acks, functools.partial(ack_many, source, [run.lease for run in acks], now=self.clock()))

    def _settle_acks(self, runs: list[Run], send: Callable[[], list[BaseException | None]]) -> None:
        """Count and log the outcome of each run's ack, as `send()` returns them (or raises, for all)."""
        assert self._settler is not None
        try:
            errors = send()
        except Exception as error:  # noqa: BLE001 - a lost connection, or a poisoned queue: the acks' fate is unknown
            errors = [error if isinstance(error, OSError) else ConnectionError(f"{type(error).__name__}: {error}")]
            errors *= len(runs)
            if isinstance(error, QueueClosed) and not self._stopping.is_set():
                self._fail_worker(error)
        for run, ack_error in zip(runs, errors, strict=True):
            self._settler.acked(run, ack_error)
            self._monitor.remove(run)

    def _capacity(self) -> int:
        """How many leases to hold: the threads plus the prefetch, or (adaptive) what they run in the window."""
        most = self.concurrency + self.prefetch
        if not self._adaptive:
            return most
        mean = self._mean_run_seconds
        if mean is None:  # nothing measured yet: one per thread, as a thread that finishes needs
            return self.concurrency + min(self.prefetch, self.concurrency)
        per_thread = int(_PREFETCH_WINDOW_SECONDS / max(mean, 1e-6))
        return max(self.concurrency, min(most, self.concurrency * per_thread))

    def _measured(self, seconds: float) -> None:
        """One handler ran `seconds`: the moving average (a lost update between threads is harmless)."""
        mean = self._mean_run_seconds
        self._mean_run_seconds = seconds if mean is None else mean + (seconds - mean) / 8

    def _fail_worker(self, error: BaseException) -> None:
        log.error("worker %s stops: %s: %s", self.name, type(error).__name__, error)
        self.fatal = error
        self.stop()

    def _dispatch(self, lease: Lease, now: int) -> None:
        """Hand a fresh lease to an idle executor (called with the reserve lock held)."""
        run = Run.start(lease, self.clock, now, self.beat_every, None)  # the timeout counts from `begin`
        self._pending.take()
        self._monitor.add(run)
        self._handoff.put(run)

    def _idle(self) -> None:
        """Nothing was due: block until a commit or the next due time, at most `idle_wait`."""
        assert self.source is not None
        stats = self.source.stats()
        dues = [time for time in (stats.get("next_available_at"), stats.get("next_deadline")) if time is not None]
        now = self.clock()
        wake_at = min([now + self.idle_wait, *dues])
        if wake_at > now and not self._stopping.is_set():
            self._pending.idle(True)  # no reserve will take the acks of tasks still running: the acker sends them
            self.source.wait(seconds_until(wake_at, now, self.units_per_second))

    def _executor(self) -> None:
        assert self._settler is not None
        while True:
            run = self._handoff.get()
            if run is None:
                return
            try:
                queued = self._execute(run)
            except Exception:  # a bug in recording the outcome: this thread must live on for the next task
                log.exception(
                    "recording the outcome of %s failed; its lease will run out and it runs again", run.job.id
                )
                queued = False
            with run.lock:
                run.finished = True
                replaced = run.abandoned
            if not queued:
                self._monitor.remove(run)
            if replaced:
                return  # a new executor took this one's place when its handler timed out
            self._pending.give(self._capacity() if self._adaptive else None)

    def _execute(self, run: Run) -> bool:
        """Run the handler and settle its outcome; True if the ack was left to the fetcher."""
        assert self._settler is not None and self.source is not None
        with run.lock:
            if run.settled:  # given back at shutdown before it started
                return False
            run.begin(self.clock(), self.timeout)
        if self.timeout is not None:
            self._monitor.begun(run)
        began = time.monotonic()
        try:
            outcome = self.handler(run.job, run.context)
            refuse_awaitable(outcome)  # a plain handler that returned a coroutine: never acked unrun
        except BaseException as error:  # noqa: BLE001 - every failure of a handler is the task's, not the worker's
            leave_if_forked(self._pid, run.job.id, error)
            run.end(self.clock())
            self._measured(time.monotonic() - began)
            self._settler.fail(run, error)
            return False
        leave_if_forked(self._pid, run.job.id, None)
        run.end(self.clock())
        self._measured(time.monotonic() - began)
        if not self._settler.claim(run):
            return False
        if isinstance(outcome, Completion) and not outcome.plain:  # an App's result or follow-ups: one `complete`
            try:
                send_completion(self.source, run.lease, outcome, now=self.clock())
            except Exception as error:  # noqa: BLE001 - refused whole (too large for a frame): it runs again
                lost = error if isinstance(error, StaleLease | OSError) else ConnectionError(f"refused: {error}")
                self._settler.acked(run, lost)
            else:
                self._settler.acked(run, None)
            return False
        if self._batched_acks:
            self._pending.queue_ack(run)
            return True
        try:
            self.source.ack(run.lease, now=self.clock())
        except (StaleLease, OSError) as error:
            self._settler.acked(run, error)
        else:
            self._settler.acked(run, None)
        return False

    def _on_timeout(self, run: Run) -> None:
        """The monitor took back a timed-out run: free its slot (a new executor), or end the process (hard)."""
        if self.hard_timeout:
            self._exit_hard(run)
        with run.lock:
            if run.finished:
                return  # its executor is already back in the pool
            run.abandoned = True
        if not self._stopping.is_set():
            self._spawn(self._executor, "executor (replacement)")
        self._pending.give()

    def _exit_hard(self, run: Run) -> None:
        """A hard timeout: release every other running task, then end this process at once."""
        assert self._settler is not None
        log.error("%s overran its hard timeout: the process exits and its supervisor starts a new one", run.job.id)
        error = {"type": "WorkerRestart", "message": f"the worker process restarted after {run.job.id} timed out"}
        for other in self._monitor.runs():
            if not self._settler.withdraw(other, "restart"):  # unstarted: given back, its attempt restored
                self._settler.abandon(other, "interrupted", "restart", 0, error)
        for handler in logging.getLogger().handlers + logging.getLogger("walqueue").handlers:
            handler.flush()
        os._exit(EXIT_HARD_TIMEOUT)

    def _timeout_error(self, run: Run) -> dict[str, str]:
        return {"type": "Timeout", "message": f"the handler ran longer than its timeout ({self.timeout} clock units)"}

    def _monitor_thread(self) -> None:
        self._monitor.run_forever(self.clock, self.units_per_second, self._monitor_stop, self._maybe_summary)

    def _maybe_summary(self) -> float:
        """Log the summary line when it is due; the seconds until the next one (infinity: never)."""
        if self.summary_every is None:
            return float("inf")
        if time.monotonic() >= self._next_summary:
            self._next_summary = time.monotonic() + self.summary_every
            self.report.summary(self._running())
        return max(0.0, self._next_summary - time.monotonic())

    def _lifecycle(self) -> None:
        """Wait for `stop`, then: no more reserves, the grace, release what still runs, close."""
        self._stop_requested.wait()
        assert self._settler is not None
        with self._reserving:  # a reserve under way has handed out its leases when this returns
            pass
        if self._bounded is not None:  # from now on each call is tried once: nobody restarts a server mid-stop
            self._bounded.reconnect_seconds = 0.0
            self._settler.source = self._bounded
        for run in self._monitor.runs():
            if self._settler.withdraw(run):  # prefetched, never started: given back now, not after the grace
                self._monitor.remove(run)
        started = self.clock()
        grace_end = started + self.grace
        for run in self._monitor.runs():
            run.context.shorten(grace_end)
        if not self._hurry.is_set():
            log.info("worker %s stopping: %d task(s) running, grace %d", self.name, len(self._monitor), self.grace)
            self._monitor.wait_empty(seconds_until(grace_end, started, self.units_per_second), self._hurry)
        error = {"type": "Shutdown", "message": "the worker stopped before the handler finished"}
        for run in self._monitor.runs():
            if not self._settler.withdraw(run):  # never started (handed out meanwhile): its attempt restored
                self._settler.abandon(run, "interrupted", "shutdown", 0, error)
        self._pending.close()  # the acker sends the acks still queued, then ends
        if self._acker_thread is not None:
            self._acker_thread.join(_ACKER_JOIN_SECONDS)
        self._finish()

    def _finish(self) -> None:
        self._monitor_stop.set()
        self._monitor.wake()
        for _ in range(self.concurrency):
            self._handoff.put(None)
        if self._directory is not None and self.source is not None:
            assert isinstance(self.source, Queue)
            self.source.close()
        if self._bounded is not None:
            self._bounded.close()
        self.report.summary(self._running())
        log.info("worker %s stopped", self.name)
        self._done.set()

    def __repr__(self) -> str:
        where = self._directory if self._directory is not None else repr(self.source)
        return f"<Worker {self.name!r} on {where}, {self.concurrency} thread(s){', stopped' if self.done else ''}>"
