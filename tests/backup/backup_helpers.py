"""What the backup tests share: a store that fails on demand, a settable clock, a restore's tasks."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any, BinaryIO

from walqueue import Queue
from walqueue.backup.restore import execute, make_plan
from walqueue.backup.stores import FileStore, ObjectStore, StoreUnavailable


class Clock:
    """Simulated seconds: tests move it; the replicator reads it."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class FaultyStore:
    """Sits between the replicator and a real store: fails the next calls as told.

    `down`: every call raises StoreUnavailable (a 500, a timeout, a reset).
    `partial_next`: the next put writes half the object under its key, then fails.
    `fail_puts`: the next N puts fail before writing.
    `lose_answer_next`: the next log object is written, then its answer is lost (a timeout after success).
    `stall`: while the event is set, log objects' puts wait (a slow upload that succeeds in the end).
    """

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.url = inner.url
        self.down = False
        self.partial_next = False
        self.fail_puts = 0
        self.lose_answer_next = False
        self.puts = 0
        self.attempts = 0
        #: While set, every log object's put waits until it is cleared (a slow upload, which then succeeds).
        self.stall: threading.Event | None = None
        #: Called after each deletion (a test's way to let something happen in the middle of a pass).
        self.on_delete: Callable[[str], None] | None = None

    def _check(self, what: str) -> None:
        if self.down:
            raise StoreUnavailable(f"{what}: 503 Service Unavailable (injected)")

    def put(self, key: str, data: bytes, *, if_none_match: bool = False, if_match: str | None = None) -> str:
        self.attempts += 1
        self._check("put")
        if self.fail_puts:
            self.fail_puts -= 1
            raise StoreUnavailable("put: connection reset by peer (injected)")
        if self.partial_next and key.endswith(".wal"):
            self.partial_next = False
            self.inner.put(key, data[: len(data) // 2])
            raise StoreUnavailable("put: timed out mid-upload (injected)")
        if self.stall is not None and key.endswith(".wal"):
            while self.stall.is_set():
                time.sleep(0.01)
        self.puts += 1
        etag = self.inner.put(key, data, if_none_match=if_none_match, if_match=if_match)
        if self.lose_answer_next and key.endswith(".wal"):
            self.lose_answer_next = False
            raise StoreUnavailable("put: read timeout (injected, after the store had the object)")
        return etag

    def put_file(self, key: str, source: BinaryIO, size: int, *, if_none_match: bool = False) -> str:
        self.attempts += 1
        self._check("put")
        if self.fail_puts:
            self.fail_puts -= 1
            raise StoreUnavailable("put: connection reset by peer (injected)")
        self.puts += 1
        return self.inner.put_file(key, source, size, if_none_match=if_none_match)

    def read_into(self, key: str, sink: Callable[[bytes], object]) -> bool:
        self._check("get")
        return self.inner.read_into(key, sink)

    def get(self, key: str) -> tuple[bytes, str] | None:
        self._check("get")
        return self.inner.get(key)

    def list(self, prefix: str) -> list[str]:
        self._check("list")
        return self.inner.list(prefix)

    def delete(self, key: str) -> None:
        self._check("delete")
        self.inner.delete(key)
        if self.on_delete is not None:
            self.on_delete(key)


def put_tasks(queue: Queue, first: int, count: int) -> None:
    """Tasks ``t<first>`` ... one durable put each."""
    for number in range(first, first + count):
        queue.put(f"t{number}", {"n": number})


def replicate_once(store: ObjectStore, path: Any, first: int, count: int, **options: Any) -> dict[str, Any]:
    """One life of a writer and its replicator: open `path`, put `count` tasks, one tick, stop.

    What it leaves: whether the tick shipped everything, the replicator's status, the queue's tasks.
    """
    from walqueue.backup import Replicator

    with Queue(path) as queue:
        replicator = Replicator(queue, store, **options)
        put_tasks(queue, first, count)
        shipped = replicator.tick()
        status, tasks = replicator.status(), snapshot_of(queue)
        replicator.stop()
    return {"shipped": shipped, "status": status, "tasks": tasks}


def snapshot_of(queue: Queue) -> dict[str, Any]:
    """Every task of a queue, comparable across stores."""
    return {task.task_id: (task.status, task.payload, task.attempts) for task in queue.tasks()}


def restore_to(store: ObjectStore, target: str, **target_options: Any) -> dict[str, Any]:
    """Restore the replica into `target` and return its tasks and last sequence."""
    plan = make_plan(store, **target_options)
    execute(store, plan, target)
    with Queue(target, create=False) as queue:
        return {"last_seq": queue.last_seq, "tasks": snapshot_of(queue)}


def file_store(tmp_path: Any, name: str = "replica") -> FileStore:
    return FileStore(os.path.join(str(tmp_path), name))
