"""Compaction: rotate -> snapshot -> CURRENT -> delete, and the automatic policy.

The order is what makes a crash at any point harmless (SPEC §4, Compaction):
until CURRENT is replaced the old snapshot and every old segment are intact
and authoritative; once it is replaced the new snapshot is complete and
synced, and the deletions that follow only remove what it covers. Nothing
that the published CURRENT names, and no live segment, is ever written to,
renamed over or deleted.
"""

from __future__ import annotations

import logging
import os

from walqueue.engine.state import State
from walqueue.engine.wal import Hook, WalWriter
from walqueue.format.current import Current, publish_current, write_current_tmp
from walqueue.format.fsutil import fsync_directory
from walqueue.format.names import list_directory, snapshot_name
from walqueue.format.snapshot import write_snapshot

__all__ = ["compact", "compaction_threshold"]

log = logging.getLogger("walqueue")

#: The automatic threshold never falls below this multiple of the published snapshot's size.
SNAPSHOT_SIZE_FACTOR = 2


def compaction_threshold(snapshot_size: int, compact_bytes: int | None) -> int | None:
    """How many bytes of live WAL make compaction due (once exceeded); ``None``: never automatically.

    A snapshot costs time proportional to the state's size. Waiting until the
    WAL written since the last snapshot exceeds both `compact_bytes` and
    twice that snapshot's size keeps compaction's cost per transaction
    bounded by a constant however large the state grows (each byte of WAL
    pays for at most half a byte of snapshot), while a small state still
    compacts every `compact_bytes`. The threshold changes only when a
    snapshot is published, so a writer computes it then and compares one
    number per commit.
    """
    if compact_bytes is None:
        return None
    return max(compact_bytes, SNAPSHOT_SIZE_FACTOR * snapshot_size)


def _delete_leftovers(directory: str, wal: WalWriter, keep_snapshot: str | None, hook: Hook) -> bool:
    """Delete segments below the first live one (one phase each) and unpublished snapshots."""
    listing = list_directory(directory)
    deleted = False
    for number in listing.segment_numbers:
        if number >= wal.first_live:
            break
        os.unlink(os.path.join(directory, listing.segments[number]))
        deleted = True
        hook("segment.deleted")
    for name in listing.snapshots.values():
        if name != keep_snapshot:
            # An older snapshot or an orphan of an interrupted compaction: no
            # longer named by CURRENT, so nothing can ever read it again.
            os.unlink(os.path.join(directory, name))
            deleted = True
    return deleted


def compact(
    directory: str, state: State, wal: WalWriter, current: Current | None, *, hook: Hook, sync: bool
) -> tuple[Current | None, int | None]:
    """Compact the directory; return the published CURRENT and the new snapshot's size (None if unchanged)."""
    published_seq = 0 if current is None else current.seq
    if state.last_seq == published_seq:
        keep = None if current is None else current.snapshot
        if _delete_leftovers(directory, wal, keep, hook) and sync:
            fsync_directory(directory)
        hook("compact.done")
        return current, None

    wal.rotate()

    seq = state.last_seq
    name = snapshot_name(seq)
    path = os.path.join(directory, name)
    info = write_snapshot(path, seq, len(state), state.iter_record_json(), on_partial=lambda: hook("snapshot.partial"))
    hook("snapshot.written")
    if sync:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_directory(directory)
    hook("snapshot.synced")

    new_current = Current(snapshot=name, seq=seq, size=info.size, sha256=info.sha256, wal=wal.newest)
    write_current_tmp(directory, new_current, sync=sync)
    hook("current.written")
    publish_current(directory, sync=sync)
    hook("current.published")
    wal.retire_sealed()
    log.info("compacted through sequence %d into %s (%d bytes)", seq, name, info.size)

    if _delete_leftovers(directory, wal, name, hook) and sync:
        fsync_directory(directory)
    hook("compact.done")
    return new_current, info.size
