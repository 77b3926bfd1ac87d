"""The few durable-file primitives every writer shares.

All go through the `os` module at call time (never cached references), so a
fault-injection harness can wrap `os.write`, `os.fsync`, `os.replace` and
`os.unlink` and see every call WALQueue makes.
"""

from __future__ import annotations

import os

__all__ = ["fsync_directory", "read_all", "write_all", "write_rest"]


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write every byte of `data`: `os.write` may write less than asked."""
    written = os.write(fd, data)
    if written != len(data):
        write_rest(fd, data, written)


def write_rest(fd: int, data: bytes | memoryview, written: int) -> None:
    """Finish writing `data`, of which one `os.write` wrote the first `written` bytes.

    For a caller that makes the usual single `os.write` itself (the WAL's
    hot path) and needs the rare rest written the same way `write_all` does.
    """
    if written <= 0:
        raise OSError(f"os.write wrote {written} bytes")
    view = memoryview(data)[written:]
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(f"os.write wrote {written} bytes")
        view = view[written:]


def read_all(fd: int, limit: int) -> bytes:
    """Read from `fd` until end of file, at most `limit` bytes (a file that grew is cut there)."""
    chunks = []
    remaining = limit
    while remaining > 0:
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def fsync_directory(directory: str | os.PathLike[str]) -> None:
    """Make a directory's entries (creations, renames, deletions) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
