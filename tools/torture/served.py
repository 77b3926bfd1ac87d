"""A real `walqueue-serve` process for the server campaigns (sync=True, over its Unix socket)."""

from __future__ import annotations

import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from .harness import Abort
from .kill_child import child_environment

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
        command = [sys.executable, "-m", "walqueue.serve", str(self.directory), "--socket", self.socket_path]
        command += ["--log-level", "WARNING"]
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=child_environment(), bufsize=0
        )
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], SERVER_START_TIMEOUT)
        if not ready or not self.process.stdout.readline():
            self.process.kill()
            self.process.wait(SERVER_START_TIMEOUT)
            raise Abort(f"walqueue-serve on {self.directory} did not start (exit {self.process.returncode})")

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


def socket_dir() -> str:
    return tempfile.mkdtemp(prefix="wq-torture-", dir="/tmp")  # sun_path holds 108 bytes: keep it short


def start_victim(code: str, arguments: list[str], where: str) -> subprocess.Popen[bytes]:
    """A client process (``python -c code arguments``) that has printed "ready"; `Abort` if it did not start.

    Unbuffered: the caller's `readline` must not read past "ready" into a
    buffer that `communicate` (which reads the raw descriptor) never looks at.
    """
    victim = subprocess.Popen(
        [sys.executable, "-c", code, *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=child_environment(),
        bufsize=0,
    )
    assert victim.stdout is not None
    ready, _, _ = select.select([victim.stdout], [], [], SERVER_START_TIMEOUT)
    if not ready or victim.stdout.readline() != b"ready\n":
        victim.kill()
        victim.wait(SERVER_START_TIMEOUT)
        raise Abort(f"{where} did not start")
    return victim
