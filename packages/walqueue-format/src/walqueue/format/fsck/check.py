"""fsck's checks: what opening checks, in opening's order, with opening's readers, changing nothing.

`check(directory)` fills a `Report`. It reads through the directory's
descriptor (a chdir changes nothing) and never writes, creates, truncates
or locks anything. The live segments are read with `LiveSegment`, the very
reader recovery uses, under the same `SequenceRule`; with `replay=True` the
registered state machine (`walqueue.format.replay`, which the engine
fills) applies the snapshot and every live transaction as recovery does.
Opening stops at the first problem; fsck goes on where the rest can still
be checked on its own, so one damaged frame does not hide another. When it
finds damage, it surveys the directory past it (`walqueue.format.salvage.survey`)
and names the likely causes (`walqueue.format.fsck.causes`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Mapping
from typing import Any, BinaryIO

from walqueue.format.current import Current, read_current
from walqueue.format.directory import StoreDirectory, describe_file_type
from walqueue.format.errors import CorruptStore
from walqueue.format.frame import FRAME_OVERHEAD, LENGTH_BYTES, SegmentEnd
from walqueue.format.fsck.causes import likely_causes
from walqueue.format.fsck.report import (
    Finding,
    LeftoverSummary,
    ReplaySummary,
    Report,
    SegmentSummary,
    SnapshotSummary,
    group_dead_letters,
)
from walqueue.format.log_rules import LiveSegment, SequenceRule, live_segments, missing_current
from walqueue.format.names import CURRENT_NAME, LOCK_NAME, DirectoryListing, list_directory, wal_name
from walqueue.format.progress import Progress
from walqueue.format.replay import ReplayState, StateMachine, require_state_machine
from walqueue.format.salvage_plan import survey
from walqueue.format.snapshot import SnapshotReader
from walqueue.format.transaction import transaction_seq

__all__ = ["check"]


class _Replay:
    """The state as the log is replayed with the registered state machine, exactly as recovery builds it."""

    def __init__(self, machine: StateMachine) -> None:
        self.machine = machine
        self.state: ReplayState | None = None
        self.applied = 0

    def start_empty(self) -> None:
        self.state = self.machine.new_state()

    def load_snapshot(
        self,
        seq: int,
        records: Iterator[dict[str, Any]],
        path: str,
        clock: int | None = None,
        queues: dict[str, Any] | None = None,
    ) -> None:
        """Build the state from the snapshot's records and header settings (recovery's `State.from_records`)."""
        try:
            # `clock` and `queues` only when the header has them: an older state machine takes (seq, records)
            extra = ({} if clock is None else {"clock": clock}) | ({"queues": queues} if queues else {})
            self.state = self.machine.from_records(seq, records, **extra)
        except self.machine.invalid as exc:
            raise CorruptStore(path, None, f"invalid snapshot record: {exc}") from None

    def apply(self, tx: Mapping[str, Any], seq: int, path: str, offset: int) -> None:
        """Apply one transaction after the snapshot; an invalid one is `CorruptStore`, as in recovery."""
        if self.state is None:
            return
        try:
            self.machine.apply(self.state, tx)
        except self.machine.invalid as exc:
            raise CorruptStore(path, offset, f"invalid transaction {seq}: {exc}") from None
        self.applied += 1

    def summary(self, complete: bool) -> ReplaySummary:
        if self.state is None:
            return ReplaySummary(complete, self.applied, None, None)
        told = self.machine.dead_letters
        dead = None if told is None else group_dead_letters(told(self.state))
        return ReplaySummary(complete, self.applied, self.state.last_seq, self.state.counts(), dead)


def check(directory: str | os.PathLike[str], *, replay: bool = False, progress: Progress | None = None) -> Report:
    """Inspect `directory` without changing anything and return the report.

    With `replay`, the registered state machine applies the snapshot and
    every live transaction too (`ReplayUnavailable` if the engine is
    missing). When the verdict is `corrupt` or `error`, the report also
    carries a survey past the damage and the likely causes. A directory
    holding only files WALQueue never writes is `not-a-store`. `progress`,
    if given, is advanced by the bytes read.
    """
    machine = require_state_machine() if replay else None
    path = os.fspath(directory)
    report = Report(path)
    if not os.path.isdir(path):
        what = "does not exist" if not os.path.lexists(path) else "is not a directory"
        report.add("error", "not-a-directory", None, None, f"{path} {what}")
        return report
    try:
        store = StoreDirectory.open(path)
    except OSError as exc:
        report.add_unreadable(path, exc)
        return report
    try:
        listing = _check_store(report, store, machine, progress)
    finally:
        store.close()
    if progress is not None:
        progress.finish()
    if listing is not None and not report.sound and report.status != "not-a-store":
        _survey_damage(report, path, replay, listing, progress)
    return report


def _check_store(
    report: Report, store: StoreDirectory, machine: StateMachine | None, progress: Progress | None
) -> DirectoryListing | None:
    """Every check, through the directory's descriptor; the listing, if the directory could be listed."""
    try:
        listing = list_directory(store)
    except OSError as exc:
        report.add_unreadable(store.path, exc)
        return None
    if listing.foreign:
        names = ", ".join(listing.others[:3]) + (", ..." if len(listing.others) > 3 else "")
        report.add(
            "error",
            "not-a-store",
            None,
            None,
            f"not a WALQueue store: no store file (CURRENT, LOCK, wal-*.log, snapshot-*.snap), only other files "
            f"({names}); check the path",
        )
        return listing
    _check_lock(report, store)
    replayer = None if machine is None else _Replay(machine)
    if progress is not None:
        progress.total = _store_bytes(store, listing)
    current, current_ok = _check_current(report, store)
    snapshot_seq = 0
    if current is not None:
        snapshot_seq = _check_snapshot(report, store, current, replayer)
        if progress is not None and report.snapshot is not None:
            progress.advance(report.snapshot.size)
    elif current_ok and replayer is not None:
        replayer.start_empty()
    _note_other_files(report, listing, current, current_ok)
    if current_ok:
        first_live = 1 if current is None else current.wal
        live = _live_segments(report, store, listing, current is not None, first_live)
        sequencer = SequenceRule(snapshot_seq)
        _check_segments(report, store, live, first_live, sequencer, replayer, snapshot_seq, progress)
        _summarize_sequences(report, store, sequencer, snapshot_seq)
    else:
        report.add(
            "note",
            "not-checked",
            None,
            None,
            "WAL segments not checked as opening would: without CURRENT their range is unknown",
        )
    if replayer is not None:
        report.replay = replayer.summary(report.sound)
    return listing


def _survey_damage(
    report: Report, directory: str, replay: bool, listing: DirectoryListing, progress: Progress | None
) -> None:
    """Read past the damage: what survives, what a salvage would keep, and the likely causes."""
    try:
        found = survey(directory, engine=replay, progress=progress)
    except OSError:
        return
    report.survey = found
    report.causes = likely_causes(report, found, listing)


def _store_bytes(directory: StoreDirectory, listing: DirectoryListing) -> int:
    """The bytes a check reads: the snapshots and segments (an estimate for progress only)."""
    total = 0
    for name in [*listing.segments.values(), *listing.snapshots.values()]:
        size = _file_size(directory, name)
        total += size or 0
    return total


def _check_lock(report: Report, store: StoreDirectory) -> None:
    """LOCK, if present, must be a regular file: opening refuses anything else (it cannot lock it)."""
    try:
        entry = store.lstat(LOCK_NAME)
    except OSError as exc:
        report.add_unreadable(store.file_path(LOCK_NAME), exc)
        return
    if entry is not None and not stat.S_ISREG(entry.st_mode):
        report.add(
            "corrupt", "lock", LOCK_NAME, None, f"LOCK is {describe_file_type(entry.st_mode)}, not a regular file"
        )


def _check_current(report: Report, directory: StoreDirectory) -> tuple[Current | None, bool]:
    """Read CURRENT; returns it (None if absent) and whether it could be used."""
    try:
        current = read_current(directory)
    except CorruptStore as exc:
        report.add_corrupt("current", exc)
        return None, False
    except OSError as exc:
        report.add_unreadable(directory.file_path(CURRENT_NAME), exc)
        return None, False
    report.current = current
    return current, True


def _check_snapshot(report: Report, directory: StoreDirectory, current: Current, replayer: _Replay | None) -> int:
    """Verify the snapshot CURRENT names (size, SHA-256, every frame and record); return its sequence."""
    path = directory.file_path(current.snapshot)
    try:
        with SnapshotReader(
            current.snapshot, expected_size=current.size, expected_sha256=current.sha256, directory=directory
        ) as reader:
            if reader.seq != current.seq:
                raise CorruptStore(path, 0, f"snapshot holds sequence {reader.seq}, CURRENT says {current.seq}")
            if replayer is not None:
                replayer.load_snapshot(reader.seq, reader.records(), path, reader.clock, reader.queues)
            else:
                for _ in reader.records():
                    pass
            report.snapshot = SnapshotSummary(current.snapshot, reader.seq, reader.count, reader.size, reader.sha256)
    except CorruptStore as exc:
        report.add_corrupt("snapshot", exc)
    except OSError as exc:
        report.add_unreadable(path, exc)
    return current.seq


def _note_other_files(report: Report, listing: DirectoryListing, current: Current | None, current_ok: bool) -> None:
    """Orphan snapshots, temp files and unknown files: ignored by opening, reported as notes."""
    for seq, name in sorted(listing.snapshots.items()):
        if current is not None and name == current.snapshot:
            continue
        if current_ok:
            report.add("note", "orphan-snapshot", name, None, f"orphan snapshot (seq {seq}): CURRENT does not name it")
        else:
            report.add("note", "unchecked-snapshot", name, None, "snapshot not checked: CURRENT is unreadable")
    for name in listing.temps:
        report.add("note", "temp-file", name, None, "temporary file of an interrupted write: never read")
    for name in listing.others:
        report.add("note", "unknown-file", name, None, "not a WALQueue file: ignored")


def _file_size(directory: StoreDirectory, name: str) -> int | None:
    try:
        entry = directory.lstat(name)
    except OSError:
        return None
    return None if entry is None else entry.st_size


def _live_segments(
    report: Report, directory: StoreDirectory, listing: DirectoryListing, has_current: bool, first_live: int
) -> list[int]:
    """Sort segments into leftovers (below `first_live`, not read) and live ones; report gaps."""
    segments = live_segments(listing.segment_numbers, first_live, has_current=has_current)
    for number in segments.leftovers:
        name = listing.segments[number]
        size = _file_size(directory, name)
        report.leftover_segments.append(LeftoverSummary(name, number, size))
        report.add(
            "note",
            "leftover-segment",
            name,
            None,
            f"leftover of an interrupted compaction, below the first live segment {first_live}: not read",
        )
    if segments.first_missing:
        report.add("corrupt", "segment-missing", wal_name(first_live), None, "the first live WAL segment is missing")
    elif segments.new_store:
        report.add("note", "new-store", None, None, "no CURRENT and no WAL segment: opening starts an empty queue")
    lost_current = missing_current(listing) if segments.missing else None
    if lost_current is not None:
        # What opening names too: not the segments the compaction deleted, but CURRENT.
        report.add("corrupt", "current-missing", CURRENT_NAME, None, lost_current)
        return segments.live
    for first, last in segments.missing:
        missing = wal_name(first) if first == last else f"{wal_name(first)} .. {wal_name(last)}"
        report.add("corrupt", "segment-missing", wal_name(first), None, f"WAL segment is missing: {missing}")
    live = segments.live
    return live


def _check_segments(
    report: Report,
    directory: StoreDirectory,
    live: list[int],
    first_live: int,
    sequencer: SequenceRule,
    replayer: _Replay | None,
    snapshot_seq: int,
    progress: Progress | None = None,
) -> None:
    """Read every live segment in order; only the newest may end in a torn tail."""
    previous = first_live - 1
    for number in live:
        if number != previous + 1:
            sequencer.resync()
        summary = SegmentSummary(wal_name(number), number)
        report.segments.append(summary)
        done = 0 if progress is None else progress.done
        if not _read_segment(
            report, directory, summary, number == live[-1], sequencer, replayer, snapshot_seq, progress
        ):
            sequencer.resync()
        if progress is not None:
            progress.update(done + (summary.size or 0))
        previous = number


def _read_segment(
    report: Report,
    directory: StoreDirectory,
    summary: SegmentSummary,
    newest: bool,
    sequencer: SequenceRule,
    replayer: _Replay | None,
    snapshot_seq: int,
    progress: Progress | None = None,
) -> bool:
    """Verify one segment's frames, envelopes and sequences (and replay them); False if it is damaged."""
    end = SegmentEnd()
    stage = "frame"
    path = directory.file_path(summary.file)
    done = 0 if progress is None else progress.done
    try:
        with LiveSegment(directory, summary.number, newest=newest) as segment:
            end = segment.end
            for offset, size, value in segment.frames():
                stage = "transaction"
                seq = transaction_seq(value, path, offset)
                stage = "sequence"
                sequencer.check(seq, path, offset)
                summary.saw(seq)
                if replayer is not None and seq > snapshot_seq and report.sound:
                    stage = "invalid-transaction"
                    replayer.apply(value, seq, path, offset)
                stage = "frame"
                if progress is not None:
                    progress.update(done + offset + size)
            summary.size = end.size
            if end.torn_offset is not None:
                _report_torn(report, segment.file, summary, end)
    except CorruptStore as exc:
        summary.size = end.size
        report.add_corrupt(stage, exc)
        return False
    except OSError as exc:
        report.add_unreadable(path, exc)
        return False
    return True


def _report_torn(report: Report, file: BinaryIO, summary: SegmentSummary, end: SegmentEnd) -> None:
    """Record the torn tail: where it starts, how many bytes opening would cut, and what it holds."""
    assert end.torn_offset is not None
    summary.torn_offset = end.torn_offset
    summary.torn_bytes = end.torn_bytes
    if end.torn_bytes < LENGTH_BYTES:
        what = f"incomplete length field ({end.torn_bytes} of {LENGTH_BYTES} bytes)"
    else:
        file.seek(end.torn_offset)
        length = int.from_bytes(file.read(LENGTH_BYTES), "big")
        if end.torn_bytes > length + FRAME_OVERHEAD:  # inside a preallocated tail: a prefix, then zeros
            what = f"final frame of {length + FRAME_OVERHEAD} bytes cut short by the preallocated zeros"
        else:
            what = f"incomplete final frame ({end.torn_bytes} of {length + FRAME_OVERHEAD} bytes)"
    report.findings.append(
        Finding(
            "torn",
            "torn-tail",
            summary.file,
            end.torn_offset,
            f"{what}; opening would cut {end.torn_bytes} bytes",
            end.torn_bytes,
        )
    )


def _summarize_sequences(report: Report, directory: StoreDirectory, sequencer: SequenceRule, snapshot_seq: int) -> None:
    """The last sequence opening would recover; corruption when the log stops short of the snapshot.

    A live WAL whose frames all precede the snapshot's sequence cannot be
    continued (the next transaction would leave a gap), so recovery refuses
    it as `CorruptStore`, and so does fsck.
    """
    last = sequencer.last
    report.last_seq = snapshot_seq if last is None else max(last, snapshot_seq)
    if report.sound and report.segments:
        try:
            sequencer.check_end(directory.file_path(report.segments[-1].file))
        except CorruptStore as exc:
            report.add_corrupt("sequence", exc)
