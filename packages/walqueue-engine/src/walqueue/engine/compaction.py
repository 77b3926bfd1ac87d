"""Compaction: rotate -> snapshot -> CURRENT -> delete, and the automatic policy.

The order is what makes a crash at any point harmless (CONTRACT §4, Compaction):
until CURRENT is replaced the old snapshot and every old segment are intact
and authoritative; once it is replaced the new snapshot is complete and
synced, and the deletions that follow only remove what it covers. Nothing
that the published CURRENT names, and no live segment, is ever written to,
renamed over or deleted.
"""

from __future__ import annotations

import errno
import heapq
import logging
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import chain
from typing import Any

from walqueue.engine.records import row_json, view
from walqueue.engine.state import State, Stored
from walqueue.engine.wal import Hook, WalWriter
from walqueue.format.current import Current, publish_current, write_current_tmp
from walqueue.format.directory import StoreDirectory, describe_file_type
from walqueue.format.names import CURRENT_TMP_NAME, list_directory, snapshot_name, wal_name
from walqueue.format.snapshot import SnapshotInfo, write_snapshot

__all__ = [
    "FrozenState",
    "SnapshotSource",
    "check_room",
    "compact",
    "compaction_threshold",
    "publish",
    "remove_entry",
    "seal",
    "write_current",
    "write_frozen_snapshot",
]

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
        if number >= wal.deletable_below():
            break
        remove_entry(directory, listing.segments[number])
        deleted = True
        hook("segment.deleted")
    for name in listing.snapshots.values():
        if name != keep_snapshot:
            # An older snapshot or an orphan of an interrupted compaction: no
            # longer named by CURRENT, so nothing can ever read it again.
            if remove_entry(directory, name):
                deleted = True
    return deleted


def remove_entry(directory: StoreDirectory, name: str) -> bool:
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
    try:
        directory.unlink(name)
    except FileNotFoundError:
        return False  # removed meanwhile (by a compaction that published after this one)
    return True


def covered_files(directory: StoreDirectory, first_live: int, seq: int) -> list[str]:
    """What a published snapshot of `seq` leaves unreadable: the segments below `first_live`, older snapshots.

    Listed under the queue's lock at publication, deleted after it
    (`delete_files`): a later compaction's files are never on the list,
    since its segments are live and its snapshot's sequence is above `seq`.
    """
    listing = list_directory(directory)
    names = [listing.segments[number] for number in listing.segment_numbers if number < first_live]
    names += [name for snapshot_seq, name in sorted(listing.snapshots.items()) if snapshot_seq < seq]
    return names


def delete_files(directory: StoreDirectory, names: list[str], *, sync: bool) -> None:
    """Delete what `covered_files` listed, then sync the directory if anything went."""
    deleted = False
    for name in names:
        deleted = remove_entry(directory, name) or deleted
    if deleted and sync:
        directory.fsync()


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


class SnapshotSource:
    """The task ids in order, kept up to date cheaply, and what a snapshot in progress must still see.

    Sorting a million task ids, or copying a million-entry dict, would stall
    every caller for tens of milliseconds, so neither happens at compaction
    time. Task ids are never removed, so the ids of the state at the last
    snapshot stay sorted in `_sorted`, and the ids created since are only
    appended to `_new`; a snapshot merges them lazily (`heapq.merge`),
    which is linear. The ids created since the last snapshot are sorted by
    the snapshot's own thread, in runs of at most `SORT_RUN` ids: one sort
    of them all (hundreds of thousands after a long run of puts) would be
    one C call that holds the interpreter lock, and every caller would wait
    for it. The ordered ids are tuples of about `ID_CHUNK` ids: the collector
    walks a list item by item (tens of milliseconds at a million, in whichever
    call triggers it) and a list is always tracked, but a tuple of strings is
    untracked by the first collection that sees it. The ids a published
    snapshot replaced are freed by its thread, chunk by chunk, after the
    lock (`FrozenState.release`). Records are immutable (a transition
    replaces a task's record), so the view of sequence S is the live dict
    plus the pre-images of the tasks that changed after S, which the queue
    records before applying each transaction (`before_change`) while a
    snapshot is being written.
    """

    __slots__ = ("_sorted", "_new", "_preimages", "_merged")

    def __init__(self, state: State) -> None:
        self._sorted: list[tuple[str, ...]] = _chunks(sorted(state.tasks))  # opening: nobody waits yet
        self._new: list[str] = []
        self._preimages: dict[str, Stored | None] | None = None
        self._merged: list[tuple[str, ...]] = []

    def created(self, task_ids: Iterable[str]) -> None:
        """A transaction created the tasks `task_ids` (what `apply` reports, under the queue's lock)."""
        self._new.extend(task_ids)

    def before_change(self, ops: Iterable[Mapping[str, Any]], tasks: Mapping[str, Stored]) -> None:
        """Keep the records a running snapshot must still see, before the tasks the `ops` name change.

        Called before every transaction is applied; without a snapshot
        running it costs one test.
        """
        preimages = self._preimages
        if preimages is None:
            return
        for op in ops:
            task_id = op.get("task")  # None: a store-level op (clock) or a queue's settings (configure)
            if task_id is not None and task_id not in preimages:
                preimages[task_id] = tasks.get(task_id)

    def freeze(self, state: State) -> FrozenState:
        """The state as it is now, readable while the live one goes on changing (under the queue's lock)."""
        new, self._new = self._new, []  # unsorted: the snapshot's thread sorts it, run by run
        self._preimages = {}
        self._merged = []
        frozen = FrozenState(
            self, state.last_seq, len(state.tasks), state.tasks, new, state.clock, state.results_copy()
        )
        frozen.queues = state.settings_json()  # a copy, as it is now (lanes)
        return frozen

    def thaw(self, frozen: FrozenState, *, written: bool) -> None:
        """The snapshot of `frozen` is done (`written`) or abandoned: stop keeping pre-images.

        What is no longer needed (the pre-images, the replaced ids, the
        frozen copies) goes to `frozen.retired` instead of being freed here,
        under the queue's lock, in one long C call (`FrozenState.release`).
        """
        retired: list[Any] = [self._preimages, frozen.results, frozen.new]
        self._preimages = None
        if written and sum(map(len, self._merged)) == frozen.count:
            retired += self._sorted
            self._sorted = self._merged
        else:
            self._new = frozen.new + self._new
        self._merged = []
        frozen.retired, frozen.new, frozen.results = retired, [], {}


class FrozenState:
    """The state at one sequence, as a snapshot reads it: every task's record in task-id order."""

    __slots__ = ("_source", "seq", "count", "_tasks", "new", "clock", "results", "queues", "retired")

    def __init__(
        self,
        source: SnapshotSource,
        seq: int,
        count: int,
        tasks: Mapping[str, Stored],
        new: list[str],
        clock: int | None = None,
        results: Mapping[str, bytes] | None = None,
    ):
        self.results = results or {}  # the completed tasks' results at `seq` (a copy: see State.results_copy)
        self._source = source
        self.clock = clock  # the store's clock unit at `seq` (the snapshot header's "clock")
        self.seq = seq
        self.count = count
        self._tasks = tasks
        self.new = new
        #: The queues' settings at `seq` (lanes), for the header; empty: none.
        self.queues: dict[str, Any] = {}
        #: What the snapshot no longer needs once thawed, for `release` to free piece by piece.
        self.retired: list[Any] = []

    def release(self, step: Callable[[], None]) -> None:
        """Free what `thaw` retired a chunk (or `ID_CHUNK` items) at a time, `step` between two.

        Dropping a million ids at once is one C call of several milliseconds
        holding the interpreter lock; the snapshot's thread calls this after publishing.
        """
        retired = self.retired
        while retired:
            item = retired[-1]
            if type(item) is list and len(item) > ID_CHUNK:
                del item[-ID_CHUNK:]
            elif type(item) is dict and len(item) > ID_CHUNK:
                for _ in range(ID_CHUNK):
                    item.popitem()
            else:
                retired.pop()
            step()

    def record_json(self, pause: Callable[[], None] | None = None, every: int = 16) -> Iterator[bytes]:
        """Each task's snapshot record, in task-id order, as it was at `seq`.

        The live record is read first and a pre-image looked up after it: a
        change after `seq` saves its pre-image before it replaces the record,
        so whichever order another thread's change takes, the record seen is
        the one of `seq`. `pause` is called every `every` records (a thread
        writing in the background lets the callers run).
        """
        tasks = self._tasks
        source = self._source
        preimages = source._preimages
        assert preimages is not None, "a frozen state is read once, while it is frozen"
        merged = source._merged
        chunk: list[str] = []
        keep = chunk.append
        missing = _MISSING
        runs = self._sorted_runs(pause)
        results = self.results
        for count, task_id in enumerate(heapq.merge(chain.from_iterable(source._sorted), *runs), 1):
            record = tasks[task_id]
            earlier = preimages.get(task_id, missing)
            if earlier is not missing:
                assert earlier is not None  # only tasks created after `seq` have no pre-image, and they are not here
                record = earlier
            keep(task_id)
            stored = results.get(task_id) if results else None
            text = row_json(record) if type(record) is tuple else view(record).record_json()
            yield text if stored is None else with_result(text, stored)
            if not count % every:
                if len(chunk) >= ID_CHUNK:
                    merged.append(tuple(chunk))  # a short list to walk, whatever the state's size
                    chunk.clear()
                if pause is not None:
                    pause()
        if chunk:
            merged.append(tuple(chunk))

    def _sorted_runs(self, pause: Callable[[], None] | None) -> list[list[str]]:
        """The ids created since the last snapshot as sorted runs of at most `SORT_RUN` ids each.

        Each run is one short sort; `pause` between two of them lets the
        callers have the interpreter lock (see `SnapshotSource`).
        """
        new = self.new
        runs: list[list[str]] = []
        for start in range(0, len(new), SORT_RUN):
            runs.append(sorted(new[start : start + SORT_RUN]))
            if pause is not None:
                pause()
        return runs


_MISSING: Any = object()


def with_result(record_json: bytes, stored: bytes) -> bytes:
    """A completed task's snapshot record with its optional ``result`` member, in canonical key order.

    ``result`` sorts between ``payload`` and ``status``; a string's quote is
    always escaped, so the first ``,"status":`` is the record's own key.
    """
    expires, _, value = stored.partition(b" ")
    member = b',"result":{"expires":%b,"value":%b}' % (expires, value)
    head, status, tail = record_json.partition(b',"status":')
    return head + member + status + tail


#: The most ids one sort of the snapshot's thread takes at a time (a few milliseconds of the interpreter lock).
SORT_RUN = 8192
#: About how many ordered ids one tuple of `SnapshotSource` holds (see there).
ID_CHUNK = 8192


def _chunks(ids: list[str]) -> list[tuple[str, ...]]:
    """`ids` as consecutive tuples of `ID_CHUNK` ids (the last one shorter)."""
    return [tuple(ids[start : start + ID_CHUNK]) for start in range(0, len(ids), ID_CHUNK)]


def seal(wal: WalWriter, hook: Hook) -> None:
    """Rotate: seal the newest segment (synced) and start the next one (CONTRACT §5 phases wal.rotate.*)."""
    hook("wal.rotate.before")
    wal.rotate()
    hook("wal.rotate.after")


def write_frozen_snapshot(
    directory: StoreDirectory,
    frozen: FrozenState,
    *,
    hook: Hook,
    sync: bool,
    pause: Callable[[], None] | None = None,
) -> SnapshotInfo:
    """Write and sync the snapshot of `frozen` (phases snapshot.partial, .written, .synced)."""
    info = write_snapshot(
        snapshot_name(frozen.seq),
        frozen.seq,
        frozen.count,
        frozen.record_json(pause),
        on_partial=lambda: hook("snapshot.partial"),
        on_written=lambda: hook("snapshot.written"),
        directory=directory,
        sync=sync,
        clock=frozen.clock,
        queues=frozen.queues,
    )
    if sync:
        directory.fsync()
    hook("snapshot.synced")
    return info


def write_current(
    directory: StoreDirectory, newest: int, frozen: FrozenState, info: SnapshotInfo, *, sync: bool
) -> Current:
    """Write (and sync) CURRENT.tmp naming the snapshot of `frozen`, replayed from segment `newest` (step one).

    Nothing reads CURRENT.tmp, so a background snapshot writes it before it
    takes the queue's lock, and holds the lock only for the rename.
    """
    name = snapshot_name(frozen.seq)
    current = Current(snapshot=name, seq=frozen.seq, size=info.size, sha256=info.sha256, wal=newest)
    write_current_tmp(directory, current, sync=sync)
    return current


def publish(
    directory: StoreDirectory,
    wal: WalWriter,
    frozen: FrozenState,
    info: SnapshotInfo,
    *,
    hook: Hook,
    sync: bool,
    delete: bool = True,
    written: Current | None = None,
) -> Current:
    """Publish the snapshot through CURRENT (the commit point), then delete what it covers.

    `delete=False` leaves the deletions to the caller (`covered_files`,
    `delete_files`): the background snapshot deletes after releasing the
    queue's lock, since unlinking a large segment takes a while. `written`:
    CURRENT.tmp is already written and synced for this very snapshot and
    segment (`write_current`).
    """
    name = snapshot_name(frozen.seq)
    new_current = written
    if new_current is None or new_current.wal != wal.newest or new_current.snapshot != name:
        new_current = write_current(directory, wal.newest, frozen, info, sync=sync)
    hook("current.written")
    publish_current(directory, sync=sync)
    hook("current.published")
    wal.retire_sealed()
    log.info("compacted through sequence %d into %s (%d bytes)", frozen.seq, name, info.size)
    if delete:
        if _delete_leftovers(directory, wal, name, hook) and sync:
            directory.fsync()
        hook("compact.done")
    return new_current


def compact(
    directory: StoreDirectory,
    state: State,
    source: SnapshotSource,
    wal: WalWriter,
    current: Current | None,
    *,
    hook: Hook,
    sync: bool,
) -> tuple[Current | None, int | None]:
    """Compact the directory in the caller's thread; return the published CURRENT and the new snapshot's size.

    The size is None when nothing was appended since the published snapshot
    (only leftovers are deleted then). Call `check_room` first: an obstacle
    found here, after the rotation, poisons the queue.
    """
    published_seq = 0 if current is None else current.seq
    if state.last_seq == published_seq:
        keep = None if current is None else current.snapshot
        if _delete_leftovers(directory, wal, keep, hook) and sync:
            directory.fsync()
        hook("compact.done")
        return current, None
    seal(wal, hook)
    frozen = source.freeze(state)
    written = False
    try:
        info = write_frozen_snapshot(directory, frozen, hook=hook, sync=sync)
        written = True
    finally:
        source.thaw(frozen, written=written)
    return publish(directory, wal, frozen, info, hook=hook, sync=sync), info.size
