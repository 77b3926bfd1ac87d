"""What survives in a damaged store, and salvage: its longest valid history written as a NEW store.

Opening a store stops at the first damage, and so does recovery's view of
it; whoever repairs a store needs more: which sequences are still intact
after the damage, how many transactions a repair would lose, and a way to
keep everything else. This module gives both, reading the damaged directory
only (it never writes, creates, truncates or locks anything in it):

- `survey(directory)` reads every file that may hold history, whatever
  CURRENT says or whether it is readable at all: every snapshot file (each
  verified on its own: frames, header, records, footer) and every WAL
  segment, frame by frame past any damage (after a bad frame it looks for
  the next complete frame with a valid digest, as recovery's torn-tail rule
  does, and goes on from there). The result lists the intact runs of
  sequences, every damaged byte range, and `plan`: the longest history that
  can be rebuilt.
- The longest valid history starts from a base, an empty state (sequence 0)
  or a snapshot that verifies, and continues with the transactions that
  follow it without a gap. Of all bases, the one reaching the highest
  sequence wins (ties: the snapshot CURRENT names, then the newer snapshot).
  When the engine is installed, its state machine replays the plan as well
  and the history stops before the first invalid transaction, so that the
  salvaged store opens.
- `salvage(directory, out)` writes that history to the new directory `out`
  (which must not exist or be empty, and may not lie inside `directory`):
  the base snapshot rewritten record for record, one WAL segment holding the
  kept frames byte for byte, and CURRENT, all fsynced; then it checks `out`
  as `walqueue-fsck` would. It reports exactly what it dropped.

Command line: ``walqueue-fsck --salvage OUT DIRECTORY`` (docs/REPAIR.md says
when to use it). Everything that reads the damaged store goes through
`_Source`, so that how files are opened lives in one place.

Example::

    result = salvage("/var/lib/app/queue", "/var/lib/app/queue.salvaged")
    print(result.plan.last_seq, result.plan.dropped_transactions)
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from walqueue.format.canonical import canonical_json
from walqueue.format.current import Current, publish_current, read_current, write_current_tmp
from walqueue.format.directory import StoreDirectory
from walqueue.format.errors import CorruptStore, WalQueueError
from walqueue.format.frame import SegmentEnd, decode_frame, find_complete_frame, scan_frames
from walqueue.format.fsutil import fsync_directory, write_all
from walqueue.format.names import DirectoryListing, list_directory, snapshot_name, wal_name
from walqueue.format.progress import Progress
from walqueue.format.snapshot import SnapshotReader, write_snapshot
from walqueue.format.transaction import transaction_seq

__all__ = [
    "Damage",
    "Plan",
    "Run",
    "SalvageError",
    "SalvageResult",
    "SegmentSurvey",
    "SnapshotSurvey",
    "Survey",
    "describe_plan",
    "render_salvage",
    "salvage",
    "seq_ranges",
    "survey",
]


class SalvageError(WalQueueError):
    """Salvage could not write a store: `out` is not usable, or nothing valid survives."""


# -- reading the damaged store: every call of the reader API in one place -------------------


class _Source:
    """Read-only access to the damaged directory (the only code here that opens its files)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        # Names are never followed and only regular files are read (a FIFO is
        # never opened, so a survey cannot hang): the rules opening applies.
        self.store = StoreDirectory.at(directory)

    def path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    def listing(self) -> DirectoryListing:
        return list_directory(self.store)

    def current(self) -> Current | None:
        return read_current(self.store)

    def snapshot(self, name: str) -> SnapshotReader:
        return SnapshotReader(name, directory=self.store)

    def open_segment(self, name: str) -> Any:
        try:
            fd = self.store.open_regular(name, "WAL segment")
        except FileNotFoundError:
            raise CorruptStore(self.path(name), None, "WAL segment is missing") from None
        return os.fdopen(fd, "rb")

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
class Run:
    """Consecutive intact frames of one segment whose sequences follow each other."""

    file: str
    first_seq: int
    last_seq: int
    offset: int
    end: int

    def to_json(self) -> dict[str, Any]:
        """The run as a JSON object."""
        return {
            "file": self.file,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "offset": self.offset,
            "end": self.end,
        }


@dataclass(frozen=True, slots=True)
class Damage:
    """A byte range of a segment that holds no readable transaction, and why."""

    file: str
    offset: int
    bytes: int
    reason: str

    def to_json(self) -> dict[str, Any]:
        """The damage as a JSON object."""
        return {"file": self.file, "offset": self.offset, "bytes": self.bytes, "reason": self.reason}


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

    def to_json(self) -> dict[str, Any]:
        """The segment's survey as a JSON object."""
        return {
            "file": self.file,
            "number": self.number,
            "size": self.size,
            "runs": [run.to_json() for run in self.runs],
            "damage": [damage.to_json() for damage in self.damage],
            "torn": None if self.torn is None else {"offset": self.torn[0], "bytes": self.torn[1]},
        }


@dataclass(frozen=True, slots=True)
class SnapshotSurvey:
    """One snapshot file verified on its own (whatever CURRENT says of it)."""

    file: str
    seq: int
    tasks: int | None
    valid: bool
    reason: str | None
    named_by_current: bool

    def to_json(self) -> dict[str, Any]:
        """The snapshot's survey as a JSON object."""
        return {
            "file": self.file,
            "seq": self.seq,
            "tasks": self.tasks,
            "valid": self.valid,
            "reason": self.reason,
            "named_by_current": self.named_by_current,
        }


@dataclass(frozen=True, slots=True)
class Plan:
    """The longest valid history: a base (a snapshot, or empty at 0) and the transactions after it.

    `dropped` lists, as ``[first, last]`` ranges, every sequence above
    `last_seq` that the store knows of (up to `highest_seq`): `lost` are the
    ones no intact frame holds, `intact_dropped` the intact ones that follow
    a gap and so cannot be replayed.
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

    @property
    def kept_transactions(self) -> int:
        """How many WAL transactions the history replays after its base."""
        return self.last_seq - self.base_seq

    @property
    def dropped_transactions(self) -> int:
        """How many known transactions the history cannot keep."""
        return self.highest_seq - self.last_seq

    def to_json(self) -> dict[str, Any]:
        """The plan as a JSON object."""
        return {
            "base": self.base,
            "base_seq": self.base_seq,
            "base_tasks": self.base_tasks,
            "last_seq": self.last_seq,
            "highest_seq": self.highest_seq,
            "kept_transactions": self.kept_transactions,
            "dropped_transactions": self.dropped_transactions,
            "lost": self.lost,
            "intact_dropped": self.intact_dropped,
            "engine_checked": self.engine_checked,
            "stop": self.stop,
        }


@dataclass(slots=True)
class Survey:
    """Everything readable in a directory, independent of CURRENT, and the longest history in it."""

    directory: str
    current: Current | None = None
    current_present: bool = False
    current_problem: str | None = None
    snapshots: list[SnapshotSurvey] = field(default_factory=list)
    segments: list[SegmentSurvey] = field(default_factory=list)
    #: seq -> (segment file, offset, size) of the first intact frame holding it.
    frames: dict[int, tuple[str, int, int]] = field(default_factory=dict)
    plan: Plan | None = None

    def intact(self) -> list[list[int]]:
        """The intact transaction sequences as ``[first, last]`` ranges."""
        return seq_ranges(self.frames)

    def to_json(self) -> dict[str, Any]:
        """The survey as a JSON object (without the per-frame index)."""
        return {
            "current_present": self.current_present,
            "current_problem": self.current_problem,
            "snapshots": [s.to_json() for s in self.snapshots],
            "segments": [s.to_json() for s in self.segments],
            "intact": self.intact(),
            "plan": None if self.plan is None else self.plan.to_json(),
        }


def seq_ranges(seqs: Iterator[int] | dict[int, Any] | list[int] | set[int]) -> list[list[int]]:
    """Sorted sequences as ``[first, last]`` ranges: ``{1, 2, 3, 7}`` -> ``[[1, 3], [7, 7]]``."""
    ranges: list[list[int]] = []
    for seq in sorted(seqs):
        if ranges and seq == ranges[-1][1] + 1:
            ranges[-1][1] = seq
        else:
            ranges.append([seq, seq])
    return ranges


def _total_bytes(source: _Source, listing: DirectoryListing) -> int:
    total = 0
    for name in [*listing.segments.values(), *listing.snapshots.values()]:
        try:
            total += os.stat(source.path(name)).st_size
        except OSError:
            pass
    return total


def survey(
    directory: str | os.PathLike[str], *, engine: bool | None = None, progress: Progress | None = None
) -> Survey:
    """Read everything that may hold history in `directory` (read only) and plan the longest history.

    `engine`: replay the plan with the engine's state machine (``None``: if
    it can be imported). `progress` is advanced by the bytes read. Raises
    `OSError` if the directory cannot be listed.
    """
    path = os.fspath(directory)
    source = _Source(path)
    listing = source.listing()
    result = Survey(path, current_present=listing.has_current)
    if progress is not None:
        progress.restart(f"surveying {path}", _total_bytes(source, listing))
    try:
        result.current = source.current()
    except CorruptStore as exc:
        result.current_problem = exc.reason
    except OSError as exc:
        result.current_problem = f"cannot read: {exc.strerror or exc}"
    named = None if result.current is None else result.current.snapshot
    for seq, name in sorted(listing.snapshots.items()):
        result.snapshots.append(_survey_snapshot(source, name, seq, name == named))
        if progress is not None:
            try:
                progress.advance(os.stat(source.path(name)).st_size)
            except OSError:
                pass
    for number in listing.segment_numbers:
        result.segments.append(_survey_segment(source, listing.segments[number], number, progress, result.frames))
    result.plan = _plan(source, result, engine)
    if progress is not None:
        progress.finish()
    return result


def _survey_snapshot(source: _Source, name: str, seq: int, named: bool) -> SnapshotSurvey:
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
        return SnapshotSurvey(name, seq, None, False, f"cannot read: {exc.strerror or exc}", named)


def _survey_segment(
    source: _Source, name: str, number: int, progress: Progress | None, frames: dict[int, tuple[str, int, int]]
) -> SegmentSurvey:
    """Read one segment frame by frame, going on past damage at the next complete frame.

    Every intact transaction is added to `frames` (the first intact copy of
    a sequence wins: a leftover segment may repeat what a later one holds).
    """
    segment = SegmentSurvey(name, number)
    base_done = 0 if progress is None else progress.done
    try:
        file = source.open_segment(name)
    except OSError as exc:
        segment.damage.append(Damage(name, 0, 0, f"cannot read: {exc.strerror or exc}"))
        return segment
    except CorruptStore as exc:  # not a regular file (a FIFO, a directory, a symlink): never read
        segment.damage.append(Damage(name, 0, 0, exc.reason))
        return segment
    with file:
        size = os.fstat(file.fileno()).st_size
        segment.size = size
        start = 0
        run: list[int] = []  # first_seq, last_seq, offset, end of the open run

        def close_run() -> None:
            if run:
                segment.runs.append(Run(name, run[0], run[1], run[2], run[3]))
                run.clear()

        while start < size:
            end = SegmentEnd()
            try:
                for offset, frame_size, value in scan_frames(file, source.path(name), end=end, start=start):
                    if progress is not None:
                        progress.update(base_done + offset + frame_size)
                    try:
                        seq = transaction_seq(value, name, offset)
                    except CorruptStore as exc:
                        close_run()
                        segment.damage.append(Damage(name, offset, frame_size, exc.reason))
                        continue
                    frames.setdefault(seq, (name, offset, frame_size))
                    if run and seq == run[1] + 1:
                        run[1], run[3] = seq, offset + frame_size
                    else:
                        close_run()
                        run.extend((seq, seq, offset, offset + frame_size))
                close_run()
                if end.torn_offset is not None:
                    segment.torn = (end.torn_offset, end.torn_bytes)
                break
            except CorruptStore as exc:
                close_run()
                bad = start if exc.offset is None else exc.offset
                following = find_complete_frame(file.fileno(), bad, size)
                stop = size if following is None else following
                segment.damage.append(Damage(name, bad, stop - bad, exc.reason))
                if following is None:
                    break
                start = following
            except OSError as exc:
                close_run()
                segment.damage.append(Damage(name, start, size - start, f"cannot read: {exc.strerror or exc}"))
                break
    if progress is not None:
        progress.update(base_done + segment.size)
    return segment


# -- the plan ---------------------------------------------------------------------------------


def _reach(frames: dict[int, tuple[str, int, int]], base_seq: int) -> int:
    end = base_seq
    while end + 1 in frames:
        end += 1
    return end


_NO_FRAME = "the next sequence is in no intact frame"
_END = "end of the log"
#: Stops that the lost/intact ranges already explain (an engine's refusal is worth spelling out).
_PLAIN_STOPS = (_NO_FRAME, _END)


def _plan(source: _Source, result: Survey, engine: bool | None) -> Plan:
    frames = result.frames
    bases: list[tuple[str | None, int, int, bool]] = [(None, 0, 0, False)]
    for snap in result.snapshots:
        if snap.valid:
            bases.append((snap.file, snap.seq, snap.tasks or 0, snap.named_by_current))
    ranked = sorted(bases, key=lambda b: (_reach(frames, b[1]), b[3], b[1]), reverse=True)
    state_module = _engine_state() if engine is not False else None
    if engine is True and state_module is None:
        raise RuntimeError("the engine's state machine (walqueue-engine) cannot be imported")
    best: tuple[tuple[str | None, int, int, bool], int, str] | None = None
    for base in ranked:
        raw_end = _reach(frames, base[1])
        if best is not None and raw_end <= best[1]:
            break
        stop = _NO_FRAME if raw_end < max(frames, default=0) else _END
        end = raw_end
        if state_module is not None:
            checked = _replay(source, result, state_module, base, raw_end)
            if checked is None:
                continue  # the snapshot's records are invalid for the engine
            end, why = checked
            if why is not None:
                stop = why
        if best is None or end > best[1]:
            best = (base, end, stop)
    if best is None:  # every snapshot invalid and the empty base too: impossible, the empty base always works
        best = ((None, 0, 0, False), 0, "nothing is valid")
    (name, base_seq, tasks, _), last, stop = best
    highest = max([*frames, *(s.seq for s in result.snapshots)], default=0)
    above = [seq for seq in frames if seq > last]
    lost = seq_ranges(set(range(last + 1, highest + 1)) - set(above))
    return Plan(
        base=name,
        base_seq=base_seq,
        base_tasks=tasks,
        last_seq=last,
        highest_seq=max(highest, last),
        lost=lost,
        intact_dropped=seq_ranges(above),
        engine_checked=state_module is not None,
        stop=stop,
    )


def _engine_state() -> Any:
    try:
        from walqueue.engine import state
    except ImportError:
        return None
    return state


def _replay(
    source: _Source, result: Survey, state_module: Any, base: tuple[str | None, int, int, bool], raw_end: int
) -> tuple[int, str | None] | None:
    """Apply the base and its transactions with the engine; the last valid sequence and why it stops there."""
    name, base_seq, _, _ = base
    try:
        if name is None:
            state = state_module.State()
        else:
            with source.snapshot(name) as reader:
                state = state_module.State.from_records(reader.seq, reader.records())
    except (state_module.InvalidTransaction, CorruptStore, OSError):
        return None
    for seq in range(base_seq + 1, raw_end + 1):
        file, offset, size = result.frames[seq]
        try:
            _, value = source.read_frame(file, offset, size)
            state_module.apply(state, value)
        except state_module.InvalidTransaction as exc:
            return seq - 1, f"transaction {seq} is invalid for the state machine: {exc}"
        except (CorruptStore, OSError) as exc:
            return seq - 1, f"transaction {seq} can no longer be read: {exc}"
    return raw_end, None


# -- writing the new store --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SalvageResult:
    """What `salvage` wrote to `out`, from which survey, and how `out` checks afterwards."""

    directory: str
    out: str
    survey: Survey
    plan: Plan
    files: list[str]
    check_status: str

    def to_json(self) -> dict[str, Any]:
        """The result as a JSON object (the `--salvage --json` report)."""
        return {
            "directory": self.directory,
            "out": self.out,
            "plan": self.plan.to_json(),
            "files": self.files,
            "check": self.check_status,
            "survey": self.survey.to_json(),
        }


def _prepare_out(directory: str, out: str) -> None:
    real_dir = os.path.realpath(directory)
    real_out = os.path.realpath(out)
    if real_out == real_dir or real_out.startswith(real_dir.rstrip(os.sep) + os.sep):
        raise SalvageError(f"{out} is {directory} or inside it: salvage never writes into the damaged store")
    if os.path.lexists(out):
        if not os.path.isdir(out) or os.path.islink(out):
            raise SalvageError(f"{out} exists and is not a directory")
        if os.listdir(out):
            raise SalvageError(f"{out} is not empty: salvage writes a new store only")
    else:
        os.makedirs(out)
        parent = os.path.dirname(os.path.abspath(out))
        fsync_directory(parent)


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def salvage(
    directory: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    engine: bool | None = None,
    progress: Progress | None = None,
) -> SalvageResult:
    """Write the longest valid history of `directory` as a new store at `out`; never touch `directory`.

    `out` must not exist or be an empty directory outside `directory`. The
    new store holds the plan's base snapshot (if any) under its own name,
    ``wal-00000000000000000001.log`` with the kept transactions' frames, and
    CURRENT pointing at both; every file and the directory are fsynced.
    Raises `SalvageError` (an unusable `out`, or no history at all) or
    `OSError`; `CorruptStore` if a kept frame changed since the survey.
    """
    from walqueue.format.fsck import check  # fsck uses this module's survey; imported here, not at the top

    source_dir = os.fspath(directory)
    out_dir = os.fspath(out)
    if not os.path.isdir(source_dir):
        raise SalvageError(f"{source_dir} is not a directory")
    found = survey(source_dir, engine=engine, progress=progress)
    plan = found.plan
    assert plan is not None
    if plan.base is None and plan.last_seq == 0:
        raise SalvageError(
            f"nothing to salvage in {source_dir}: no snapshot verifies and no intact transaction 1 "
            "(an empty queue needs no salvage)"
        )
    _prepare_out(source_dir, out_dir)
    source = _Source(source_dir)
    files: list[str] = []
    if plan.base is not None:
        name = snapshot_name(plan.base_seq)
        with source.snapshot(plan.base) as reader:
            info = write_snapshot(
                os.path.join(out_dir, name), reader.seq, reader.count, (canonical_json(r) for r in reader.records())
            )
        _fsync_file(os.path.join(out_dir, name))
        files.append(name)
    segment = wal_name(1)
    fd = os.open(os.path.join(out_dir, segment), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        for seq in range(plan.base_seq + 1, plan.last_seq + 1):
            file, offset, size = found.frames[seq]
            data, value = source.read_frame(file, offset, size)
            if transaction_seq(value, file, offset) != seq:
                raise CorruptStore(source.path(file), offset, f"frame no longer holds sequence {seq}")
            write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    files.append(segment)
    if plan.base is not None:
        write_current_tmp(out_dir, Current(snapshot_name(plan.base_seq), plan.base_seq, info.size, info.sha256, 1))
        publish_current(out_dir)
        files.append("CURRENT")
    fsync_directory(out_dir)
    verdict = check(out_dir, replay=plan.engine_checked)
    return SalvageResult(source_dir, out_dir, found, plan, files, verdict.status)


# -- the words --------------------------------------------------------------------------------


def _ranges_text(ranges: list[list[int]]) -> str:
    return ", ".join(f"{a}" if a == b else f"{a}..{b}" for a, b in ranges)


def describe_plan(plan: Plan) -> list[str]:
    """The plan in a few lines: what a salvage keeps and what it drops."""
    if plan.base is None:
        base = "an empty state (seq 0)"
    else:
        base = f"{plan.base} (seq {plan.base_seq}, {plan.base_tasks} tasks)"
    lines = [
        f"keeps the history through seq {plan.last_seq}: {base} and {plan.kept_transactions} transactions after it"
    ]
    if plan.dropped_transactions:
        parts = []
        if plan.lost:
            parts.append(f"seq {_ranges_text(plan.lost)} in no intact frame")
        if plan.intact_dropped:
            parts.append(f"seq {_ranges_text(plan.intact_dropped)} intact but after the gap")
        why = "" if plan.stop in _PLAIN_STOPS else f" ({plan.stop})"
        lines.append(f"drops {plan.dropped_transactions} transactions: {'; '.join(parts)}{why}")
    else:
        lines.append("drops no transaction")
    return lines


def render_salvage(result: SalvageResult) -> str:
    """The human-readable salvage report."""
    lines = [f"walqueue-fsck --salvage {result.out} {result.directory}"]
    lines += [f"  {line}" for line in describe_plan(result.plan)]
    engine = "replayed with the engine's state machine" if result.plan.engine_checked else "not replayed (no engine)"
    lines.append(f"  wrote     {', '.join(result.files)} in {result.out} ({engine})")
    unused = [s.file for s in result.survey.snapshots if s.file != result.plan.base]
    if unused:
        lines.append(f"  unused    {', '.join(unused)}")
    for segment in result.survey.segments:
        for damage in segment.damage:
            lines.append(f"  damaged   {damage.file} at byte {damage.offset}: {damage.bytes} bytes ({damage.reason})")
    lines.append(f"  check     {result.out}: {result.check_status}")
    lines.append(f"result: salvaged, {result.plan.dropped_transactions} transactions dropped")
    return "\n".join(lines)
