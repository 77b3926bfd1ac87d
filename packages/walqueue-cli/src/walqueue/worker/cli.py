"""walqueue-worker: run a handler for each task of a queue directory, or of a walqueue-serve socket.

    walqueue-worker DIR app.tasks:handle --concurrency 8
    walqueue-worker DIR app.tasks:handle --processes 4      # starts walqueue-serve DIR itself
    walqueue-worker --socket /run/app/queue.sock app.tasks:handle

The handler is imported before anything else is touched: a handler that
cannot be imported is a usage error (64), and nothing is written, not even
the directory. Times on the command line are in seconds; the worker's clock
is milliseconds since the epoch, so producers must use milliseconds for
`available_at`.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import logging
import os
import select
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any, Final

from walqueue import WalQueueError
from walqueue.engine.events import JsonLinesFormatter
from walqueue.engine.validate import check_queues_filter
from walqueue.format.cmdline import EX_USAGE, EXIT_CANNOT_OPEN, EXIT_FATAL, EXIT_OK, UsageParser, version_line
from walqueue.serve.parentpipe import add_parent_pipe_argument, add_ready_pipe_argument, wait_until_ready, watch_parent
from walqueue.worker.clock import MILLISECONDS
from walqueue.worker.summaries import add_summary_fd_argument, send_summary
from walqueue.worker.sync_only import AsyncHandler, refuse_async

if TYPE_CHECKING:  # the scheduler (tomllib, cron) is imported only for --schedule
    from walqueue.worker.schedule import Periodic

__all__ = ["EXIT_SERVER", "StopSignals", "main", "open_store", "resolve_handler", "until_stopped"]

PROG = "walqueue-worker"
#: The server could not be started (the other exit statuses are walqueue.format.cmdline's).
EXIT_SERVER = 3

_EPILOG = """\
The handler, MODULE:CALLABLE (the current directory is searched first, as
`python -m` does), is called as handler(job, context) for each task: job.id,
job.payload, job.attempts; context.time_left(), context.lease_lost,
context.check(). Returning acks the task; raising releases it for a retry
after an exponential backoff (raise walqueue.worker.Retry(delay=MS) to
choose the delay, walqueue.worker.Permanent to make it dead at once). A
walqueue.worker.Router picks a function by payload["kind"].

Times: options take seconds; the worker's clock is milliseconds since the
epoch (producers use milliseconds for available_at).

SIGTERM or SIGINT: stop reserving at once, give running handlers --grace
seconds, then release their leases and exit 0. A second signal releases at
once.

exit status: 0 stopped by a signal; 1 the queue failed (poisoned by an I/O
error); 2 DIR could not be opened (corrupt, locked by another owner); 3 the
server (--processes with DIR) could not be started; 64 usage error (also a
handler that cannot be imported or is async def, or a bad --schedule file).

With --processes, the first process alone runs --schedule, and the
supervisor logs one summary line for all of them."""


@functools.cache
def _parser() -> UsageParser:
    """The command's parser, made once: a child forked by the supervisor parses its own line with the same one."""
    parser = UsageParser(
        prog=PROG,
        usage=f"{PROG} (DIR | --socket PATH) MODULE:CALLABLE [options]",
        description="Run MODULE:CALLABLE for each task of the WALQueue in DIR (or served on --socket PATH).",
        epilog=_EPILOG,
    )
    parser.add_argument("places", nargs="+", metavar="[DIR] MODULE:CALLABLE", help=argparse.SUPPRESS)
    parser.add_argument("--socket", metavar="PATH", help="use the walqueue-serve listening on PATH instead of DIR")
    parser.add_argument("--concurrency", type=_positive_int, default=1, metavar="N", help="threads per process (1)")
    parser.add_argument(
        "--prefetch",
        type=_count,
        metavar="N",
        help="extra leases held (default: what the threads run in 0.1 s, at most 1 per thread, 31 through a server)",
    )
    parser.add_argument(
        "--processes",
        type=_positive_int,
        metavar="P",
        help="P processes sharing the queue through walqueue-serve",
    )
    parser.add_argument(
        "--start-method",
        choices=["fork", "spawn"],
        help="with --processes: fork the processes from the supervisor (default, but spawn on macOS) "
        "or start fresh interpreters (spawn)",
    )
    parser.add_argument("--lease", type=_seconds, default=30.0, metavar="S", help="lease length in seconds (30)")
    parser.add_argument(
        "--grace", type=_seconds_or_zero, default=20.0, metavar="S", help="shutdown grace in seconds (20)"
    )
    parser.add_argument("--timeout", type=_seconds, metavar="S", help="a handler's time limit in seconds (none)")
    parser.add_argument("--schedule", metavar="FILE", help="periodic tasks: a TOML ([[task]]) or JSON file")
    parser.add_argument("--name", type=_worker_name, help="the worker name in leases (default HOST:PID)")
    parser.add_argument(
        "--queues", type=_queue_list, metavar="Q1,Q2", help="lease only from these queues (default: every queue)"
    )
    parser.add_argument("--log-json", action="store_true", help="log JSON lines instead of text")
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="INFO: a line per task"
    )
    parser.add_argument(
        "--summary",
        type=_seconds_or_zero,
        default=60.0,
        metavar="S",
        help="a summary line every S seconds (60; 0: never)",
    )
    parser.add_argument("--hard-timeout", action="store_true", help=argparse.SUPPRESS)
    add_parent_pipe_argument(parser)  # set by the supervisor: a child stops as on SIGTERM once it is gone
    add_summary_fd_argument(parser)  # set by the supervisor: a child sends it its counters, for one combined line
    add_ready_pipe_argument(parser)  # set by the supervisor: a child started beside its server waits for it
    parser.add_argument("--version", action="version", version=version_line(PROG))
    return parser


def _queue_list(text: str) -> list[str]:
    """An argparse type for ``--queues a,b``: the queue names, each checked as the engine checks one."""
    try:
        return list(check_queues_filter(text.split(",")) or ())
    except (TypeError, ValueError) as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type for a whole number >= `minimum`; anything else is a usage error that names the bound."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an int >= {minimum}, not {text!r}")
        return value

    return parse


def _worker_name(text: str) -> str:
    """An argparse type: a name the queue can store as a lease's worker (the engine's rule, checked up front)."""
    from walqueue.engine.validate import check_name

    try:
        return check_name(text, "--name")
    except (TypeError, ValueError) as error:
        raise argparse.ArgumentTypeError(str(error)) from None


_positive_int: Final = _int_at_least(1)
_count: Final = _int_at_least(0)


def _seconds_or_zero(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 10**9:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, not {text!r}")
    return value


def _seconds(text: str) -> float:
    value = _seconds_or_zero(text)
    if value * MILLISECONDS < 1:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0.001, not {text!r}")
    return value


def milliseconds_of(seconds: float) -> int:
    return max(1, round(seconds * MILLISECONDS))


class HandlerImportError(WalQueueError, ValueError):
    """MODULE:CALLABLE cannot be imported or is not callable (a usage error)."""


def resolve_handler(spec: str) -> Callable[..., Any]:
    """Import MODULE:CALLABLE (dotted attributes allowed after the colon); `HandlerImportError` says why not."""
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        raise HandlerImportError(f"the handler must be MODULE:CALLABLE (for example app.tasks:handle), not {spec!r}")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)  # as `python -m` and `python script.py` do: the project's own modules are found
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as error:  # an ImportError, or any error raised by the module's own code
        raise HandlerImportError(f"cannot import {module_name!r}: {type(error).__name__}: {error}") from error
    for name in attribute.split("."):
        try:
            target = getattr(target, name)
        except AttributeError:
            raise HandlerImportError(f"{module_name!r} has no attribute {attribute!r}") from None
    if not callable(target):
        raise HandlerImportError(f"{spec} is not callable: {target!r}")
    try:
        refuse_async(target)
    except AsyncHandler as error:
        raise HandlerImportError(str(error)) from None
    return target  # type: ignore[no-any-return]


def configure_logging(level: str, json_lines: bool) -> None:
    """Log the `walqueue` loggers to stderr, as text or JSON lines (left alone if the application set a handler)."""
    logger = logging.getLogger("walqueue")
    if not any(not isinstance(handler, logging.NullHandler) for handler in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        formatter = (
            JsonLinesFormatter() if json_lines else logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s")
        )
        handler.setFormatter(formatter)
        logger.addHandler(handler)
    logger.setLevel(level)


class StopSignals:
    """SIGTERM/SIGINT caught from the moment this is entered, and acted on by `run` once the target has started.

    Entered before the store is opened, so a signal that arrives while the
    worker opens its store or starts is never the default action (death by
    the signal, no clean stop): it is counted and acted on once it has
    started. The handlers only count; the main thread acts, woken by
    `signal.set_wakeup_fd`, so no lock is ever taken inside a signal
    handler. Leaving puts back the handlers found.
    """

    def __enter__(self) -> StopSignals:
        self.wake_read, self.wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.received: list[int] = []
        self.previous = {number: signal.signal(number, self._on_signal) for number in (signal.SIGTERM, signal.SIGINT)}
        self.previous_fd = signal.set_wakeup_fd(self.wake_write, warn_on_full_buffer=False)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.set_wakeup_fd(self.previous_fd)
        for number, handler in self.previous.items():
            signal.signal(number, handler)
        os.close(self.wake_read)
        # wake_write stays open: the done-notifier may still write to it (it is close-on-exec).

    def _on_signal(self, number: int, frame: FrameType | None) -> None:
        self.received.append(number)

    def run(self, target: Any, start: Callable[[], Any], parent_pipe: int | None = None) -> bool:
        """Call `start`, then block until `target` is done; a first signal stops it, a second with ``now=True``.

        With `parent_pipe` (``--parent-pipe``: a supervisor's child), the end of
        that pipe (the supervisor is gone) acts as a SIGTERM this process sends
        itself, so the same stop runs: grace, then release. Returns False (at
        once) if `start` returns False.
        """

        def notify_done() -> None:
            target.wait(None)
            try:
                os.write(self.wake_write, b"d")
            except OSError:
                pass

        if parent_pipe is not None:
            watch_parent(parent_pipe, lambda: os.kill(os.getpid(), signal.SIGTERM))
        if start() is False:
            return False
        threading.Thread(target=notify_done, name="walqueue-worker done", daemon=True).start()
        acted = 0
        while not target.wait(0):
            while acted < min(len(self.received), 2):  # a signal of the start (before `run`) is acted on first
                acted += 1
                logging.getLogger("walqueue.worker").info(
                    "%s received: %s",
                    signal.Signals(self.received[acted - 1]).name,
                    "stopping (a second signal releases at once)" if acted == 1 else "releasing at once",
                )
                target.stop(now=acted == 2)
            if target.wait(0):
                break
            select.select([self.wake_read], [], [])
            try:
                os.read(self.wake_read, 512)
            except BlockingIOError:
                pass
        return True


def until_stopped(target: Any, start: Callable[[], Any], parent_pipe: int | None = None) -> bool:
    """`StopSignals().run(...)` for a target that already exists: signals are caught from this call on."""
    with StopSignals() as signals:
        return signals.run(target, start, parent_pipe)


def _usage(parser: UsageParser, message: str) -> int:
    parser.print_usage(sys.stderr)
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return EX_USAGE


def main(argv: Sequence[str] | None = None) -> int:
    """The walqueue-worker command; returns its exit status."""
    parser = _parser()
    arguments = parser.parse_args(argv)
    places: list[str] = arguments.places
    if arguments.socket is not None:
        if len(places) != 1:
            return _usage(parser, "with --socket, give only MODULE:CALLABLE (no DIR)")
        directory, spec = None, places[0]
    else:
        if len(places) != 2:
            return _usage(parser, "give DIR and MODULE:CALLABLE (or --socket PATH and MODULE:CALLABLE)")
        directory, spec = places
    if arguments.start_method is not None and arguments.processes is None:
        return _usage(parser, "--start-method applies to --processes P only")
    try:
        handler = resolve_handler(spec)
    except HandlerImportError as error:
        return _usage(parser, f"the handler {spec}: {error}")
    schedule: list[Periodic] = []
    if arguments.schedule is not None:
        from walqueue.worker.schedule import load_schedule

        try:
            schedule = load_schedule(arguments.schedule, MILLISECONDS)
        except ValueError as error:
            return _usage(parser, str(error))
    configure_logging(arguments.log_level, arguments.log_json)
    if arguments.processes is not None:
        from walqueue.worker.supervisor import supervise

        return supervise(directory, arguments.socket, spec, arguments, prog=PROG, open_store=open_store)
    return _run_here(directory, arguments, handler, schedule)


def open_store(directory: str) -> Any:
    """`Queue(directory)` (created if missing), or None once the reason it cannot be opened is printed."""
    from walqueue import CorruptStore, DirectoryLocked, Queue

    try:
        return Queue(directory)
    except (CorruptStore, DirectoryLocked, OSError) as error:
        hint = ""
        if isinstance(error, DirectoryLocked):
            hint = " (another process owns it: share it with --processes, or use its server with --socket PATH)"
        elif isinstance(error, CorruptStore):
            hint = " (run walqueue-fsck DIR)"
        print(f"{PROG}: cannot open {directory}: {type(error).__name__}: {error}{hint}", file=sys.stderr)
        return None


def _run_here(directory: str | None, arguments: Any, handler: Callable[..., Any], schedule: list[Periodic]) -> int:
    with StopSignals() as signals:  # before the store is opened: a SIGTERM during the start is a clean stop
        return _open_and_run(signals, directory, arguments, handler, schedule)


def _open_and_run(
    signals: StopSignals, directory: str | None, arguments: Any, handler: Callable[..., Any], schedule: list[Periodic]
) -> int:
    from walqueue.worker.clock import ClockMismatch
    from walqueue.worker.runner import Worker

    source: Any
    if directory is not None:
        source = open_store(directory)
        if source is None:
            return EXIT_CANNOT_OPEN
    else:
        from walqueue.client import Client

        wait_until_ready(arguments.ready_pipe)  # imports done while the server started: now it listens
        source = Client(arguments.socket)
    try:
        worker = Worker(
            source,
            handler,
            concurrency=arguments.concurrency,
            prefetch=arguments.prefetch,
            lease=milliseconds_of(arguments.lease),
            timeout=None if arguments.timeout is None else milliseconds_of(arguments.timeout),
            grace=round(arguments.grace * MILLISECONDS),
            schedule=schedule,
            name=arguments.name,
            queues=arguments.queues,
            hard_timeout=arguments.hard_timeout,
            summary_every=arguments.summary or None,
        )
        if arguments.summary_fd is not None:
            worker.report.sink = functools.partial(send_summary, arguments.summary_fd)
        signals.run(worker, worker.start, parent_pipe=arguments.parent_pipe)
    except ClockMismatch as error:
        print(f"{PROG}: cannot work on {directory or arguments.socket}: {error}", file=sys.stderr)
        return EXIT_CANNOT_OPEN
    finally:
        source.close()
    return EXIT_OK if worker.fatal is None else EXIT_FATAL
