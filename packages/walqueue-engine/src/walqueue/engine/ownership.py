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

The owner note: a walqueue-serve that owns a directory writes one JSON line
into LOCK, ``{"pid": P, "socket": "/abs/path"}`` (`write_owner_note`), so
that a `DirectoryLocked` met by someone else names the socket to use
instead. Every new owner empties LOCK first, so a note never outlives the
ownership it describes (a crashed server's note is gone at the next
opening). LOCK's content is no part of the store (docs/FORMAT.md).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
import weakref

from walqueue.engine.types import DirectoryLocked
from walqueue.format.directory import StoreDirectory, describe_file_type
from walqueue.format.errors import CorruptStore
from walqueue.format.names import LOCK_NAME

__all__ = ["DirectoryLock", "OWNER_NOTE_BYTES", "read_owner_note", "write_owner_note"]

#: The most bytes of LOCK read as an owner note.
OWNER_NOTE_BYTES = 4096

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
                raise _locked(directory, f"{directory.path} is owned by another Queue") from None
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
                raise _locked(directory, f"{directory.path} is owned by another process (its LOCK is locked)") from None
            if os.fstat(fd).st_size:
                os.ftruncate(fd, 0)  # a note a previous owner left (it crashed): this owner is someone else
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


def _locked(directory: StoreDirectory, message: str) -> DirectoryLocked:
    """The `DirectoryLocked` to raise: naming the owner's socket when its note gives one."""
    note = read_owner_note(directory)
    socket_path = note.get("socket") if note is not None else None
    if not isinstance(socket_path, str) or not socket_path:
        return DirectoryLocked(message)
    error = DirectoryLocked(
        f"{directory.path} is owned by walqueue-serve (pid {note.get('pid') if note else '?'}), listening on "
        f"{socket_path}: use Client({socket_path!r}) there, or walqueue --socket {socket_path}"
    )
    error.socket_path = socket_path
    return error


def read_owner_note(directory: StoreDirectory) -> dict[str, object] | None:
    """The owner note in LOCK (a JSON object), or None: no note, unreadable, or not a note; never raises."""
    try:
        fd = os.open(LOCK_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory.fd)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, OWNER_NOTE_BYTES)
        value = json.loads(data.decode("utf-8"))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)
    return value if isinstance(value, dict) else None


def write_owner_note(directory: str | os.PathLike[str], socket_path: str) -> None:
    """Write the owner note into ``DIR/LOCK``: call it only while this process owns DIR (walqueue-serve).

    Best effort: a note that cannot be written only leaves `DirectoryLocked`
    without the socket's name; `OSError` is the caller's to log.
    """
    note = json.dumps({"pid": os.getpid(), "socket": socket_path}, ensure_ascii=False).encode("utf-8") + b"\n"
    if len(note) > OWNER_NOTE_BYTES:
        return
    fd = os.open(os.path.join(directory, LOCK_NAME), os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return
        os.ftruncate(fd, 0)
        os.write(fd, note)
    finally:
        os.close(fd)
