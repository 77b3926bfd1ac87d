"""Child processes of the tools, bench and torture alike: how a child imports the same code, how it says it is ready.

One place for what every tool that starts a `walqueue-serve` or a client
process needs: the environment (`child_environment`: PYTHONPATH naming the
very src or site directories this process imports `walqueue` from, and
tools/ for the reference model), the server's command line
(`serve_command`), a start that waits for the child's first line
(`start_ready`), a directory short enough for a socket's path
(`socket_dir`), and the live processes a child started in turn
(`live_processes`, `children`, from /proc).
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "TOOLS_DIR",
    "child_environment",
    "children",
    "live_processes",
    "serve_command",
    "socket_dir",
    "start_ready",
]

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


def live_processes() -> Iterator[tuple[int, int, int]]:
    """Every live (not zombie) process: (pid, its parent's pid, its process group), from /proc/PID/stat."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()  # after the command name: state, ppid, pgrp, ...
            if fields[0] != b"Z":
                yield int(entry), int(fields[1]), int(fields[2])
        except (OSError, IndexError, ValueError):
            continue  # it exited while we looked


def children(parent: int) -> list[tuple[int, str]]:
    """The live child processes of `parent`: (pid, "server" or "worker" or its command line).

    A child forked by the supervisor has the supervisor's command line and
    says what it is by its process name (/proc/PID/comm, DECISIONS §44); a
    spawned one by its command line (``-m walqueue.serve`` or ``-m walqueue.worker``).
    """
    found = []
    for pid, its_parent, _ in live_processes():
        if its_parent != parent:
            continue
        try:
            with open(f"/proc/{pid}/comm", "rb") as comm, open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                name, command = comm.read().strip().decode(errors="replace"), cmdline.read().replace(b"\0", b" ")
        except OSError:
            continue
        if name == "walqueue-serve" or b"walqueue.serve" in command:
            found.append((pid, "server"))
        elif name == "walqueue-worker" or b"walqueue.worker" in command:
            found.append((pid, "worker"))
        else:
            found.append((pid, command.decode(errors="replace")))
    return found
