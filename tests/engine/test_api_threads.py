"""CONTRACT §2: calls on one `Queue` are serialized; sharing it between threads is safe.

Several threads reserve, ack and release on one queue: no lease is lost or
handed out twice, every transaction is counted once, and readers running at
the same time never see a broken state.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from model import view
from walqueue import Lease, Queue, StaleLease

THREADS = 8


def run_threads(target: Callable[[int], None], count: int = THREADS) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(count)

    def wrapped(index: int) -> None:
        try:
            barrier.wait()
            target(index)
        except BaseException as exc:  # noqa: BLE001 - reported to the main thread
            errors.append(exc)

    threads = [threading.Thread(target=wrapped, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    assert not errors, errors


def test_threads_reserving_and_acking_never_share_or_lose_a_lease(tmp_path: Path) -> None:
    tasks = [f"t{i:03d}" for i in range(200)]
    with Queue(tmp_path / "q", sync=False, compact_bytes=4096) as q:
        q.put_many([{"task_id": t, "payload": {"t": t}} for t in tasks])
        leases: list[Lease] = []
        lock = threading.Lock()
        transactions = Counter[str]()

        def worker(index: int) -> None:
            name = f"w{index}"
            while True:
                got = q.reserve(name, now=0, lease_seconds=10**6, limit=1 + index % 3)
                if not got:
                    return
                with lock:
                    leases.extend(got)
                    transactions["reserve"] += 1
                for lease in got:
                    assert lease.worker == name and lease.generation == 1 and lease.payload == {"t": lease.task_id}
                    q.ack(lease, now=1)

        run_threads(worker)
        assert sorted(lease.task_id for lease in leases) == tasks  # each leased exactly once
        assert q.stats()["counts"] == {"ready": 0, "leased": 0, "completed": 200, "dead": 0}
        assert q.last_seq == 1 + transactions["reserve"] + 200
        before = view(q)
    with Queue(tmp_path / "q", sync=False) as q:
        assert view(q) == before


def test_threads_releasing_and_retrying_keep_exact_counters(tmp_path: Path) -> None:
    tasks = [f"t{i:02d}" for i in range(40)]
    with Queue(tmp_path / "q", sync=False, compact_bytes=2048) as q:
        q.put_many([{"task_id": t, "payload": {}, "max_attempts": 3} for t in tasks])
        per_task = Counter[str]()
        lock = threading.Lock()

        def worker(index: int) -> None:
            while True:
                got = q.reserve(f"w{index}", now=0, lease_seconds=100)
                if not got:
                    return
                [lease] = got
                with lock:
                    per_task[lease.task_id] += 1
                    assert per_task[lease.task_id] == lease.attempts == lease.generation
                q.release(lease, now=0)  # third release makes it dead

        run_threads(worker)
        assert per_task == Counter({t: 3 for t in tasks})
        assert q.stats()["counts"]["dead"] == 40
        assert q.last_seq == 1 + 40 * 3 * 2


def test_a_stale_token_is_refused_even_under_contention(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as q:
        q.put("t", {})
        [lease] = q.reserve("w", now=0, lease_seconds=100)
        outcomes = Counter[str]()
        lock = threading.Lock()

        def acker(index: int) -> None:
            try:
                q.ack(lease, now=1)
                result = "ok"
            except StaleLease:
                result = "stale"
            with lock:
                outcomes[result] += 1

        run_threads(acker)
        assert outcomes == Counter({"ok": 1, "stale": THREADS - 1})
        assert q.last_seq == 3


def test_threads_putting_distinct_and_identical_tasks(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False, compact_bytes=4096) as q:

        def putter(index: int) -> None:
            for i in range(50):
                assert q.put(f"w{index}-{i:02d}", {"i": i}) == f"w{index}-{i:02d}"
                assert q.put("shared", {"same": True}) == "shared"  # identical retries race

        run_threads(putter)
        assert q.last_seq == THREADS * 50 + 1
        assert len(q.tasks()) == THREADS * 50 + 1


def test_readers_see_consistent_states_while_writers_run(tmp_path: Path) -> None:
    writers = 4
    with Queue(tmp_path / "q", sync=False, compact_bytes=2048) as q:
        q.put_many([{"task_id": f"t{i:03d}", "payload": {"i": i}} for i in range(100)])
        writers_left = [writers]
        lock = threading.Lock()

        def thread(index: int) -> None:
            if index < writers:
                try:
                    while got := q.reserve(f"w{index}", now=0, lease_seconds=10, limit=2):
                        for lease in got:
                            q.ack(lease, now=1)
                finally:
                    with lock:
                        writers_left[0] -= 1
                return
            while True:
                with lock:
                    finished = writers_left[0] == 0
                counts = q.stats()["counts"]
                assert sum(counts.values()) == 100
                tasks = q.tasks()
                assert len(tasks) == 100
                assert [t.task_id for t in tasks] == sorted(t.task_id for t in tasks)
                if finished:
                    return

        run_threads(thread)
        assert q.stats()["counts"]["completed"] == 100
