"""Group commit: many threads, shared fsyncs, and every rule of the contract for every caller.

The rules (docs/DECISIONS.md, "Group commit"): a call returns only after an
fsync that covers its own frame; a failed fsync poisons the queue and
reaches every waiting caller; no read shows a transaction that is not yet
durable; the log order is the order of application. The fsyncs are
observed through the `os` module, as the torture harness's fault injector
does.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from walqueue import Queue, QueueClosed

pytestmark = pytest.mark.timeout(120)


class SlowFsync:
    """Wraps `os.fsync`: each call waits on a gate (so callers pile up), optionally fails, and is counted."""

    def __init__(self) -> None:
        self.original = os.fsync
        self.calls = 0
        self.gate = threading.Event()
        self.gate.set()
        self.fail_with: int | None = None
        self.entered = threading.Event()
        self.lock = threading.Lock()

    def __call__(self, fd: int) -> None:
        with self.lock:
            self.calls += 1
        self.entered.set()
        self.gate.wait(30)
        if self.fail_with is not None:
            raise OSError(self.fail_with, "injected fsync failure")
        self.original(fd)


@pytest.fixture
def slow_fsync(monkeypatch: pytest.MonkeyPatch) -> Iterator[SlowFsync]:
    probe = SlowFsync()
    monkeypatch.setattr(os, "fsync", probe)
    monkeypatch.setattr(os, "fdatasync", probe)  # the WAL syncs its data with fdatasync
    yield probe
    probe.gate.set()


def test_one_fsync_covers_the_frames_of_many_threads(qdir: Path, slow_fsync: SlowFsync) -> None:
    queue = Queue(qdir, compact_bytes=None)
    slow_fsync.calls = 0
    slow_fsync.gate.clear()
    slow_fsync.entered.clear()
    first = threading.Thread(target=queue.put, args=("first", {}))
    first.start()
    assert slow_fsync.entered.wait(10)  # the first caller leads an fsync and is held in it
    results = _run_all_while(lambda: slow_fsync.gate.set(), [lambda n=n: queue.put(f"t{n}", {}) for n in range(16)])
    first.join(30)
    assert results == [f"t{n}" for n in range(16)]
    # The 16 callers wrote while the first fsync ran: one or two more fsyncs covered them all.
    assert slow_fsync.calls <= 4, slow_fsync.calls
    queue.close()
    with Queue(qdir, sync=False) as reopened:
        assert len(reopened.tasks()) == 17


def _run_all_while(release: Callable[[], None], functions: list[Callable[[], Any]]) -> list[Any]:
    """Start every function in a thread, give them a moment to write and queue up, then `release()`."""
    results: list[Any] = [None] * len(functions)
    started = threading.Barrier(len(functions) + 1)

    def run(index: int) -> None:
        started.wait(10)
        try:
            results[index] = functions[index]()
        except BaseException as exc:  # noqa: BLE001
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(functions))]
    for thread in threads:
        thread.start()
    started.wait(10)
    threading.Event().wait(0.3)  # let them write their frames and wait for the fsync
    release()
    for thread in threads:
        thread.join(60)
        assert not thread.is_alive(), "a caller hung"
    return results


def test_a_failed_fsync_reaches_every_waiting_thread_and_poisons(qdir: Path, slow_fsync: SlowFsync) -> None:
    queue = Queue(qdir, compact_bytes=None)
    queue.put("durable", {})
    slow_fsync.gate.clear()
    slow_fsync.entered.clear()
    slow_fsync.fail_with = errno.EIO
    leader_result: list[BaseException] = []

    def leader() -> None:
        try:
            queue.put("leader", {})
        except BaseException as exc:  # noqa: BLE001
            leader_result.append(exc)

    first = threading.Thread(target=leader)
    first.start()
    assert slow_fsync.entered.wait(10)
    results = _run_all_while(slow_fsync.gate.set, [lambda n=n: queue.put(f"t{n}", {}) for n in range(8)])
    first.join(30)
    assert len(leader_result) == 1 and isinstance(leader_result[0], OSError)
    assert leader_result[0].errno == errno.EIO
    for result in results:
        # Each waiter raises: the fsync error itself, or (arriving after the poisoning) QueueClosed.
        assert isinstance(result, (OSError, QueueClosed)), result
        if isinstance(result, OSError):
            assert result.errno == errno.EIO
    with pytest.raises(QueueClosed):
        queue.put("after", {})
    slow_fsync.fail_with = None
    with Queue(qdir) as reopened:  # the lock was released; nothing acknowledged is lost
        assert reopened.get("durable") is not None


def test_a_read_waits_for_the_fsync_that_covers_what_it_reads(qdir: Path, slow_fsync: SlowFsync) -> None:
    queue = Queue(qdir, compact_bytes=None)
    slow_fsync.gate.clear()
    slow_fsync.entered.clear()
    writer = threading.Thread(target=queue.put, args=("t", {"n": 1}))
    writer.start()
    assert slow_fsync.entered.wait(10)  # the frame is written and applied; its fsync is held
    seen: list[Any] = []
    reader = threading.Thread(target=lambda: seen.append(queue.get("t")))
    reader.start()
    reader.join(0.5)
    assert reader.is_alive() and seen == []  # the read waits: its answer would show an unsynced put
    slow_fsync.gate.set()
    reader.join(30)
    writer.join(30)
    assert seen and seen[0] is not None and seen[0].task_id == "t"
    queue.close()


def test_an_identical_retry_waits_for_the_put_it_matches(qdir: Path, slow_fsync: SlowFsync) -> None:
    queue = Queue(qdir, compact_bytes=None)
    slow_fsync.gate.clear()
    slow_fsync.entered.clear()
    writer = threading.Thread(target=queue.put, args=("t", {"n": 1}))
    writer.start()
    assert slow_fsync.entered.wait(10)
    retry: list[Any] = []
    thread = threading.Thread(target=lambda: retry.append(queue.put("t", {"n": 1})))
    thread.start()
    thread.join(0.5)
    assert thread.is_alive()  # "stored" may be answered only once the put it matches is durable
    slow_fsync.gate.set()
    thread.join(30)
    writer.join(30)
    assert retry == ["t"]
    queue.close()


def test_close_syncs_what_callers_wait_for(qdir: Path, slow_fsync: SlowFsync) -> None:
    queue = Queue(qdir, compact_bytes=None)
    slow_fsync.gate.clear()
    slow_fsync.entered.clear()
    writer_result: list[Any] = []
    writer = threading.Thread(target=lambda: writer_result.append(queue.put("t", {})))
    writer.start()
    assert slow_fsync.entered.wait(10)
    closer = threading.Thread(target=queue.close)
    closer.start()
    slow_fsync.gate.set()
    closer.join(30)
    writer.join(30)
    assert writer_result == ["t"]
    with Queue(qdir) as reopened:
        assert reopened.get("t") is not None


def test_many_threads_mixing_every_call_leave_a_state_that_replays(qdir: Path) -> None:
    queue = Queue(qdir, compact_bytes=4096)
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            for i in range(40):
                queue.put(f"w{n}-{i}", {"i": i})
                for lease in queue.reserve(f"w{n}", now=i, lease_seconds=100, limit=2):
                    if i % 3:
                        queue.ack(lease, now=i)
                    else:
                        queue.release(lease, now=i, delay=1)
                queue.stats()
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    before = {task.task_id: task for task in queue.tasks()}
    last_seq = queue.last_seq
    queue.close()
    with Queue(qdir, sync=False) as reopened:
        assert reopened.last_seq == last_seq
        assert {task.task_id: task for task in reopened.tasks()} == before
