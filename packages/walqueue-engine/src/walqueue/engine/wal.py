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

The newest segment is preallocated (`PREALLOCATE_BYTES` at a time, with
`posix_fallocate`): a frame is written at the next offset inside space the
file already has, so a commit does not change the file's size and
`fdatasync` has no inode size to journal (docs/DECISIONS.md §35). Zeros
after the last frame are the end of the log (docs/FORMAT.md §7). A sealed
segment, and the newest one at a clean close, is cut to exactly its frames.
"""

from __future__ import annotations

import errno
import os
import weakref
from collections.abc import Callable

from walqueue.format.directory import StoreDirectory
from walqueue.format.fsutil import write_rest
from walqueue.format.names import wal_name

__all__ = ["PREALLOCATE_BYTES", "Hook", "WalWriter", "append_with_phases", "create_segment", "no_hook"]

Hook = Callable[[str], None]

#: The most room the newest segment is given at a time: 20,000 small frames between two size changes.
PREALLOCATE_BYTES = 4 * 2**20
#: The first room a segment gets; each extension doubles it up to `PREALLOCATE_BYTES`, so
#: a store opened for a few calls allocates (and cuts at close) little.
FIRST_ROOM_BYTES = 64 * 2**10

#: `fdatasync` syncs a file's data and the metadata needed to read it (its size, its extents), not its times.
#: Looked up at each call through `os`, so that a fault injector wrapping it sees every sync.
_HAS_FDATASYNC = hasattr(os, "fdatasync")


def preallocate(fd: int, offset: int, length: int) -> bool:
    """Give the file room up to `offset + length` (zeros); False where the file system refuses.

    Refused (no `posix_fallocate`, a file system without it, or no space
    left for the room itself) the segment simply grows at each write, as
    before: a fallback, never an error. A failed call may still have
    extended the file; what it added reads as zeros, the end of the log.
    """
    allocate = getattr(os, "posix_fallocate", None)
    if allocate is None:
        return False
    try:
        allocate(fd, offset, length)
    except OSError:
        return False
    return True


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
        self._size = newest_size  # where the frames end: the next frame's offset
        self._room = os.fstat(fd).st_size  # the file's size: frames, then (preallocated) zeros
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
        """Write `data` after the newest segment's last frame (not synced); return where the frames now end."""
        fd = self._fd
        if fd is None:
            fd = self.fd()  # raises: `fd`'s rule, its call made only when it fails (this runs per write)
        size = len(data)
        end = self._size + size
        if end >= self._room:
            self._grow(fd, end)
        written = os.write(fd, data)
        if written != size:
            write_rest(fd, data, written)
        self._size = end
        self.wal_bytes += size
        return end

    def _grow(self, fd: int, end: int) -> None:
        """Preallocate the room the next frames need (or let the write grow the file where refused)."""
        # Strictly past `end`: a frame in preallocated room always has a zero byte after it (FORMAT §7).
        step = min(PREALLOCATE_BYTES, max(FIRST_ROOM_BYTES, self._room))
        room = max(self._room, end - end % step + step)
        if preallocate(fd, self._room, room - self._room):
            self._room = room
        else:
            self._room = max(self._room, os.fstat(fd).st_size, end)

    def sync(self) -> None:
        """Make every byte written to the newest segment so far durable (with `sync=True`).

        `fdatasync` is enough: it writes the data and whatever metadata reading
        it back needs (a size grown past the preallocation, extents), and
        skips only the times.
        """
        if self._sync:
            if _HAS_FDATASYNC:
                os.fdatasync(self.fd())
            else:
                os.fsync(self.fd())

    def truncate(self, size: int) -> None:
        """Cut the newest segment to `size` bytes (a torn tail, at opening) and sync the cut."""
        fd = self.fd()
        os.ftruncate(fd, size)
        if self._sync:
            os.fsync(fd)
        os.lseek(fd, size, os.SEEK_SET)
        self.wal_bytes -= self._size - size  # the cut bytes were counted as live
        self._size = size
        self._room = size

    def trim(self) -> None:
        """Cut the newest segment's zero tail, leaving exactly its frames, and sync the cut.

        Done to a segment being sealed, and to the newest one at a clean
        close: a closed store is byte for byte what a writer without
        preallocation leaves, which older readers open (docs/DECISIONS.md §35).
        """
        if self._room != self._size:
            self.truncate(self._size)

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
        """Seal the newest segment (cut to its frames, synced) and start the next one (its name made durable)."""
        if self._room != self._size:
            self.trim()  # its fsync makes the frames durable with the cut: no second sync (DECISIONS §60)
        else:
            self.sync()
        self.close()
        self._adopt(create_segment(self.directory, self.newest + 1, sync=self._sync))
        self.newest += 1
        self._size = 0
        self._room = 0
        self._grow(self.fd(), 0)

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
