"""The few durable-file primitives every writer shares.

All go through the `os` module at call time (never cached references), so a
fault-injection harness can wrap `os.write`, `os.fsync`, `os.replace` and
`os.unlink` and see every call WALQueue makes.
"""

from __future__ import annotations

import os

__all__ = ["fsync_directory", "write_all"]


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write every byte of `data`: `os.write` may write less than asked."""
    written = os.write(fd, data)
    if written == len(data):  # the usual case: one call, no view
        return
    if written <= 0:
        raise OSError(f"os.write wrote {written} bytes")
    view = memoryview(data)[written:]
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(f"os.write wrote {written} bytes")
        view = view[written:]


def fsync_directory(directory: str | os.PathLike[str]) -> None:
    """Make a directory's entries (creations, renames, deletions) durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
