"""The rules that make a list of segments and a run of frames one log (docs/FORMAT.md §7).

Opening (the engine's recovery) and `walqueue-fsck` must give the same
verdict on every store, so both call these, instead of each keeping a copy:

- Which segments are live: those numbered from CURRENT's first live segment
  (1 without CURRENT) on, with no number missing; lower ones are leftovers
  of an interrupted compaction and are never read.
- Which sequences may follow each other: the first transaction of the live
  WAL may repeat sequences the snapshot covers (they are skipped), but not
  jump past the snapshot's sequence + 1; every later one is its
  predecessor's + 1; and a live WAL that ends before the snapshot's
  sequence cannot be continued.

Recovery stops at the first broken rule; fsck reports every one and then
goes on reading, so these return or raise per rule, and `SequenceRule`
can be re-anchored after damage (`resync`).

Both also read a live segment the same way, through `LiveSegment` (which
names a vanished segment, refuses anything but a regular file and says
where a torn tail starts), and name a deleted CURRENT the same way
(`missing_current`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from walqueue.format.directory import StoreDirectory
from walqueue.format.errors import CorruptStore
from walqueue.format.frame import SegmentEnd, scan_frames
from walqueue.format.names import DirectoryListing, wal_name

__all__ = ["LiveSegment", "LiveSegments", "SequenceRule", "live_segments", "missing_current"]


@dataclass(frozen=True, slots=True)
class LiveSegments:
    """The segments of a directory sorted by the live-range rule.

    `missing` lists each gap as ``(first, last)`` segment numbers, in order;
    `first_missing` is set when no live segment exists although the
    directory is not new (CURRENT names a first live segment, or there are
    leftovers): that segment should have been there.
    """

    leftovers: list[int]
    live: list[int]
    missing: list[tuple[int, int]]
    first_missing: bool

    @property
    def new_store(self) -> bool:
        """Neither CURRENT nor any segment: opening starts an empty queue."""
        return not self.live and not self.first_missing


def live_segments(numbers: list[int], first_live: int, *, has_current: bool) -> LiveSegments:
    """Sort the sorted segment `numbers` into leftovers (below `first_live`) and the live range, and find gaps."""
    leftovers = [n for n in numbers if n < first_live]
    live = [n for n in numbers if n >= first_live]
    missing: list[tuple[int, int]] = []
    expected = first_live
    for number in live:
        if number != expected:
            missing.append((expected, number - 1))
        expected = number + 1
    return LiveSegments(leftovers, live, missing, first_missing=not live and (has_current or bool(numbers)))


class SequenceRule:
    """Sequence continuity of the live WAL, frame by frame.

    `check` raises `CorruptStore` (naming the file and offset) for a frame
    that may not follow what came before. After damage, continuity with
    what came before is unknown: `resync` makes the next frame start a new
    run (fsck uses it so as not to report one damage twice; recovery never
    does, since it stops at the first).

    WARNING: the rule's whole state after an accepted frame is `expected`.
    A reader that has just seen a frame carry exactly `expected` may set
    ``rule.expected = seq + 1`` instead of calling `check`, which would
    accept that frame and do only that (recovery's inner loop does, to save
    a call per frame). Any state added to `check` must keep that true.
    """

    __slots__ = ("snapshot_seq", "expected", "anchored", "_last_run_end")

    def __init__(self, snapshot_seq: int) -> None:
        self.snapshot_seq = snapshot_seq
        #: The sequence the next frame must carry; None before the first frame (or after a resync).
        self.expected: int | None = None
        self.anchored = True
        #: The last sequence seen before the latest `resync` (None: none was).
        self._last_run_end: int | None = None

    @property
    def last(self) -> int | None:
        """The last sequence seen, or None."""
        expected = self.expected
        return self._last_run_end if expected is None else expected - 1

    def check(self, seq: int, path: str, offset: int) -> None:
        """Accept `seq` as the next frame's sequence, or raise `CorruptStore`."""
        expected = self.expected
        if expected is None:
            if self.anchored and seq > self.snapshot_seq + 1:
                raise CorruptStore(path, offset, f"sequence {seq} follows snapshot {self.snapshot_seq}: a gap")
        elif seq != expected:
            raise CorruptStore(path, offset, f"sequence {seq} where {expected} was expected")
        self.expected = seq + 1

    def resync(self) -> None:
        """Forget the continuity: the next frame starts a new, unanchored run."""
        self._last_run_end = self.last
        self.expected = None
        self.anchored = False

    def check_end(self, path: str) -> None:
        """Raise `CorruptStore` if the log stops short of the snapshot.

        The next transaction appended would carry the snapshot's sequence + 1
        after frames that end below it: a gap that `check` itself refuses.
        """
        last = self.last
        if last is not None and last < self.snapshot_seq:
            raise CorruptStore(
                path,
                None,
                f"the live WAL ends at sequence {last}, before the snapshot's {self.snapshot_seq}: "
                "the next transaction appended would leave a gap",
            )


def missing_current(listing: DirectoryListing) -> str | None:
    """Why a directory whose log does not start at segment 1 lacks CURRENT, or ``None``.

    Without CURRENT the live WAL must start at segment 1. When it does not,
    and a snapshot file shows that a compaction ran (it deletes the segments
    its snapshot covers and writes CURRENT to say so), the missing file is
    CURRENT, not the first segments: naming those would send a repairer
    looking for files that were deleted on purpose.
    """
    numbers = listing.segment_numbers
    if listing.has_current or not listing.snapshots or not numbers or numbers[0] == 1:
        return None
    snapshots = ", ".join(name for _, name in sorted(listing.snapshots.items()))
    return (
        f"CURRENT is missing, but the store was compacted ({snapshots} present, the WAL starts at "
        f"{wal_name(numbers[0])}): CURRENT was probably deleted or lost"
    )


class LiveSegment:
    """One live WAL segment open for reading: the segment reader recovery and fsck share.

    Opening it refuses what opening a store refuses (a vanished segment, a
    symlink, a FIFO or anything but a regular file, as `CorruptStore`
    naming it); `frames()` yields its ``(offset, size, value)`` frames, a
    torn tail allowed only in the newest segment; `end` then says where the
    segment ended and `kept_bytes` what opening keeps of it.
    """

    __slots__ = ("name", "path", "newest", "end", "file")

    def __init__(self, directory: StoreDirectory, number: int, *, newest: bool) -> None:
        self.name = wal_name(number)
        self.path = directory.file_path(self.name)
        self.newest = newest
        self.end = SegmentEnd()
        try:
            fd = directory.open_regular(self.name, "WAL segment")
        except FileNotFoundError:
            raise CorruptStore(self.path, None, "WAL segment is missing") from None
        self.file = os.fdopen(fd, "rb")

    def frames(self) -> Iterator[tuple[int, int, Any]]:
        """The segment's verified frames, in order (`scan_frames`, with this segment's torn-tail rule)."""
        return scan_frames(self.file, self.path, allow_torn_tail=self.newest, end=self.end, allow_zero_tail=True)

    @property
    def kept_bytes(self) -> int:
        """The bytes opening keeps: the whole segment, or everything before its torn or zero tail."""
        return self.end.frames_end

    def __enter__(self) -> LiveSegment:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.file.close()
