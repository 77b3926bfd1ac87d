"""The store's directory, opened once: every file operation on a store goes through here.

A store is a directory, and a program that owns one for hours meets
everything an ordinary process meets: the working directory changes, a
symlink in the path is repointed, an operator leaves a FIFO, a symlink or a
directory where a file should be. So:

- A `StoreDirectory` holds a descriptor of the directory it opened, and every
  name is resolved against that descriptor (``dir_fd=``), never against a
  path string again. A relative path, a `chdir` or a repointed symlink
  cannot send a later write, rename or deletion into another directory.
- Every name is opened with ``O_NOFOLLOW``: a symlink inside the store is
  never followed out of it (reading one is `CorruptStore`; an obstacle where
  a new file must go is unlinked or reported, see `clear_obstacle`).
- A file that is read is first `lstat`-ed, then opened with ``O_NONBLOCK``
  and checked again with `fstat` to be the same regular file: a FIFO, a
  device or a socket is never opened for reading, so nothing can block or
  feed endless bytes, and anything that is not a regular file is
  `CorruptStore` naming it. Its size is bounded before a byte is read.
- Files are created with ``O_EXCL``: nothing that already exists under a
  name is ever written through.
- Every descriptor is close-on-exec.

A `StoreDirectory` made by `StoreDirectory.at(path)` holds no descriptor and
resolves names against the path at each call: that is for offline callers
(tests, one-shot tools) that hand the format layer a path; the engine and
`walqueue-fsck` always `open` one.

Every call goes through the `os` module at call time (never a cached
reference), so a fault-injection harness can wrap `os.write`, `os.fsync`,
`os.replace` and `os.unlink` and see every call.
"""

from __future__ import annotations

import errno
import os
import stat

from walqueue.format.errors import CorruptStore

__all__ = ["StoreDirectory", "as_store_directory", "describe_file_type", "make_directories"]

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_APPEND_FLAGS = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


#: Each file type `stat.S_IFMT` can report, in words (anything else is "a special file").
_FILE_TYPE_WORDS = {
    stat.S_IFREG: "a regular file",
    stat.S_IFDIR: "a directory",
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def describe_file_type(mode: int) -> str:
    """What kind of directory entry `mode` (an `st_mode`) is, in words."""
    return _FILE_TYPE_WORDS.get(stat.S_IFMT(mode), "a special file")


class StoreDirectory:
    """A store's directory: its descriptor (or, offline, its path) and the few operations on names in it.

    `path` is only for messages: it names the directory as the caller gave
    it when it was opened.
    """

    __slots__ = ("path", "fd")

    def __init__(self, path: str, fd: int | None) -> None:
        self.path = path
        self.fd = fd

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> StoreDirectory:
        """Open the directory `path` (symlinks in it are resolved now, once).

        `NotADirectoryError` if it is not a directory, `FileNotFoundError` if
        it does not exist.
        """
        text = os.fspath(path)
        if not isinstance(text, str):
            raise TypeError("a store directory must be a text path")
        try:
            fd = os.open(text, _DIRECTORY_FLAGS)
        except NotADirectoryError:
            raise NotADirectoryError(errno.ENOTDIR, "not a directory (a store is a directory)", text) from None
        return cls(text, fd)

    @classmethod
    def at(cls, path: str | os.PathLike[str]) -> StoreDirectory:
        """A directory named by its path alone, resolved again at every call (offline use only)."""
        text = os.fspath(path)
        if not isinstance(text, str):
            raise TypeError("a store directory must be a text path")
        return cls(text, None)

    def close(self) -> None:
        """Close the descriptor; idempotent, never raises."""
        fd, self.fd = self.fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def file_path(self, name: str) -> str:
        """`name` joined to the directory's path, for messages."""
        return os.path.join(self.path, name)

    def _name(self, name: str) -> str:
        return name if self.fd is not None else os.path.join(self.path, name)

    # -- reading ----------------------------------------------------------------

    def listdir(self) -> list[str]:
        """The names in the directory (sorted)."""
        return sorted(os.listdir(self.fd if self.fd is not None else self.path))

    def lstat(self, name: str) -> os.stat_result | None:
        """The entry `name` itself (a symlink is not followed); ``None`` if there is none."""
        try:
            return os.stat(self._name(name), dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def open_regular(self, name: str, what: str, *, max_size: int | None = None) -> int:
        """Open regular file `name` for reading and return its descriptor.

        `FileNotFoundError` if there is no such entry. Anything else than a
        regular file of at most `max_size` bytes is `CorruptStore` naming
        the file, and is never opened for reading at all (a FIFO would block
        or feed bytes from a writer, a device endless bytes).
        """
        path = self.file_path(name)
        entry = self.lstat(name)
        if entry is None:
            raise FileNotFoundError(errno.ENOENT, f"{what} does not exist", path)
        if not stat.S_ISREG(entry.st_mode):
            raise CorruptStore(path, None, f"{what} is {describe_file_type(entry.st_mode)}, not a regular file")
        try:
            fd = os.open(self._name(name), _READ_FLAGS, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
                # Replaced between the lstat and the open.
                raise CorruptStore(path, None, f"{what} is not a regular file") from None
            raise
        try:
            opened = os.fstat(fd)
            if not stat.S_ISREG(opened.st_mode) or (opened.st_dev, opened.st_ino) != (entry.st_dev, entry.st_ino):
                raise CorruptStore(path, None, f"{what} is not a regular file (it was replaced while being opened)")
            if max_size is not None and opened.st_size > max_size:
                raise CorruptStore(path, 0, f"{what} is {opened.st_size} bytes, more than the {max_size} it can be")
        except BaseException:
            os.close(fd)
            raise
        return fd

    # -- writing ----------------------------------------------------------------

    def open_append(self, name: str, what: str) -> int:
        """Open existing regular file `name` for writing (a WAL segment being continued)."""
        fd = os.open(self._name(name), _APPEND_FLAGS, dir_fd=self.fd)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise CorruptStore(self.file_path(name), None, f"{what} is not a regular file")
        except BaseException:
            os.close(fd)
            raise
        return fd

    def create(self, name: str) -> int:
        """Create `name`, which must not exist in any form, and return a write descriptor."""
        return os.open(self._name(name), _CREATE_FLAGS, 0o644, dir_fd=self.fd)

    def unlink(self, name: str) -> None:
        """Remove the entry `name` (a symlink itself, never its target)."""
        os.unlink(self._name(name), dir_fd=self.fd)

    def replace(self, source: str, target: str) -> None:
        """Rename `source` over `target`, both in this directory (atomic)."""
        os.replace(self._name(source), self._name(target), src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def clear_obstacle(self, name: str) -> None:
        """Make room for a file WALQueue is about to create under a transient or unpublished `name`.

        A regular file or a symlink there is a leftover (of an interrupted
        write, or an operator's link) that nothing reads: it is unlinked,
        which never touches a symlink's target. A directory or a special
        file is not ours to remove: `FileExistsError` naming it, before
        anything is written.
        """
        entry = self.lstat(name)
        if entry is None:
            return
        if stat.S_ISREG(entry.st_mode) or stat.S_ISLNK(entry.st_mode):
            self.unlink(name)
            return
        raise FileExistsError(
            errno.EEXIST,
            f"{describe_file_type(entry.st_mode)} is in the way of a file WALQueue must create; remove it",
            self.file_path(name),
        )

    def fsync(self) -> None:
        """Make the directory's entries (creations, renames, deletions) durable."""
        if self.fd is not None:
            os.fsync(self.fd)
            return
        fd = os.open(self.path, _DIRECTORY_FLAGS)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def __repr__(self) -> str:
        return f"StoreDirectory({self.path!r}, fd={self.fd})"


def as_store_directory(directory: StoreDirectory | str | os.PathLike[str]) -> StoreDirectory:
    """`directory` itself, or a path-only `StoreDirectory` for a path (the format layer's public calls take both)."""
    if isinstance(directory, StoreDirectory):
        return directory
    return StoreDirectory.at(directory)


def make_directories(path: str, *, sync: bool) -> None:
    """Create directory `path` and any missing parents, each creation made durable.

    `os.makedirs` fsyncs nothing, so a power cut could lose a new directory
    whose files were acknowledged. Each directory created here is followed
    by an fsync of its parent before the next step (with `sync`). A path
    (or parent) that exists but is not a directory is `NotADirectoryError`.
    """
    missing: list[str] = []
    here = os.path.abspath(path)
    while True:
        try:
            entry = os.stat(here)
        except FileNotFoundError:
            missing.append(here)
            parent = os.path.dirname(here)
            if parent == here:
                raise
            here = parent
            continue
        if not stat.S_ISDIR(entry.st_mode):
            raise NotADirectoryError(errno.ENOTDIR, "exists and is not a directory (a store is a directory)", here)
        break
    for created in reversed(missing):
        try:
            os.mkdir(created, 0o755)
        except FileExistsError:
            if not os.path.isdir(created):
                raise NotADirectoryError(
                    errno.ENOTDIR, "exists and is not a directory (a store is a directory)", created
                ) from None
            continue
        if sync:
            StoreDirectory.at(os.path.dirname(created)).fsync()
