"""walqueue-serve: one process owns a directory and serves many over a Unix socket.

`walqueue-serve DIR --socket PATH` (also `python -m walqueue.cli.serve`)
opens DIR as a `Queue` and answers, on every connection to the Unix domain
socket PATH, exactly the JSON-lines protocol of `python -m walqueue.cli`
(`walqueue.cli.protocol`): one answer per request, in order per connection.

How it is built, and why:

- One thread per connection, plus the accepting (main) thread. The `Queue`
  serializes its calls with its own lock, so a connection's thread simply
  calls it; the lock is never held while a socket is read or written, so a
  client that is slow to send or to read holds up only its own thread.
- What a connection may cost is bounded: a request line is at most
  `MAX_LINE_BYTES` (a longer one is refused and dropped as it arrives, see
  `protocol.LineReader`); an answer is written with a timeout
  (`--write-timeout`), so a client that never reads is disconnected once
  the kernel's socket buffer is full, and its thread reads nothing more in
  the meantime (backpressure instead of a growing buffer); there are at most
  `--max-clients` connections.
- A request is executed only when its whole line has arrived, and each
  `Queue` call is atomic: a request whose connection drops is either
  completed (its answer is then lost) or never started.
- `wait` is answered by `CommitNotifier`, a condition variable notified
  after each request that committed a transaction. That is sound because
  this server is the only writer of its queue (it holds DIR's lock).
- Stopping (SIGTERM, SIGINT): close the listener, let each connection finish
  the request it is executing (a `wait` is woken and answers false), drop
  the lines not started, close the queue, remove the socket file (only if
  it is still the one this server bound), exit 0. `main` points
  `signal.set_wakeup_fd` at a pipe that the accept loop polls: a signal
  that lands just before the loop enters `poll` (or on another thread)
  runs its handler only once the loop wakes, and without that pipe the
  loop would sleep through it.
"""

from __future__ import annotations

import argparse
import logging
import os
import select
import signal
import socket
import stat
import struct
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from walqueue import CorruptStore, DirectoryLocked, Queue, QueueClosed, WalQueueError
from walqueue.cli.protocol import (
    MAX_LINE_BYTES,
    OVERLONG,
    LineReader,
    encode_answer,
    error_answer,
    is_blank,
    overlong_answer,
    respond,
)

__all__ = ["DEFAULT_MAX_CLIENTS", "DEFAULT_MODE", "CommitNotifier", "Server", "SocketInUse", "main"]

log = logging.getLogger("walqueue.serve")

#: Exit statuses: a clean stop; a fatal (poisoning) error; DIR could not be
#: opened (corrupt, locked by another owner); the socket could not be taken.
EXIT_OK = 0
EXIT_FATAL = 1
EXIT_CANNOT_OPEN = 2
EXIT_SOCKET = 3

DEFAULT_MAX_CLIENTS = 64
DEFAULT_MODE = 0o600
DEFAULT_WRITE_TIMEOUT = 30.0
#: How long a server that is stopping waits for its connections' requests in flight.
STOP_GRACE_SECONDS = 60.0
_RECV_BYTES = 2**16
_PEERCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


class SocketInUse(WalQueueError):
    """The socket path is answered by another process, or is not a socket at all."""


class CommitNotifier:
    """The server's long poll: who waits is woken when another request commits.

    `seq` is the queue's `last_seq` as of the last request that finished.
    `wait(after, timeout)` returns True as soon as a transaction later than
    `after` has committed (at once if one already has), False after
    `timeout` seconds or when the server stops.
    """

    def __init__(self, seq: int) -> None:
        self._condition = threading.Condition()
        self._seq = seq
        self._closed = False

    @property
    def seq(self) -> int:
        with self._condition:
            return self._seq

    def committed(self, seq: int) -> None:
        with self._condition:
            if seq > self._seq:
                self._seq = seq
                self._condition.notify_all()

    def wait(self, after: int, timeout: float) -> bool:
        with self._condition:
            self._condition.wait_for(lambda: self._seq > after or self._closed, timeout)
            return self._seq > after

    def close(self) -> None:
        with self._condition:
            self._closed = True
            self._condition.notify_all()


@dataclass(frozen=True, slots=True)
class Peer:
    """Who is on the other end of a connection (SO_PEERCRED)."""

    pid: int
    uid: int
    gid: int


def peer_of(connection: socket.socket) -> Peer | None:
    try:
        raw = connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    except (OSError, AttributeError):  # AttributeError: no SO_PEERCRED on this platform
        return None
    return Peer(*_PEERCRED.unpack(raw))


def bind_socket(path: str, mode: int) -> tuple[socket.socket, int]:
    """Listen on `path` with `mode`; returns the socket and the inode of its file.

    A file at `path` is replaced only if it is a socket nobody answers on
    (left by a killed server). Anything else there, or a socket that
    answers, is `SocketInUse`, and the file is left alone. The socket is
    created under umask 0o177 (never wider than 0600) and then given `mode`
    before it listens, so no client can connect under a wider mode first.
    """
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISSOCK(status.st_mode):
            raise SocketInUse(f"{path} exists and is not a socket; not replacing it")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(2.0)
        try:
            probe.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            log.info("replacing the stale socket %s (nothing answers on it)", path)
            os.unlink(path)
        except OSError as error:
            raise SocketInUse(f"{path} is a socket in use ({type(error).__name__}: {error})") from None
        else:
            raise SocketInUse(f"another process answers on {path}")
        finally:
            probe.close()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        old_umask = os.umask(0o177)
        try:
            listener.bind(path)
        finally:
            os.umask(old_umask)
        os.chmod(path, mode)
        listener.listen(128)
        return listener, os.lstat(path).st_ino
    except BaseException:
        listener.close()
        raise


class Server:
    """One queue directory served on one Unix socket. `main` drives it; tests may too.

    `start()` opens the queue and binds the socket (raising `DirectoryLocked`,
    `CorruptStore`, `SocketInUse` or `OSError`, in that order of checks: the
    directory first, so a second server never touches the first one's
    socket); `serve_forever()` accepts until `stop()` and returns the exit
    status; `stop()` may be called from any thread or a signal handler.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        socket_path: str | os.PathLike[str],
        *,
        mode: int = DEFAULT_MODE,
        max_clients: int = DEFAULT_MAX_CLIENTS,
        write_timeout: float = DEFAULT_WRITE_TIMEOUT,
        line_limit: int = MAX_LINE_BYTES,
        sync: bool = True,
    ) -> None:
        self.directory = Path(directory)
        self.socket_path = os.fspath(socket_path)
        self.mode = mode
        self.max_clients = max_clients
        self.write_timeout = write_timeout
        self.line_limit = line_limit
        self.sync = sync
        self._queue: Queue | None = None
        self._listener: socket.socket | None = None
        self._socket_inode = 0
        self._notifier = CommitNotifier(0)
        self._stop_read, self._stop_write = os.pipe()
        os.set_blocking(self._stop_write, False)
        self._stopping = threading.Event()
        self._exit_status = EXIT_OK
        self._lock = threading.Lock()
        self._connections: dict[int, tuple[socket.socket, threading.Thread]] = {}
        self._next_number = 0

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        """`open_queue()` then `bind()`; the queue is closed again if binding fails."""
        self.open_queue()
        try:
            self.bind()
        except BaseException:
            assert self._queue is not None
            self._queue.close()
            raise

    def open_queue(self) -> None:
        self._queue = Queue(self.directory, sync=self.sync)

    def close_queue(self) -> None:
        if self._queue is not None:
            self._queue.close()

    def bind(self) -> None:
        assert self._queue is not None, "open_queue() first"
        self._listener, self._socket_inode = bind_socket(self.socket_path, self.mode)
        self._notifier = CommitNotifier(self._queue.last_seq)
        log.info(
            "serving %s on %s (mode %o, at most %d clients, pid %d)",
            self.directory,
            self.socket_path,
            self.mode,
            self.max_clients,
            os.getpid(),
        )

    def stop(self, status: int = EXIT_OK) -> None:
        """Begin a graceful stop (async-signal-safe enough: a flag and a pipe write)."""
        if status != EXIT_OK:
            self._exit_status = status
        self._stopping.set()
        try:
            os.write(self._stop_write, b"x")
        except (BlockingIOError, OSError):
            pass

    def serve_forever(self, wakeup: int | None = None) -> int:
        """Accept until `stop()`; returns the exit status.

        `wakeup` is the read end of the pipe given to `signal.set_wakeup_fd`
        (non-blocking). It is polled with the listener so that a signal
        always wakes this loop, and drained: the Python-level handler (which
        calls `stop()`) runs in this thread before the loop polls again.
        """
        assert self._listener is not None, "start() first"
        poller = select.poll()
        poller.register(self._listener.fileno(), select.POLLIN)
        poller.register(self._stop_read, select.POLLIN)
        if wakeup is not None:
            poller.register(wakeup, select.POLLIN)
        try:
            while not self._stopping.is_set():
                events = dict(poller.poll())
                if self._stop_read in events or self._stopping.is_set():
                    break
                if wakeup is not None and wakeup in events:
                    _drain(wakeup)
                    continue
                try:
                    connection, _ = self._listener.accept()
                except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                    continue
                except OSError as error:  # e.g. EMFILE: refuse this one, keep serving the others
                    log.warning("accept failed: %s", error)
                    continue
                self._admit(connection)
        finally:
            self._shutdown()
        return self._exit_status

    def _shutdown(self) -> None:
        self._stopping.set()
        if self._listener is not None:
            self._listener.close()
        self._notifier.close()
        with self._lock:
            threads = [thread for _, thread in self._connections.values()]
        for thread in threads:
            thread.join(STOP_GRACE_SECONDS)
        with self._lock:
            stuck = list(self._connections.values())
        for connection, _ in stuck:
            _close_quietly(connection)
        if self._queue is not None:
            self._queue.close()
        self._remove_socket_file()
        if not stuck:  # a stuck thread may still poll the pipe: never let its number be reused
            os.close(self._stop_read)
            os.close(self._stop_write)
        log.info("stopped serving %s", self.directory)

    def _remove_socket_file(self) -> None:
        try:
            if os.lstat(self.socket_path).st_ino == self._socket_inode:
                os.unlink(self.socket_path)
        except FileNotFoundError:
            pass

    # -- connections -------------------------------------------------------

    def _admit(self, connection: socket.socket) -> None:
        peer = peer_of(connection)
        who = f"pid={peer.pid} uid={peer.uid} gid={peer.gid}" if peer else "peer unknown"
        with self._lock:
            full = len(self._connections) >= self.max_clients
            if not full:
                self._next_number += 1
                number = self._next_number
        if full:
            log.warning("refusing a client (%s): %d clients already", who, self.max_clients)
            answer = error_answer("TooManyClients", f"the server has {self.max_clients} clients already")
            try:
                connection.settimeout(1.0)
                connection.sendall(encode_answer(answer))
            except OSError:
                pass
            _close_quietly(connection)
            return
        log.info("client %d connected (%s)", number, who)
        thread = threading.Thread(
            target=self._serve_connection, args=(number, connection), name=f"walqueue-client-{number}", daemon=True
        )
        with self._lock:
            self._connections[number] = (connection, thread)
        thread.start()

    def _serve_connection(self, number: int, connection: socket.socket) -> None:
        requests = 0
        try:
            requests = self._converse(connection)
        except Exception:  # a bug must cost one connection, never the server
            log.exception("client %d: unexpected error; disconnecting it", number)
        finally:
            _close_quietly(connection)
            with self._lock:
                self._connections.pop(number, None)
            log.info("client %d disconnected after %d requests", number, requests)

    def _converse(self, connection: socket.socket) -> int:
        """Read, answer, repeat; returns the number of requests answered."""
        assert self._queue is not None
        queue = self._queue
        connection.settimeout(self.write_timeout)  # bounds each send; recv only follows poll
        reader = LineReader(self.line_limit)
        poller = select.poll()
        poller.register(connection.fileno(), select.POLLIN)
        poller.register(self._stop_read, select.POLLIN)
        seen = self._notifier.seq
        answered = 0

        def waiter(timeout: float) -> bool:
            return self._notifier.wait(seen, timeout)

        while True:
            events = dict(poller.poll())
            if self._stop_read in events or self._stopping.is_set():
                return answered
            try:
                data = connection.recv(_RECV_BYTES)
            except (ConnectionError, TimeoutError):
                return answered
            if data:
                lines: list[Any] = reader.feed(data)
            else:
                last = reader.end()
                lines = [] if last is None else [last]
            for line in lines:
                if self._stopping.is_set():
                    return answered  # not started: the client sees the connection close
                fatal = False
                if line is OVERLONG:
                    answer = overlong_answer(self.line_limit)
                elif is_blank(line):
                    continue
                else:
                    reply = respond(line, queue, waiter)
                    answer, fatal = reply.answer, reply.fatal
                    seen = self._after_request(queue)
                try:
                    connection.sendall(encode_answer(answer))
                except TimeoutError:
                    log.warning("a client did not read its answers for %.0f s; disconnecting it", self.write_timeout)
                    return answered
                except OSError:
                    return answered  # it went away; its request was completed
                answered += 1
                if fatal:
                    log.error("the queue is poisoned (%s); stopping", answer.get("message"))
                    self.stop(EXIT_FATAL)
                    return answered
            if not data:
                return answered

    def _after_request(self, queue: Queue) -> int:
        try:
            seq = queue.last_seq
        except QueueClosed:
            return self._notifier.seq
        self._notifier.committed(seq)
        return seq


def _drain(fd: int) -> None:
    """Read a non-blocking pipe until it is empty (or closed)."""
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def _close_quietly(connection: socket.socket) -> None:
    try:
        connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    connection.close()


# ---------------------------------------------------------------------------
# The command line


def _mode(text: str) -> int:
    try:
        value = int(text, 8)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an octal mode such as 600 or 660") from None
    if not 0 <= value <= 0o777:
        raise argparse.ArgumentTypeError(f"{text!r} is not a permission mode (000 to 777)")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def _argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="walqueue-serve",
        description=(
            "Own a WALQueue directory and serve it to other processes on a Unix domain socket. "
            "Each connection speaks the JSON-lines protocol of `python -m walqueue.cli` "
            "(see `walqueue --help` for every op), and its "
            '{"op": "wait", "timeout": SECONDS} is woken by the commits of other connections. '
            "Once it accepts connections it prints one line with the socket path. "
            "SIGTERM or SIGINT stops it gracefully."
        ),
        epilog=(
            "exit status: 0 stopped by a signal; 1 the queue was poisoned by an I/O error; "
            "2 DIRECTORY could not be opened (corrupt, locked by another owner); "
            "3 the socket path is in use or cannot be bound"
        ),
    )
    parser.add_argument("directory", metavar="DIRECTORY", help="the queue directory (created if missing)")
    parser.add_argument("--socket", required=True, metavar="PATH", help="the Unix domain socket to listen on")
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
        type=float,
        default=DEFAULT_WRITE_TIMEOUT,
        metavar="SECONDS",
        help=f"disconnect a client that reads none of an answer for this long (default {DEFAULT_WRITE_TIMEOUT:.0f})",
    )
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="default INFO"
    )
    return parser


def _configure_logging(level: str) -> None:
    logger = logging.getLogger("walqueue")
    if not any(not isinstance(handler, logging.NullHandler) for handler in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(level)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the server until SIGTERM/SIGINT; returns the exit status."""
    arguments = _argument_parser().parse_args(argv)
    _configure_logging(arguments.log_level)
    server = Server(
        arguments.directory,
        arguments.socket,
        mode=arguments.mode,
        max_clients=arguments.max_clients,
        write_timeout=arguments.write_timeout,
    )

    def on_signal(number: int, frame: FrameType | None) -> None:
        log.info("%s received; stopping", signal.Signals(number).name)
        server.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        # The directory first: a second server for it stops here, before
        # it could look at (let alone replace) the first one's socket.
        server.open_queue()
    except (CorruptStore, DirectoryLocked, OSError) as error:
        print(f"walqueue-serve: cannot open {arguments.directory}: {type(error).__name__}: {error}", file=sys.stderr)
        return EXIT_CANNOT_OPEN
    try:
        server.bind()
    except (SocketInUse, OSError) as error:
        server.close_queue()
        print(f"walqueue-serve: cannot listen on {arguments.socket}: {error}", file=sys.stderr)
        return EXIT_SOCKET
    wakeup_read, wakeup_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    previous_wakeup = signal.set_wakeup_fd(wakeup_write, warn_on_full_buffer=False)
    try:
        print(f"walqueue-serve: listening on {server.socket_path}", flush=True)
        return server.serve_forever(wakeup_read)
    finally:
        signal.set_wakeup_fd(previous_wakeup)
        os.close(wakeup_read)
        os.close(wakeup_write)


if __name__ == "__main__":
    raise SystemExit(main())
