"""The WAL writer: appends frames to the newest segment and rotates segments.

A frame is written in two parts so that a crash at `wal.append.partial`
leaves a real torn tail on disk, exactly what a power cut mid-write leaves.
Every phase of SPEC §5 that concerns the log is reported here and nowhere
else. Any exception escaping these methods means the file may be in an
unknown state: the Queue poisons itself.
"""

from __future__ import annotations

import errno
import os
import weakref
from collections.abc import Callable

from walqueue.format.directory import StoreDirectory
from walqueue.format.fsutil import write_all, write_rest
from walqueue.format.names import wal_name

__all__ = ["Hook", "WalWriter", "create_segment", "no_hook"]

Hook = Callable[[str], None]


def no_hook(phase: str) -> None:
    """The hook of a queue opened without one: nothing observes the phases."""


def create_segment(directory: StoreDirectory, number: int, *, sync: bool) -> int:
    """Create an empty segment file (it must not exist) and make its name durable; return a write fd."""
    fd = directory.create(wal_name(number))
    try:
        if sync:
            directory.fsync()
    except BaseException:
        os.close(fd)
        raise
    return fd


class WalWriter:
    """The open newest segment plus the bookkeeping of the live WAL.

    `first_live` is the first segment after the published snapshot;
    `wal_bytes` counts every byte in live segments (SPEC's `stats()`).
    """

    def __init__(
        self,
        directory: StoreDirectory,
        *,
        first_live: int,
        newest: int,
        fd: int,
        newest_size: int,
        wal_bytes: int,
        sync: bool,
        hook: Hook,
    ) -> None:
        self.directory = directory
        self.first_live = first_live
        self.newest = newest
        self.wal_bytes = wal_bytes
        self._fd: int | None = None
        self._closer: weakref.finalize[[int], WalWriter] | None = None
        self._adopt(fd)
        self._size = newest_size
        self._sync = sync
        self._hook = hook

    @property
    def segments(self) -> int:
        return self.newest - self.first_live + 1

    def append(self, frame: bytes) -> None:
        """Write `frame` at the end of the newest segment and (with sync) fsync it."""
        fd = self._open_fd()
        hook = self._hook
        if hook is no_hook:
            # Nobody can stop the process between two parts of the write, so
            # one write does; a power cut can tear it just the same.
            written = os.write(fd, frame)
            if written != len(frame):
                write_rest(fd, frame, written)
            self._size += len(frame)
            self.wal_bytes += len(frame)
            if self._sync:
                os.fsync(fd)
            return
        hook("wal.append.before")
        half = len(frame) // 2
        view = memoryview(frame)
        write_all(self._open_fd(), view[:half])
        self._size += half
        self.wal_bytes += half
        hook("wal.append.partial")
        write_all(self._open_fd(), view[half:])
        self._size += len(frame) - half
        self.wal_bytes += len(frame) - half
        hook("wal.append.written")
        if self._sync:
            os.fsync(self._open_fd())
        hook("wal.append.synced")

    def _open_fd(self) -> int:
        """The newest segment's descriptor, read again after every hook call.

        A hook may have closed the queue (or forked: a child closes what it
        inherited), and a descriptor number kept from before could by then
        name another file.
        """
        fd = self._fd
        if fd is None:
            raise OSError(errno.EBADF, "the WAL was closed during the write")
        return fd

    def rotate(self) -> None:
        """Seal the newest segment and start the next one (its name made durable)."""
        self._hook("wal.rotate.before")
        fd = self._open_fd()
        if self._sync:
            os.fsync(fd)
        self.close()
        self._adopt(create_segment(self.directory, self.newest + 1, sync=self._sync))
        self.newest += 1
        self._size = 0
        self._hook("wal.rotate.after")

    def retire_sealed(self) -> None:
        """Record that a published snapshot covers every sealed segment: only the newest stays live."""
        self.first_live = self.newest
        self.wal_bytes = self._size

    def _adopt(self, fd: int) -> None:
        # The descriptor is closed when the writer is garbage-collected, so a
        # discarded Queue leaks nothing even if nobody calls close().
        self._fd = fd
        self._closer = weakref.finalize(self, _close_quietly, fd)

    def close(self) -> None:
        """Close the newest segment's descriptor; idempotent, never raises."""
        closer, self._closer, self._fd = self._closer, None, None
        if closer is not None:
            closer()


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
