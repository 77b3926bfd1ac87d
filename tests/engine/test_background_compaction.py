"""Automatic compaction off the hot path: the snapshot of sequence S is written by a thread while calls go on.

The rules (docs/DECISIONS.md, "Compaction in the background"): the order
rotate -> snapshot -> CURRENT -> delete holds; the snapshot holds exactly the
state at S however the live state changes meanwhile; a failure while writing
it loses nothing and poisons nothing (the WAL keeps everything, the next
trigger tries again); a failure while publishing poisons the queue; close()
cancels it and leaves no orphan. A hook makes compaction synchronous (its
phases come in order in the caller's thread).
"""

from __future__ import annotations

import errno
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from model import Model, view
from walqueue import Queue, QueueClosed
from walqueue.engine import background, compaction
from walqueue.format.fsck import EXIT_HEALTHY, check
from walqueue.format.names import wal_name

pytestmark = pytest.mark.timeout(120)


class Gate:
    """Holds the background snapshot thread before it reads a record, until opened."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.opened = threading.Event()


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gate]:
    held = Gate()
    original = background.BackgroundSnapshot._run

    def run(self: background.BackgroundSnapshot) -> None:
        held.reached.set()
        held.opened.wait(30)
        original(self)

    monkeypatch.setattr(background.BackgroundSnapshot, "_run", run)
    yield held
    held.opened.set()


def _wait_for(condition: object, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.005)
    assert condition(), "timed out"  # type: ignore[operator]


def _fill(queue: Queue, model: Model, prefix: str, count: int) -> None:
    for n in range(count):
        for target in (queue, model):
            target.put(f"{prefix}{n:04d}", {"n": n, "pad": "x" * 40})


def test_calls_go_on_while_the_snapshot_is_written_and_it_holds_the_state_at_its_sequence(
    qdir: Path, gate: Gate
) -> None:
    queue = Queue(qdir, sync=False, compact_bytes=20_000)
    model = Model()
    _fill(queue, model, "a", 300)
    assert gate.reached.wait(30)
    frozen_at = queue.stats()["last_seq"]
    # The thread is held inside the snapshot: every call goes on, changing tasks it has yet to write.
    for lease in queue.reserve("w", now=1, lease_seconds=10, limit=50):
        queue.ack(lease, now=2)
    model_leases = model.reserve("w", now=1, lease_seconds=10, limit=50)
    for lease in model_leases:
        model.ack(lease, now=2)
    _fill(queue, model, "b", 20)
    assert queue.stats()["snapshot_seq"] == 0
    gate.opened.set()
    _wait_for(lambda: queue.stats()["snapshot_seq"] > 0)
    snapshot_seq = queue.stats()["snapshot_seq"]
    assert snapshot_seq <= frozen_at + 1
    assert view(queue) == view(model)
    queue.close()
    assert check(qdir, replay=True).exit_code == EXIT_HEALTHY
    with Queue(qdir, sync=False) as reopened:
        assert view(reopened) == view(model)


def test_a_failure_while_writing_the_snapshot_loses_nothing_and_poisons_nothing(
    qdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = os.write
    failing = {"on": True}

    def write(fd: int, data: bytes) -> int:
        if failing["on"] and threading.current_thread().name.startswith("walqueue-snapshot"):
            raise OSError(errno.ENOSPC, "injected ENOSPC in the background snapshot")
        return original(fd, data)

    monkeypatch.setattr(os, "write", write)
    queue = Queue(qdir, sync=False, compact_bytes=4_000)
    model = Model()
    _fill(queue, model, "a", 100)
    time.sleep(0.2)
    assert queue.stats()["snapshot_seq"] == 0
    assert not list(qdir.glob("snapshot-*"))  # the partial file was removed
    failing["on"] = False
    _fill(queue, model, "b", 200)  # later triggers try again, and succeed
    _wait_for(lambda: queue.stats()["snapshot_seq"] > 0)
    assert view(queue) == view(model)
    queue.close()
    with Queue(qdir, sync=False) as reopened:
        assert view(reopened) == view(model)


def test_a_failure_while_publishing_poisons_the_queue_and_loses_nothing_acknowledged(
    qdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = os.replace

    def replace(*args: object, **kwargs: object) -> None:
        if threading.current_thread().name.startswith("walqueue-snapshot"):
            raise OSError(errno.EIO, "injected EIO publishing CURRENT")
        original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "replace", replace)
    queue = Queue(qdir, sync=False, compact_bytes=4_000)
    model = Model()
    acknowledged = 0
    try:
        for n in range(400):
            queue.put(f"t{n:04d}", {"n": n, "pad": "x" * 40})
            model.put(f"t{n:04d}", {"n": n, "pad": "x" * 40})
            acknowledged += 1
            time.sleep(0.001)
    except QueueClosed:
        pass
    _wait_for(lambda: queue._guard.closed)  # noqa: SLF001 - the publication failed: poisoned
    with pytest.raises(QueueClosed):
        queue.put("after", {})
    queue.close()
    monkeypatch.setattr(os, "replace", original)
    with Queue(qdir, sync=False) as reopened:
        stored = {task.task_id for task in reopened.tasks()}
        assert {f"t{n:04d}" for n in range(acknowledged)} <= stored


def test_close_cancels_the_background_snapshot_and_leaves_no_orphan(qdir: Path, gate: Gate) -> None:
    queue = Queue(qdir, sync=False, compact_bytes=20_000)
    model = Model()
    _fill(queue, model, "a", 300)
    assert gate.reached.wait(30)
    closer = threading.Thread(target=queue.close)
    closer.start()
    gate.opened.set()
    closer.join(30)
    assert not closer.is_alive()
    assert not list(qdir.glob("snapshot-*"))
    with Queue(qdir, sync=False) as reopened:
        assert view(reopened) == view(model)


def test_explicit_compact_waits_for_a_background_snapshot(qdir: Path, gate: Gate) -> None:
    queue = Queue(qdir, sync=False, compact_bytes=20_000)
    model = Model()
    _fill(queue, model, "a", 300)
    assert gate.reached.wait(30)
    compacted = threading.Thread(target=queue.compact)
    compacted.start()
    compacted.join(0.3)
    assert compacted.is_alive()
    gate.opened.set()
    compacted.join(30)
    stats = queue.stats()
    assert stats["snapshot_seq"] == stats["last_seq"] and stats["wal_bytes"] == 0
    queue.close()
    with Queue(qdir, sync=False) as reopened:
        assert view(reopened) == view(model)


def test_with_a_hook_automatic_compaction_runs_in_the_call_with_every_phase(qdir: Path) -> None:
    phases: list[str] = []
    queue = Queue(qdir, sync=False, compact_bytes=2_000, hook=phases.append)
    for n in range(60):
        queue.put(f"t{n}", {"pad": "x" * 40})
    assert "compact.done" in phases and "snapshot.synced" in phases
    assert [p for p in phases if threading.current_thread().name] == phases
    assert queue.stats()["snapshot_seq"] > 0
    queue.close()


def test_the_covered_files_are_deleted_after_the_lock_is_released(qdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    queue = Queue(qdir, sync=False, compact_bytes=20_000)
    held: list[bool] = []
    original = background.delete_files

    def delete_files(directory: object, names: list[str], *, sync: bool) -> None:
        held.append(queue._guard.mutex._is_owned())  # type: ignore[attr-defined]  # noqa: SLF001
        original(directory, names, sync=sync)  # type: ignore[arg-type]

    monkeypatch.setattr(background, "delete_files", delete_files)
    model = Model()
    _fill(queue, model, "a", 300)
    _wait_for(lambda: queue.stats()["snapshot_seq"] > 0 and not queue._compactor.running())  # noqa: SLF001
    assert held and not any(held)
    live = queue.stats()
    queue.close()
    segments = sorted(qdir.glob("wal-*.log"))
    assert len(segments) == 1  # the sealed segment went, after the publication
    assert check(qdir, replay=True).exit_code == EXIT_HEALTHY
    with Queue(qdir, sync=False) as reopened:
        assert view(reopened) == view(model)
        assert reopened.stats()["last_seq"] == live["last_seq"]


def test_a_signal_handler_closing_the_queue_while_compact_joins_the_snapshot_thread(qdir: Path, gate: Gate) -> None:
    queue = Queue(qdir, sync=False, compact_bytes=20_000)
    model = Model()
    _fill(queue, model, "a", 300)
    assert gate.reached.wait(30)
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: queue.close())
    opener = threading.Timer(0.3, gate.opened.set)
    opener.start()
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        try:
            queue.compact()  # joins the held thread; the handler's close() comes during the join
        except QueueClosed:
            pass
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        opener.join()
    with pytest.raises(QueueClosed):
        queue.put("after", {})
    with Queue(qdir, sync=False) as reopened:  # the close released the directory
        assert view(reopened) == view(model)


def test_current_tmp_is_written_and_synced_before_the_lock_and_renamed_under_it(
    qdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = Queue(qdir, sync=True, compact_bytes=20_000)
    held: dict[str, list[bool]] = {"written": [], "renamed": []}
    write_current, publish_current = background.write_current, compaction.publish_current

    def written(*args: Any, **kwargs: Any) -> Any:
        held["written"].append(queue._guard.mutex._is_owned())  # type: ignore[attr-defined]  # noqa: SLF001
        return write_current(*args, **kwargs)

    def renamed(*args: Any, **kwargs: Any) -> None:
        held["renamed"].append(queue._guard.mutex._is_owned())  # type: ignore[attr-defined]  # noqa: SLF001
        publish_current(*args, **kwargs)

    monkeypatch.setattr(background, "write_current", written)
    monkeypatch.setattr(compaction, "publish_current", renamed)
    model = Model()
    _fill(queue, model, "a", 300)
    _wait_for(lambda: queue.stats()["snapshot_seq"] > 0 and not queue._compactor.running())  # noqa: SLF001
    assert held["written"] and not any(held["written"])
    assert held["renamed"] and all(held["renamed"])
    queue.close()
    assert not (qdir / "CURRENT.tmp").exists()
    assert check(qdir, replay=True).exit_code == EXIT_HEALTHY
    with Queue(qdir, sync=False) as reopened:
        assert view(reopened) == view(model)


def _snapshot_at_the_gate(qdir: Path, gate: Gate) -> tuple[Queue, Model]:
    """A queue whose background snapshot has started and waits at the gate, and its model."""
    queue, model = Queue(qdir, sync=False, compact_bytes=20_000), Model()
    _fill(queue, model, "a", 300)
    assert gate.reached.wait(30)
    return queue, model


def test_a_publication_postponed_by_an_obstacle_leaves_no_current_tmp(qdir: Path, gate: Gate) -> None:
    queue, model = _snapshot_at_the_gate(qdir, gate)
    obstacle = qdir / wal_name(queue._compactor.wal.newest + 1)  # noqa: SLF001
    obstacle.mkdir()  # in the way of the next rotation: the publication is postponed
    gate.opened.set()
    _wait_for(lambda: not queue._compactor.running())  # noqa: SLF001
    assert queue.stats()["snapshot_seq"] == 0  # postponed, nothing lost
    assert not (qdir / "CURRENT.tmp").exists()  # written before the lock, removed when not published
    _fill(queue, model, "b", 10)
    queue.close()
    obstacle.rmdir()
    with Queue(qdir, sync=False, compact_bytes=None) as reopened:
        assert view(reopened) == view(model)
