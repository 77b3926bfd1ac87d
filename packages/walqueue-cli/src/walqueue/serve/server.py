"""`Server`: one queue directory served on one Unix socket, from start to a clean stop.

The loop itself is `walqueue.serve.eventloop`; this module holds the order
of starting and stopping, which is where a server must never leave
something behind or touch what another owns:

- An existing directory is opened first, so a second server for it stops
  at `DirectoryLocked` before it could look at the first one's socket. A
  missing directory is created only after the socket is bound, so a
  server that cannot listen creates nothing; should the opening then fail,
  the socket file it bound is removed again.
- `stop()` is safe from a signal handler or another thread: a flag and one
  byte down a pipe that the loop watches. The loop answers parked waits,
  drops requests not started, flushes answers already made (for a bounded
  time), closes the queue, and removes the socket file if it is still the
  one this server bound.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import TYPE_CHECKING, TypedDict, Unpack

from walqueue import CorruptStore, DirectoryLocked, Queue, WalQueueError
from walqueue.engine.metrics import RequestSeconds
from walqueue.engine.ownership import write_owner_note
from walqueue.format.cmdline import EXIT_CANNOT_OPEN, EXIT_FATAL, EXIT_OK
from walqueue.protocol.calltable import CALLS
from walqueue.protocol.exchange import socket_address
from walqueue.protocol.lines import MAX_LINE_BYTES
from walqueue.serve.eventloop import DEFAULT_TURN_CAP, Limits, Loop
from walqueue.serve.listener import SocketInUse, bind_socket, remove_socket_file

if TYPE_CHECKING:  # the directory as a Path is made on demand: serving never imports pathlib
    from pathlib import Path

__all__ = [
    "DEFAULT_MAX_CLIENTS",
    "DEFAULT_MODE",
    "DEFAULT_WRITE_TIMEOUT",
    "EXIT_SOCKET",
    "Server",
    "StartFailed",
]

log = logging.getLogger("walqueue.serve")

#: The socket could not be taken (the other exit statuses are walqueue.format.cmdline's).
EXIT_SOCKET = 3

DEFAULT_MAX_CLIENTS = 64
DEFAULT_MODE = 0o600
DEFAULT_WRITE_TIMEOUT = 30.0


class StartFailed(WalQueueError):
    """The server could not start; `status` is its exit status, the message says why. Nothing was left behind."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ServerLimits(TypedDict, total=False):
    """What one connection may cost a `Server` (its `Limits`), by keyword; each omitted one has its default.

    `max_clients` (64), `write_timeout` (30 s), `line_limit` (the protocol's
    line bound) and `turn_cap` (the loop's requests per client per turn).
    """

    max_clients: int
    write_timeout: float
    line_limit: int
    turn_cap: int


class Server:
    """One queue directory served on one Unix socket. `main` drives it; tests may too.

    `start()` (or `open_queue()` and `bind()`, in the order `opens_first()`
    says); then `serve_forever()` until `stop()`; it returns the exit status.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        socket_path: str | os.PathLike[str],
        *,
        mode: int = DEFAULT_MODE,
        sync: bool = True,
        create: bool = True,
        **limits: Unpack[ServerLimits],
    ) -> None:
        self._directory = directory
        self._absolute_directory = os.path.abspath(directory)  # resolved once, as the socket path is
        self.socket_path = socket_address(socket_path)
        self.mode = mode
        self.limits = Limits(
            limits.get("max_clients", DEFAULT_MAX_CLIENTS),
            limits.get("write_timeout", DEFAULT_WRITE_TIMEOUT),
            limits.get("line_limit", MAX_LINE_BYTES),
            limits.get("turn_cap", DEFAULT_TURN_CAP),
        )
        self.sync = sync
        self.create = create
        self._queue: Queue | None = None
        #: Each request's seconds by op, observed by the loop; read by `metrics` answers and the dashboard.
        self.request_seconds = RequestSeconds(tuple(CALLS))
        self._listener: socket.socket | None = None
        self._socket_inode: int | None = None
        self._stop_read, self._stop_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._stopping = False
        self._stop_when_idle = False
        self._exit_status = EXIT_OK

    # -- starting --------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        """The queue directory, as a `Path` (made here: the server itself never needs pathlib)."""
        from pathlib import Path

        return Path(self._directory)

    def opens_first(self) -> bool:
        """Whether the directory is opened before the socket is bound: when it exists (see the module)."""
        return os.path.lexists(self._directory) or not self.create

    def start(self) -> None:
        """Open the queue and bind the socket, in the safe order; `StartFailed` undoes what was done."""
        if self.opens_first():
            self._open_or_fail()
            try:
                self._bind_or_fail()
            except BaseException:
                self.close_queue()
                raise
        else:
            self._bind_or_fail()
            try:
                self._open_or_fail()
            except BaseException:
                self.unbind()
                raise
        self._write_owner_note()

    def _write_owner_note(self) -> None:
        """Name this server's socket in LOCK, so that a `DirectoryLocked` met by a producer says where to go."""
        if not os.path.isabs(self.socket_path):
            return  # a path too long to resolve names nothing another process could use
        try:
            write_owner_note(self._absolute_directory, self.socket_path)
        except OSError as error:
            log.warning("cannot write the owner note into %s/LOCK: %s", self._absolute_directory, error)

    def _open_or_fail(self) -> None:
        try:
            self.open_queue()
        except (CorruptStore, DirectoryLocked, OSError) as error:
            message = f"cannot open {os.fspath(self._directory)}: {type(error).__name__}: {error}"
            if isinstance(error, FileNotFoundError) and not self.create:
                message += " (--no-create: the queue must exist already; create it first, or drop --no-create)"
            raise StartFailed(EXIT_CANNOT_OPEN, message) from error

    def _bind_or_fail(self) -> None:
        try:
            self.bind()
        except (SocketInUse, OSError) as error:
            raise StartFailed(EXIT_SOCKET, f"cannot listen on {self.socket_path}: {error}") from error

    @property
    def queue(self) -> Queue:
        """The queue being served, once opened (`start()`): the dashboard reads it from threads of its own."""
        assert self._queue is not None, "start() first"
        return self._queue

    def dashboard_backend(self) -> Queue:
        """The queue as the dashboard reads it in this process: its `metrics` carry the server's request seconds.

        The dashboard's threads read the queue directly (not through the
        socket); the figures the loop keeps are attached to the queue when
        it is opened, so its `metrics()` carries them as a `metrics` answer does.
        """
        return self.queue

    def open_queue(self) -> None:
        self._queue = Queue(self._directory, sync=self.sync, create=self.create)
        self._queue.attach_request_seconds(self.request_seconds)

    def close_queue(self) -> None:
        if self._queue is not None:
            self._queue.close()

    def bind(self) -> None:
        self._listener, self._socket_inode = bind_socket(self.socket_path, self.mode)

    def unbind(self) -> None:
        """Close the listener and remove its socket file (a start that failed after binding)."""
        if self._listener is not None:
            self._listener.close()
            self._listener = None
            remove_socket_file(self.socket_path, self._socket_inode)

    # -- serving -------------------------------------------------------------------------

    def poke(self) -> None:
        """Wake the loop: another thread of this process committed (the dashboard's actions).

        The loop is then no longer the queue's only writer; woken, it reads
        the queue's durable sequence again and answers the parked waits
        that commit released (`Loop._release_parked`).
        """
        try:
            os.write(self._stop_write, b"c")
        except OSError:
            pass  # the pipe is full (the loop will wake anyway) or closed (the server stopped)

    def stop_when_idle(self) -> None:
        """Stop once no client is connected (at once if none is): the supervisor that started this server is gone.

        Its worker processes are stopping too, and release their leases
        through this server during their grace: stopping now would turn
        those releases into leases that only expire. Safe from any thread.
        """
        self._stop_when_idle = True
        try:
            os.write(self._stop_write, b"i")
        except OSError:
            pass

    def stop(self, status: int = EXIT_OK) -> None:
        """Begin a graceful stop (async-signal-safe enough: a flag and a pipe write)."""
        if status != EXIT_OK:
            self._exit_status = status
        self._stopping = True
        try:
            os.write(self._stop_write, b"x")
        except OSError:
            pass

    def serve_forever(self, wakeup: int | None = None) -> int:
        """Serve until `stop()` (or a poisoned queue); returns the exit status.

        `wakeup` is the read end of the pipe given to `signal.set_wakeup_fd`
        (non-blocking): the loop watches it so that a signal that lands just
        before it sleeps (or on another thread) still wakes it, and its
        Python handler (which calls `stop()`) then runs in this thread.
        """
        assert self._queue is not None and self._listener is not None, "start() first"
        limits = self.limits
        log.info(
            "serving %s on %s (mode %o, at most %d clients, pid %d)",
            os.fspath(self._directory),
            self.socket_path,
            self.mode,
            limits.max_clients,
            os.getpid(),
        )
        pipes = [self._stop_read] if wakeup is None else [self._stop_read, wakeup]
        loop = Loop(
            self._queue,
            self._listener,
            pipes,
            limits,
            lambda: self._stopping or (self._stop_when_idle and loop.client_count == 0),
            self.request_seconds,
        )
        try:
            loop.run()
        finally:
            if loop.fatal:
                self._exit_status = EXIT_FATAL
            self._queue.close()
            self.unbind()
            os.close(self._stop_read)
            os.close(self._stop_write)
            log.info("stopped serving %s", os.fspath(self._directory))
        return self._exit_status
