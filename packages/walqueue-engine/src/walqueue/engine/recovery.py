"""Opening a directory: CURRENT -> snapshot -> replay of the live WAL -> torn-tail truncation.

This is the live write path read backwards, and it uses the very same
`apply` (CONTRACT §4). Every rule that can fail raises `CorruptStore` naming the
file and byte offset; there is no fallback to another snapshot and never a
fresh start over damaged data. The only repair is cutting a torn tail: the
incomplete final frame of the newest live segment, which no caller was ever
told had succeeded.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from walqueue.engine.gcpause import paused_gc
from walqueue.engine.state import InvalidTransaction, State, apply
from walqueue.engine.wal import Hook, WalWriter, create_segment
from walqueue.format.current import Current, read_current
from walqueue.format.directory import StoreDirectory
from walqueue.format.errors import CorruptStore, repair_hint
from walqueue.format.frame import SegmentEnd
from walqueue.format.log_rules import LiveSegment, SequenceRule, live_segments, missing_current
from walqueue.format.names import CURRENT_NAME, list_directory, wal_name
from walqueue.format.progress import Progress
from walqueue.format.snapshot import SnapshotReader
from walqueue.format.transaction import transaction_seq

__all__ = ["Recovered", "recover"]

log = logging.getLogger("walqueue")


@dataclass(slots=True)
class Recovered:
    state: State
    current: Current | None
    wal: WalWriter
    snapshot_size: int


def _load_snapshot(directory: StoreDirectory, current: Current) -> tuple[State, int]:
    path = directory.file_path(current.snapshot)
    with SnapshotReader(
        current.snapshot, expected_size=current.size, expected_sha256=current.sha256, directory=directory
    ) as reader:
        if reader.seq != current.seq:
            raise CorruptStore(path, 0, f"snapshot holds sequence {reader.seq}, CURRENT says {current.seq}")
        try:
            state = State.from_records(
                reader.seq, reader.records(), decoded=True, clock=reader.clock, queues=reader.queues
            )
        except InvalidTransaction as exc:
            raise CorruptStore(path, None, f"invalid snapshot record: {exc}") from None
    return state, current.size


def _replay_segment(
    state: State,
    frames: Iterator[tuple[int, int, Any]],
    path: str,
    rule: SequenceRule,
    progress: Progress | None,
    done_before: int,
) -> None:
    """Check and apply one segment's transactions, after the snapshot's sequence.

    The loop is the inner loop of every open, so it takes `scan_frames`
    tuples, not `Frame` objects, and `progress` is None unless it is shown.
    """
    snapshot_seq = rule.snapshot_seq
    for offset, _, value in frames:
        if progress is not None:
            progress.update(done_before + offset)
        expected = rule.expected
        if expected is not None and expected > snapshot_seq and type(value) is dict and value.get("seq") == expected:
            # The usual frame: the next transaction, to be applied. `apply`
            # checks its envelope as strictly as `transaction_seq` would
            # (exact keys, an int sequence, a non-empty list of known ops),
            # so it is not checked twice; nor is its sequence, which is the
            # one the rule expects (see `SequenceRule`'s WARNING).
            seq = expected
            rule.expected = seq + 1
        else:
            seq = transaction_seq(value, path, offset)
            rule.check(seq, path, offset)
        if seq <= snapshot_seq:
            continue
        try:
            apply(state, value, decoded=True)
        except InvalidTransaction as exc:
            raise CorruptStore(path, offset, f"invalid transaction {seq}: {exc}") from None


def _progress(directory: StoreDirectory, current: Current | None, live: list[int]) -> Progress | None:
    """INFO lines while a large store opens (only when INFO is on for the `walqueue` logger)."""
    if not log.isEnabledFor(logging.INFO):
        return None
    total = 0 if current is None else current.size
    for number in live:
        entry = directory.lstat(wal_name(number))
        total += 0 if entry is None else entry.st_size
    return Progress.to_log(log, f"opening {directory.path}", total)


def recover(directory: StoreDirectory, *, hook: Hook, sync: bool) -> Recovered:
    """Rebuild the state of `directory` (which the caller owns) and open its WAL for appending.

    A `CorruptStore` also says what to do next (`repair_hint`): whoever
    meets it is an operator with a queue that will not start.
    """
    try:
        return _recover(directory, hook=hook, sync=sync)
    except CorruptStore as exc:
        raise CorruptStore(exc.path, exc.offset, f"{exc.reason}; {repair_hint(directory.path)}") from None


def _recover(directory: StoreDirectory, *, hook: Hook, sync: bool) -> Recovered:
    listing = list_directory(directory)
    current = read_current(directory)
    if current is not None:
        state, snapshot_size = _load_snapshot(directory, current)
        first_live = current.wal
    else:
        state, snapshot_size = State(), 0
        first_live = 1
    for name in listing.snapshots.values():
        if current is None or name != current.snapshot:
            log.info("ignoring orphan snapshot %s", name)
    for name in listing.temps:
        log.info("ignoring temporary file %s", name)

    segments = live_segments(listing.segment_numbers, first_live, has_current=current is not None)
    if segments.leftovers:
        log.info("skipping %d leftover segment(s) below %s", len(segments.leftovers), wal_name(first_live))
    if segments.first_missing:
        raise CorruptStore(directory.file_path(wal_name(first_live)), None, "the first live WAL segment is missing")
    if segments.new_store:
        fd = create_segment(directory, 1, sync=sync)
        wal = WalWriter(directory, first_live=1, newest=1, fd=fd, newest_size=0, wal_bytes=0, sync=sync)
        return Recovered(state, None, wal, snapshot_size)
    if segments.missing:
        lost_current = missing_current(listing)
        if lost_current is not None:
            raise CorruptStore(directory.file_path(CURRENT_NAME), None, lost_current)
        raise CorruptStore(directory.file_path(wal_name(segments.missing[0][0])), None, "WAL segment is missing")
    live = segments.live

    rule = SequenceRule(state.last_seq)
    progress = _progress(directory, current, live)
    if progress is not None:
        progress.advance(snapshot_size)
    wal_bytes = 0
    end = SegmentEnd()
    newest = live[-1]
    for number in live:
        with LiveSegment(directory, number, newest=number == newest) as segment, paused_gc():
            _replay_segment(state, segment.frames(), segment.path, rule, progress, snapshot_size + wal_bytes)
        end = segment.end
        # A torn tail (of the newest segment only) is cut below, by the writer; a zero tail is room, not log.
        wal_bytes += end.size if end.zero_offset is None else end.zero_offset
    if progress is not None:
        progress.finish()

    newest_path = directory.file_path(wal_name(newest))
    rule.check_end(newest_path)
    fd = directory.open_append(wal_name(newest), "WAL segment")
    # The writer owns the descriptor from here (and closes it if it is dropped).
    size = end.size if end.zero_offset is None else end.zero_offset
    wal = WalWriter(
        directory, first_live=first_live, newest=newest, fd=fd, newest_size=size, wal_bytes=wal_bytes, sync=sync
    )
    try:
        if end.torn_offset is not None:
            log.warning(
                "truncating a torn tail of %d bytes at byte %d of %s", end.torn_bytes, end.torn_offset, newest_path
            )
            hook("recover.truncate.before")
            wal.truncate(end.torn_offset)
            hook("recover.truncate.after")
        else:
            # What opening recovered is what every read will show: make the
            # newest segment durable now, in case its last frames were
            # written by a process that died before its fsync.
            wal.sync()
    except BaseException:
        wal.close()
        raise
    return Recovered(state, current, wal, snapshot_size)
