"""The size trigger of compaction: a snapshot written in the background, then published under the lock.

`Queue._commit` calls `compact_automatically` once the live WAL outgrew its
threshold (compaction.py's policy). The snapshot is written by a
`BackgroundSnapshot` thread while later calls proceed, and published by
`finish_background`, which that thread calls holding the queue's lock; an
obstacle in the directory postpones it for another threshold's worth of
WAL instead of failing the call that set it off. These functions reach into
the `Queue` they serve, as calls.py does: the two are one unit kept in two
files so that queue.py holds the calls and this file the policy's moving
parts (docs/DECISIONS.md, "Compaction off the hot path").
"""

from __future__ import annotations

import functools
import logging
import os
from typing import TYPE_CHECKING

from walqueue.engine.compaction import (
    BackgroundSnapshot,
    FrozenState,
    check_room,
    compaction_threshold,
    covered_files,
    publish,
    seal,
)
from walqueue.engine.wal import no_hook
from walqueue.format.directory import StoreDirectory
from walqueue.format.snapshot import SnapshotInfo

if TYPE_CHECKING:
    from walqueue.engine.queue import Queue

__all__ = ["compact_automatically", "finish_background", "postpone"]

log = logging.getLogger("walqueue")


def compact_automatically(queue: Queue) -> None:
    """The size trigger: a snapshot written in the background (in this call, when a hook watches).

    An obstacle in the directory postpones it instead of failing the call.
    """
    try:
        check_room(queue._store, queue._wal, queue._state.last_seq)
    except FileExistsError as exc:
        log.warning("automatic compaction postponed: %s", exc)
        postpone(queue)
        return
    if queue._hook is not no_hook:
        # The phases must come in order in the caller's thread: compact here.
        queue._compact_now()
        return
    queue._durability.drain()
    seal(queue._wal, no_hook)
    frozen = queue._source.freeze(queue._state)
    # The thread gets a descriptor of its own: whatever happens to this
    # queue's, its writes and its cleanup stay in this very directory.
    assert queue._store.fd is not None
    directory = StoreDirectory(queue._store.path, os.dup(queue._store.fd))
    background = BackgroundSnapshot(
        directory,
        frozen,
        sync=queue._sync,
        lock=queue._mutex,
        finish=functools.partial(finish_background, queue),
        activity=lambda: queue._serialized.entered,  # changes with every call: the thread steps aside
    )
    queue._background = background
    background.start()


def postpone(queue: Queue) -> None:
    threshold = compaction_threshold(queue._snapshot_size, queue._compact_bytes)
    assert threshold is not None  # only the size trigger gets here
    queue._compact_at = queue._wal.wal_bytes + threshold


def finish_background(
    queue: Queue, frozen: FrozenState, info: SnapshotInfo | None, error: BaseException | None
) -> list[str] | None:
    """Publish a background snapshot; return the files its thread deletes next, after the lock.

    Called by its thread, holding the lock unless the queue is closing.
    """
    if queue._closed or info is None:
        queue._source.thaw(frozen, written=False)
        if error is not None and not queue._closed:
            log.error("background snapshot through sequence %d failed, the WAL keeps everything: %s", frozen.seq, error)
            postpone(queue)
        return None
    try:
        # Something put in the way while the snapshot was written: nothing
        # is published yet, so the snapshot stays an orphan and nothing is lost.
        check_room(queue._store, queue._wal, frozen.seq)
    except FileExistsError as exc:
        queue._source.thaw(frozen, written=False)
        log.warning("publishing the background snapshot postponed: %s", exc)
        postpone(queue)
        return None
    try:
        current = publish(queue._store, queue._wal, frozen, info, hook=no_hook, sync=queue._sync, delete=False)
        covered = covered_files(queue._store, queue._wal.first_live, frozen.seq)
    except BaseException as exc:
        queue._source.thaw(frozen, written=False)
        log.error("publishing the snapshot through sequence %d failed; the queue is closed: %s", frozen.seq, exc)
        queue._poison()
        return None
    queue._source.thaw(frozen, written=True)
    queue._current = current
    queue._snapshot_size = info.size
    queue._compact_at = compaction_threshold(info.size, queue._compact_bytes)
    return covered
