"""Object stores: the small interface a replica needs, `file://` (standard library) and the URL opener.

The replicator and the restore command use four operations: a put that can
be conditional (``if_none_match``: only if the key is absent; ``if_match``:
only if the object is still the one with that etag), a get that returns the
bytes and their etag, a list under a prefix, a delete. A refused condition
is `PreconditionFailed`; anything that may pass on a retry (a 500, a
timeout, a reset connection, an unreachable endpoint) is `StoreUnavailable`.

`file://` keeps objects as files under its root: every write goes to a
temporary file in the root (a snapshot copied in pieces), is fsynced, then linked (``if_none_match``:
`os.link` refuses an existing name) or renamed into place, and the
directory is fsynced. Conditional replacement holds an `fcntl.flock` on the
root's ``.lock`` while it compares the etag, so two replicators on one
machine (or on a file system with working locks) never both win.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO
from urllib.parse import unquote, urlsplit

from walqueue.backup.objectstore import (
    CHUNK_BYTES,
    ObjectStore,
    PreconditionFailed,
    StoreUnavailable,
    UsageError,
    check_key,
    chunks,
)

__all__ = ["FileStore", "ObjectStore", "PreconditionFailed", "StoreUnavailable", "UsageError", "open_store"]


def _etag(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class FileStore:
    """A replica in a local or mounted directory (``file:///path``)."""

    def __init__(self, root: str, *, create: bool = True) -> None:
        self.root = os.path.abspath(root)
        self.url = "file://" + self.root
        if create:  # a replicator's; a restore's reading of a mistyped path must not create it
            os.makedirs(self.root, exist_ok=True)

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *check_key(key).split("/"))

    def _write_temp(self, pieces: Iterable[bytes]) -> str:
        temp = os.path.join(self.root, f".tmp-{uuid.uuid4().hex}")
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            for piece in pieces:
                view = memoryview(piece)
                while view:
                    view = view[os.write(fd, view) :]
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            _unlink_quietly(temp)
            raise
        os.close(fd)
        return temp

    def put(self, key: str, data: bytes, *, if_none_match: bool = False, if_match: str | None = None) -> str:
        self._store(key, (data,), if_none_match=if_none_match, if_match=if_match)
        return _etag(data)

    def put_file(self, key: str, source: BinaryIO, size: int, *, if_none_match: bool = False) -> str:
        """Copy `source` into the temporary file piece by piece (memory: one piece), then link it as `put` does."""
        digest = hashlib.sha256()
        self._store(key, _hashed(chunks(source, size), digest), if_none_match=if_none_match, if_match=None)
        return digest.hexdigest()

    def _store(self, key: str, pieces: Iterable[bytes], *, if_none_match: bool, if_match: str | None) -> None:
        path = self._path(key)
        parent = os.path.dirname(path)
        try:
            os.makedirs(parent, exist_ok=True)
            temp = self._write_temp(pieces)
            try:
                if if_none_match:
                    try:
                        os.link(temp, path)
                    except FileExistsError:
                        raise PreconditionFailed(f"{key} exists already") from None
                elif if_match is not None:
                    with self._locked():
                        current = self._read(path)
                        if current is None or _etag(current) != if_match:
                            raise PreconditionFailed(f"{key} changed since it was read")
                        os.replace(temp, path)
                else:
                    os.replace(temp, path)
            finally:
                _unlink_quietly(temp)
            _fsync_directory(parent)
        except OSError as exc:
            raise StoreUnavailable(f"{self.url}: writing {key}: {exc}") from exc

    def _locked(self) -> _FileLock:
        return _FileLock(os.path.join(self.root, ".lock"))

    @staticmethod
    def _read(path: str) -> bytes | None:
        try:
            with open(path, "rb") as file:
                return file.read()
        except FileNotFoundError:
            return None

    def get(self, key: str) -> tuple[bytes, str] | None:
        try:
            data = self._read(self._path(key))
        except OSError as exc:
            raise StoreUnavailable(f"{self.url}: reading {key}: {exc}") from exc
        return None if data is None else (data, _etag(data))

    def read_into(self, key: str, sink: Callable[[bytes], object]) -> bool:
        """Read the file piece by piece into `sink` (a failing `sink` is its own error, not the store's)."""
        try:
            file = open(self._path(key), "rb")  # noqa: SIM115 - closed below, around the sink's calls
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StoreUnavailable(f"{self.url}: reading {key}: {exc}") from exc
        with file:
            while True:
                try:
                    piece = file.read(CHUNK_BYTES)
                except OSError as exc:
                    raise StoreUnavailable(f"{self.url}: reading {key}: {exc}") from exc
                if not piece:
                    return True
                sink(piece)

    def list(self, prefix: str) -> list[str]:
        keys: list[str] = []
        for directory, subdirectories, files in os.walk(self.root):
            subdirectories.sort()
            relative = os.path.relpath(directory, self.root)
            for name in files:
                if name.startswith("."):
                    continue  # temporary files and the lock
                key = name if relative == "." else f"{relative.replace(os.sep, '/')}/{name}"
                if key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)

    def delete(self, key: str) -> None:
        try:
            os.unlink(self._path(key))
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StoreUnavailable(f"{self.url}: deleting {key}: {exc}") from exc


class _FileLock:
    """An exclusive `flock` on a file in the replica's root, for the compare-and-swap of `if_match`."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = -1

    def __enter__(self) -> None:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)  # closing releases the lock


def _hashed(pieces: Iterable[bytes], digest: Any) -> Iterator[bytes]:
    for piece in pieces:
        digest.update(piece)
        yield piece


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _fsync_directory(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno != errno.EINVAL:  # some file systems cannot sync a directory
            raise
    finally:
        os.close(fd)


def open_store(url: str, *, endpoint: str | None = None, region: str | None = None, create: bool = True) -> ObjectStore:
    """The store a replica URL names: ``file:///path`` or ``s3://bucket/prefix`` (the `s3` extra)."""
    parts = urlsplit(url)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise UsageError(f"{url!r}: a file replica is file:///absolute/path")
        return FileStore(unquote(parts.path), create=create)
    if parts.scheme == "s3":
        if not parts.netloc:
            raise UsageError(f"{url!r}: an S3 replica is s3://bucket/prefix")
        from walqueue.backup.s3 import S3Store  # the optional extra: imported only when asked for

        return S3Store(parts.netloc, parts.path.strip("/"), endpoint=endpoint, region=region)
    raise UsageError(f"{url!r}: a replica URL starts with file:// or s3://")
