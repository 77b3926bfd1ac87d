"""Child processes of the tools, bench and torture alike: how a child imports the same code, how it says it is ready.

One place for what every tool that starts a `walqueue-serve` or a client
process needs: the environment (`child_environment`: PYTHONPATH naming the
very src or site directories this process imports `walqueue` from, and
tools/ for the reference model), the server's command line
(`serve_command`), a start that waits for the child's first line
(`start_ready`), and a directory short enough for a socket's path
(`socket_dir`).
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["TOOLS_DIR", "child_environment", "serve_command", "socket_dir", "start_ready"]

TOOLS_DIR = Path(__file__).resolve().parent


def child_environment() -> dict[str, str]:
    """PYTHONPATH for a child that imports exactly the walqueue (and model) this process imports."""
    import walqueue

    entries: list[str] = []
    for package_dir in walqueue.__path__:  # every src (or site) directory that contributes to walqueue
        parent = str(Path(package_dir).resolve().parent)
        if parent not in entries:
            entries.append(parent)
    entries.append(str(TOOLS_DIR))
    env = dict(os.environ)
    inherited = env.get("PYTHONPATH")
    env["PYTHONPATH"] = os.pathsep.join(entries + ([inherited] if inherited else []))
    return env


def serve_command(directory: str | os.PathLike[str], socket_path: str) -> list[str]:
    """`walqueue-serve DIRECTORY --socket PATH`, quiet but for warnings, as this interpreter runs it."""
    return [
        sys.executable,
        "-m",
        "walqueue.serve",
        os.fspath(directory),
        "--socket",
        socket_path,
        "--log-level",
        "WARNING",
    ]


def start_ready(
    command: list[str], *, timeout: float, expect: bytes | None = None, stderr: int | None = subprocess.DEVNULL
) -> subprocess.Popen[bytes] | None:
    """Start `command` and wait up to `timeout` s for its first line (`expect`, if given); None if none came.

    A child that did not start is killed and waited for. Unbuffered, so that
    the caller's reads and `communicate` see every byte after that line.
    """
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, env=child_environment(), bufsize=0)
    assert child.stdout is not None
    ready, _, _ = select.select([child.stdout], [], [], timeout)
    line = child.stdout.readline() if ready else b""
    if line and (expect is None or line == expect):
        return child
    child.kill()
    child.wait(timeout)
    return None


def socket_dir(prefix: str = "wq-") -> str:
    """A new directory under /tmp: a socket's path (sun_path) holds 108 bytes, so keep it short."""
    return tempfile.mkdtemp(prefix=prefix, dir="/tmp")
