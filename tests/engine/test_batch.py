"""`Queue.batch()`: many calls answered together, made durable by one fsync when the batch ends.

The rules (docs/DECISIONS.md, "A batch of calls"): inside a batch a call
of this thread returns without waiting for its fsync; leaving the
outermost batch waits until everything those calls wrote or saw is
durable, with one fsync for all of them; a failed fsync there poisons the
queue and raises; other threads, hooks and `sync=False` are unaffected.
The fsyncs are counted through the `os` module.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from walqueue import PHASES, Queue, QueueClosed, ReentrantCall

pytestmark = pytest.mark.timeout(120)


class CountingFsync:
    """Wraps `os.fsync`: counts the calls, and fails them with `fail_with` once it is set."""

    def __init__(self) -> None:
        self.original = os.fsync
        self.calls = 0
        self.fail_with: int | None = None

    def __call__(self, fd: int) -> None:
        self.calls += 1
        if self.fail_with is not None:
            raise OSError(self.fail_with, "injected fsync failure")
        self.original(fd)


@pytest.fixture
def fsyncs(monkeypatch: pytest.MonkeyPatch) -> Iterator[CountingFsync]:
    probe = CountingFsync()
    monkeypatch.setattr(os, "fsync", probe)
    monkeypatch.setattr(os, "fdatasync", probe)  # the WAL syncs its data with fdatasync
    yield probe


def test_one_fsync_covers_every_put_of_a_batch(qdir: Path, fsyncs: CountingFsync) -> None:
    with Queue(qdir, compact_bytes=None) as queue:
        fsyncs.calls = 0
        with queue.batch():
            ids = [queue.put(f"t{n}", {"n": n}) for n in range(20)]
            assert fsyncs.calls == 0  # nothing is synced while the batch runs
        assert fsyncs.calls == 1
        assert ids == [f"t{n}" for n in range(20)]
    with Queue(qdir, sync=False) as reopened:
        assert len(reopened.tasks()) == 20


def test_without_a_batch_every_put_waits_for_its_own_fsync(qdir: Path, fsyncs: CountingFsync) -> None:
    with Queue(qdir, compact_bytes=None) as queue:
        fsyncs.calls = 0
        for n in range(5):
            queue.put(f"t{n}", {})
        assert fsyncs.calls == 5


def test_a_read_inside_a_batch_waits_at_the_exit_for_what_it_saw(qdir: Path, fsyncs: CountingFsync) -> None:
    with Queue(qdir, compact_bytes=None) as queue:
        fsyncs.calls = 0
        with queue.batch():
            queue.put("a", {})
            seen = queue.get("a")
            assert seen is not None and seen.status == "ready"
            leases = queue.reserve("w", now=0, lease_seconds=10)
            assert [lease.task_id for lease in leases] == ["a"]
            assert fsyncs.calls == 0
        assert fsyncs.calls == 1


def test_a_read_in_a_batch_of_what_another_thread_wrote_waits_for_that_write(qdir: Path, fsyncs: CountingFsync) -> None:
    with Queue(qdir, compact_bytes=None) as queue:
        written = threading.Event()
        release = threading.Event()

        def writer() -> None:
            with queue.batch():
                queue.put("theirs", {})
                written.set()
                release.wait(30)

        thread = threading.Thread(target=writer)
        thread.start()
        assert written.wait(30)
        fsyncs.calls = 0
        with queue.batch():
            assert queue.get("theirs") is not None  # saw a write no fsync covers yet
        assert fsyncs.calls == 1  # the exit synced what this batch saw
        release.set()
        thread.join(30)
        assert fsyncs.calls == 1  # and the writer's exit found it durable already


def test_nested_batches_are_one_batch(qdir: Path, fsyncs: CountingFsync) -> None:
    with Queue(qdir, compact_bytes=None) as queue:
        fsyncs.calls = 0
        with queue.batch():
            queue.put("a", {})
            with queue.batch():
                queue.put("b", {})
            assert fsyncs.calls == 0  # the inner exit waits for nothing
            queue.put("c", {})
        assert fsyncs.calls == 1


def test_a_batch_holds_back_only_its_own_threads_calls(qdir: Path, fsyncs: CountingFsync) -> None:
    with Queue(qdir, compact_bytes=None) as queue:
        fsyncs.calls = 0
        with queue.batch():
            queue.put("mine", {})
            other = threading.Thread(target=queue.put, args=("theirs", {}))
            other.start()
            other.join(30)
            # The other thread waited for its own fsync, which covered this batch's frame too.
            assert fsyncs.calls == 1
        assert fsyncs.calls == 1


def test_a_failed_fsync_at_the_batchs_exit_raises_and_poisons(qdir: Path, fsyncs: CountingFsync) -> None:
    queue = Queue(qdir, compact_bytes=None)
    with pytest.raises(OSError) as raised:
        with queue.batch():
            queue.put("a", {})
            queue.put("b", {})
            fsyncs.fail_with = errno.EIO
    assert raised.value.errno == errno.EIO
    assert not isinstance(raised.value, QueueClosed)
    with pytest.raises(QueueClosed):
        queue.get("a")
    fsyncs.fail_with = None
    queue.close()
    Queue(qdir).close()  # the directory was released and reopens


def test_a_batch_whose_queue_was_poisoned_before_its_fsync_raises(qdir: Path, fsyncs: CountingFsync) -> None:
    queue = Queue(qdir, compact_bytes=None)
    with pytest.raises(QueueClosed):
        with queue.batch():
            queue.put("a", {})
            queue._poison()  # what an I/O error in a later call of the batch does
    queue.close()


def test_close_inside_a_batch_syncs_what_the_batch_wrote(qdir: Path, fsyncs: CountingFsync) -> None:
    queue = Queue(qdir, compact_bytes=None)
    with queue.batch():
        queue.put("a", {})
        queue.close()
    with pytest.raises(QueueClosed):
        queue.get("a")
    with Queue(qdir, sync=False) as reopened:
        assert reopened.get("a") is not None


def test_wait_inside_a_batch_is_refused(qdir: Path) -> None:
    with Queue(qdir, compact_bytes=None) as queue:
        with queue.batch():
            queue.put("a", {})
            with pytest.raises(ReentrantCall):
                queue.wait(0.0)
        assert queue.wait(0.0) is False  # usable again once the batch is over


def test_a_batch_on_a_closed_queue_is_refused(qdir: Path) -> None:
    queue = Queue(qdir, compact_bytes=None)
    queue.close()
    with pytest.raises(QueueClosed):
        with queue.batch():
            pass


def test_with_a_hook_every_write_of_a_batch_is_synced_in_its_own_phases(qdir: Path) -> None:
    phases: list[str] = []
    with Queue(qdir, hook=phases.append, compact_bytes=None) as queue:
        phases.clear()
        with queue.batch():
            queue.put("a", {})
            assert phases[-1] == "wal.append.synced"  # durable before the call returned
            queue.put("b", {})
        assert phases.count("wal.append.synced") == 2
        assert set(phases) <= set(PHASES)


def test_the_exit_wakes_a_thread_waiting_for_a_commit(qdir: Path) -> None:
    with Queue(qdir, compact_bytes=None) as queue:
        queue.put("first", {})
        woken: list[bool] = []
        looked = threading.Event()

        def waiter() -> None:
            assert queue.last_seq >= 1  # the state this thread has seen: a commit after it wakes the wait
            looked.set()
            woken.append(queue.wait(30))

        waiting = threading.Thread(target=waiter)
        waiting.start()
        assert looked.wait(30)
        with queue.batch():
            queue.put("a", {})
        waiting.join(30)
        assert woken == [True]
