"""What an ordinary process does to an open queue: chdir, symlinks, fork, signals, stray files, LOCK games.

Each test names the rule it proves (docs/RELIABILITY.md, "What the
environment can do to a store"). Everything that could hang runs under
pytest-timeout's limit, and the children of fork tests exit through
`os._exit`, so a failure in a child can never run the rest of pytest twice.
"""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import signal
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from model import directory_digest, place_special
from walqueue import CorruptStore, DirectoryLocked, InjectedCrash, Queue, QueueClosed, ReentrantCall
from walqueue.format.names import CURRENT_TMP_NAME, LOCK_NAME, snapshot_name, wal_name

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def in_tmp(tmp_path: Path) -> Iterator[Path]:
    """Run the test with `tmp_path` as the working directory, and restore it after."""
    before = os.getcwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(before)


def _ids(queue: Queue) -> list[str]:
    return [task.task_id for task in queue.tasks()]


# -- 1. the working directory and symlinks ------------------------------------------------


def test_a_chdir_never_moves_where_a_relative_queue_writes(in_tmp: Path) -> None:
    (in_tmp / "a").mkdir()
    (in_tmp / "b").mkdir()
    os.chdir(in_tmp / "a")
    with Queue("q", sync=False, compact_bytes=None) as other:  # a/q: a bystander store
        other.put("theirs", {})
    bystander = directory_digest(in_tmp / "a" / "q")
    os.chdir(in_tmp / "b")
    queue = Queue("q", sync=False, compact_bytes=None)
    queue.put("before", {})
    os.chdir(in_tmp / "a")  # now "q" names the bystander
    queue.put("after", {})
    queue.compact()
    queue.put("after-compaction", {})
    queue.close()
    assert directory_digest(in_tmp / "a" / "q") == bystander
    with Queue(in_tmp / "b" / "q", sync=False) as reopened:
        assert _ids(reopened) == ["after", "after-compaction", "before"]


def test_a_repointed_symlink_never_moves_where_the_queue_writes(tmp_path: Path) -> None:
    real, decoy, link = tmp_path / "real", tmp_path / "decoy", tmp_path / "link"
    real.mkdir()
    decoy.mkdir()
    link.symlink_to(real)
    queue = Queue(link, sync=False, compact_bytes=None)
    queue.put("one", {})
    link.unlink()
    link.symlink_to(decoy)
    queue.put("two", {})
    queue.compact()
    queue.close()
    assert list(decoy.iterdir()) == []
    with Queue(real, sync=False) as reopened:
        assert _ids(reopened) == ["one", "two"]


# -- 2. fork ---------------------------------------------------------------------------------

#: What a forked child tries, each on the inherited queue.
CHILD_CALLS: dict[str, Any] = {
    "put": lambda q: q.put("child", {}),
    "put_many": lambda q: q.put_many([{"task_id": "child", "payload": {}}]),
    "reserve": lambda q: q.reserve("w", now=10, lease_seconds=5),
    "compact": lambda q: q.compact(),
    "get": lambda q: q.get("t"),
    "tasks": lambda q: q.tasks(),
    "stats": lambda q: q.stats(),
    "last_seq": lambda q: q.last_seq,
}


def _in_child(body: Any) -> int:
    """Fork, run `body()` in the child (its return value is the exit status), and return that status."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        status = 99
        try:
            status = body()
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.parametrize("call", list(CHILD_CALLS))
def test_a_forked_child_can_use_no_inherited_queue(qdir: Path, call: str) -> None:
    queue = Queue(qdir, sync=False, compact_bytes=None)
    queue.put("t", {})

    def child() -> int:
        try:
            CHILD_CALLS[call](queue)
        except QueueClosed:
            return 0
        return 1

    assert _in_child(child) == 0
    queue.put("parent", {})
    queue.close()
    with Queue(qdir, sync=False) as reopened:
        assert _ids(reopened) == ["parent", "t"]


def test_a_child_that_closes_its_copy_leaves_the_parent_owning(qdir: Path) -> None:
    queue = Queue(qdir, sync=False)

    def child() -> int:
        queue.close()
        queue.close()
        try:
            Queue(qdir, sync=False)
        except DirectoryLocked:
            return 0
        return 1

    assert _in_child(child) == 0
    with pytest.raises(DirectoryLocked):
        Queue(qdir, sync=False)
    queue.put("still-mine", {})
    queue.close()


def _sleep_in_pool(seconds: float) -> float:
    import time

    time.sleep(seconds)
    return seconds


def test_a_fork_pool_keeps_no_ownership_after_the_parent_closes(qdir: Path) -> None:
    queue = Queue(qdir, sync=False)
    context = multiprocessing.get_context("fork")
    with context.Pool(2) as pool:
        pending = pool.map_async(_sleep_in_pool, [0.5, 0.5])
        queue.close()
        with Queue(qdir, sync=False) as reopened:  # while the workers still live
            reopened.put("t", {})
        pending.get(timeout=30)


def test_a_fork_inside_the_hook_never_lets_the_child_write(qdir: Path) -> None:
    children: list[int] = []
    forked = False

    def hook(phase: str) -> None:
        nonlocal forked
        if phase == "wal.append.partial" and not forked:
            forked = True
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child goes on into the write and must be stopped
                return
            children.append(pid)

    queue = Queue(qdir, sync=False, hook=hook, compact_bytes=None)
    try:
        queue.put("t", {"n": 1})
    except QueueClosed:  # pragma: no cover - only the child gets here
        os._exit(0)
    except BaseException:  # pragma: no cover
        os._exit(1)
    if not children:  # pragma: no cover
        os._exit(2)
    [pid] = children
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    queue.put("u", {})
    queue.close()
    with Queue(qdir, sync=False) as reopened:
        assert _ids(reopened) == ["t", "u"]


def test_every_descriptor_of_a_queue_is_close_on_exec(qdir: Path) -> None:
    with Queue(qdir, sync=False) as queue:
        queue.put("t", {})
        mine = []
        for entry in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{entry}")
            except OSError:
                continue
            if target.startswith(str(qdir)):
                mine.append(int(entry))
        assert len(mine) >= 3  # the directory (twice: operations and ownership), LOCK, the WAL
        for fd in mine:
            assert fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC, os.readlink(f"/proc/self/fd/{fd}")


# -- 3. re-entrancy --------------------------------------------------------------------------


@pytest.mark.parametrize("phase", ["wal.append.before", "wal.append.partial", "wal.append.written"])
def test_close_from_a_signal_handler_inside_a_call_never_hangs(qdir: Path, phase: str) -> None:
    queue: Queue | None = None

    def handler(signum: int, frame: object) -> None:
        assert queue is not None
        queue.close()

    def hook(seen: str) -> None:
        if seen == phase:
            os.kill(os.getpid(), signal.SIGUSR1)

    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        queue = Queue(qdir, sync=False, hook=hook, compact_bytes=None)
        with pytest.raises(QueueClosed):  # the interrupted call fails cleanly...
            queue.put("t", {})
        with pytest.raises(QueueClosed):  # ...and so does every later one
            queue.get("t")
    finally:
        signal.signal(signal.SIGUSR1, previous)
    with Queue(qdir, sync=False) as reopened:  # the lock was released as the call returned
        # Before the write or halfway through it: nothing (a torn tail is cut).
        # Once the frame is whole it may come back (CONTRACT §4 rule 6).
        assert _ids(reopened) in ([["t"], []] if phase == "wal.append.written" else [[]])


def test_close_from_a_signal_handler_between_calls_closes_at_once(qdir: Path) -> None:
    queue = Queue(qdir, sync=False, compact_bytes=None)
    queue.put("a", {})
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: queue.close())
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    with pytest.raises(QueueClosed):
        queue.put("b", {})
    with Queue(qdir, sync=False) as reopened:
        assert _ids(reopened) == ["a"]


def test_a_put_many_generator_that_reads_the_queue_does_not_deadlock(q: Queue) -> None:
    q.put("seed", {})

    def items() -> Iterator[dict[str, Any]]:
        for n in range(3):
            assert q.get("seed") is not None
            yield {"task_id": f"t{n}", "payload": {"n": n}}

    assert q.put_many(items()) == ["t0", "t1", "t2"]


def test_a_mapping_that_calls_the_queue_does_not_deadlock(q: Queue) -> None:
    class Talkative(dict[str, Any]):
        def __getitem__(self, key: str) -> Any:
            q.stats()
            return super().__getitem__(key)

    q.put_many([Talkative(task_id="t", payload={})])
    assert q.get("t") is not None


def test_a_hook_that_calls_the_queue_is_refused_not_deadlocked(qdir: Path) -> None:
    queue: Queue | None = None

    def hook(phase: str) -> None:
        if phase == "wal.append.written":
            assert queue is not None
            queue.stats()

    queue = Queue(qdir, sync=False, hook=hook, compact_bytes=None)
    with pytest.raises(ReentrantCall):
        queue.put("t", {})
    with pytest.raises(QueueClosed):  # the hook raised: poisoned, as any hook exception poisons
        queue.get("t")
    with Queue(qdir, sync=False) as reopened:  # the frame was complete: it may come back
        assert _ids(reopened) in (["t"], [])


def test_a_lease_subclass_is_read_before_the_lock(q: Queue) -> None:
    from walqueue import Lease

    q.put("t", {})
    [lease] = q.reserve("w", now=0, lease_seconds=10)

    class Noisy(Lease):
        __slots__ = ()

        def __getattribute__(self, name: str) -> Any:
            if name in ("task_id", "worker", "generation"):
                q.stats()  # user code: runs before ack takes the lock, or it would deadlock
            return super().__getattribute__(name)

    token = Noisy(lease.task_id, lease.worker, lease.generation, lease.deadline, lease.attempts, {})
    q.ack(token, now=1)
    assert q.get("t").status == "completed"  # type: ignore[union-attr]


# -- 4. special files where a regular file must be ------------------------------------------


def _compacted_store(qdir: Path) -> tuple[str, str]:
    """A store with a snapshot and a live segment; returns (snapshot name, live segment name)."""
    with Queue(qdir, sync=False, compact_bytes=None) as queue:
        queue.put("a", {"n": 1})
        queue.compact()
        queue.put("b", {"n": 2})
        stats = queue.stats()
    snapshot = snapshot_name(stats["snapshot_seq"])
    segments = sorted(p.name for p in qdir.glob("wal-*.log"))
    return snapshot, segments[-1]


@pytest.mark.parametrize("kind", ["fifo", "directory", "dev-zero", "dev-null"])
@pytest.mark.parametrize("which", ["CURRENT", "snapshot", "segment"])
def test_a_special_file_where_a_store_file_must_be_is_corrupt_store(qdir: Path, which: str, kind: str) -> None:
    snapshot, segment = _compacted_store(qdir)
    name = {"CURRENT": "CURRENT", "snapshot": snapshot, "segment": segment}[which]
    place_special(qdir / name, kind)
    with pytest.raises(CorruptStore) as caught:
        Queue(qdir, sync=False)
    assert caught.value.path is not None and caught.value.path.endswith(name)


@pytest.mark.parametrize("kind", ["fifo", "directory", "dev-null"])
def test_a_lock_that_is_not_a_regular_file_is_corrupt_store(qdir: Path, kind: str) -> None:
    _compacted_store(qdir)
    place_special(qdir / LOCK_NAME, kind)
    with pytest.raises(CorruptStore) as caught:
        Queue(qdir, sync=False)
    assert caught.value.path is not None and caught.value.path.endswith(LOCK_NAME)


# -- 5. names the queue does not own ---------------------------------------------------------


def test_a_current_tmp_symlink_is_never_written_through(tmp_path: Path) -> None:
    qdir, outside = tmp_path / "q", tmp_path / "outside.txt"
    outside.write_text("precious")
    with Queue(qdir, sync=False, compact_bytes=None) as queue:
        queue.put("t", {})
        (qdir / CURRENT_TMP_NAME).symlink_to(outside)
        queue.compact()
        queue.put("u", {})
    assert outside.read_text() == "precious"
    with Queue(qdir, sync=False) as reopened:
        assert _ids(reopened) == ["t", "u"]


@pytest.mark.parametrize("obstacle", ["current-tmp", "next-snapshot", "next-segment"])
def test_a_directory_in_compactions_way_is_reported_and_poisons_nothing(qdir: Path, obstacle: str) -> None:
    queue = Queue(qdir, sync=False, compact_bytes=None)
    queue.put("t", {})
    name = {
        "current-tmp": CURRENT_TMP_NAME,
        "next-snapshot": snapshot_name(queue.last_seq),
        "next-segment": wal_name(queue.stats()["segments"] + 1),
    }[obstacle]
    (qdir / name).mkdir()
    before = directory_digest(qdir)
    with pytest.raises(FileExistsError, match="in the way"):
        queue.compact()
    assert directory_digest(qdir) == before  # nothing was written
    queue.put("u", {})  # not poisoned
    (qdir / name).rmdir()
    queue.compact()
    queue.close()
    with Queue(qdir, sync=False) as reopened:
        assert _ids(reopened) == ["t", "u"]


def test_an_obstacle_postpones_automatic_compaction_without_failing_the_put(qdir: Path) -> None:
    queue = Queue(qdir, sync=False, compact_bytes=200)
    queue.put("t0", {})
    (qdir / CURRENT_TMP_NAME).mkdir()
    for n in range(1, 20):
        queue.put(f"t{n}", {"pad": "x" * 50})
    assert queue.stats()["snapshot_seq"] == 0
    (qdir / CURRENT_TMP_NAME).rmdir()
    for n in range(20, 40):
        queue.put(f"t{n}", {"pad": "x" * 50})
    deadline = time.monotonic() + 30  # the snapshot is written in the background
    while queue.stats()["snapshot_seq"] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert queue.stats()["snapshot_seq"] > 0
    queue.close()
    with Queue(qdir, sync=False) as reopened:
        assert len(reopened.tasks()) == 40


# -- 6. ownership -------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_ownership_survives_lock_being_deleted_or_replaced(qdir: Path, how: str) -> None:
    with Queue(qdir, sync=False) as queue:
        (qdir / LOCK_NAME).unlink()
        if how == "replaced":
            (qdir / LOCK_NAME).write_bytes(b"")
        with pytest.raises(DirectoryLocked):
            Queue(qdir, sync=False)
        queue.put("t", {})


# -- 7. creating the directory ------------------------------------------------------------


def test_a_file_where_the_directory_should_be_is_not_a_directory_error(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_bytes(b"x")
    with pytest.raises(NotADirectoryError):
        Queue(path)
    with pytest.raises(NotADirectoryError):
        Queue(path / "below")
    with pytest.raises(NotADirectoryError):
        Queue(path, create=False)


def test_create_false_refuses_a_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        Queue(tmp_path / "typo", create=False)
    assert not (tmp_path / "typo").exists()
    (tmp_path / "there").mkdir()
    with Queue(tmp_path / "there", create=False) as queue:
        queue.put("t", {})


def test_each_created_directory_is_made_durable_before_the_first_frame(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    original = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        original(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    monkeypatch.setattr(os, "fdatasync", recording_fsync)  # the WAL syncs its data with fdatasync
    target = tmp_path / "a" / "b" / "q"
    with Queue(target) as queue:
        queue.put("t", {})
    first_segment = str(target / wal_name(1))
    frame_sync = synced.index(first_segment)
    for directory in (tmp_path, tmp_path / "a", tmp_path / "a" / "b", target):
        assert str(directory) in synced[:frame_sync], (directory, synced)
    assert stat.S_ISDIR(os.stat(target).st_mode)


def test_creation_fails_cleanly_on_an_injected_crash_and_reopens(qdir: Path) -> None:
    def hook(phase: str) -> None:
        raise InjectedCrash(phase)

    queue = Queue(qdir, sync=False, hook=hook)
    with pytest.raises(InjectedCrash):
        queue.put("t", {})
    with Queue(qdir, sync=False) as reopened:
        assert reopened.tasks() == []
