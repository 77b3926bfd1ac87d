"""`walqueue-worker ... --processes P`: P worker processes sharing one queue through walqueue-serve.

A directory has one owner (its lock), so processes share it through the
server: given DIR, the supervisor starts ``walqueue-serve DIR --socket
DIR/worker.sock`` itself and, at the same time, P children, each ``python -m
walqueue.worker --socket DIR/worker.sock HANDLER`` with the same options,
which import their code and then wait until the server has said it listens
(and a hard timeout: a child whose handler overruns releases its leases and
exits). Given ``--socket PATH`` it starts only the children.
With ``--schedule``, the first child alone runs the periodic tasks (one
put, and one ``fired`` line, per firing); it is restarted like the others.

It keeps them running: a child or a server that dies (a crash, SIGKILL, a
hard timeout) is started again, after a pause that grows while they keep
dying at once, so a handler that crashes on import cannot spin.

On SIGTERM/SIGINT it passes the signal to every child, waits for them (each
runs its own grace, then releases), then stops the server, and exits 0. A
second signal is passed on too (children release at once). A child still
alive `grace + 10` seconds after the first signal is killed; its leases then
expire as any crashed worker's do.

If the supervisor itself dies without passing a signal on (SIGKILL, an OOM
kill), its children notice through ``--parent-pipe`` (`walqueue.serve.parentpipe`:
the read end of a pipe whose write end only the supervisor holds): each
worker stops as on SIGTERM (grace, then release), and the server stops once
its last client has left, so nothing is orphaned and no lease is held.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from walqueue.serve.parentpipe import READY_OPTION
from walqueue.worker.report import log
from walqueue.worker.summaries import Summaries

__all__ = ["SOCKET_NAME", "Supervisor", "supervise"]

#: The socket the supervisor's server listens on, inside the directory (nothing is written outside it).
SOCKET_NAME = "worker.sock"
#: The longest path a Unix socket address may hold on Linux (108 bytes with the final NUL).
_MAX_SOCKET_PATH = 107
_SERVER_START_SECONDS = 30.0
_SERVER_START_TRIES = 5  # a server killed by a signal while it starts is started again, this often
_KILL_MARGIN_SECONDS = 10.0
_RESTART_PAUSE = (0.1, 5.0)  # after a child that lived less than a second: doubling up to the cap
_ALIVE_SECONDS = 1.0


@dataclass
class _Child:
    """One process the supervisor keeps alive: its command, the process, and how fast it has been dying."""

    name: str
    command: list[str]
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    pause: float = _RESTART_PAUSE[0]
    restart_at: float | None = None
    restarts: int = 0
    output: Any = field(default=None, repr=False)
    #: The descriptors the child inherits (the read end of the supervisor's pipe).
    pass_fds: tuple[int, ...] = ()

    def start(self, extra: tuple[str, ...] = (), extra_fds: tuple[int, ...] = ()) -> None:
        """Start the process; `extra` arguments and `extra_fds` for this start only (the ready pipe)."""
        self.process = subprocess.Popen(
            [*self.command, *extra], stdin=subprocess.DEVNULL, stdout=self.output, pass_fds=self.pass_fds + extra_fds
        )
        self.started = time.monotonic()
        self.restart_at = None

    def exited(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def signal(self, number: int) -> None:
        if self.process is not None and self.process.poll() is None:
            try:
                self.process.send_signal(number)
            except ProcessLookupError:
                pass

    def schedule_restart(self, now: float) -> None:
        lived = now - self.started
        self.pause = _RESTART_PAUSE[0] if lived >= _ALIVE_SECONDS else min(self.pause * 2, _RESTART_PAUSE[1])
        self.restart_at = now + (0.0 if lived >= _ALIVE_SECONDS else self.pause)
        self.restarts += 1


class Supervisor:
    """Runs the server (for a directory) and P worker children until stopped; see the module docstring."""

    def __init__(
        self,
        directory: str | None,
        socket_path: str,
        children: list[list[str]],
        grace: float,
        server_log_level: str = "WARNING",
        summary_every: float | None = None,
    ) -> None:
        self.directory = directory
        self.socket_path = socket_path
        self.grace = grace
        # Nothing is written to this pipe: its end (every write end closed) tells the children that
        # this process is gone. The write end is close-on-exec, so only this process holds it.
        self._parent_read, self._parent_write = os.pipe()
        # The children write their counters here (`summaries.py`); this process logs one line for all.
        self._summary_read, self._summary_write = os.pipe()
        self.summaries = Summaries(self._summary_read)
        self.summary_every = summary_every
        watch = ("--parent-pipe", str(self._parent_read))
        inherit = (self._parent_read,)
        report = ("--summary-fd", str(self._summary_write))
        self.server: _Child | None = None
        if directory is not None:
            command = [sys.executable, "-m", "walqueue.serve", directory, "--socket", socket_path]
            command += ["--log-level", server_log_level, *watch]
            # Its stdout is a pipe: its "listening" line is the readiness signal (`_server_ready`), the rest is drained.
            self.server = _Child("server", command, output=subprocess.PIPE, pass_fds=inherit)
        self.children = [
            _Child(f"worker {number}", [*command, *watch, *report], pass_fds=(*inherit, self._summary_write))
            for number, command in enumerate(children)
        ]
        self._stopping = threading.Event()
        self._hurry = threading.Event()
        self._done = threading.Event()
        self._children_gone = threading.Event()  # ends the summaries' reader before its pipe is closed
        self._summarizer: threading.Thread | None = None
        self._changed = threading.Condition()
        self.exit_status = 0

    # -- the interface of `cli.until_stopped` ----------------------------------------------

    def stop(self, *, now: bool = False) -> None:
        if now:
            self._hurry.set()
        self._stopping.set()
        with self._changed:
            self._changed.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    # -- running ---------------------------------------------------------------------------

    def start(self) -> bool:
        """Start the server (if any) and the children at once; the children connect once it listens.

        The children import their code while the server opens the store
        (two interpreter starts side by side, not one after the other); each
        waits on the read end of a pipe whose write end only this process
        holds, and closing it once the server has printed its "listening"
        line releases them all (DECISIONS §35). False if the server failed:
        the children, which have connected to nothing, are stopped.
        """
        if self.server is None:
            for child in self.children:
                child.start()
        else:
            ready_read, ready_write = os.pipe()
            try:
                for child in self.children:
                    child.start((READY_OPTION, str(ready_read)), (ready_read,))
            finally:
                os.close(ready_read)
            try:
                started = self._start_server()
            finally:
                os.close(ready_write)  # the children go on: to the server, or to an error if it failed
            if not started:
                self._stop_unconnected_children()
                return False
        threading.Thread(target=self._keep_alive, name="walqueue-worker supervisor", daemon=True).start()
        self._summarizer = threading.Thread(target=self._summarize, name="walqueue-worker summaries", daemon=True)
        self._summarizer.start()
        log.info("supervising %d worker process(es) on %s", len(self.children), self.socket_path)
        return True

    def _start_server(self) -> bool:
        assert self.server is not None
        for _ in range(_SERVER_START_TRIES):
            self.server.start()
            if self._server_ready():
                return True
            status = self.server.exited()
            if status is None or status >= 0:
                return False  # it refused to start (2: DIR cannot be opened, 3: the socket): say so
            log.warning("walqueue-serve was killed while starting; starting it again")
        return False

    def _stop_unconnected_children(self) -> None:
        """The server never listened: the children hold nothing (no connection, no lease); end them now."""
        for child in self.children:
            child.signal(signal.SIGKILL)
            if child.process is not None:
                child.process.wait()

    def _server_ready(self) -> bool:
        """Wait for the server's "listening" line on its stdout (no polling): True, or False if it died or hung.

        walqueue-serve prints that line once its socket accepts; reading it
        wakes this process at that instant, where probing the socket between
        growing sleeps lost up to 200 ms per start (DECISIONS §35).
        """
        assert self.server is not None and self.server.process is not None
        process = self.server.process
        assert process.stdout is not None
        if _read_until_listening(process.stdout.fileno(), time.monotonic() + _SERVER_START_SECONDS):
            _drain(process.stdout)
            return True
        if process.poll() is None:
            log.error("walqueue-serve did not listen on %s within %.0f s", self.socket_path, _SERVER_START_SECONDS)
            self.server.signal(signal.SIGKILL)
            process.wait()
            self.exit_status = 3
            return False
        status = process.wait()
        if status >= 0:
            log.error("walqueue-serve exited with status %d before it listened (see its message above)", status)
        self.exit_status = status if status in (2, 3) else 3
        return False

    def _live_pids(self) -> set[int]:
        return {child.process.pid for child in self.children if child.process is not None and child.exited() is None}

    def _summarize(self) -> None:
        """Take in the children's counters; every `summary_every` seconds, log their sum as one line."""
        next_line = time.monotonic() + (self.summary_every or float("inf"))
        while not self._children_gone.is_set():
            self.summaries.read(max(0.0, min(0.5, next_line - time.monotonic())))
            if time.monotonic() >= next_line and not self._stopping.is_set():
                self.summaries.log(self._live_pids())
                next_line = time.monotonic() + (self.summary_every or float("inf"))

    def _keep_alive(self) -> None:
        """Restart what dies until the first signal; then pass signals on, wait, stop the server."""
        while not self._stopping.is_set():
            now = time.monotonic()
            for child in ([self.server] if self.server is not None else []) + self.children:
                status = child.exited()
                if status is None:
                    continue
                if child.restart_at is None:
                    log.warning("%s exited with status %d; starting it again", child.name, status)
                    child.schedule_restart(now)
                if child.restart_at is not None and now >= child.restart_at:
                    child.start()
                    if child is self.server and child.process is not None and child.process.stdout is not None:
                        _drain(child.process.stdout)  # nobody waits for a restarted server's line
            with self._changed:
                self._changed.wait(0.1)
        self._shut_down()

    def _shut_down(self) -> None:
        for child in self.children:
            child.signal(signal.SIGTERM)
        began = time.monotonic()
        kill_at = began + self.grace + _KILL_MARGIN_SECONDS
        hurried = False
        while any(child.exited() is None for child in self.children):
            if self._hurry.is_set() and not hurried:
                hurried = True
                for child in self.children:
                    child.signal(signal.SIGTERM)  # the second signal: release at once
            if time.monotonic() >= kill_at:
                for child in self.children:
                    if child.exited() is None:
                        log.error(
                            "%s still running %.1f s after the stop (its grace: %g s): killed",
                            child.name,
                            time.monotonic() - began,
                            self.grace,
                        )
                        child.signal(signal.SIGKILL)
                kill_at = float("inf")  # killed once, logged once
            with self._changed:
                self._changed.wait(0.05)
        if self.server is not None and self.server.process is not None:
            self.server.signal(signal.SIGTERM)
            try:
                self.server.process.wait(_KILL_MARGIN_SECONDS)
            except subprocess.TimeoutExpired:
                self.server.signal(signal.SIGKILL)
                self.server.process.wait()
        self._children_gone.set()
        if self._summarizer is not None:
            self._summarizer.join(5.0)
        self.summaries.read(0.0)  # the children's last counters, sent as they stopped
        self.summaries.log(set())
        self.close_pipe()
        self._done.set()

    def close_pipe(self) -> None:
        """Close both ends of the children's pipe (every child has exited, or none was started)."""
        for fd in (self._parent_read, self._parent_write, self._summary_read, self._summary_write):
            try:
                os.close(fd)
            except OSError:
                pass


def _read_until_listening(fd: int, give_up: float) -> bool:
    """Read `fd` until a line holding ``listening`` (True), its end or `give_up` (False)."""
    seen = b""
    while b"listening" not in seen:
        remaining = give_up - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            return False
        chunk = os.read(fd, 4096)
        if not chunk:
            return False  # the server closed its stdout: it exited
        seen = seen[-16:] + chunk
    return True


def _drain(stream: Any) -> None:
    """Read and drop the server's later output on a daemon thread, so that its prints never block it."""

    def drain() -> None:
        with stream:
            while stream.read1(65536):
                pass

    threading.Thread(target=drain, name="walqueue-worker server output", daemon=True).start()


def _child_command(socket_path: str, spec: str, arguments: Any, *, schedule: bool = True) -> list[str]:
    command = [sys.executable, "-m", "walqueue.worker", "--socket", socket_path, spec]
    command += ["--concurrency", str(arguments.concurrency), "--lease", repr(arguments.lease)]
    if arguments.prefetch is not None:
        command += ["--prefetch", str(arguments.prefetch)]
    command += ["--grace", repr(arguments.grace), "--summary", repr(arguments.summary)]
    command += ["--log-level", arguments.log_level]
    if arguments.timeout is not None:
        command += ["--timeout", repr(arguments.timeout), "--hard-timeout"]
    if arguments.schedule is not None and schedule:
        command += ["--schedule", os.path.abspath(arguments.schedule)]
    if arguments.queues is not None:
        command += ["--queues", ",".join(arguments.queues)]
    if arguments.log_json:
        command.append("--log-json")
    return command


def supervise(
    directory: str | None,
    socket_path: str | None,
    spec: str,
    arguments: Any,
    *,
    prog: str,
    until_stopped: Callable[[Any, Callable[[], Any]], bool],
    open_store: Callable[[str], Any],
) -> int:
    """Run P children (and the server, for a directory) until SIGTERM/SIGINT; returns the exit status.

    `prog`, `until_stopped` and `open_store` are the command's
    (`walqueue.worker.cli`), which calls this: passed in, so that this module
    does not import its caller.
    """
    from walqueue.format.cmdline import EXIT_CANNOT_OPEN

    if socket_path is None:
        assert directory is not None
        socket_path = os.path.join(os.path.abspath(directory), SOCKET_NAME)
        if len(os.fsencode(socket_path)) > _MAX_SOCKET_PATH:
            print(
                f"{prog}: the socket path {socket_path} is longer than a Unix socket allows "
                f"({_MAX_SOCKET_PATH} bytes): start walqueue-serve with a shorter --socket yourself "
                "and run walqueue-worker --socket PATH",
                file=sys.stderr,
            )
            return 3
    created = directory is not None and not os.path.lexists(directory)
    if created:  # created here, as the threaded worker creates it (its socket goes in it)
        assert directory is not None
        store = open_store(directory)
        if store is None:
            return EXIT_CANNOT_OPEN
        store.close()
    command = _child_command(socket_path, spec, arguments)
    # One scheduler per supervisor (the first child, restarted like any other): one put and one line per firing.
    others = _child_command(socket_path, spec, arguments, schedule=False)
    children = [command] + [others] * (arguments.processes - 1)
    server_log_level = "DEBUG" if arguments.log_level == "DEBUG" else "WARNING"  # its per-client lines are noise here
    supervisor = Supervisor(
        directory, socket_path, children, arguments.grace, server_log_level, summary_every=arguments.summary or None
    )
    if not until_stopped(supervisor, supervisor.start):
        supervisor.close_pipe()
        if created:  # a failed start leaves nothing behind: not the empty store made for it either
            assert directory is not None
            shutil.rmtree(directory, ignore_errors=True)
        return supervisor.exit_status
    return 0
