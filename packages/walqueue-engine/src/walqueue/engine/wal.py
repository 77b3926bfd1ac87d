"""The WAL writer: appends frames to the newest segment, syncs them, rotates segments.

Writing and syncing are separate calls, as in LevelDB's `log::Writer` and
etcd's `WAL.Save`: `write` puts bytes at the end of the newest segment and
returns the end offset, `sync` makes everything written before it durable.
That seam is what group commit needs: many callers' frames are written one
after another, and one fsync covers them all (`Queue` decides when).

The fault-injection phases of the log (CONTRACT §5) are not in the writer: they
are in `append_with_phases`, the one small wrapper a queue with a hook uses,
which writes a frame in two parts so that a crash at `wal.append.partial`
leaves a real torn tail on disk, exactly what a power cut mid-write leaves.
Any exception escaping these functions means the file may be in an unknown
state: the Queue poisons itself.
"""

from __future__ import annotations

import errno
import os
import weakref
from collections.abc import Callable

from walqueue.format.directory import StoreDirectory
from walqueue.format.fsutil import write_rest
from walqueue.format.names import wal_name

__all__ = ["Hook", "WalWriter", "append_with_phases", "create_segment", "no_hook"]

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
    `wal_bytes` counts every byte in live segments (CONTRACT §2's `stats()`).
    With `sync=False`, `sync` does nothing: everything else is the same.
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
    ) -> None:
        self.directory = directory
        self.first_live = first_live
        self.newest = newest
        self.wal_bytes = wal_bytes
        #: A replicator's retention hold: the lowest segment it has not shipped yet (None: no hold).
        #: Compaction deletes only segments below both this and `first_live` (`deletable_below`).
        self.hold: int | None = None
        self._fd: int | None = None
        self._closer: weakref.finalize[[int], WalWriter] | None = None
        self._adopt(fd)  # from here the writer owns the descriptor (closed when the writer goes)
        os.lseek(fd, newest_size, os.SEEK_SET)  # the descriptor has no O_APPEND: writes go at its offset
        self._size = newest_size
        self._sync = sync

    def deletable_below(self) -> int:
        """Segments numbered below this may be deleted: below the first live one and below the hold."""
        hold = self.hold
        return self.first_live if hold is None else min(self.first_live, hold)

    @property
    def segments(self) -> int:
        return self.newest - self.first_live + 1

    @property
    def syncs(self) -> bool:
        """Whether `sync` really fsyncs (the queue's `sync` option)."""
        return self._sync

    def write(self, data: bytes | memoryview) -> int:
        """Write `data` at the end of the newest segment (not synced); return the segment's new size."""
        fd = self.fd()
        written = os.write(fd, data)
        if written != len(data):
            write_rest(fd, data, written)
        self._size += len(data)
        self.wal_bytes += len(data)
        return self._size

    def sync(self) -> None:
        """Make every byte written to the newest segment so far durable (with `sync=True`)."""
        if self._sync:
            os.fsync(self.fd())

    def truncate(self, size: int) -> None:
        """Cut the newest segment to `size` bytes (a torn tail, at opening) and sync the cut."""
        fd = self.fd()
        os.ftruncate(fd, size)
        self.sync()
        os.lseek(fd, size, os.SEEK_SET)
        self.wal_bytes -= self._size - size  # the cut bytes were counted as live
        self._size = size

    def fd(self) -> int:
        """The newest segment's descriptor, read again at every use.

        A hook may have closed the queue (or forked: a child closes what it
        inherited), and a descriptor number kept from before could by then
        name another file.
        """
        fd = self._fd
        if fd is None:
            raise OSError(errno.EBADF, "the WAL is closed")
        return fd

    def rotate(self) -> None:
        """Seal the newest segment (synced) and start the next one (its name made durable)."""
        self.sync()
        self.close()
        self._adopt(create_segment(self.directory, self.newest + 1, sync=self._sync))
        self.newest += 1
        self._size = 0

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


def append_with_phases(wal: WalWriter, frame: bytes, hook: Hook) -> None:
    """Append and sync `frame`, reporting the four `wal.append.*` phases of CONTRACT §5 around each step.

    The frame goes out in two writes, its first half before
    `wal.append.partial`, so that a crash there leaves a torn tail. Without
    a hook nobody can stop the process between two parts, so the queue
    writes a frame with one `write` (a power cut tears it just the same).
    """
    hook("wal.append.before")
    half = len(frame) // 2
    view = memoryview(frame)
    wal.write(view[:half])
    hook("wal.append.partial")
    wal.write(view[half:])
    hook("wal.append.written")
    wal.sync()
    hook("wal.append.synced")


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
