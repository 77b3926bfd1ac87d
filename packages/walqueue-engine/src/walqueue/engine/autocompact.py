"""The compaction controller: when to compact, the background snapshot, and its publication under the lock.

`Queue._commit` asks `Compactor.at` (the live WAL size past which
compaction is due, compaction.py's policy) after every transaction and
calls `trigger` once it is exceeded. The snapshot is then written by a
`BackgroundSnapshot` thread while later calls proceed, and published by
`_finish`, which that thread calls holding the queue's lock; an obstacle in
the directory postpones it for another threshold's worth of WAL instead of
failing the call that set it off (docs/DECISIONS.md, "Compaction off the
hot path"). `compact_now` is `Queue.compact()`'s compaction, in the
caller's thread.

Its inputs are explicit: the files (`store`, `wal`), the snapshot
bookkeeping (`source`), the durability to drain before a segment is sealed,
and the guard of the queue's calls (its lock, its activity count, whether
it is closed, and `release`, which poisons). The state is passed to each
call that snapshots it.
"""

from __future__ import annotations

import logging
import os

from walqueue.engine.background import BackgroundSnapshot
from walqueue.engine.callguard import CallGuard
from walqueue.engine.compaction import (
    FrozenState,
    SnapshotSource,
    check_room,
    compact,
    compaction_threshold,
    covered_files,
    publish,
    seal,
)
from walqueue.engine.durability import Durability
from walqueue.engine.recovery import Recovered
from walqueue.engine.state import State
from walqueue.engine.wal import Hook, no_hook
from walqueue.format.current import Current
from walqueue.format.directory import StoreDirectory
from walqueue.format.snapshot import SnapshotInfo

__all__ = ["Compactor"]

log = logging.getLogger("walqueue")


class Compactor:
    """What compaction knows of one queue: the published snapshot, the threshold, the background thread."""

    __slots__ = (
        "store",
        "wal",
        "source",
        "current",
        "snapshot_size",
        "at",
        "background",
        "_compact_bytes",
        "_sync",
        "_hook",
        "_durability",
        "_guard",
        "compactions",
    )

    def __init__(
        self,
        store: StoreDirectory,
        recovered: Recovered,
        *,
        compact_bytes: int | None,
        hook: Hook,
        durability: Durability,
        guard: CallGuard,
    ) -> None:
        """Start from what recovery opened; snapshots fsync exactly when the WAL does (`WalWriter.syncs`)."""
        self.store = store
        self.wal = recovered.wal
        #: The task ids in order and a running snapshot's pre-images (`Queue._commit` feeds it).
        self.source = SnapshotSource(recovered.state)
        #: The published CURRENT (None before the first snapshot).
        self.current = recovered.current
        self.snapshot_size = recovered.snapshot_size
        #: Live WAL bytes past which compaction is due (None: only `compact()` compacts).
        self.at = compaction_threshold(recovered.snapshot_size, compact_bytes)
        self.background: BackgroundSnapshot | None = None
        self._compact_bytes = compact_bytes
        self._sync = recovered.wal.syncs
        self._hook = hook
        self._durability = durability
        self._guard = guard
        #: Snapshots published since the queue was opened (Queue.metrics reads it).
        self.compactions = 0

    @property
    def snapshot_seq(self) -> int:
        return 0 if self.current is None else self.current.seq

    def running(self) -> bool:
        background = self.background
        return background is not None and background.running

    def compact_now(self, state: State) -> None:
        """Compact in the caller's thread (under the queue's lock); `check_room` first."""
        self._durability.drain()  # a segment is sealed, and a sequence snapshotted, only once synced
        current, size = compact(
            self.store, state, self.source, self.wal, self.current, hook=self._hook, sync=self._sync
        )
        self.current = current
        if size is not None:
            self._published(size)

    def compact_when_free(self, state: State) -> None:
        """`Queue.compact()`: wait (never holding the lock) for a background snapshot under way, then compact now.

        An obstacle a compaction must create is `FileExistsError` before
        anything is written (`check_room`); any other failure poisons the
        queue (the guard's `release`) and is raised.
        """
        guard = self._guard
        while True:
            background = self.background
            if background is not None:
                guard.join(background.join)  # the thread publishes under the lock
            with guard:
                if self.running():
                    continue  # another call started one meanwhile: wait for it too
                check_room(self.store, self.wal, state.last_seq)
                try:
                    self.compact_now(state)
                except BaseException:
                    guard.release(drain=False)
                    raise
                return

    def trigger(self, state: State) -> None:
        """The size trigger: a snapshot written in the background (in this call, when a hook watches).

        An obstacle in the directory postpones it instead of failing the call.
        """
        try:
            check_room(self.store, self.wal, state.last_seq)
        except FileExistsError as exc:
            log.warning("automatic compaction postponed: %s", exc)
            self._postpone()
            return
        if self._hook is not no_hook:
            # The phases must come in order in the caller's thread: compact here.
            self.compact_now(state)
            return
        self._durability.drain()
        seal(self.wal, no_hook)
        frozen = self.source.freeze(state)
        # The thread gets a descriptor of its own: whatever happens to this
        # queue's, its writes and its cleanup stay in this very directory.
        assert self.store.fd is not None
        directory = StoreDirectory(self.store.path, os.dup(self.store.fd))
        guard = self._guard
        background = BackgroundSnapshot(
            directory,
            frozen,
            sync=self._sync,
            lock=guard.mutex,
            finish=self._finish,
            newest=self.wal.newest,
            activity=lambda: guard.entered,  # changes with every call: the thread steps aside
        )
        self.background = background
        background.start()

    def stop(self) -> None:
        """Stop and join a background snapshot (the queue is closing): a new owner never meets its files."""
        background = self.background
        if background is not None:
            background.cancel()
            background.join()

    def _published(self, size: int) -> None:
        self.compactions += 1
        self.snapshot_size = size
        self.at = compaction_threshold(size, self._compact_bytes)

    def _postpone(self) -> None:
        threshold = compaction_threshold(self.snapshot_size, self._compact_bytes)
        assert threshold is not None  # only the size trigger gets here
        self.at = self.wal.wal_bytes + threshold

    def _finish(
        self, frozen: FrozenState, info: SnapshotInfo | None, written: Current | None, error: BaseException | None
    ) -> list[str] | None:
        """Publish a background snapshot (its CURRENT.tmp `written`); return the files its thread deletes next.

        Called by its thread, holding the lock unless the queue is closing.
        """
        closed = self._guard.closed
        if closed or info is None:
            self.source.thaw(frozen, written=False)
            if error is not None and not closed:
                log.error(
                    "background snapshot through sequence %d failed, the WAL keeps everything: %s", frozen.seq, error
                )
                self._postpone()
            return None
        try:
            # Something put in the way while the snapshot was written: nothing
            # is published yet, so the snapshot stays an orphan and nothing is lost.
            check_room(self.store, self.wal, frozen.seq)
        except FileExistsError as exc:
            self.source.thaw(frozen, written=False)
            log.warning("publishing the background snapshot postponed: %s", exc)
            self._postpone()
            return None
        try:
            current = publish(
                self.store, self.wal, frozen, info, hook=no_hook, sync=self._sync, delete=False, written=written
            )
            covered = covered_files(self.store, self.wal.deletable_below(), frozen.seq)
        except BaseException as exc:
            self.source.thaw(frozen, written=False)
            log.error("publishing the snapshot through sequence %d failed; the queue is closed: %s", frozen.seq, exc)
            self._guard.release(drain=False)  # poisoned
            return None
        self.source.thaw(frozen, written=True)
        self.current = current
        self._published(info.size)
        return covered
