"""walqueue-serve: one process owns a directory and serves many over a Unix socket.

`walqueue-serve DIR --socket PATH` (also `python -m walqueue.serve`)
opens DIR as a `Queue` and answers, on every connection to the Unix domain
socket PATH, exactly the JSON-lines protocol of `python -m walqueue.cli`
(`walqueue.protocol.requests`): one answer per request, in order per connection,
and any number of requests may be sent before reading their answers.

This module is the command line only. The server is `walqueue.serve.server`
(starting and stopping), `walqueue.serve.eventloop` (the one thread that owns
the queue: each turn executes every request that arrived, runs one fsync
for all of them, then answers), `walqueue.serve.conversation` (one
connection's buffers, no I/O) and `walqueue.serve.listener` (the socket file).

Signals: SIGTERM and SIGINT stop the server gracefully (exit 0). `main`
points `signal.set_wakeup_fd` at a pipe the loop watches: a signal that
lands just before the loop sleeps (or on another thread) runs its Python
handler only once the loop wakes, and without that pipe the loop would
sleep through it. Started by walqueue-worker's supervisor (the hidden
``--parent-pipe FD``, `walqueue.serve.parentpipe`), it also stops once the
supervisor is gone and its last client has left.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING

from walqueue.backup.serving import add_replicate_arguments, check_replicate_arguments, start_replicator
from walqueue.dashboard.options import HttpOptions, add_http_arguments, http_options
from walqueue.format.cmdline import EX_USAGE, EXIT_CANNOT_OPEN, EXIT_FATAL, EXIT_OK, UsageParser, version_line
from walqueue.serve.listener import SocketInUse
from walqueue.serve.parentpipe import add_parent_pipe_argument, watch_parent
from walqueue.serve.server import (
    DEFAULT_MAX_CLIENTS,
    DEFAULT_MODE,
    DEFAULT_WRITE_TIMEOUT,
    EXIT_SOCKET,
    Server,
    StartFailed,
)

if TYPE_CHECKING:  # the dashboard is imported with --http only (DECISIONS §59)
    from walqueue.dashboard.http import RunningServer

__all__ = ["DEFAULT_MAX_CLIENTS", "DEFAULT_MODE", "EXIT_USAGE", "Server", "SocketInUse", "main"]

log = logging.getLogger("walqueue.serve")

EXIT_USAGE = EX_USAGE

_EPILOG = f"""\
exit status:
  {EXIT_OK}    stopped by SIGTERM or SIGINT (every answered request is durable)
  {EXIT_FATAL}    an I/O error poisoned the queue (a Fatal answer was sent)
  {EXIT_CANNOT_OPEN}    DIRECTORY could not be opened: corrupt, locked by another owner
       (another server: its socket is left alone), not a directory, or
       missing under --no-create; nothing was created
  {EXIT_SOCKET}    the socket path is in use, is not a socket, or cannot be bound;
       a missing DIRECTORY was not created; or the --http address cannot be bound
  {EXIT_USAGE}   usage error: an unknown option, a missing or bad argument
"""


def _option[T](convert: Callable[[str], T], valid: Callable[[T], bool], what: str) -> Callable[[str], T]:
    """An argparse type: `convert` the text, then require `valid`; the message names what was expected."""

    def parse(text: str) -> T:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not valid(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return value

    return parse


_mode = _option(lambda text: int(text, 8), lambda value: 0 <= value <= 0o777, "an octal mode (000 to 777), e.g. 600")
_positive_int = _option(int, lambda value: value >= 1, "an integer >= 1")
_seconds = _option(float, lambda value: 0 < value < math.inf, "a number of seconds > 0")


def _argument_parser() -> argparse.ArgumentParser:
    parser = UsageParser(
        prog="walqueue-serve",
        description=(
            "Own a WALQueue directory and serve it to other processes on a Unix domain socket. "
            "Each connection speaks the JSON-lines protocol of `walqueue` "
            "(see `walqueue --help` for every op), may send many requests before reading "
            "their answers (they come in order), and its "
            '{"op": "wait", "timeout": SECONDS} is woken by the commits of other connections. '
            "Once it accepts connections it prints one line with the socket path. "
            "SIGTERM or SIGINT stops it gracefully."
        ),
        epilog=_EPILOG,
    )
    parser.add_argument(
        "directory", metavar="DIRECTORY", help="the queue directory (created if missing, unless --no-create)"
    )
    parser.add_argument("--socket", required=True, metavar="PATH", help="the Unix domain socket to listen on")
    parser.add_argument(
        "--no-create",
        dest="create",
        action="store_false",
        help="refuse a missing DIRECTORY (exit 2) instead of creating an empty queue: for services "
        "whose queue must already exist",
    )
    parser.add_argument(
        "--mode",
        type=_mode,
        default=DEFAULT_MODE,
        help="the socket's permission bits, in octal (default 600: the owner only; 660 adds the group)",
    )
    parser.add_argument(
        "--max-clients",
        type=_positive_int,
        default=DEFAULT_MAX_CLIENTS,
        metavar="N",
        help=f"connections served at once; more are refused (default {DEFAULT_MAX_CLIENTS})",
    )
    parser.add_argument(
        "--write-timeout",
        type=_seconds,
        default=DEFAULT_WRITE_TIMEOUT,
        metavar="SECONDS",
        help="disconnect a client whose answers make no progress (it reads none of them) for this long "
        f"(default {DEFAULT_WRITE_TIMEOUT:.0f})",
    )
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="default INFO"
    )
    parser.add_argument("--version", action="version", version=version_line("walqueue-serve"))
    add_http_arguments(parser)  # --http HOST:PORT: the dashboard, /metrics and the JSON API (walqueue.dashboard)
    add_parent_pipe_argument(parser)  # walqueue-worker's supervisor: stop once it is gone and the clients have left
    add_replicate_arguments(parser)  # --replicate URL: continuous backup (walqueue.backup)
    return parser


def _configure_logging(level: str) -> None:
    logger = logging.getLogger("walqueue")
    if not any(not isinstance(handler, logging.NullHandler) for handler in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(level)


@dataclass(frozen=True, slots=True)
class _Started:
    """What a successful start runs beside the socket: the dashboard (None without --http)."""

    dashboard: RunningServer | None


def _start(server: Server, http: HttpOptions | None, address: str | None) -> _Started | int:
    """Bind --http, start the server, serve the dashboard: what runs, or the exit status of the failure.

    The HTTP port is bound before the store is opened or created, so a busy
    port leaves nothing behind; a dashboard that then cannot start closes
    what the start opened.
    """
    bound = None
    if http is not None:
        from walqueue.dashboard.http import bind

        try:
            bound = bind(http.host, http.port)
        except OSError as error:
            print(f"walqueue-serve: cannot serve the dashboard on {address}: {error}", file=sys.stderr)
            return EXIT_SOCKET
    try:
        server.start()
    except StartFailed as failure:
        if bound is not None:
            bound.server_close()
        print(f"walqueue-serve: {failure}", file=sys.stderr)
        return failure.status
    if http is None:
        return _Started(None)
    from walqueue.dashboard.http import start_dashboard

    try:
        return _Started(start_dashboard(server.dashboard_backend(), http, on_commit=server.poke, bound=bound))
    except OSError as error:
        server.close_queue()
        server.unbind()
        print(f"walqueue-serve: cannot serve the dashboard on {address}: {error}", file=sys.stderr)
        return EXIT_SOCKET


def main(argv: Sequence[str] | None = None) -> int:
    """Run the server until SIGTERM/SIGINT; returns the exit status."""
    parser = _argument_parser()
    arguments = parser.parse_args(argv)
    try:
        http = http_options(arguments)
    except ValueError as error:
        parser.error(str(error))
    replicate_problem = check_replicate_arguments(arguments)
    if replicate_problem is not None:
        parser.error(replicate_problem)
    _configure_logging(arguments.log_level)
    server = Server(
        arguments.directory,
        arguments.socket,
        mode=arguments.mode,
        max_clients=arguments.max_clients,
        write_timeout=arguments.write_timeout,
        create=arguments.create,
    )

    def on_signal(number: int, frame: FrameType | None) -> None:
        log.info("%s received; stopping", signal.Signals(number).name)
        server.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    started = _start(server, http, arguments.http)
    if isinstance(started, int):
        return started
    dashboard = started.dashboard
    replicator = start_replicator(server.queue, arguments)
    if arguments.parent_pipe is not None:
        watch_parent(arguments.parent_pipe, server.stop_when_idle)
    wakeup_read, wakeup_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    previous_wakeup = signal.set_wakeup_fd(wakeup_write, warn_on_full_buffer=False)
    try:
        print(f"walqueue-serve: listening on {server.socket_path}", flush=True)
        if dashboard is not None:
            print(f"walqueue-serve: dashboard on {dashboard.url}", flush=True)
        return server.serve_forever(wakeup_read)
    finally:
        if dashboard is not None:
            dashboard.stop()
        if replicator is not None:
            replicator.stop()
        signal.set_wakeup_fd(previous_wakeup)
        os.close(wakeup_read)
        os.close(wakeup_write)


if __name__ == "__main__":
    raise SystemExit(main())
