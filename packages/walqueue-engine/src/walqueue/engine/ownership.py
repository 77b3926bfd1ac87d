"""Exclusive ownership of a directory: an `fcntl.flock` on `DIR/LOCK`.

flock locks belong to an open file description, so a second `open` of LOCK
conflicts even within the same process; closing the descriptor (explicitly,
by garbage collection, or by the death of the process) ends ownership.
POSIX only.
"""

from __future__ import annotations

import fcntl
import os
import weakref

from walqueue.engine.types import DirectoryLocked
from walqueue.format.names import LOCK_NAME

__all__ = ["DirectoryLock"]


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


class DirectoryLock:
    """Holds LOCK's descriptor; `release()` is idempotent and also runs at garbage collection."""

    def __init__(self, directory: str) -> None:
        path = os.path.join(directory, LOCK_NAME)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DirectoryLocked(f"{directory} is owned by another Queue") from None
        except BaseException:
            os.close(fd)
            raise
        self._finalizer = weakref.finalize(self, _close_quietly, fd)

    def release(self) -> None:
        self._finalizer()
