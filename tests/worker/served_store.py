"""A real walqueue-serve on a fresh store, for the worker tests that run through a server."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Served:
    """The server process, its socket (a short path under /tmp, for AF_UNIX) and the environment it ran with."""

    server: subprocess.Popen[bytes]
    socket: Path
    env: dict[str, str]


@contextlib.contextmanager
def walqueue_serve(src_pythonpath: str, *, start_seconds: float = 30) -> Iterator[Served]:
    """Start walqueue-serve, wait until its socket exists; kill it and remove its directory after."""
    place = Path(tempfile.mkdtemp(prefix="wq-", dir="/tmp"))
    env = dict(os.environ, PYTHONPATH=src_pythonpath)
    server = subprocess.Popen(
        [sys.executable, "-m", "walqueue.serve", str(place / "q"), "--socket", str(place / "s")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        give_up = time.monotonic() + start_seconds
        while not (place / "s").exists():
            assert server.poll() is None, "walqueue-serve exited"
            assert time.monotonic() < give_up, "walqueue-serve did not start"
            time.sleep(0.01)
        yield Served(server, place / "s", env)
    finally:
        server.kill()
        server.wait(30)
        shutil.rmtree(place, ignore_errors=True)
