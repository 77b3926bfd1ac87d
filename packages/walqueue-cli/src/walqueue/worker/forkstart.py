"""Start a supervisor's child by `os.fork` instead of a fresh interpreter (DECISIONS §44).

`walqueue-worker --processes P` has imported WALQueue and the handler's
module before it starts anything; a fresh interpreter per child imports
them all again (hundreds of milliseconds of CPU each on a loaded machine,
five at once on two cores). A fork copies the imported process in a
millisecond, as huey's consumer and gunicorn's ``--preload`` do.

A fork is only safe from a process that runs one thread: the child gets
a copy of every lock, and a lock another thread held at that instant is
held forever in the child. So the supervisor runs no thread of its own
(its loop is one `select` in the main thread), and `other_threads` tells
it when something else (a handler module that starts a thread when
imported) has started one: it then starts its children as fresh
interpreters instead.

What a forked child gets, and what it gives up, is decided here
(`_become_child`): the signal handlers the supervisor found (not its own),
no wake-up descriptor, stdin on /dev/null, and none of the descriptors the
supervisor made for itself (the write end of the parent pipe above all:
a child holding it would never see its parent die). Descriptors the
handler's module opened when imported are left to the child, as with any
fork. The child runs a ``main(argv)`` with the arguments a fresh
interpreter would get, and ends with `os._exit`: it never returns into the
supervisor's code, and runs no `atexit` hook of the supervisor's.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["Forked", "can_fork", "fork", "other_threads"]

#: How a handler of the supervisor's is put back in a child: the handlers it found before installing its own.
Handlers = Mapping[int, Any]


def can_fork() -> bool:
    """True where `os.fork` exists (not on Windows)."""
    return hasattr(os, "fork")


def other_threads() -> list[str]:
    """The threads this process runs besides the calling one: names, or a placeholder for unnamed OS threads.

    `threading.enumerate` misses threads started without `threading` (by a
    C extension, or `_thread`); on Linux the kernel's own count is checked
    too.
    """
    names = [thread.name for thread in threading.enumerate() if thread is not threading.current_thread()]
    try:
        count = len(os.listdir(f"/proc/{os.getpid()}/task"))
    except OSError:
        return names
    return names + ["(a thread not started by threading)"] * max(0, count - 1 - len(names))


class Forked:
    """A forked child, with the part of `subprocess.Popen`'s interface the supervisor uses."""

    def __init__(self, pid: int, stdout: int | None) -> None:
        self.pid = pid
        #: The read end of the child's stdout pipe (if one was asked for); the caller closes it.
        self.stdout_fd = stdout
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The exit status (negative: the signal that ended it) once it has exited, else None; reaps it."""
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return self.returncode
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for its exit (no polling where `os.pidfd_open` exists); `TimeoutError` after `timeout`."""
        if timeout is None:
            if self.returncode is None:
                _, status = os.waitpid(self.pid, 0)
                self.returncode = os.waitstatus_to_exitcode(status)
            return self.returncode
        give_up = time.monotonic() + timeout
        while self.poll() is None:
            remaining = give_up - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"process {self.pid} still runs after {timeout:g} s")
            _wait_readable(self.pid, remaining)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, number: int) -> None:
        if self.poll() is None:  # never a signal to a pid that is reaped, and may be reused
            try:
                os.kill(self.pid, number)
            except ProcessLookupError:
                pass


def _wait_readable(pid: int, timeout: float) -> None:
    """Block until process `pid` exits or `timeout` passes: its pidfd where there is one, else a short nap."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        time.sleep(min(timeout, 0.01))
        return
    try:
        select.select([pidfd], [], [], timeout)
    finally:
        os.close(pidfd)


def fork(
    main: Callable[[list[str]], int],
    argv: list[str],
    *,
    close: Iterable[int],
    handlers: Handlers,
    stdout_pipe: bool = False,
    name: str | None = None,
) -> Forked:
    """Fork a child that runs ``main(argv)`` and exits with its status; see the module docstring.

    `close`: the supervisor's own descriptors, closed in the child.
    `handlers`: the signal handlers to put back in the child.
    `stdout_pipe`: the child's stdout is a new pipe, whose read end the
    returned `Forked` holds (the server's "listening" line).
    `name`: the child's process name (what ``ps -e``, ``top`` and ``pgrep``
    show), where Linux lets a process set its own; its command line stays
    the supervisor's.
    """
    _flush()  # nothing buffered here is written twice, once by each process
    read, write = os.pipe() if stdout_pipe else (None, None)
    pid = os.fork()
    if pid == 0:  # the child: from here on, this never returns
        status = 70
        try:
            _become_child([*close, *([] if read is None else [read])], write, handlers)
            if name is not None:
                _set_name(name)
            status = _run(main, argv)
        finally:
            os._exit(status)
    if write is not None:
        os.close(write)
    return Forked(pid, read)


def _become_child(close: list[int], stdout: int | None, handlers: Handlers) -> None:
    """Give up what is the supervisor's: its signal handlers and wake-up descriptor, its descriptors, its stdin."""
    signal.set_wakeup_fd(-1)
    for number, handler in handlers.items():
        signal.signal(number, handler)
    for fd in close:
        try:
            os.close(fd)
        except OSError:
            pass
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    if stdout is not None:
        os.dup2(stdout, 1)
        os.close(stdout)


def _set_name(name: str) -> None:
    """Set this process's name (at most 15 bytes) through /proc/self/comm where there is one; else leave it."""
    try:
        with open("/proc/self/comm", "w") as comm:
            comm.write(name[:15])
    except OSError:
        pass


def _run(main: Callable[[list[str]], int], argv: list[str]) -> int:
    """``main(argv)``'s status, as a fresh interpreter running it would exit (`SystemExit`, a traceback: 1)."""
    try:
        code: Any = main(argv)
    except SystemExit as stop:
        code = stop.code
    except BaseException:  # noqa: BLE001 - printed, as the interpreter would, then the child exits 1
        traceback.print_exc()
        code = 1
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    _flush()
    return status


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
