"""What survives in a damaged store: every snapshot and every segment read past its damage.

Opening a store stops at the first damage; whoever repairs it needs more:
which sequences are still intact after the damage, and which files could
not be read at all. `read_survey(directory)` reads every file that may hold
history, whatever CURRENT says or whether it is readable, and only reads
(it never writes, creates, truncates or locks anything):

- every snapshot file, each verified on its own (frames, header, records,
  footer);
- every WAL segment, frame by frame past any damage: after a bad frame it
  looks for the next complete frame with a valid digest, as recovery's
  torn-tail rule does, and goes on from there.

The result lists the intact runs of sequences, every damaged byte range,
and the files that could not be read (a permission or I/O error: their
contents are unknown, which is not the same as damaged). `walqueue.format.salvage`
plans the longest history from it. Everything that opens a file of the
damaged store goes through `SurveySource`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from walqueue.format.current import Current, read_current
from walqueue.format.directory import StoreDirectory
from walqueue.format.errors import CorruptStore
from walqueue.format.frame import SegmentEnd, decode_frame, find_complete_frame, scan_frames
from walqueue.format.jsonfields import FieldsJson, fields_json
from walqueue.format.log_rules import LiveSegment
from walqueue.format.names import CURRENT_NAME, DirectoryListing, list_directory, wal_name
from walqueue.format.progress import Progress
from walqueue.format.snapshot import SnapshotReader
from walqueue.format.transaction import transaction_seq

__all__ = [
    "Damage",
    "Run",
    "SalvagePlan",
    "SegmentSurvey",
    "SnapshotSurvey",
    "Survey",
    "SurveySource",
    "cannot_read",
    "ranges_text",
    "read_survey",
    "seq_ranges",
]


def cannot_read(exc: OSError) -> str:
    """How an unreadable file is described everywhere: the OS's reason, never a verdict on its bytes."""
    return f"cannot read: {exc.strerror or exc}"


class SurveySource:
    """Read-only access to the damaged directory (the only code of the survey and salvage that opens its files)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        # Names are never followed and only regular files are read (a FIFO is
        # never opened, so a survey cannot hang): the rules opening applies.
        self.store = StoreDirectory.at(directory)

    def path(self, name: str) -> str:
        """`name` joined to the directory, for messages."""
        return os.path.join(self.directory, name)

    def listing(self) -> DirectoryListing:
        """The directory's files by kind."""
        return list_directory(self.store)

    def current(self) -> Current | None:
        """CURRENT, read and validated (``None`` if absent)."""
        return read_current(self.store)

    def snapshot(self, name: str) -> SnapshotReader:
        """A reader of snapshot `name`, verified on its own."""
        return SnapshotReader(name, directory=self.store)

    def open_segment(self, number: int) -> LiveSegment:
        """Segment `number`, opened with the segment reader opening uses."""
        return LiveSegment(self.store, number, newest=True)

    def read_frame(self, name: str, offset: int, size: int) -> tuple[bytes, Any]:
        """The frame at `offset` of segment `name`, verified again (it may have changed since the survey)."""
        fd = self.store.open_regular(name, "WAL segment")
        try:
            data = os.pread(fd, size, offset)
        finally:
            os.close(fd)
        return data, decode_frame(data, self.path(name))


# -- the survey -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Run(FieldsJson):
    """Consecutive intact frames of one segment whose sequences follow each other."""

    file: str
    first_seq: int
    last_seq: int
    offset: int
    end: int


@dataclass(frozen=True, slots=True)
class Damage(FieldsJson):
    """A byte range of a segment that holds no readable transaction, and why."""

    file: str
    offset: int
    bytes: int
    reason: str


@dataclass(slots=True)
class SegmentSurvey:
    """One WAL segment read past its damage: its intact runs and its damaged ranges."""

    file: str
    number: int
    size: int = 0
    runs: list[Run] = field(default_factory=list)
    damage: list[Damage] = field(default_factory=list)
    #: An incomplete final frame: (offset, bytes); only harmless in the newest segment.
    torn: tuple[int, int] | None = None
    #: Why (part of) the segment could not be read (a permission or I/O error); ``None`` if it was read.
    unreadable: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The segment's survey as a JSON object."""
        torn = None if self.torn is None else {"offset": self.torn[0], "bytes": self.torn[1]}
        return {**fields_json(self), "torn": torn}


@dataclass(frozen=True, slots=True)
class SnapshotSurvey(FieldsJson):
    """One snapshot file verified on its own (whatever CURRENT says of it)."""

    file: str
    seq: int
    tasks: int | None
    valid: bool
    reason: str | None
    named_by_current: bool
    #: False when the file could not be read at all (`reason` says why): its contents are unknown.
    readable: bool = True


@dataclass(frozen=True, slots=True)
class SalvagePlan:
    """What a salvage would keep: a base (a snapshot, or empty at 0) and the transactions after it.

    `lost` and `intact_dropped` list, as ``[first, last]`` ranges, every
    sequence above `last_seq` that the store knows of (up to `highest_seq`):
    `lost` are the ones no intact frame holds, `intact_dropped` the intact
    ones that follow a gap and so cannot be replayed (`--export-suffix`
    writes them out). `unreadable` names the files that could not be read:
    what they hold is unknown, so the counts are a lower bound and a
    salvage refuses until they can be read.
    """

    base: str | None
    base_seq: int
    base_tasks: int
    last_seq: int
    highest_seq: int
    lost: list[list[int]]
    intact_dropped: list[list[int]]
    engine_checked: bool
    stop: str
    unreadable: list[str] = field(default_factory=list)

    @property
    def kept_transactions(self) -> int:
        """How many WAL transactions the history replays after its base."""
        return self.last_seq - self.base_seq

    @property
    def dropped_transactions(self) -> int:
        """How many known transactions the history cannot keep (a lower bound when files are unreadable)."""
        return self.highest_seq - self.last_seq

    @property
    def complete(self) -> bool:
        """True when every file was read, so `dropped_transactions` is exact."""
        return not self.unreadable

    def to_json(self) -> dict[str, Any]:
        """The plan as a JSON object."""
        return {
            **fields_json(self),
            "kept_transactions": self.kept_transactions,
            "dropped_transactions": self.dropped_transactions,
            "complete": self.complete,
        }


@dataclass(slots=True)
class Survey:
    """Everything readable in a directory, independent of CURRENT, and the longest history in it."""

    directory: str
    current: Current | None = None
    current_present: bool = False
    current_problem: str | None = None
    #: False when CURRENT exists but could not be read at all (`current_problem` says why).
    current_readable: bool = True
    snapshots: list[SnapshotSurvey] = field(default_factory=list)
    segments: list[SegmentSurvey] = field(default_factory=list)
    #: seq -> (segment file, offset, size) of the first intact frame holding it.
    frames: dict[int, tuple[str, int, int]] = field(default_factory=dict)
    plan: SalvagePlan | None = None

    def intact(self) -> list[list[int]]:
        """The intact transaction sequences as ``[first, last]`` ranges."""
        return seq_ranges(self.frames)

    def unreadable(self) -> list[str]:
        """The files that could not be read (permissions, I/O errors): their contents are unknown."""
        names = [] if self.current_readable else [CURRENT_NAME]
        names += [s.file for s in self.snapshots if not s.readable]
        names += [s.file for s in self.segments if s.unreadable is not None]
        return names

    def to_json(self) -> dict[str, Any]:
        """The survey as a JSON object (without the per-frame index)."""
        return {
            **fields_json(self, omit=("directory", "current", "frames")),
            "intact": self.intact(),
            "unreadable": self.unreadable(),
        }


def seq_ranges(seqs: Iterable[int]) -> list[list[int]]:
    """Sorted sequences as ``[first, last]`` ranges: ``{1, 2, 3, 7}`` -> ``[[1, 3], [7, 7]]``."""
    ranges: list[list[int]] = []
    for seq in sorted(seqs):
        if ranges and seq == ranges[-1][1] + 1:
            ranges[-1][1] = seq
        else:
            ranges.append([seq, seq])
    return ranges


def ranges_text(ranges: list[list[int]]) -> str:
    """``[[1, 3], [7, 7]]`` -> ``"1..3, 7"`` (``"none"`` for no range): how reports write sequences."""
    return ", ".join(f"{a}" if a == b else f"{a}..{b}" for a, b in ranges) or "none"


def _total_bytes(source: SurveySource, listing: DirectoryListing) -> int:
    total = 0
    for name in [*listing.segments.values(), *listing.snapshots.values()]:
        try:
            total += os.stat(source.path(name)).st_size
        except OSError:
            pass
    return total


def read_survey(directory: str | os.PathLike[str], *, progress: Progress | None = None) -> Survey:
    """Read everything that may hold history in `directory` (read only); the plan is left to salvage.

    `progress` is advanced by the bytes read. Raises `OSError` if the
    directory cannot be listed.
    """
    path = os.fspath(directory)
    source = SurveySource(path)
    listing = source.listing()
    result = Survey(path, current_present=listing.has_current)
    if progress is not None:
        progress.restart(f"surveying {path}", _total_bytes(source, listing))
    try:
        result.current = source.current()
    except CorruptStore as exc:
        result.current_problem = exc.reason
    except OSError as exc:
        result.current_problem = cannot_read(exc)
        result.current_readable = False
    named = None if result.current is None else result.current.snapshot
    for seq, name in sorted(listing.snapshots.items()):
        result.snapshots.append(_survey_snapshot(source, name, seq, name == named))
        if progress is not None:
            try:
                progress.advance(os.stat(source.path(name)).st_size)
            except OSError:
                pass
    for number in listing.segment_numbers:
        result.segments.append(_survey_segment(source, number, progress, result.frames))
    return result


def _survey_snapshot(source: SurveySource, name: str, seq: int, named: bool) -> SnapshotSurvey:
    try:
        with source.snapshot(name) as reader:
            count = 0
            for _ in reader.records():
                count += 1
            if reader.seq != seq:
                return SnapshotSurvey(name, seq, count, False, f"holds sequence {reader.seq}, not {seq}", named)
            return SnapshotSurvey(name, seq, count, True, None, named)
    except CorruptStore as exc:
        where = "" if exc.offset is None else f" at byte {exc.offset}"
        return SnapshotSurvey(name, seq, None, False, f"{exc.reason}{where}", named)
    except OSError as exc:
        return SnapshotSurvey(name, seq, None, False, cannot_read(exc), named, readable=False)


class _Runs:
    """The runs of consecutive sequences found in one segment, built frame by frame."""

    def __init__(self, segment: SegmentSurvey) -> None:
        self.segment = segment
        self.open: list[int] = []  # first_seq, last_seq, offset, end of the open run

    def add(self, seq: int, offset: int, size: int) -> None:
        run = self.open
        if run and seq == run[1] + 1:
            run[1], run[3] = seq, offset + size
        else:
            self.close()
            run.extend((seq, seq, offset, offset + size))

    def close(self) -> None:
        run = self.open
        if run:
            self.segment.runs.append(Run(self.segment.file, run[0], run[1], run[2], run[3]))
            run.clear()


def _survey_segment(
    source: SurveySource, number: int, progress: Progress | None, frames: dict[int, tuple[str, int, int]]
) -> SegmentSurvey:
    """Read one segment frame by frame, going on past damage at the next complete frame.

    Every intact transaction is added to `frames` (the first intact copy of
    a sequence wins: a leftover segment may repeat what a later one holds).
    A segment that cannot be read (or stops being readable) is marked
    `unreadable`, never described as damaged.
    """
    base_done = 0 if progress is None else progress.done
    try:
        opened = source.open_segment(number)
    except OSError as exc:
        return SegmentSurvey(wal_name(number), number, unreadable=cannot_read(exc))
    except CorruptStore as exc:  # not a regular file (a FIFO, a directory, a symlink): never read
        segment = SegmentSurvey(wal_name(number), number)
        segment.damage.append(Damage(segment.file, 0, 0, exc.reason))
        return segment
    segment = SegmentSurvey(opened.name, number)
    with opened:
        segment.size = os.fstat(opened.file.fileno()).st_size
        runs = _Runs(segment)
        start = 0
        while start < segment.size:
            try:
                _scan_from(source, opened.file, segment, start, runs, frames, progress, base_done)
                break
            except CorruptStore as exc:
                runs.close()
                bad = start if exc.offset is None else exc.offset
                following = find_complete_frame(opened.file.fileno(), bad, segment.size)
                stop = segment.size if following is None else following
                segment.damage.append(Damage(segment.file, bad, stop - bad, exc.reason))
                if following is None:
                    break
                start = following
            except OSError as exc:
                runs.close()
                segment.unreadable = f"{cannot_read(exc)} (from byte {start})"
                break
    if progress is not None:
        progress.update(base_done + segment.size)
    return segment


def _scan_from(
    source: SurveySource,
    file: BinaryIO,
    segment: SegmentSurvey,
    start: int,
    runs: _Runs,
    frames: dict[int, tuple[str, int, int]],
    progress: Progress | None,
    base_done: int,
) -> None:
    """Scan `file` from `start` to its end (or a torn tail), recording runs; `CorruptStore` at damage."""
    name = segment.file
    end = SegmentEnd()
    for offset, frame_size, value in scan_frames(file, source.path(name), end=end, start=start, allow_zero_tail=True):
        if progress is not None:
            progress.update(base_done + offset + frame_size)
        try:
            seq = transaction_seq(value, name, offset)
        except CorruptStore as exc:
            runs.close()
            segment.damage.append(Damage(name, offset, frame_size, exc.reason))
            continue
        frames.setdefault(seq, (name, offset, frame_size))
        runs.add(seq, offset, frame_size)
    runs.close()
    if end.torn_offset is not None:
        segment.torn = (end.torn_offset, end.torn_bytes)
