"""`walqueue-worker ... --processes P`: P worker processes sharing one queue through walqueue-serve.

A directory has one owner (its lock), so processes share it through the
server: given DIR, the supervisor starts ``walqueue-serve DIR --socket
DIR/worker.sock`` itself and P children, each running ``walqueue-worker
--socket DIR/worker.sock HANDLER`` with the same options; the children
connect once the server has said it listens (and a hard timeout: a child
whose handler overruns releases its leases and exits). Given ``--socket
PATH`` it starts only the children. With ``--schedule``, the first child
alone runs the periodic tasks (one put, and one ``fired`` line, per
firing); it is restarted like the others.

How a child starts (``--start-method``, DECISIONS §44): by default it is
forked from the supervisor, which has already imported WALQueue and the
handler's module (`forkstart`); with ``spawn`` (and where a fork is not
safe: a handler module that started a thread when imported, no `os.fork`)
it is a fresh interpreter, ``python -m walqueue.worker`` or ``-m
walqueue.serve``. Either way it runs the same command line. To fork
safely at any time, restarts included, the supervisor runs no thread: one
loop in the main thread waits in `select` for a signal (SIGTERM, SIGINT,
SIGCHLD, through `signal.set_wakeup_fd`), the children's counters
(`summaries.py`) and the server's output.

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
the read end of a pipe whose write end only the supervisor holds; a forked
child closes its copy at once): each worker stops as on SIGTERM (grace,
then release), and the server stops once its last client has left, so
nothing is orphaned and no lease is held.
"""

from __future__ import annotations

import functools
import importlib
import os
import select
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any

from walqueue.serve.parentpipe import READY_OPTION
from walqueue.worker import forkstart
from walqueue.worker.report import log
from walqueue.worker.summaries import Summaries

if TYPE_CHECKING:  # imported where a fresh interpreter is started: a forked fleet never needs it
    import subprocess

__all__ = ["SOCKET_NAME", "START_METHODS", "Supervisor", "default_start_method", "supervise"]

#: The socket the supervisor's server listens on, inside the directory (nothing is written outside it).
SOCKET_NAME = "worker.sock"
#: ``--start-method``: fork the children from the supervisor, or start fresh interpreters.
START_METHODS = ("fork", "spawn")
#: The longest path a Unix socket address may hold on Linux (108 bytes with the final NUL).
_MAX_SOCKET_PATH = 107
_SERVER_START_SECONDS = 30.0
_SERVER_START_TRIES = 5  # a server killed by a signal while it starts is started again, this often
_KILL_MARGIN_SECONDS = 10.0
_RESTART_PAUSE = (0.1, 5.0)  # after a child that lived less than a second: doubling up to the cap
_ALIVE_SECONDS = 1.0
_LONGEST_WAIT = 1.0  # the loop's select wakes at least this often (a SIGCHLD normally wakes it at once)
#: The module a child's command runs (``python -m M``) -> the module whose ``main(argv)`` a forked child calls.
_ENTRIES = {"walqueue.worker": "walqueue.worker.cli", "walqueue.serve": "walqueue.serve.cli"}
#: A forked child's process name (its command line is the supervisor's): the command it runs.
_NAMES = {"walqueue.worker": "walqueue-worker", "walqueue.serve": "walqueue-serve"}
#: What the server and every worker child import alike (the protocol): imported once, before the first fork.
_SHARED_PRELOAD = ("walqueue.client",)
#: What a worker child imports on its way to its first task: imported once, before the workers' forks.
_WORKER_PRELOAD = ("walqueue.worker.runner", "walqueue.worker.monitor")
_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD)


def default_start_method() -> str:
    """``fork`` where `os.fork` exists, except on macOS, whose system libraries may abort in a forked child."""
    return "fork" if forkstart.can_fork() and sys.platform != "darwin" else "spawn"


@dataclass
class _Child:
    """One process the supervisor keeps alive: its command, the process, and how fast it has been dying."""

    name: str
    command: list[str]
    process: subprocess.Popen[bytes] | forkstart.Forked | None = None
    started: float = 0.0
    pause: float = _RESTART_PAUSE[0]
    restart_at: float | None = None
    restarts: int = 0
    #: The descriptors the child keeps (the read end of the parent pipe, the summaries' write end).
    pass_fds: tuple[int, ...] = ()

    def exited(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def signal(self, number: int) -> None:
        if self.process is not None and self.process.poll() is None:
            try:
                self.process.send_signal(number)
            except ProcessLookupError:
                pass

    def exits_within(self, seconds: float) -> bool:
        """Wait up to `seconds` for the process to exit; whether it did."""
        if isinstance(self.process, forkstart.Forked):
            try:
                self.process.wait(seconds)
            except TimeoutError:
                return False
            return True
        import subprocess  # imported already: this process was started by it

        assert self.process is not None
        try:
            self.process.wait(seconds)
        except subprocess.TimeoutExpired:
            return False
        return True

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
        start_method: str = "spawn",
    ) -> None:
        self.directory = directory
        self.socket_path = socket_path
        self.grace = grace
        self.start_method = start_method
        # Nothing is written to this pipe: its end (every write end closed) tells the children that
        # this process is gone. Only this process holds the write end (close-on-exec; a fork closes it).
        self._parent_read, self._parent_write = os.pipe()
        # The children write their counters here (`summaries.py`); this process logs one line for all.
        self._summary_read, self._summary_write = os.pipe()
        self.summaries = Summaries(self._summary_read)
        self.summary_every = summary_every
        watch = ("--parent-pipe", str(self._parent_read))
        report = ("--summary-fd", str(self._summary_write))
        self.server: _Child | None = None
        if directory is not None:
            command = [sys.executable, "-m", "walqueue.serve", directory, "--socket", socket_path]
            command += ["--log-level", server_log_level, *watch]
            self.server = _Child("server", command, pass_fds=(self._parent_read,))
        self.children = [
            _Child(f"worker {number}", [*command, *watch, *report], pass_fds=(self._parent_read, self._summary_write))
            for number, command in enumerate(children)
        ]
        #: The read end of the server's stdout: its "listening" line, then output that is read and dropped.
        self._server_out: int | None = None
        self._ready_write: int | None = None
        #: What the server printed so far (its tail), until its "listening" line.
        self._server_said = b""
        self._wake: tuple[int, int] | None = None
        self._received: list[int] = []
        self._acted = 0
        self._stopping = False
        self._hurry = False
        self._handlers: dict[int, Any] = {}  # the signal handlers found, put back at the end and in a forked child
        self._pipes_closed = False
        self.exit_status = 0

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> bool:
        """Start, supervise until SIGTERM/SIGINT (or `stop`), stop everything; False if the start failed.

        The signal handlers are installed first, so a signal during the
        start is acted on once it has started. They only count; the loop
        acts, woken through `signal.set_wakeup_fd`. Call it from the main
        thread.
        """
        self._wake = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._handlers = {number: signal.signal(number, self._on_signal) for number in _SIGNALS}
        previous_fd = signal.set_wakeup_fd(self._wake[1], warn_on_full_buffer=False)
        try:
            if not self.start():
                return False
            self._supervise()
            self._shut_down()
            return True
        finally:
            signal.set_wakeup_fd(previous_fd)
            for number, handler in self._handlers.items():
                signal.signal(number, handler)
            for fd in self._wake:
                os.close(fd)
            self._wake = None

    def stop(self, *, now: bool = False) -> None:
        """Stop as on a first signal (`now`: a second); from another thread too."""
        self._hurry = self._hurry or now
        self._stopping = True
        if self._wake is not None:
            try:
                os.write(self._wake[1], b"s")
            except OSError:
                pass

    def _on_signal(self, number: int, frame: FrameType | None) -> None:
        if number != signal.SIGCHLD:  # a SIGCHLD only wakes the loop (the wake-up descriptor), which reaps
            self._received.append(number)

    def _act_on_signals(self) -> None:
        while self._acted < min(len(self._received), 2):
            self._acted += 1
            log.info(
                "%s received: %s",
                signal.Signals(self._received[self._acted - 1]).name,
                "stopping (a second signal releases at once)" if self._acted == 1 else "releasing at once",
            )
            self.stop(now=self._acted == 2)

    def _wait_for_events(self, timeout: float) -> None:
        """Sleep in `select` until a signal, a child's counters, server output or `timeout`; take them in."""
        assert self._wake is not None
        watched = [self._wake[0], self._summary_read]
        if self._server_out is not None:
            watched.append(self._server_out)
        readable, _, _ = select.select(watched, [], [], max(0.0, timeout))
        if self._wake[0] in readable:
            try:
                os.read(self._wake[0], 512)
            except BlockingIOError:
                pass
        if self._summary_read in readable:
            self.summaries.read(0.0)
        if self._server_out is not None and self._server_out in readable and not os.read(self._server_out, 65536):
            self._close_server_out()  # the server exited: the loop restarts it
        self._act_on_signals()

    def _supervise(self) -> None:
        """Restart what dies, log the summary line, until the first signal."""
        every = self.summary_every or float("inf")
        next_line = time.monotonic() + every
        while not self._stopping:
            now = time.monotonic()
            wake_at = min([next_line, now + _LONGEST_WAIT] + self._restarts_due(now))
            self._wait_for_events(wake_at - time.monotonic())
            if time.monotonic() >= next_line and not self._stopping:
                self.summaries.log(self._live_pids())
                next_line = time.monotonic() + every

    def _restarts_due(self, now: float) -> list[float]:
        """Start again what is due; schedule what newly exited; the times of the restarts still to come."""
        pending = []
        for child in ([self.server] if self.server is not None else []) + self.children:
            status = child.exited()
            if status is None:
                continue
            if child.restart_at is None:
                log.warning("%s exited with status %d; starting it again", child.name, status)
                child.schedule_restart(now)
            assert child.restart_at is not None
            if now >= child.restart_at:
                self._start(child)  # nobody waits for a restarted server's line: the loop drops it
            else:
                pending.append(child.restart_at)
        return pending

    def _live_pids(self) -> set[int]:
        return {child.process.pid for child in self.children if child.process is not None and child.exited() is None}

    # -- starting --------------------------------------------------------------------------

    def start(self) -> bool:
        """Start the server (if any) and the children; the children connect once it listens.

        Each child waits on the read end of a pipe whose write end only this
        process holds, and closing it once the server has printed its
        "listening" line releases them all (DECISIONS §35). False if the
        server failed: the children, which have connected to nothing, are
        stopped.
        """
        self._choose_start_method()
        if self.server is None:
            self._preload(_ENTRIES["walqueue.worker"], *_SHARED_PRELOAD, *_WORKER_PRELOAD)
            for child in self.children:
                self._start(child)
        else:
            ready_read, self._ready_write = os.pipe()
            try:
                started = self._start_server_and_children(ready_read)
            finally:
                os.close(ready_read)
                self._release_children()  # the children go on: to the server, or to an error if it failed
            if not started:
                self._stop_unconnected_children()
                return False
        log.info(
            "supervising %d worker process(es) on %s (%s)", len(self.children), self.socket_path, self.start_method
        )
        return True

    def _choose_start_method(self) -> None:
        """Fork only from a process that runs no other thread (a fork copies the locks the others hold)."""
        if self.start_method != "fork":
            return
        threads = forkstart.other_threads()
        if not forkstart.can_fork() or threads:
            reason = "no os.fork here" if not forkstart.can_fork() else "threads run: " + ", ".join(threads[:5])
            log.warning("starting the worker processes as fresh interpreters, not by fork (%s)", reason)
            self.start_method = "spawn"

    def _preload(self, *modules: str) -> None:
        """Import what a forked child would import on its way to its first act: once, here, not in each fork.

        The server imports its own modules itself, beside this process's import of the workers' (DECISIONS §59).
        """
        if self.start_method == "fork":
            for module in modules:
                importlib.import_module(module)

    def _start_server_and_children(self, ready_read: int) -> bool:
        assert self.server is not None
        self._preload(*_SHARED_PRELOAD)
        self._start(self.server)  # first: it has the most to do (import its own modules, open the store, listen)
        self._preload(_ENTRIES["walqueue.worker"], *_WORKER_PRELOAD)
        for child in self.children:
            self._start(child, ready_read)
            self._release_if_listening()  # a server that listens already need not wait for the last fork
        for attempt in range(_SERVER_START_TRIES):
            if attempt:
                self._start(self.server)
            if self._server_ready():
                return True
            status = self.server.exited()
            if status is None or status >= 0:
                return False  # it refused to start (2: DIR cannot be opened, 3: the socket): say so
            log.warning("walqueue-serve was killed while starting; starting it again")
        return False

    def _release_if_listening(self) -> None:
        """Release the children forked so far if the server has printed its "listening" line (no wait)."""
        assert self._server_out is not None
        heard, self._server_said = _read_until_listening(self._server_out, 0.0, self._server_said)
        if heard:
            self._release_children()

    def _release_children(self) -> None:
        """Close this process's write end of the ready pipe (once): every child waiting on it goes on."""
        if self._ready_write is not None:
            os.close(self._ready_write)
            self._ready_write = None

    def _start(self, child: _Child, ready: int | None = None) -> None:
        """Start `child` by this supervisor's start method; `ready`: the read end of the ready pipe (a first start)."""
        extra = [] if ready is None else [READY_OPTION, str(ready)]
        keep = child.pass_fds + (() if ready is None else (ready,))
        piped = child is self.server
        if piped:
            self._close_server_out()
        if self.start_method == "fork":
            close = [fd for fd in self._own_fds() if fd not in keep]
            entry = functools.partial(_run_entry, _ENTRIES[child.command[2]])
            forked = forkstart.fork(
                entry,
                child.command[3:] + extra,
                close=close,
                handlers=self._handlers,
                stdout_pipe=piped,
                name=_NAMES[child.command[2]],
            )
            child.process, output = forked, forked.stdout_fd
        else:
            import subprocess

            read, write = os.pipe() if piped else (None, None)
            try:
                child.process = subprocess.Popen(
                    [*child.command, *extra], stdin=subprocess.DEVNULL, stdout=write, pass_fds=keep
                )
            finally:
                if write is not None:
                    os.close(write)
            output = read
        if piped:
            self._server_out, self._server_said = output, b""
        child.started = time.monotonic()
        child.restart_at = None

    def _own_fds(self) -> list[int]:
        """Every descriptor this supervisor made (a forked child closes those it is not given)."""
        fds = [self._parent_read, self._parent_write, self._summary_read, self._summary_write]
        fds += [fd for fd in (self._server_out, self._ready_write) if fd is not None]
        return fds + list(self._wake or ())

    def _close_server_out(self) -> None:
        if self._server_out is not None:
            os.close(self._server_out)
            self._server_out = None

    def _stop_unconnected_children(self) -> None:
        """The server never listened: the children hold nothing (no connection, no lease); end them now."""
        for child in self.children:
            child.signal(signal.SIGKILL)
            if child.process is not None:
                child.process.wait()

    def _server_ready(self) -> bool:
        """Wait for the server's "listening" line on its stdout (no polling): True, or False if it died or hung.

        walqueue-serve prints that line once its socket accepts; reading it
        wakes this process at that instant (DECISIONS §35). Its later output
        is read and dropped by the loop, so a later print never blocks it.
        """
        assert self.server is not None and self.server.process is not None and self._server_out is not None
        process = self.server.process
        heard, self._server_said = _read_until_listening(
            self._server_out, time.monotonic() + _SERVER_START_SECONDS, self._server_said
        )
        if heard:
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

    # -- stopping --------------------------------------------------------------------------

    def _shut_down(self) -> None:
        """Pass the stop on, wait for the children (killing any still there after grace + margin), stop the server."""
        for child in self.children:
            child.signal(signal.SIGTERM)
        began = time.monotonic()
        kill_at = began + self.grace + _KILL_MARGIN_SECONDS
        hurried = False
        while any(child.exited() is None for child in self.children):
            if self._hurry and not hurried:
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
            self._wait_for_events(min(_LONGEST_WAIT, kill_at - time.monotonic()))
        self._stop_server()
        self.summaries.read(0.0)  # the children's last counters, sent as they stopped
        self.summaries.log(set())
        self._close_server_out()
        self.close_pipe()

    def _stop_server(self) -> None:
        if self.server is not None and self.server.process is not None:
            self.server.signal(signal.SIGTERM)
            if not self.server.exits_within(_KILL_MARGIN_SECONDS):
                self.server.signal(signal.SIGKILL)
                self.server.process.wait()

    def close_pipe(self) -> None:
        """Close both ends of the children's pipes (every child has exited, or none was started); once."""
        if self._pipes_closed:
            return
        self._pipes_closed = True
        for fd in (self._parent_read, self._parent_write, self._summary_read, self._summary_write):
            os.close(fd)


def _run_entry(module: str, argv: list[str]) -> int:
    """In a forked child: ``module.main(argv)`` (imported here if the supervisor has not imported it)."""
    main: Callable[[list[str]], int] = importlib.import_module(module).main
    return main(argv)


def _read_until_listening(fd: int, give_up: float, seen: bytes = b"") -> tuple[bool, bytes]:
    """Read `fd` until a line holding ``listening`` (True), its end or `give_up` (False); and the tail read.

    `seen`: the tail an earlier call read. A `give_up` already past reads only what is there (it never waits).
    """
    while b"listening" not in seen:
        remaining = max(0.0, give_up - time.monotonic())
        if not select.select([fd], [], [], remaining)[0]:
            return False, seen
        chunk = os.read(fd, 4096)
        if not chunk:
            return False, seen  # the server closed its stdout: it exited
        seen = seen[-16:] + chunk
    return True, seen


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
    open_store: Callable[[str], Any],
) -> int:
    """Run P children (and the server, for a directory) until SIGTERM/SIGINT; returns the exit status.

    `prog` and `open_store` are the command's (`walqueue.worker.cli`), which
    calls this: passed in, so that this module does not import its caller.
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
    if created:  # created here, as the threaded worker creates it (its socket goes in it); closed before any fork
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
        directory,
        socket_path,
        children,
        arguments.grace,
        server_log_level,
        summary_every=arguments.summary or None,
        start_method=arguments.start_method or default_start_method(),
    )
    if not supervisor.run():
        supervisor.close_pipe()
        if created:  # a failed start leaves nothing behind: not the empty store made for it either
            assert directory is not None
            import shutil

            shutil.rmtree(directory, ignore_errors=True)
        return supervisor.exit_status
    return 0
