"""walqueue-fsck: the offline inspector of a WALQueue directory (README "Inspecting a directory", docs/REPAIR.md).

It checks what opening a directory checks (docs/FORMAT.md §1-§7), in the same
order and with the same readers as the engine's recovery, but it only
reads: it never writes, creates, truncates or locks anything, so it can look
at a directory that another process owns, or at a copy of a damaged one.
Without `--replay` it needs nothing but this package and does not apply
transactions (their meaning is the engine's business); with `--replay` it
also applies them with the engine's own state machine, and then its verdict
is exactly opening's:

- exit 0, `healthy`: opening would succeed and change nothing (notes — orphan
  snapshots, leftover segments, temp files, unknown files — are allowed);
- exit 1, `torn`: opening would succeed after cutting a torn tail (the
  incomplete final frame of the newest live segment);
- exit 2, `corrupt`: opening would raise `CorruptStore`; also `error`, when
  the directory or one of its files cannot be read at all.

Every finding names its file and byte offset (``None`` when it concerns a
whole file) and has a `kind`:

- error: `not-a-directory`, `unreadable`;
- corrupt: `lock` (LOCK is not a regular file), `current`, `snapshot` (size, digest, header, records, footer; with
  replay also an invalid record), `segment-missing`, `frame` (length,
  digest, JSON, an incomplete frame before the newest segment's end),
  `transaction` (the {seq, ops} envelope), `sequence` (a gap or a repeat),
  `invalid-transaction` (replay only);
- torn: `torn-tail` (with `bytes`, what opening would cut);
- note: `new-store`, `orphan-snapshot`, `unchecked-snapshot`,
  `leftover-segment`, `temp-file`, `unknown-file`, `not-checked`.

Opening stops at the first problem; fsck goes on where the rest can still
be checked on its own (other segments, the files opening ignores), so one
damaged frame does not hide another. Replay stops at the first problem.

When it finds damage (status `corrupt` or `error`), fsck also surveys the
directory past it (`walqueue.format.salvage.survey`): every snapshot file
and every segment frame by frame, whatever CURRENT says, so it can say what
survives (the intact sequences after the damage), how many transactions a
salvage would drop, and the likely cause (`causes`: `current-missing`,
`current-damaged`, `snapshot-damaged`, `segment-lost`, `damaged-frame`,
`sequence-gap`). `--salvage OUT` writes the longest valid history to a new
store at OUT (docs/REPAIR.md). On a terminal, long checks show progress on
stderr.

`check()` returns the report as an object for programs; `main()` is the
command line. A directory that a live writer is appending to may show its
in-flight frame as a torn tail: that is what a crash at this instant would
leave.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import stat
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Protocol

from walqueue.format.cmdline import EX_USAGE, EXIT_INTERRUPTED, UsageParser, interrupted, version_line
from walqueue.format.current import Current, read_current
from walqueue.format.directory import StoreDirectory, describe_file_type
from walqueue.format.errors import CorruptStore, WalQueueError
from walqueue.format.frame import FRAME_OVERHEAD, LENGTH_BYTES, SegmentEnd, read_frames
from walqueue.format.log_rules import SequenceRule, live_segments
from walqueue.format.names import CURRENT_NAME, LOCK_NAME, DirectoryListing, list_directory, wal_name
from walqueue.format.progress import Progress
from walqueue.format.salvage import SalvageError, Survey, describe_plan, render_salvage, salvage, survey
from walqueue.format.snapshot import SnapshotReader
from walqueue.format.transaction import transaction_seq

__all__ = [
    "EXIT_CORRUPT",
    "EXIT_INTERRUPTED",
    "EX_USAGE",
    "EXIT_HEALTHY",
    "EXIT_TORN",
    "REPORT_VERSION",
    "Cause",
    "Finding",
    "LeftoverSummary",
    "ReplaySummary",
    "ReplayUnavailable",
    "Report",
    "SegmentSummary",
    "SnapshotSummary",
    "check",
    "main",
    "render_text",
]

EXIT_HEALTHY = 0
EXIT_TORN = 1
EXIT_CORRUPT = 2

#: The version of the `--json` report's layout (the `fsck` field).
REPORT_VERSION = 1

#: Severities, worst first. `error`: fsck could not read something; `corrupt`:
#: opening would raise CorruptStore; `torn`: opening would cut a torn tail;
#: `note`: worth knowing, harmless to opening.
SEVERITIES = ("error", "corrupt", "torn", "note")
_STATUS_EXIT = {"error": EXIT_CORRUPT, "corrupt": EXIT_CORRUPT, "torn": EXIT_TORN, "healthy": EXIT_HEALTHY}


class ReplayUnavailable(WalQueueError, RuntimeError):
    """`--replay` was asked for but `walqueue.engine` cannot be imported."""


# -- the report ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing fsck found: how bad, what kind, where (file name and byte offset), and why."""

    severity: str
    kind: str
    file: str | None
    offset: int | None
    message: str
    #: For a torn tail: the number of bytes opening would cut.
    bytes: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The finding as a JSON object (the `findings` items of `--json`)."""
        return {
            "severity": self.severity,
            "kind": self.kind,
            "file": self.file,
            "offset": self.offset,
            "message": self.message,
            "bytes": self.bytes,
        }


@dataclass(frozen=True, slots=True)
class Cause:
    """The likely cause of the damage fsck found, in words a repairer can act on (docs/REPAIR.md)."""

    kind: str
    message: str

    def to_json(self) -> dict[str, Any]:
        """The cause as a JSON object."""
        return {"kind": self.kind, "message": self.message}


@dataclass(frozen=True, slots=True)
class SnapshotSummary:
    """The snapshot CURRENT names, as read and verified."""

    file: str
    seq: int
    tasks: int
    size: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        """The snapshot summary as a JSON object."""
        return {"file": self.file, "seq": self.seq, "tasks": self.tasks, "size": self.size, "sha256": self.sha256}


@dataclass(slots=True)
class SegmentSummary:
    """One live WAL segment: its size, how many frames were verified, their sequence range, its end."""

    file: str
    number: int
    size: int | None = None
    frames: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    torn_offset: int | None = None
    torn_bytes: int = 0

    def saw(self, seq: int) -> None:
        """Count one verified frame holding transaction `seq`."""
        self.frames += 1
        if self.first_seq is None:
            self.first_seq = seq
        self.last_seq = seq

    def to_json(self) -> dict[str, Any]:
        """The segment summary as a JSON object (the `segments` items of `--json`)."""
        return {
            "file": self.file,
            "number": self.number,
            "size": self.size,
            "frames": self.frames,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "torn_offset": self.torn_offset,
            "torn_bytes": self.torn_bytes,
        }


@dataclass(frozen=True, slots=True)
class LeftoverSummary:
    """A segment below CURRENT.wal: never read, as opening never reads it."""

    file: str
    number: int
    size: int | None

    def to_json(self) -> dict[str, Any]:
        """The leftover segment as a JSON object."""
        return {"file": self.file, "number": self.number, "size": self.size}


@dataclass(frozen=True, slots=True)
class ReplaySummary:
    """What applying the log with the engine's state machine gave.

    `complete` is false when damage stopped the replay: `applied`, `last_seq`
    and `counts` then describe the state just before the damage (`counts` is
    ``None`` when not even the snapshot could be loaded).
    """

    complete: bool
    applied: int
    last_seq: int | None
    counts: dict[str, int] | None

    def to_json(self) -> dict[str, Any]:
        """The replay summary as a JSON object."""
        return {"complete": self.complete, "applied": self.applied, "last_seq": self.last_seq, "counts": self.counts}


@dataclass(slots=True)
class Report:
    """Everything fsck learned about one directory; `status` and `exit_code` are its verdict."""

    directory: str
    findings: list[Finding] = field(default_factory=list)
    current: Current | None = None
    snapshot: SnapshotSummary | None = None
    segments: list[SegmentSummary] = field(default_factory=list)
    leftover_segments: list[LeftoverSummary] = field(default_factory=list)
    last_seq: int | None = None
    replay: ReplaySummary | None = None
    #: Only when damage was found: the likely causes, and what survives past the damage.
    causes: list[Cause] = field(default_factory=list)
    survey: Survey | None = None

    def add(self, severity: str, kind: str, file: str | None, offset: int | None, message: str) -> None:
        """Record a finding."""
        assert severity in SEVERITIES, severity
        self.findings.append(Finding(severity, kind, file, offset, message))

    def add_corrupt(self, kind: str, exc: CorruptStore) -> None:
        """Record `exc` as a corrupt finding of `kind`."""
        self.add("corrupt", kind, _file_name(exc.path), exc.offset, exc.reason)

    def add_unreadable(self, path: str, exc: OSError) -> None:
        """Record that `path` could not be read."""
        self.add("error", "unreadable", _file_name(path), None, f"cannot read: {exc.strerror or exc}")

    @property
    def sound(self) -> bool:
        """True while nothing found so far would make opening fail."""
        return not any(f.severity in ("error", "corrupt") for f in self.findings)

    @property
    def status(self) -> str:
        """`error`, `corrupt`, `torn` or `healthy`: the worst severity found (notes count as healthy)."""
        severities = {f.severity for f in self.findings}
        for severity in ("error", "corrupt", "torn"):
            if severity in severities:
                return severity
        return "healthy"

    @property
    def exit_code(self) -> int:
        """The exit status of the verdict: 0 healthy, 1 torn, 2 corrupt or error."""
        return _STATUS_EXIT[self.status]

    def to_json(self) -> dict[str, Any]:
        """The `--json` report (layout version `REPORT_VERSION`, documented in `main`'s help)."""
        return {
            "fsck": REPORT_VERSION,
            "directory": self.directory,
            "status": self.status,
            "exit_code": self.exit_code,
            "findings": [f.to_json() for f in self.findings],
            "current": None if self.current is None else self.current.to_json(),
            "snapshot": None if self.snapshot is None else self.snapshot.to_json(),
            "segments": [s.to_json() for s in self.segments],
            "leftover_segments": [s.to_json() for s in self.leftover_segments],
            "last_seq": self.last_seq,
            "replay": None if self.replay is None else self.replay.to_json(),
            "causes": [c.to_json() for c in self.causes],
            "survey": None if self.survey is None else self.survey.to_json(),
        }


def _file_name(path: str | None) -> str | None:
    """Findings name files relative to the directory: every file of a store sits directly in it."""
    return None if path is None else os.path.basename(path)


# -- the optional engine (never imported at module level: fsck needs no engine) -------


class _EngineState(Protocol):
    @property
    def last_seq(self) -> int: ...

    def counts(self) -> dict[str, int]: ...


@dataclass(frozen=True, slots=True)
class _Engine:
    """The few pieces of `walqueue.engine.state` that replay uses."""

    new_state: Callable[[], _EngineState]
    from_records: Callable[[int, Iterable[Mapping[str, Any]]], _EngineState]
    apply: Callable[[Any, Mapping[str, Any]], None]
    invalid: type[Exception]


def _load_engine() -> _Engine:
    """Import the engine's state machine now; `ReplayUnavailable` if it is not installed."""
    try:
        from walqueue.engine import state as engine_state
    except ImportError as exc:
        raise ReplayUnavailable(f"--replay needs walqueue-engine, which cannot be imported ({exc})") from None
    return _Engine(
        new_state=engine_state.State,
        # Decoded records and transactions, as recovery passes them: both come from the same frame reader.
        from_records=functools.partial(engine_state.State.from_records, decoded=True),
        apply=functools.partial(engine_state.apply, decoded=True),
        invalid=engine_state.InvalidTransaction,
    )


class _Replay:
    """The engine's state as the log is replayed, exactly as recovery builds it."""

    def __init__(self, engine: _Engine) -> None:
        self.engine = engine
        self.state: _EngineState | None = None
        self.applied = 0

    def start_empty(self) -> None:
        self.state = self.engine.new_state()

    def load_snapshot(self, seq: int, records: Iterator[dict[str, Any]], path: str) -> None:
        """Build the state from the snapshot's records (recovery's `State.from_records`)."""
        try:
            self.state = self.engine.from_records(seq, records)
        except self.engine.invalid as exc:
            raise CorruptStore(path, None, f"invalid snapshot record: {exc}") from None

    def apply(self, tx: Mapping[str, Any], seq: int, path: str, offset: int) -> None:
        """Apply one transaction after the snapshot; an invalid one is `CorruptStore`, as in recovery."""
        if self.state is None:
            return
        try:
            self.engine.apply(self.state, tx)
        except self.engine.invalid as exc:
            raise CorruptStore(path, offset, f"invalid transaction {seq}: {exc}") from None
        self.applied += 1

    def summary(self, complete: bool) -> ReplaySummary:
        if self.state is None:
            return ReplaySummary(complete, self.applied, None, None)
        return ReplaySummary(complete, self.applied, self.state.last_seq, self.state.counts())


# -- the checks, in recovery's order ---------------------------------------------------


def check(directory: str | os.PathLike[str], *, replay: bool = False, progress: Progress | None = None) -> Report:
    """Inspect `directory` without changing anything and return the report.

    With `replay`, the engine's state machine applies the snapshot and every
    live transaction too (`ReplayUnavailable` if the engine is missing).
    When the verdict is `corrupt` or `error`, the report also carries a
    survey past the damage and the likely causes. `progress`, if given, is
    advanced by the bytes read.
    """
    engine = _load_engine() if replay else None
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
        _check_store(report, store, engine, progress)
    finally:
        store.close()
    if progress is not None:
        progress.finish()
    if not report.sound:
        listing = list_directory(store.path) if os.path.isdir(path) else None
        if listing is not None:
            _survey_damage(report, path, replay, listing, progress)
    return report


def _check_store(report: Report, store: StoreDirectory, engine: _Engine | None, progress: Progress | None) -> None:
    """Every check, through the directory's descriptor (as opening reads it: a chdir changes nothing)."""
    try:
        listing = list_directory(store)
    except OSError as exc:
        report.add_unreadable(store.path, exc)
        return
    _check_lock(report, store)
    replayer = None if engine is None else _Replay(engine)
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


def _survey_damage(
    report: Report, directory: str, replay: bool, listing: DirectoryListing, progress: Progress | None
) -> None:
    """Read past the damage: what survives, what a salvage would keep, and the likely causes."""
    try:
        found = survey(directory, engine=replay, progress=progress)
    except OSError:
        return
    report.survey = found
    report.causes = _likely_causes(report, found, listing)


def _ranges_text(ranges: list[list[int]]) -> str:
    return ", ".join(f"{a}" if a == b else f"{a}..{b}" for a, b in ranges) or "none"


def _likely_causes(report: Report, found: Survey, listing: DirectoryListing) -> list[Cause]:
    """Name what most probably happened, from the findings and the survey (docs/REPAIR.md per cause)."""
    causes: list[Cause] = []
    bad = [f for f in report.findings if f.severity in ("corrupt", "error")]
    valid = [s for s in found.snapshots if s.valid]
    newest = max(valid, key=lambda s: s.seq, default=None)
    intact = found.intact()
    numbers = [s.number for s in found.segments]
    held = f"the segments hold intact seq {_ranges_text(intact)}"
    snap = "no snapshot file verifies" if newest is None else f"{newest.file} verifies (seq {newest.seq})"
    current_missing = not found.current_present and (
        bool(listing.snapshots) or (bool(numbers) and numbers[0] != 1) or (bool(intact) and intact[0][0] != 1)
    )
    if current_missing:
        first = "no WAL segment" if not numbers else wal_name(numbers[0])
        causes.append(
            Cause(
                "current-missing",
                f"CURRENT is missing, but the store was compacted: {snap}, the WAL starts at {first} and {held}; "
                "CURRENT was probably deleted or lost",
            )
        )
    elif found.current_present and found.current is None:
        causes.append(
            Cause(
                "current-damaged",
                f"CURRENT is damaged ({found.current_problem}), probably truncated or overwritten; {snap}; {held}",
            )
        )
    if found.current is not None:
        named = next((s for s in found.snapshots if s.file == found.current.snapshot), None)
        problems = [f for f in bad if f.kind == "snapshot"]
        if problems:
            reason = problems[0].message if named is None or named.valid else named.reason
            causes.append(
                Cause(
                    "snapshot-damaged",
                    f"the snapshot CURRENT names, {found.current.snapshot}, is damaged or missing ({reason})",
                )
            )
    if not current_missing:
        for finding in bad:
            if finding.kind == "segment-missing":
                causes.append(
                    Cause(
                        "segment-lost",
                        f"{finding.file} is missing, probably deleted or lost ({finding.message}); "
                        f"the transactions it held are gone, {held}",
                    )
                )
    newest_segment = numbers[-1] if numbers else None
    for segment in found.segments:
        for damage in segment.damage:
            causes.append(
                Cause(
                    "damaged-frame",
                    f"{damage.bytes} bytes of {damage.file} from byte {damage.offset} hold no readable "
                    f"transaction ({damage.reason}): a bit flip, an overwrite or a bad disk block",
                )
            )
        if segment.torn is not None and segment.number != newest_segment:
            causes.append(
                Cause(
                    "damaged-frame",
                    f"{segment.file} ends in an incomplete frame at byte {segment.torn[0]} although a later "
                    "segment follows: its end was cut or lost",
                )
            )
    if not causes and any(f.kind == "sequence" for f in bad):
        causes.append(Cause("sequence-gap", f"the WAL's sequences do not follow each other; {held}"))
    return causes


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
                replayer.load_snapshot(reader.seq, reader.records(), path)
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
        try:
            fd = directory.open_regular(summary.file, "WAL segment")
        except FileNotFoundError:
            raise CorruptStore(path, None, "WAL segment is missing") from None
        with os.fdopen(fd, "rb") as file:
            for frame in read_frames(file, path, allow_torn_tail=newest, end=end):
                stage = "transaction"
                seq = transaction_seq(frame.value, path, frame.offset)
                stage = "sequence"
                sequencer.check(seq, path, frame.offset)
                summary.saw(seq)
                if replayer is not None and seq > snapshot_seq and report.sound:
                    stage = "invalid-transaction"
                    replayer.apply(frame.value, seq, path, frame.offset)
                stage = "frame"
                if progress is not None:
                    progress.update(done + frame.offset + frame.size)
            summary.size = end.size
            if end.torn_offset is not None:
                _report_torn(report, file, summary, end)
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


# -- the command line -----------------------------------------------------------------

_EPILOG = f"""\
exit status:
  0    healthy (notes allowed); with --salvage: the new store was written
  1    a torn tail that opening would truncate
  2    corrupt (opening would raise CorruptStore) or unreadable; with
       --salvage: nothing was written (OUT not empty, nothing to salvage)
  {EX_USAGE}   usage error: an unknown option (a typo such as --jsn), a missing
       or extra argument; never a verdict on the store
  {EXIT_INTERRUPTED}  interrupted by Ctrl-C

--json prints one JSON object: fsck (report version), directory, status
(healthy|torn|corrupt|error), exit_code, findings (each: severity
error|corrupt|torn|note, kind, file, offset, message, bytes), current,
snapshot, segments (file, number, size, frames, first_seq, last_seq,
torn_offset, torn_bytes), leftover_segments, last_seq, replay (null, or
complete, applied, last_seq, counts), causes (each: kind, message; only
when damaged) and survey (null when healthy or torn; else snapshots,
segments with their intact runs and damaged ranges, intact sequences, and
plan: what a salvage keeps and drops).

--salvage OUT DIRECTORY writes the longest valid history of DIRECTORY to
the new store OUT (which must not exist or be empty) and never changes
DIRECTORY; it prints what it kept and exactly what it dropped. See
docs/REPAIR.md for a procedure per kind of damage.
"""


def _parser() -> argparse.ArgumentParser:
    parser = UsageParser(
        prog="walqueue-fsck",
        description="Check a WALQueue directory without changing it.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("directory", metavar="DIRECTORY", help="the queue directory to inspect")
    parser.add_argument("--json", action="store_true", help="print one machine-readable JSON report")
    parser.add_argument(
        "--replay",
        action="store_true",
        help="also apply every transaction with walqueue-engine's state machine (needs walqueue-engine)",
    )
    parser.add_argument(
        "--salvage",
        metavar="OUT",
        help="write the longest valid history of DIRECTORY to the new store OUT (DIRECTORY is never changed)",
    )
    parser.add_argument("--version", action="version", version=version_line("walqueue-fsck"))
    return parser


def _show(text: str) -> str:
    """A file name printable on any terminal (undecodable bytes escaped, never an encoding error)."""
    return os.fsencode(text).decode("utf-8", "backslashreplace").encode("ascii", "backslashreplace").decode("ascii")


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def render_text(report: Report) -> str:
    """The human-readable report: a summary of the store, then every finding, then the verdict."""
    lines = [f"walqueue-fsck {_show(report.directory)}"]
    lines.extend(_summary_lines(report))
    for f in report.findings:
        where = "" if f.file is None else _show(f.file)
        if f.offset is not None:
            where += f" at byte {f.offset}"
        lines.append(f"{f.severity.upper():8}{where + ': ' if where else ''}{f.message} [{f.kind}]")
    for cause in report.causes:
        lines.append(f"CAUSE   {_show(cause.message)} [{cause.kind}]")
    lines.extend(_survey_lines(report))
    lines.append(f"result: {report.status} (exit {report.exit_code})")
    return "\n".join(lines)


def _survey_lines(report: Report) -> Iterator[str]:
    found = report.survey
    if found is None:
        return
    verified = [f"{s.file} (seq {s.seq})" for s in found.snapshots if s.valid]
    yield f"  survives  intact transactions: seq {_ranges_text(found.intact())}"
    yield f"  survives  snapshots that verify: {', '.join(verified) or 'none'}"
    if found.plan is not None:
        for line in describe_plan(found.plan):
            yield f"  salvage   {line}"


def _summary_lines(report: Report) -> Iterator[str]:
    current = report.current
    if current is not None:
        yield f"  CURRENT   {current.snapshot} (seq {current.seq}), first live segment {current.wal}"
    snapshot = report.snapshot
    if snapshot is not None:
        tasks = _plural(snapshot.tasks, "task")
        yield f"  snapshot  {snapshot.file}: seq {snapshot.seq}, {tasks}, {snapshot.size} bytes"
    for s in report.segments:
        seqs = "" if s.first_seq is None else f", seq {s.first_seq}..{s.last_seq}"
        yield f"  segment   {s.file}: {s.size} bytes, {_plural(s.frames, 'frame')}{seqs}"
    for left in report.leftover_segments:
        yield f"  leftover  {left.file}: {left.size} bytes (not read)"
    if report.last_seq is not None:
        yield f"  last seq  {report.last_seq}"
    replay = report.replay
    if replay is not None:
        counts = "n/a" if replay.counts is None else ", ".join(f"{k} {v}" for k, v in replay.counts.items())
        state = "complete" if replay.complete else "stopped by damage"
        yield f"  replay    {state}: {_plural(replay.applied, 'transaction')} applied, last seq {replay.last_seq}"
        yield f"  counts    {counts}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run `walqueue-fsck [--json] [--replay] [--salvage OUT] DIRECTORY`; return the exit status."""
    args = _parser().parse_args(argv)
    try:
        if args.salvage is not None:
            return _salvage_main(args.directory, args.salvage, args.json, args.replay)
        return _check_main(args.directory, args.json, args.replay)
    except KeyboardInterrupt:
        return interrupted("walqueue-fsck")


def _salvage_main(directory: str, out: str, as_json: bool, replay: bool) -> int:
    progress = Progress.to_terminal(f"salvaging {_show(directory)}", 0)
    engine: bool | None = True if replay else None
    try:
        result = salvage(directory, out, engine=engine, progress=progress)
    except (SalvageError, CorruptStore, OSError, RuntimeError) as exc:
        progress.finish()
        print(f"walqueue-fsck: salvage: {exc}", file=sys.stderr)
        return EXIT_CORRUPT
    if as_json:
        print(json.dumps(result.to_json(), sort_keys=True))
    else:
        print(render_salvage(result))
    return EXIT_HEALTHY if result.check_status == "healthy" else EXIT_CORRUPT


def _check_main(directory: str, as_json: bool, replay: bool) -> int:
    progress = Progress.to_terminal(f"checking {_show(directory)}", 0)
    try:
        report = check(directory, replay=replay, progress=progress)
    except ReplayUnavailable as exc:
        print(f"walqueue-fsck: {exc}", file=sys.stderr)
        return EXIT_CORRUPT
    for finding in report.findings:
        if finding.severity == "error":
            print(f"walqueue-fsck: {finding.message}", file=sys.stderr)
    if as_json:
        print(json.dumps(report.to_json(), sort_keys=True))
    else:
        print(render_text(report))
    return report.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
