"""Exclusive ownership of a directory: an `fcntl.flock` on the directory itself, and on `DIR/LOCK`.

Why the directory: a lock on the file LOCK alone can be stolen. Deleting or
replacing LOCK under a live owner lets a second opener create a new LOCK
and lock that, and two writers then append to one log. The directory's own
inode cannot be recreated by a newcomer, so its flock is the ownership;
LOCK is still created and locked beside it, so that a process running an
older WALQueue (which locks only LOCK) is excluded too.

flock locks belong to an open file description, which a forked child
shares. So release unlocks explicitly (``LOCK_UN``) before closing: a child
that inherited the descriptors and has not closed them yet must not keep
the ownership alive once the owner has closed. A forked child, for its part,
closes its inherited copies without unlocking (`abandon`), since that would
release its parent's ownership. Every descriptor is close-on-exec. POSIX
only.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import weakref

from walqueue.engine.types import DirectoryLocked
from walqueue.format.directory import StoreDirectory, describe_file_type
from walqueue.format.errors import CorruptStore
from walqueue.format.names import LOCK_NAME

__all__ = ["DirectoryLock"]

_LOCK_FILE_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _unlock_and_close(owner_pid: int, fds: tuple[int, ...]) -> None:
    """Release the ownership: unlock (only in the owning process), then close; never raises."""
    unlock = os.getpid() == owner_pid
    for fd in fds:
        try:
            if unlock:
                fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError:
            pass
        try:
            os.close(fd)
        except OSError:
            pass


class DirectoryLock:
    """Holds the locked descriptors; `release()` is idempotent and also runs at garbage collection."""

    def __init__(self, directory: StoreDirectory) -> None:
        assert directory.fd is not None, "ownership needs an opened directory"
        # A descriptor of its own (a separate open file description), so that
        # the lock's life is this object's, whatever becomes of `directory`.
        dir_fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=directory.fd)
        fds: list[int] = [dir_fd]
        try:
            try:
                fcntl.flock(dir_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise DirectoryLocked(f"{directory.path} is owned by another Queue") from None
            fds.append(self._lock_file(directory))
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        self._fds = tuple(fds)
        self._finalizer = weakref.finalize(self, _unlock_and_close, os.getpid(), self._fds)

    @staticmethod
    def _lock_file(directory: StoreDirectory) -> int:
        """Open (creating it if missing) and lock LOCK, which must be a regular file."""
        path = directory.file_path(LOCK_NAME)
        entry = directory.lstat(LOCK_NAME)
        if entry is not None and not stat.S_ISREG(entry.st_mode):
            raise CorruptStore(path, None, f"LOCK is {describe_file_type(entry.st_mode)}, not a regular file")
        try:
            fd = os.open(LOCK_NAME, _LOCK_FILE_FLAGS, 0o644, dir_fd=directory.fd)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
                raise
            # Replaced by a symlink, a directory or a socket since the lstat.
            raise CorruptStore(path, None, "LOCK is not a regular file") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise CorruptStore(path, None, "LOCK is not a regular file")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise DirectoryLocked(f"{directory.path} is owned by another process (its LOCK is locked)") from None
        except BaseException:
            os.close(fd)
            raise
        return fd

    def release(self) -> None:
        """Unlock and close: the directory can be opened again at once."""
        self._finalizer()

    def abandon(self) -> None:
        """In a forked child: close the inherited descriptors WITHOUT unlocking (the parent still owns)."""
        if self._finalizer.detach() is not None:
            for fd in self._fds:
                try:
                    os.close(fd)
                except OSError:
                    pass
