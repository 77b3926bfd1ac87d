"""Snapshot files: a header frame, record bodies, a footer frame.

Both directions stream: the writer takes records one at a time and packs
them into bodies of bounded size; the reader yields records body by body.
A snapshot of millions of tasks is therefore never one frame, one string or
one list in memory.

The format layer knows a record only as a JSON object with a string `task`
and a string `key` (enough to check order and uniqueness, CONTRACT §3); what a
record means is the engine's business.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from walqueue.format.directory import StoreDirectory
from walqueue.format.errors import CorruptStore
from walqueue.format.frame import SegmentEnd, encode_body, encode_frame, read_frames
from walqueue.format.fsutil import write_all

__all__ = [
    "BODY_TARGET_BYTES",
    "SnapshotInfo",
    "SnapshotReader",
    "file_sha256",
    "write_snapshot",
]

#: Bodies are cut once they reach about this size; a larger single record gets a body of its own.
BODY_TARGET_BYTES = 1 << 20
_BODY_OPEN = b'{"tasks":['
_BODY_CLOSE = b"]}"
#: One `write` at most this size: a WAL `fdatasync` that overlaps a larger
#: one waited for it (docs/DECISIONS.md §60: up to 40-50 ms with 4 MiB).
_WRITE_BUFFER = 1 << 20
#: With `sync`, the file is synced every this many bytes while it is written,
#: not only at the end: on a journaling file system an fsync of the WAL made
#: meanwhile waits for the dirty data of every file in the same journal
#: transaction, so a whole snapshot left unsynced would stall it; a WAL
#: `fdatasync` that overlaps one of these syncs waits for its step, so the
#: step is small (8 MiB: up to 25-40 ms at a million tasks, 1 MiB: 9-16 ms).
SYNC_STEP_BYTES = 1 << 20
_HEADER_FIELDS = frozenset({"snapshot", "seq", "tasks"})
#: Header fields a format extension adds, each omitted at its default (docs/FORMAT.md):
#: "clock", the store's clock unit (units per second) once a "clock" op recorded it.
_OPTIONAL_HEADER_FIELDS = frozenset({"clock", "queues"})
_FOOTER_FIELDS = frozenset({"end", "seq", "tasks"})
_BODY_FIELDS = frozenset({"tasks"})


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """What CURRENT records about a written snapshot."""

    size: int
    sha256: str


def _body_frames(records: Iterable[bytes], count: int) -> Iterator[bytes]:
    """The body frames holding `records`, each up to `BODY_TARGET_BYTES`; `ValueError` if they are not `count`."""
    written = 0
    body: list[bytes] = []
    body_size = len(_BODY_OPEN) + len(_BODY_CLOSE) - 1
    for record in records:
        if body and body_size + len(record) + 1 > BODY_TARGET_BYTES:
            yield encode_body(_BODY_OPEN + b",".join(body) + _BODY_CLOSE)
            body = []
            body_size = len(_BODY_OPEN) + len(_BODY_CLOSE) - 1
        body.append(record)
        body_size += len(record) + 1
        written += 1
    if body:
        yield encode_body(_BODY_OPEN + b",".join(body) + _BODY_CLOSE)
    if written != count:
        raise ValueError(f"snapshot header announced {count} records, {written} were given")


def _header_frame(seq: int, count: int, clock: int | None, queues: dict[str, Any] | None) -> bytes:
    """A snapshot's first frame: its version, seq and count, and the optional header fields it has."""
    header: dict[str, Any] = {"snapshot": 1, "seq": seq, "tasks": count}
    if clock is not None:
        header["clock"] = clock
    if queues:
        header["queues"] = queues
    return encode_frame(header)


def write_snapshot(
    path: str | os.PathLike[str],
    seq: int,
    count: int,
    records: Iterable[bytes],
    *,
    on_partial: Callable[[], None] | None = None,
    on_written: Callable[[], None] | None = None,
    directory: StoreDirectory | None = None,
    sync: bool = False,
    clock: int | None = None,
    queues: dict[str, Any] | None = None,
) -> SnapshotInfo:
    """Write the snapshot through `seq` holding `count` records (canonical JSON bytes, in task-id order).

    With `directory`, `path` is a file name in that directory; otherwise a
    path. A leftover file (or symlink) of that name is removed first and the
    snapshot is created afresh with ``O_EXCL``, so nothing is ever written
    through an existing name. `on_partial` is called once, after the header
    has reached the file, so that a crash there leaves a real partial
    snapshot; `on_written` once the whole file is written. With `sync` the
    file is then fsynced through the very descriptor that wrote it (the
    caller fsyncs the directory), and also every `SYNC_STEP_BYTES` on the
    way (so that fsyncs of other files never wait for the whole snapshot's
    data); otherwise it is not synced. Raises
    `ValueError` (before finishing the file) if the number of records
    differs from `count`. `clock` (the store's clock unit) and `queues`
    (lanes' settings) go in the header only when there are any, so a store
    that uses neither writes today's bytes.
    """
    if directory is None:
        directory = StoreDirectory.at(os.path.dirname(os.fspath(path)) or os.curdir)
        name = os.path.basename(os.fspath(path))
    else:
        name = os.fspath(path)
    digest = hashlib.sha256()
    size = 0
    directory.clear_obstacle(name)
    fd = directory.create(name)
    try:
        pending: list[bytes] = []
        pending_size = 0
        unsynced = 0

        def emit(data: bytes) -> None:
            nonlocal size, pending_size
            pending.append(data)
            pending_size += len(data)
            digest.update(data)
            size += len(data)
            if pending_size >= _WRITE_BUFFER:
                flush()

        def flush() -> None:
            nonlocal pending_size, unsynced
            if pending:
                write_all(fd, b"".join(pending))
                unsynced += pending_size
                pending.clear()
                pending_size = 0
                if sync and unsynced >= SYNC_STEP_BYTES:
                    os.fdatasync(fd)
                    unsynced = 0

        emit(_header_frame(seq, count, clock, queues))
        flush()
        if on_partial is not None:
            on_partial()

        for frame in _body_frames(records, count):
            emit(frame)
        emit(encode_frame({"end": True, "seq": seq, "tasks": count}))
        flush()
        if on_written is not None:
            on_written()
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    return SnapshotInfo(size, digest.hexdigest())


def file_sha256(path: str | os.PathLike[str]) -> tuple[int, str]:
    """Size and SHA-256 of a whole regular file, read in chunks (anything else is `CorruptStore`)."""
    text = os.fspath(path)
    directory = StoreDirectory.at(os.path.dirname(text) or os.curdir)
    fd = directory.open_regular(os.path.basename(text), "the file")
    try:
        return _fd_sha256(fd)
    finally:
        os.close(fd)


def _fd_sha256(fd: int) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    offset = 0
    while chunk := os.pread(fd, 1 << 20, offset):
        digest.update(chunk)
        size += len(chunk)
        offset += len(chunk)
    return size, digest.hexdigest()


def _check_counter(value: Any) -> bool:
    return type(value) is int and value >= 0


def _header_is_valid(value: Any) -> bool:
    """Whether a snapshot's first frame is a header this reader knows: its fields, each of its type."""
    return (
        isinstance(value, dict)
        and value.keys() - _OPTIONAL_HEADER_FIELDS == _HEADER_FIELDS
        and ("clock" not in value or (_check_counter(value["clock"]) and value["clock"] >= 1))
        and ("queues" not in value or (type(value["queues"]) is dict and bool(value["queues"])))
        and type(value["snapshot"]) is int
        and value["snapshot"] == 1
        and _check_counter(value["seq"])
        and _check_counter(value["tasks"])
    )


class SnapshotReader:
    """Open a snapshot, check its size and digest, read its header; then stream its records.

    Iterating `records()` checks everything docs/FORMAT.md §5 asks of a snapshot: every
    frame, header and footer agreeing on sequence and count, exactly that many
    records in strictly increasing task-id order with unique keys, and nothing
    after the footer. Any failure is `CorruptStore` naming the file and offset.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        expected_size: int | None = None,
        expected_sha256: str | None = None,
        directory: StoreDirectory | None = None,
    ) -> None:
        # With `directory`, `path` is a file name in it; otherwise a path.
        if directory is None:
            self.path = os.fspath(path)
            directory = StoreDirectory.at(os.path.dirname(self.path) or os.curdir)
            name = os.path.basename(self.path)
        else:
            name = os.fspath(path)
            self.path = directory.file_path(name)
        try:
            fd = directory.open_regular(name, "snapshot")
        except FileNotFoundError:
            raise CorruptStore(self.path, None, "snapshot file is missing") from None
        self._file = os.fdopen(fd, "rb")
        try:
            # The size is checked before a byte is read: a snapshot of
            # another size than CURRENT records is never read at all.
            on_disk = os.fstat(fd).st_size
            if expected_size is not None and on_disk != expected_size:
                raise CorruptStore(self.path, None, f"snapshot is {on_disk} bytes, CURRENT says {expected_size}")
            actual_size, actual_sha256 = _fd_sha256(fd)
            if expected_size is not None and actual_size != expected_size:
                raise CorruptStore(self.path, None, f"snapshot is {actual_size} bytes, CURRENT says {expected_size}")
            if expected_sha256 is not None and actual_sha256 != expected_sha256:
                raise CorruptStore(self.path, None, "snapshot SHA-256 differs from the one CURRENT records")
        except BaseException:
            self._file.close()
            raise
        self.size = actual_size
        self.sha256 = actual_sha256
        self._frames = read_frames(self._file, self.path, allow_torn_tail=False, end=SegmentEnd())
        try:
            header = next(self._frames, None)
            if header is None:
                raise CorruptStore(self.path, 0, "snapshot has no header frame")
            value = header.value
            if not _header_is_valid(value):
                raise CorruptStore(self.path, 0, f"bad snapshot header {value!r:.200}")
        except BaseException:
            self.close()
            raise
        self.seq: int = value["seq"]
        self.count: int = value["tasks"]
        #: The store's clock unit (units per second) the header records; None: none recorded.
        self.clock: int | None = value.get("clock")
        #: The queues' settings the header carries (lanes; the engine checks them), or None.
        self.queues: dict[str, Any] | None = value.get("queues")
        self._consumed = False

    def close(self) -> None:
        """Close the file (the reader is also a context manager, which does it)."""
        self._file.close()

    def __enter__(self) -> SnapshotReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def records(self) -> Iterator[dict[str, Any]]:
        """Yield every record, then verify the footer and the end of the file.

        The checks come body by body and record by record, each record's
        before it is yielded, so a consumer never sees a record that breaks
        a rule of the file; a body that holds more records than the header
        announced is refused before any of them is yielded. The inner loop
        runs once per task on every open: it reads the two fields with plain
        subscripts and tests exact types (the decoder builds nothing else),
        and it binds the set's `add` once.
        """
        if self._consumed:
            raise RuntimeError("a snapshot's records can be read once")
        self._consumed = True
        path = self.path
        count = self.count
        seen = 0
        previous: str | None = None
        keys: set[str] = set()
        add_key = keys.add
        footer_offset: int | None = None
        for frame in self._frames:
            value = frame.value
            if footer_offset is not None:
                raise CorruptStore(path, frame.offset, "data follows the snapshot footer")
            if type(value) is dict and "end" in value:
                if (
                    value.keys() != _FOOTER_FIELDS
                    or value["end"] is not True
                    or type(value["seq"]) is not int
                    or type(value["tasks"]) is not int
                ):
                    raise CorruptStore(path, frame.offset, f"bad snapshot footer {value!r:.200}")
                if value["seq"] != self.seq or value["tasks"] != count:
                    raise CorruptStore(path, frame.offset, "snapshot footer disagrees with its header")
                if seen != count:
                    raise CorruptStore(path, frame.offset, f"snapshot holds {seen} records, header says {count}")
                footer_offset = frame.offset
                continue
            if type(value) is not dict or value.keys() != _BODY_FIELDS or type(value["tasks"]) is not list:
                raise CorruptStore(path, frame.offset, "snapshot frame is neither a body nor the footer")
            records: list[Any] = value["tasks"]
            if len(records) > count - seen:
                raise CorruptStore(path, frame.offset, f"snapshot holds more than {count} records")
            seen += len(records)
            for record in records:
                if type(record) is not dict:
                    raise CorruptStore(path, frame.offset, "snapshot record is not an object")
                try:
                    task = record["task"]
                    key = record["key"]
                except KeyError:
                    task = key = None
                if type(task) is not str or type(key) is not str:
                    raise CorruptStore(path, frame.offset, "snapshot record lacks a string task or key")
                if previous is not None and not previous < task:
                    raise CorruptStore(path, frame.offset, f"snapshot records out of task-id order at {task!r:.100}")
                if key in keys:
                    raise CorruptStore(path, frame.offset, f"snapshot repeats key {key!r:.100}")
                previous = task
                add_key(key)
                yield record
        if footer_offset is None:
            raise CorruptStore(path, self.size, "snapshot has no footer")
