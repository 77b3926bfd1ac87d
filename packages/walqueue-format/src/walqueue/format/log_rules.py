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
"""

from __future__ import annotations

from dataclasses import dataclass

from walqueue.format.errors import CorruptStore

__all__ = ["LiveSegments", "SequenceRule", "live_segments"]


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
