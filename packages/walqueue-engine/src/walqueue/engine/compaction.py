"""Compaction: rotate -> snapshot -> CURRENT -> delete, and the automatic policy.

The order is what makes a crash at any point harmless (SPEC §4, Compaction):
until CURRENT is replaced the old snapshot and every old segment are intact
and authoritative; once it is replaced the new snapshot is complete and
synced, and the deletions that follow only remove what it covers. Nothing
that the published CURRENT names, and no live segment, is ever written to,
renamed over or deleted.
"""

from __future__ import annotations

import errno
import logging
import stat

from walqueue.engine.state import State
from walqueue.engine.wal import Hook, WalWriter
from walqueue.format.current import Current, publish_current, write_current_tmp
from walqueue.format.directory import StoreDirectory, describe_file_type
from walqueue.format.names import CURRENT_TMP_NAME, list_directory, snapshot_name, wal_name
from walqueue.format.snapshot import write_snapshot

__all__ = ["check_room", "compact", "compaction_threshold"]

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


def _delete_leftovers(directory: StoreDirectory, wal: WalWriter, keep_snapshot: str | None, hook: Hook) -> bool:
    """Delete segments below the first live one (one phase each) and unpublished snapshots."""
    listing = list_directory(directory)
    deleted = False
    for number in listing.segment_numbers:
        if number >= wal.first_live:
            break
        _remove_entry(directory, listing.segments[number])
        deleted = True
        hook("segment.deleted")
    for name in listing.snapshots.values():
        if name != keep_snapshot:
            # An older snapshot or an orphan of an interrupted compaction: no
            # longer named by CURRENT, so nothing can ever read it again.
            if _remove_entry(directory, name):
                deleted = True
    return deleted


def _remove_entry(directory: StoreDirectory, name: str) -> bool:
    """Unlink a file (or a symlink, never its target) that nothing reads any more.

    A directory under such a name is an operator's, not ours: it is left
    alone and logged, and it changes nothing (opening never reads it).
    """
    entry = directory.lstat(name)
    if entry is None:
        return False
    if stat.S_ISDIR(entry.st_mode):
        log.warning("leaving %s alone: it is a directory, not a file WALQueue wrote", directory.file_path(name))
        return False
    directory.unlink(name)
    return True


def check_room(directory: StoreDirectory, wal: WalWriter, seq: int) -> None:
    """Refuse, before anything is written, a compaction that something in the directory would block.

    Compaction creates the next segment, the snapshot of `seq` and
    CURRENT.tmp. A leftover regular file or symlink under the last two names
    is removed when they are written; a directory or a special file there,
    or anything under the next segment's name (which no WALQueue wrote), is
    `FileExistsError` naming it. Nothing is lost either way: the WAL still
    holds every transaction.
    """
    obstacles: list[tuple[str, str]] = []
    next_segment = wal_name(wal.newest + 1)
    entry = directory.lstat(next_segment)
    if entry is not None:
        obstacles.append((next_segment, describe_file_type(entry.st_mode)))
    for name in (snapshot_name(seq), CURRENT_TMP_NAME):
        entry = directory.lstat(name)
        if entry is not None and not (stat.S_ISREG(entry.st_mode) or stat.S_ISLNK(entry.st_mode)):
            obstacles.append((name, describe_file_type(entry.st_mode)))
    if obstacles:
        name, what = obstacles[0]
        raise FileExistsError(
            errno.EEXIST,
            f"compaction cannot proceed: {what} is in the way of a file it must create; remove it",
            directory.file_path(name),
        )


def compact(
    directory: StoreDirectory, state: State, wal: WalWriter, current: Current | None, *, hook: Hook, sync: bool
) -> tuple[Current | None, int | None]:
    """Compact the directory; return the published CURRENT and the new snapshot's size (None if unchanged).

    Call `check_room` first: an obstacle found here, after the rotation,
    poisons the queue.
    """
    published_seq = 0 if current is None else current.seq
    if state.last_seq == published_seq:
        keep = None if current is None else current.snapshot
        if _delete_leftovers(directory, wal, keep, hook) and sync:
            directory.fsync()
        hook("compact.done")
        return current, None

    hook("wal.rotate.before")
    wal.rotate()
    hook("wal.rotate.after")

    seq = state.last_seq
    name = snapshot_name(seq)
    info = write_snapshot(
        name,
        seq,
        len(state),
        state.iter_record_json(),
        on_partial=lambda: hook("snapshot.partial"),
        on_written=lambda: hook("snapshot.written"),
        directory=directory,
        sync=sync,
    )
    if sync:
        directory.fsync()
    hook("snapshot.synced")

    new_current = Current(snapshot=name, seq=seq, size=info.size, sha256=info.sha256, wal=wal.newest)
    write_current_tmp(directory, new_current, sync=sync)
    hook("current.written")
    publish_current(directory, sync=sync)
    hook("current.published")
    wal.retire_sealed()
    log.info("compacted through sequence %d into %s (%d bytes)", seq, name, info.size)

    if _delete_leftovers(directory, wal, name, hook) and sync:
        directory.fsync()
    hook("compact.done")
    return new_current, info.size
