"""`Worker`: runs a handler for each task of a queue, on N threads of this process, until it is stopped.

The worker is its roles, each a module with one job, and this class only
puts them together and answers for them (`start`, `stop`, `wait`, `run`,
`stats`):

- fetch (fetch.py): the fetcher thread reserves as many leases as there
  is room for (the threads plus an adaptive prefetch) and hands them out,
  or waits in the source's `wait` when nothing is due;
- execute (execute.py): N executor threads run the handler and hand its
  outcome to the completer;
- complete (complete.py): the one place that acks (alone, in batches by
  the acker thread, or riding the fetcher's reserve through a server),
  releases, fails or gives back a lease, and records how each run ended;
- keep alive (monitor.py): the monitor thread sends heartbeats and takes
  back timed-out tasks;
- lifecycle (lifecycle.py): the stop signals, the shutdown in order (no
  more reserves, the grace, release what still runs), and a timeout's
  consequence (a replacement executor, or a hard exit);
- the scheduler, with a schedule, puts the periodic firings (`schedule.py`).

Every option is one checked `WorkerSettings` (settings.py); the old
keywords still work and map onto it. The source is declared
(`WorkerSource`, source.py): nothing about it is probed at run time.
"""

from __future__ import annotations

import functools
import os
import threading
import time
from typing import Any, Unpack

from walqueue import Queue
from walqueue.worker.clock import ClockMismatch, agree_on_unit
from walqueue.worker.complete import Completer
from walqueue.worker.crew import Crew, Signals
from walqueue.worker.execute import Executor
from walqueue.worker.fetch import Fetcher, Prefetch
from walqueue.worker.lifecycle import EXIT_HARD_TIMEOUT, Lifecycle
from walqueue.worker.monitor import Monitor
from walqueue.worker.pending import Pending
from walqueue.worker.report import Report, log
from walqueue.worker.router import Handler
from walqueue.worker.settings import (
    DEFAULT_GRACE,
    DEFAULT_IDLE_WAIT,
    DEFAULT_LEASE,
    Grouping,
    WorkerOptions,
    WorkerSettings,
)
from walqueue.worker.source import Source, bounded_client
from walqueue.worker.sync_only import refuse_async

__all__ = ["DEFAULT_GRACE", "DEFAULT_IDLE_WAIT", "DEFAULT_LEASE", "EXIT_HARD_TIMEOUT", "Worker", "WorkerSettings"]

#: Through a server, how long a finished task's ack may wait for the fetcher's next reserve to carry it
#: (at most a tenth of the lease: a claimed run gets no more heartbeats).
_ACK_LINGER_SECONDS = 0.02


def settings_of(settings: WorkerSettings | None, options: WorkerOptions) -> WorkerSettings:
    """`settings` (or the defaults) with the old keywords' values; None for `retry` or `name` is the default."""
    given: dict[str, object] = {key: value for key, value in options.items()}
    for defaulted in ("retry", "name"):
        if defaulted in given and given[defaulted] is None:
            del given[defaulted]
    base = settings if settings is not None else WorkerSettings()
    return base.replace(**given) if given else base


def _declared_grouping(source: Source | None) -> Grouping:
    """The grouping `source` declares (None: a directory, opened as a `Queue`); a clear error if it declares none."""
    if source is None:
        return Queue.grouping
    try:
        return source.grouping
    except AttributeError:
        raise TypeError(
            f"{source!r} declares no grouping: a worker's source is a WorkerSource (a Queue, a Client), "
            "or the settings say how it groups calls: WorkerSettings(grouping='none')"
        ) from None


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

    The options are one `WorkerSettings` (``settings=``); each may also be
    given as a keyword of its own, which overrides the settings' value.

    Example: ``Worker("/var/lib/app/queue", handle, concurrency=8).run()``, or
    ``Worker(queue, handle, settings=WorkerSettings(concurrency=8, lease=60_000))``
    """

    _executor: Executor  # the roles, made by `start`
    _fetcher: Fetcher
    _completer: Completer

    def __init__(
        self,
        source: Source | str | os.PathLike[str],
        handler: Handler,
        *,
        settings: WorkerSettings | None = None,
        **options: Unpack[WorkerOptions],
    ) -> None:
        if not callable(handler):
            raise TypeError(f"the handler must be callable, not {handler!r}")
        refuse_async(handler)  # an `async def` handler would be acked unrun (sync_only.py)
        self.settings = settings_of(settings, options)
        self._directory = os.fspath(source) if isinstance(source, str | os.PathLike) else None
        self.source: Source | None = None if self._directory is not None else source  # type: ignore[assignment]
        self.handler = handler
        #: How the source sends calls together: the settings', else the source's declaration (a directory: a Queue).
        self.grouping: Grouping = self.settings.grouping or _declared_grouping(self.source)
        self._prefetch = Prefetch(
            self.settings.concurrency, self.settings.prefetch, pipelined=self.grouping == "pipeline"
        )
        self.report = Report(self.settings.name)
        self.fatal: BaseException | None = None  # what stopped the worker on its own, if anything
        self._signals = Signals()
        self._pending = Pending(self._prefetch.capacity(), halve=self.grouping == "pipeline")
        self._started = False
        self._next_summary = time.monotonic() + (self.settings.summary_every or 0)
        self._monitor: Any = None
        self._lifecycle_role: Lifecycle | None = None
        self._threads: list[threading.Thread] = []

    # The options, as the attributes they always were (read them from `settings`).
    name = property(lambda self: self.settings.name)
    concurrency = property(lambda self: self.settings.concurrency)
    lease = property(lambda self: self.settings.lease)
    timeout = property(lambda self: self.settings.timeout)
    grace = property(lambda self: self.settings.grace)
    clock = property(lambda self: self.settings.clock)
    units_per_second = property(lambda self: self.settings.units_per_second)
    queues = property(lambda self: None if self.settings.queues is None else list(self.settings.queues))
    prefetch = property(lambda self: self._prefetch.prefetch)

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Open the source (for a directory) and start the threads; returns at once."""
        if self._started:
            raise RuntimeError("a Worker is started once")
        self._started = True
        if self._directory is not None:
            self.source = Queue(self._directory)
        assert self.source is not None
        settings = self.settings
        try:  # ClockMismatch before any thread starts
            agree_on_unit(self.source, settings.units_per_second, record=True)
        except ClockMismatch:
            if isinstance(self.source, Queue) and self._directory is not None:
                self.source.close()
            raise
        lifecycle = self._assemble(self.source)
        for number in range(settings.concurrency):
            self._spawn(self._executor.run, f"executor-{number}")
        self._spawn(self._monitor_thread, "monitor")
        if settings.schedule:
            from walqueue.worker.schedule import Scheduler  # only with a schedule: tomllib and cron stay unimported

            scheduler = Scheduler(settings.schedule, self.source, units_per_second=settings.units_per_second)
            self._spawn(lambda: scheduler.run_forever(settings.clock, self._signals.stopping), "scheduler")
        if self._completer.acks is not None:
            linger = min(_ACK_LINGER_SECONDS, settings.lease / settings.units_per_second / 10)
            lifecycle.acker = self._spawn(
                lambda: self._completer.run_acker(linger if self.grouping == "pipeline" else 0.0), "acker"
            )
        self._spawn(self._fetcher.run, "fetcher")
        self._spawn(lifecycle.shutdown, "lifecycle")
        log.info(
            "worker %s started: %d thread(s), lease %d, timeout %s",
            settings.name,
            settings.concurrency,
            settings.lease,
            settings.timeout,
        )

    def _assemble(self, source: Source) -> Lifecycle:
        """Make the roles, each given the crew they share (crew.py)."""
        settings = self.settings
        # Acks wait for a batch only where it makes one round trip or one fsync; otherwise each thread
        # acks by itself, and the queue's group commit joins their fsyncs.
        acks = self._pending if self.grouping != "none" else None
        units = settings.units_per_second
        completer = Completer(
            source, settings.clock, settings.retry, self.report, units, grouping=self.grouping, acks=acks
        )
        bounded = bounded_client(source, max(0.05, min(settings.beat_every, max(settings.grace, 1)) / units))
        lifecycle: Lifecycle  # made below, on the monitor; the monitor reports timeouts to it
        monitor = Monitor(  # heartbeats through `bounded`: they never outlive the grace
            completer,
            lease=settings.lease,
            beat_every=settings.beat_every,
            on_timeout=lambda run: lifecycle.on_timeout(run),  # the lifecycle decides what a timeout costs
            timeout_error=lambda run: lifecycle.timeout_error(run),
            beats=bounded,
        )
        crew = Crew(self._signals, completer, monitor, self._pending)
        spawn = functools.partial(self._spawn, lambda: self._executor.run(), "executor (replacement)")
        lifecycle = Lifecycle(settings, crew, spawn_executor=spawn, bounded=bounded, on_done=self._finish)
        completer.sent = monitor.remove
        completer.fatal = self._fail_worker
        self._completer, self._monitor, self._lifecycle_role = completer, monitor, lifecycle
        self._fetcher = Fetcher(source, settings, crew, self._fail_worker)
        self._executor = Executor(handler=self.handler, settings=settings, crew=crew, prefetch=self._prefetch)
        return lifecycle

    def _spawn(self, target: Any, name: str) -> threading.Thread:
        thread = threading.Thread(target=target, name=f"walqueue-worker {name}", daemon=True)
        self._threads.append(thread)
        thread.start()
        return thread

    def stop(self, *, now: bool = False) -> None:
        """Stop reserving at once; running handlers get the grace, then are released (`now`: no grace)."""
        if self._lifecycle_role is not None:
            self._lifecycle_role.stop(now=now)
            return
        self._signals.stopping.set()  # not started: nothing runs, and `start` will find it stopping
        if now:
            self._signals.hurry.set()
        self._signals.stop_requested.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the worker is done (True) or `timeout` seconds pass (False)."""
        return self._signals.done.wait(timeout)

    @property
    def done(self) -> bool:
        return self._signals.done.is_set()

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
                self.stop(now=self._signals.stopping.is_set())
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

    def _fail_worker(self, error: BaseException) -> None:
        log.error("worker %s stops: %s: %s", self.settings.name, type(error).__name__, error)
        self.fatal = error
        self.stop()

    def _monitor_thread(self) -> None:
        settings = self.settings
        self._monitor.run_forever(settings.clock, settings.units_per_second, self._signals.monitor_stop, self._summary)

    def _summary(self) -> float:
        """Log the summary line when it is due; the seconds until the next one (infinity: never)."""
        every = self.settings.summary_every
        if every is None:
            return float("inf")
        if time.monotonic() >= self._next_summary:
            self._next_summary = time.monotonic() + every
            self.report.summary(self._running())
        return max(0.0, self._next_summary - time.monotonic())

    def _finish(self) -> None:
        """The lifecycle's last step: close a queue opened from a directory, log the summary, done."""
        if self._directory is not None and self.source is not None:
            assert isinstance(self.source, Queue)
            self.source.close()
        self.report.summary(self._running())
        log.info("worker %s stopped", self.settings.name)
        self._signals.done.set()

    def __repr__(self) -> str:
        where = self._directory if self._directory is not None else repr(self.source)
        return f"<Worker {self.name!r} on {where}, {self.concurrency} thread(s){', stopped' if self.done else ''}>"
