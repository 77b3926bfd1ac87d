"""The background snapshot: a frozen state written by a thread of its own, published under the queue's lock.

Split from compaction.py (the files and their order), which it follows:
rotate -> snapshot -> CURRENT -> delete. What runs under the queue's lock
is only what must (the rename of CURRENT.tmp over CURRENT and the
bookkeeping, docs/DECISIONS.md §60); the rest, the thread does with the
lock released.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from walqueue.engine.compaction import (
    FrozenState,
    delete_files,
    remove_entry,
    write_current,
    write_frozen_snapshot,
)
from walqueue.engine.wal import no_hook
from walqueue.format.current import Current
from walqueue.format.directory import StoreDirectory
from walqueue.format.names import CURRENT_TMP_NAME, snapshot_name
from walqueue.format.snapshot import SnapshotInfo

__all__ = ["BackgroundSnapshot", "Finish"]

log = logging.getLogger("walqueue")

#: What the queue's side does with a written snapshot, under its lock (`Compactor._finish`): the
#: frozen state, the snapshot's info and its CURRENT.tmp (None: nothing to publish), the failure
#: if any; returns the files to delete once the lock is released (None: nothing was published).
Finish = Callable[[FrozenState, SnapshotInfo | None, Current | None, BaseException | None], list[str] | None]

#: How long the snapshot thread steps aside when calls are being made (see `BackgroundSnapshot._pause`).
_YIELD_SECONDS = 0.0001


class BackgroundSnapshot:
    """A snapshot of a frozen state written by a thread of its own, then published under the queue's lock.

    Only the writing of the snapshot file, which costs time proportional to
    the whole state, and of CURRENT.tmp run in the background; the rotation
    before it and the publication after it (CURRENT.tmp renamed over
    CURRENT) take the queue's lock like any call, so the order rotate ->
    snapshot -> CURRENT -> delete and the orphan rules are those of
    `compact`. The files the publication made unreadable are listed under
    the lock and deleted after it is released: unlinking a
    large segment takes a while, and nothing reads those files any more.
    The thread pauses every few hundred records so that callers waiting for
    the interpreter lock run. The queue keeps the thread until it ends (its
    deletions included), so that `close()` joins it before the ownership
    goes.

    A failure while writing the snapshot loses nothing (the WAL holds every
    transaction, CURRENT is untouched): it is logged, the partial file
    removed, and the next trigger tries again. A failure while publishing
    poisons the queue, as in `compact`; a failure of the deletions after it
    only leaves leftovers, which opening skips and the next compaction
    deletes.
    """

    def __init__(
        self,
        directory: StoreDirectory,
        frozen: FrozenState,
        *,
        sync: bool,
        lock: threading.RLock,
        finish: Finish,
        newest: int,
        activity: Callable[[], int] | None = None,
    ) -> None:
        self._activity = activity
        self._seen = None if activity is None else activity()
        self._directory = directory
        self._frozen = frozen
        self._sync = sync
        self._lock = lock
        self._finish = finish
        self._newest = newest  # the segment replay starts from once published (no rotation before then)
        self._cancelled = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"walqueue-snapshot-{frozen.seq}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def cancel(self) -> None:
        """Ask the thread to stop; it abandons an unpublished snapshot (an orphan nothing reads)."""
        self._cancelled.set()

    def join(self) -> None:
        if self._thread is not threading.current_thread():
            self._thread.join()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def _pause(self) -> None:
        """Between two runs of records: stop if cancelled, and let the callers have the interpreter.

        `time.sleep(0)` releases the interpreter lock, but this thread
        usually takes it back before a waiting caller is even scheduled, so
        a caller would wait for the switch interval. When calls were made
        since the last pause (`activity` moved), a real sleep, a short one,
        lets them in; the snapshot then takes longer, but no call waits for it.
        """
        if self._cancelled.is_set():
            raise _Cancelled
        activity = self._activity
        if activity is not None:
            seen = activity()
            if seen != self._seen:
                self._seen = seen
                time.sleep(_YIELD_SECONDS)
                return
        time.sleep(0)

    def _run(self) -> None:
        directory = self._directory
        try:
            self._write_and_publish(directory)
        finally:
            directory.close()
            self._frozen.release(_step_aside)  # the lock released: callers run between two pieces

    def _write_and_publish(self, directory: StoreDirectory) -> None:
        name = snapshot_name(self._frozen.seq)
        info: SnapshotInfo | None = None
        current: Current | None = None
        error: BaseException | None = None
        try:
            info = write_frozen_snapshot(directory, self._frozen, hook=no_hook, sync=self._sync, pause=self._pause)
            # Step one of publishing, before the lock: nothing reads CURRENT.tmp.
            current = write_current(directory, self._newest, self._frozen, info, sync=self._sync)
        except _Cancelled:
            pass
        except Exception as exc:  # noqa: BLE001 - reported through `finish`, never lost
            error = exc
        if current is None:
            info = None
            _remove_quietly(directory, name, CURRENT_TMP_NAME)  # partial files: orphans nobody will publish
        # Publication takes the queue's lock. A queue that is closing holds it
        # while it cancels and joins this thread, so never wait for it blindly.
        while not self._lock.acquire(timeout=0.05):
            if self._cancelled.is_set():
                break
        else:
            try:
                if not self._cancelled.is_set():
                    covered = self._finish(self._frozen, info, current, error)
                    published = True
                else:
                    published = False
            finally:
                self._lock.release()
            if published:
                if covered is None and current is not None:
                    _remove_quietly(directory, CURRENT_TMP_NAME)  # not published after all: nothing will read it
                if covered:
                    try:
                        delete_files(directory, covered, sync=self._sync)
                    except OSError as exc:
                        # Published already: what is left is leftovers, which opening skips.
                        log.warning("deleting what the snapshot through %d covers failed: %s", self._frozen.seq, exc)
                return
        if info is not None:
            _remove_quietly(directory, name, CURRENT_TMP_NAME)  # cancelled: the queue is closing, nothing publishes it
        self._finish(self._frozen, None, None, None)


def _step_aside() -> None:
    time.sleep(_YIELD_SECONDS)


def _remove_quietly(directory: StoreDirectory, *names: str) -> None:
    """Remove an unpublished snapshot and its CURRENT.tmp (orphans nothing reads) if they are there; never raises."""
    try:
        removed = [remove_entry(directory, name) for name in names]
        if any(removed):
            directory.fsync()
    except OSError:
        pass


class _Cancelled(Exception):
    """The queue closed while its background snapshot was being written."""
