"""Reading the local store for the replicator: committed frames after a cursor, and the base snapshot.

Frames are read with the format layer's segment reader (`scan_frames`),
never by a file's size: the newest segment may be preallocated, its tail
zeros, and a frame may be half-written while it is read. A segment older
than the newest one (as the writer knew it before the read began) is
sealed and complete; the newest one is read up to the durable sequence
and no further, and anything it holds after that (a torn or unfinished
frame) simply ends this read.
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

from walqueue.format.current import read_current
from walqueue.format.directory import StoreDirectory
from walqueue.format.errors import CorruptStore, WalQueueError
from walqueue.format.frame import scan_frames
from walqueue.format.names import list_directory, wal_name
from walqueue.format.transaction import transaction_seq

__all__ = ["Base", "Cursor", "LocalLog", "SegmentGone"]


class SegmentGone(WalQueueError):
    """A segment the cursor needs was deleted (compaction ran without the hold): start a new lineage."""


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where the next transaction to ship starts: segment, byte offset, and its sequence."""

    segment: int
    offset: int
    next_seq: int


@dataclass(frozen=True, slots=True)
class Base:
    """A published snapshot (or the empty store, seq 0), and the first segment the log goes on in.

    `file` is the snapshot opened and checked against CURRENT, at its start: it is streamed to the
    replica from there, never read whole (a snapshot can be gigabytes). Close it (``with base:``).
    """

    seq: int
    file: BinaryIO | None
    size: int
    sha256: str | None
    wal: int

    def __enter__(self) -> Base:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.file is not None:
            self.file.close()


class LocalLog:
    """The store's files, opened read-only beside the writer."""

    def __init__(self, path: str) -> None:
        self.directory = StoreDirectory.open(path)

    def close(self) -> None:
        self.directory.close()

    def read(self, cursor: Cursor, durable: int, newest: int, max_bytes: int) -> tuple[bytes, int, Cursor]:
        """Frames from `cursor` through at most `durable`: (their bytes, how many, the cursor after them).

        `newest` is the newest segment as the writer knew it before this
        call; `max_bytes` cuts the read at a transaction boundary.
        """
        chunks: list[bytes] = []
        count = total = 0
        segment, offset, next_seq = cursor.segment, cursor.offset, cursor.next_seq
        while True:
            path = self.directory.file_path(wal_name(segment))
            try:
                fd = self.directory.open_regular(wal_name(segment), "WAL segment")
            except FileNotFoundError:
                raise SegmentGone(f"{path} is gone before it was shipped") from None
            run_start = run_end = offset
            stopped = False  # by the durable sequence or the size, before the segment's end
            with os.fdopen(fd, "rb") as file:
                try:
                    for frame_offset, size, value in scan_frames(
                        file, path, allow_torn_tail=True, start=offset, allow_zero_tail=True
                    ):
                        seq = transaction_seq(value, path, frame_offset)
                        if seq < next_seq:  # covered by the base snapshot: skipped, as recovery does
                            run_start = run_end = frame_offset + size
                            continue
                        if seq != next_seq:
                            raise CorruptStore(path, frame_offset, f"sequence {seq} where {next_seq} was expected")
                        if seq > durable or total >= max_bytes:
                            stopped = True
                            break
                        run_end = frame_offset + size
                        total += size
                        count += 1
                        next_seq += 1
                except CorruptStore:
                    if segment < newest:
                        raise
                    # the newest segment: a frame being written, or the zeros after the last one
                if run_end > run_start:
                    chunks.append(os.pread(file.fileno(), run_end - run_start, run_start))
            offset = run_end
            if stopped or segment >= newest:
                break
            segment, offset = segment + 1, 0  # a sealed segment read to its end: the log goes on in the next
        return b"".join(chunks), count, Cursor(segment, offset, next_seq)

    def base(self, hold: Callable[[int], None]) -> Base:
        """The published snapshot, open (checked against CURRENT), with the hold set on its segments.

        `hold` is called with the first segment to keep before the snapshot
        is read; CURRENT is read again after that, so a compaction that
        published meanwhile (and deleted those segments) is seen, and the
        read starts over.
        """
        while True:
            current = read_current(self.directory)
            hold(1 if current is None else current.wal)
            again = read_current(self.directory)
            if again != current:
                continue
            if current is None:
                return Base(0, None, 0, None, 1)
            try:
                fd = self.directory.open_regular(current.snapshot, "snapshot")
            except FileNotFoundError:
                continue
            file = os.fdopen(fd, "rb")
            if _same_snapshot(file, current.size, current.sha256):
                return Base(current.seq, file, current.size, current.sha256, current.wal)
            file.close()  # replaced meanwhile; CURRENT will name the new one

    def segment_numbers(self) -> list[int]:
        return list_directory(self.directory).segment_numbers

    def find(self, seq: int) -> Cursor | None:
        """Where transaction `seq` starts in the local segments, or None if none holds it."""
        for number in self.segment_numbers():
            path = self.directory.file_path(wal_name(number))
            try:
                fd = self.directory.open_regular(wal_name(number), "WAL segment")
            except FileNotFoundError:
                continue
            with os.fdopen(fd, "rb") as file:
                try:
                    for offset, _, value in scan_frames(file, path, allow_torn_tail=True, allow_zero_tail=True):
                        found = transaction_seq(value, path, offset)
                        if found == seq:
                            return Cursor(number, offset, seq)
                        if found > seq:
                            return None
                except CorruptStore:
                    continue
        return None


def _same_snapshot(file: io.BufferedReader, size: int, sha256: str) -> bool:
    """Whether the open snapshot is `size` bytes with `sha256`, read piece by piece; left at its start.

    A snapshot file is never rewritten (a newer one gets a new name), and an open file stays readable
    if compaction deletes it meanwhile: checked once here, its bytes are the ones streamed later.
    """
    try:
        same = os.fstat(file.fileno()).st_size == size and hashlib.file_digest(file, "sha256").hexdigest() == sha256
        file.seek(0)
    except BaseException:
        file.close()
        raise
    return same
