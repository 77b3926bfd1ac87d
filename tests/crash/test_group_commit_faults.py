"""A failed fsync under group commit, injected through the OS-fault harness of tools/torture/.

`torture.faults.FaultInjector` (the wrapper of the os-faults and background
campaigns) holds the first fsync of a leader while eight more threads write
their frames and queue up behind it, then fails it with EIO: every one of
the nine callers must get that error, the queue must be poisoned, and
reopening must keep everything acknowledged before the failure.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from pathlib import Path

import pytest
from torture.faults import FaultInjector, injected

from model import Model, view, wal_bodies
from walqueue import Queue, QueueClosed

WAITERS = 8


@pytest.mark.timeout(120)
def test_a_failed_fsync_reaches_every_waiting_thread(tmp_path: Path) -> None:
    directory = tmp_path / "q"
    queue = Queue(directory, compact_bytes=None)  # sync=True, no hook: group commit
    model = Model()
    for n in range(5):  # acknowledged before the failure: must survive it
        assert queue.put(f"durable{n}", {"n": n}) == f"durable{n}"
        model.put(f"durable{n}", {"n": n})

    injector = FaultInjector()
    hold = threading.Event()
    held = threading.Event()

    def before(index: int, name: str) -> None:
        if name in ("fsync", "fdatasync") and injector.fail_at is None:
            injector.fail_at = index  # the first fsync of the group: the leader's
            held.set()

    outcomes: dict[str, BaseException | str] = {}

    def put(task_id: str) -> None:
        try:
            outcomes[task_id] = queue.put(task_id, {"who": task_id})
        except BaseException as exc:  # noqa: BLE001 - judged below
            outcomes[task_id] = exc

    with injected(injector):
        injector.arm(None, errno.EIO, threads="all", before=before, hold=hold)
        leader = threading.Thread(target=put, args=("leader",))
        leader.start()
        assert held.wait(30), "the leader never reached its fsync"
        waiters = [threading.Thread(target=put, args=(f"w{n}",)) for n in range(WAITERS)]
        for thread in waiters:
            thread.start()
        # Every waiter writes its frame (under the lock) while the leader's fsync is held.
        limit = time.monotonic() + 30
        while injector.calls.count("write") < WAITERS + 1 and time.monotonic() < limit:
            time.sleep(0.01)
        assert injector.calls.count("write") == WAITERS + 1, injector.calls
        syncs = injector.calls.count("fsync") + injector.calls.count("fdatasync")
        assert syncs == 1, "a waiter started an fsync of its own while one was held"
        hold.set()
        for thread in [leader, *waiters]:
            thread.join(60)
            assert not thread.is_alive(), "a caller hung after the failed fsync"
        injector.disarm()
        raised = injector.raised

    assert raised is not None
    assert outcomes["leader"] is raised  # the leader's own error, unwrapped
    for n in range(WAITERS):
        result = outcomes[f"w{n}"]
        assert isinstance(result, OSError), f"waiter {n} got {result!r}"
        assert result.errno == errno.EIO
    for probe in (lambda: queue.put("after", {}), lambda: queue.tasks(), lambda: queue.last_seq):
        with pytest.raises(QueueClosed):
            probe()
    queue.close()
    queue.close()  # silent, also twice

    # Nothing acknowledged before the failure is lost; the rest is the log's order of
    # the failed callers' frames (written, only their fsync failed; no power was lost).
    bodies = wal_bodies(directory)
    assert [body["seq"] for body in bodies] == list(range(1, len(bodies) + 1))
    for body in bodies[5:]:
        (op,) = body["ops"]
        model.put(op["task"], {"who": op["task"]})
    with Queue(directory, compact_bytes=None) as reopened:
        assert view(reopened) == view(model)
        for n in range(5):
            assert reopened.get(f"durable{n}") is not None


@pytest.mark.timeout(120)
def test_a_leader_whose_queue_is_poisoned_during_its_fsync_gets_queue_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "q"
    queue = Queue(directory, compact_bytes=None)
    queue.put("durable", {})
    real_fsync = os.fsync
    gate, entered = threading.Event(), threading.Event()

    def held_fsync(fd: int) -> None:
        entered.set()
        assert gate.wait(30)
        real_fsync(fd)

    outcome: list[BaseException | str] = []

    def leader() -> None:
        try:
            outcome.append(queue.put("leader", {}))
        except BaseException as exc:  # noqa: BLE001 - judged below
            outcome.append(exc)

    monkeypatch.setattr(os, "fsync", held_fsync)
    monkeypatch.setattr(os, "fdatasync", held_fsync)  # the WAL syncs its data with fdatasync
    thread = threading.Thread(target=leader)
    thread.start()
    assert entered.wait(30), "the leader never reached its fsync"
    injector = FaultInjector()
    with injected(injector):  # this thread's next write fails: it poisons the queue
        injector.arm(0, errno.ENOSPC)
        with pytest.raises(OSError) as caught:
            queue.put("poisoner", {})
        assert caught.value is injector.raised
    gate.set()
    thread.join(60)
    assert not thread.is_alive()
    monkeypatch.undo()
    with Queue(directory, compact_bytes=None) as reopened:
        assert reopened.get("durable") is not None
    assert isinstance(outcome[0], QueueClosed), repr(outcome[0])
