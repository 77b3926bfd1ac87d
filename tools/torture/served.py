"""A real `walqueue-serve` process for the server campaigns (sync=True, over its Unix socket)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from harness import scratch, tmpfs
from processes import serve_command, start_ready

from .harness import Abort

SERVER_START_TIMEOUT = 30.0
SERVER_CLIENTS = 3
SERVER_KILL_DELAY = (0.05, 0.4)
CLIENT_KILL_DELAY = (0.0, 0.15)
HOSTILE_LINES_PER_UNIT = 150


class ServedQueue:
    """A `walqueue-serve` process on `directory`; `restart()` after a kill reuses the (stale) socket."""

    def __init__(self, directory: Path, socket_path: str) -> None:
        self.directory = directory
        self.socket_path = socket_path
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        self.process = start_ready(serve_command(self.directory, self.socket_path), timeout=SERVER_START_TIMEOUT)
        if self.process is None:
            raise Abort(f"walqueue-serve on {self.directory} did not start")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
        if self.process is not None:
            self.process.wait(SERVER_START_TIMEOUT)

    def stop(self) -> int:
        """SIGTERM: the graceful stop; its exit status."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(SERVER_START_TIMEOUT)


@contextlib.contextmanager
def served_scratch(prefix: str) -> Iterator[tuple[Path, str]]:
    """A server campaign's scratch root (on tmpfs when there is one) and a directory for its sockets.

    The sockets' directory is under /tmp, short enough for a socket's path
    (sun_path holds 108 bytes). Both are removed afterwards.
    """
    with scratch(prefix, tmpfs()) as root, scratch("wq-torture-", "/tmp") as sockets:
        yield root, str(sockets)


def start_victim(code: str, arguments: list[str], where: str) -> subprocess.Popen[bytes]:
    """A client process (``python -c code arguments``) that has printed "ready"; `Abort` if it did not start."""
    victim = start_ready([sys.executable, "-c", code, *arguments], timeout=SERVER_START_TIMEOUT, expect=b"ready\n")
    if victim is None:
        raise Abort(f"{where} did not start")
    return victim
