"""A child that notices its supervisor is gone, however it died: the read end of a pipe only the parent writes.

`walqueue-worker --processes P` starts walqueue-serve and P worker
processes. If the supervisor is killed with SIGKILL (an OOM kill, a
`kill -9` by an operator, a container runtime that gives up), nobody sends
its children SIGTERM: without this they would run on as orphans, holding
leases and the directory's lock, until someone finds and stops each one.

The supervisor creates a pipe, keeps its write end (close-on-exec, so no
other process holds it) and passes the read end to every child
(``--parent-pipe FD``). Nothing is ever written; a child's thread blocks in
`os.read` on it, which returns end-of-file only once every write end is
closed, that is when the supervisor's process is gone, whatever killed it.
Polling `os.getppid()` would do the same with a timer and a race with pid
reuse; Linux's ``PR_SET_PDEATHSIG`` fires when the parent *thread* that
started the child exits, which the supervisor's restarting thread does.

This module is that option's parsing and the watching thread; what a child
does when its parent is gone (a worker stops as on SIGTERM, the server once
its last client has left) is the child's.
"""

from __future__ import annotations

import argparse
import logging
import os
import stat
import threading
from collections.abc import Callable

__all__ = ["OPTION", "add_parent_pipe_argument", "watch_parent"]

log = logging.getLogger("walqueue.cli")

#: The command-line option that carries the inherited descriptor (the supervisor adds it; not for operators).
OPTION = "--parent-pipe"


def _pipe_descriptor(text: str) -> int:
    """An argparse type: an open descriptor of a pipe (its read end), else a usage error that says what it got."""
    try:
        fd = int(text)
        mode = os.fstat(fd).st_mode
    except (ValueError, OSError) as error:
        raise argparse.ArgumentTypeError(f"expected the descriptor of an open pipe, not {text!r} ({error})") from None
    if not stat.S_ISFIFO(mode):
        raise argparse.ArgumentTypeError(f"descriptor {fd} is not a pipe")
    return fd


def add_parent_pipe_argument(parser: argparse.ArgumentParser) -> None:
    """Add the hidden ``--parent-pipe FD`` option (set by walqueue-worker's supervisor for its children)."""
    parser.add_argument(OPTION, dest="parent_pipe", type=_pipe_descriptor, metavar="FD", help=argparse.SUPPRESS)


#: The option of a child started beside its server: wait for the end of this pipe before connecting.
READY_OPTION = "--server-ready-pipe"


def add_ready_pipe_argument(parser: argparse.ArgumentParser) -> None:
    """Add the hidden ``--server-ready-pipe FD`` option (a worker child started while its server starts)."""
    parser.add_argument(READY_OPTION, dest="ready_pipe", type=_pipe_descriptor, metavar="FD", help=argparse.SUPPRESS)


def wait_until_ready(fd: int | None) -> None:
    """Block until the supervisor closes the write end of the ready pipe (its server listens, or it gave up).

    No polling: the read returns when the last write end closes, which the
    supervisor does once its server has printed its "listening" line (or
    when it dies). Then the descriptor is closed.
    """
    if fd is None:
        return
    try:
        while os.read(fd, 4096):
            pass
    finally:
        os.close(fd)


def watch_parent(fd: int, on_gone: Callable[[], None]) -> threading.Thread:
    """Call `on_gone()` once, from a daemon thread, when the pipe `fd` reaches end-of-file (the parent is gone).

    Bytes written to the pipe (none are, by the supervisor) are read and
    ignored. A read error other than an interrupted call ends the watch
    without calling `on_gone`: the descriptor was not what the option promised.
    """

    def watch() -> None:
        while True:
            try:
                if not os.read(fd, 512):
                    break
            except OSError as error:
                log.error("cannot watch the parent's pipe (descriptor %d): %s", fd, error)
                return
        log.warning("the process that started this one is gone (its pipe closed): stopping")
        on_gone()

    thread = threading.Thread(target=watch, name="walqueue parent watch", daemon=True)
    thread.start()
    return thread
