"""reopen (alias e): opening after N transactions (replay) and after a snapshot of N tasks (load)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from walqueue import Queue

from .backends import SqliteQueue, floor_read
from .figures import backends_block, figure, per_op, time_ratio
from .harness import Context, fill
from .inputs import LEASE_SECONDS, NOW, WORKER, puts, task_id
from .timing import Chunk, Clock, clock, interleave, since

#: Sizes at each scale (with the run's `reps` unless set here): `ctx.scale` during the run.
SCALES: dict[str, dict[str, int]] = {
    "tiny": {"reps": 3, "replay_tx": 300, "snapshot_tasks": 500},
    "default": {"reps": 5, "replay_tx": 5000, "snapshot_tasks": 10_000},
    "big": {"reps": 5, "replay_tx": 100_000, "snapshot_tasks": 200_000},
}


def _history(backend: Any, n_tx: int) -> str:
    """Commit exactly `n_tx` transactions (half single puts, then reserve+ack cycles); return a task id."""
    n_cycles = n_tx // 4
    n_puts = n_tx - 2 * n_cycles
    for tid, body in puts("e", 0, n_puts):
        backend.put(tid, body)
    for _ in range(n_cycles):
        backend.ack(backend.reserve(WORKER, now=NOW, lease_seconds=LEASE_SECONDS)[0], now=NOW)
    return task_id("e", n_puts - 1)


def _timed_reopen(open_queue: Callable[[], Any], probe: str) -> Clock:
    """Open a queue, read one task (so the open is complete), close it: the time of open and read."""
    start = clock()
    queue = open_queue()
    found = queue.get(probe)
    elapsed = since(start)
    queue.close()
    assert found is not None
    return elapsed


def _reopen_chunks(wq_dir: Path, sq_dir: Path, floor_files: list[str], probe: str) -> dict[str, Chunk]:
    def walqueue(rep: int) -> Clock:
        return _timed_reopen(lambda: Queue(wq_dir), probe)

    def sqlite(rep: int) -> Clock:
        return _timed_reopen(lambda: SqliteQueue(sq_dir / "queue.sqlite", durable=True), probe)

    def floor(rep: int) -> Clock:
        start = clock()
        floor_read(floor_files)
        return since(start)

    return {"walqueue": walqueue, "floor": floor, "sqlite": sqlite}


def files(directory: Path, pattern: str) -> list[str]:
    return sorted(str(path) for path in directory.glob(pattern))


def run(ctx: Context) -> dict[str, Any]:
    s = ctx.scale
    reps = s["reps"]
    n_tx, n_tasks = s["replay_tx"], s["snapshot_tasks"]

    # Replay: N transactions, never compacted.
    wq_dir, sq_dir = ctx.dir("e-replay-walqueue"), ctx.dir("e-replay-sqlite")
    queue = Queue(wq_dir, sync=False, compact_bytes=None)
    probe = _history(queue, n_tx)
    assert queue.last_seq == n_tx
    queue.close()
    sq = SqliteQueue(sq_dir / "queue.sqlite", durable=False)
    _history(sq, n_tx)
    sq.close()
    # Nothing of the build may stay alive: a big live heap makes every GC pass of the timed opens slower.
    del queue, sq
    segments = files(wq_dir, "wal-*.log")
    wal_bytes = sum(os.path.getsize(path) for path in segments)
    ctx.log(f"reopen: history of {n_tx} transactions, {wal_bytes:,} WAL bytes")
    replay_times = interleave(_reopen_chunks(wq_dir, sq_dir, segments, probe), reps)
    replay = per_op(replay_times, 1, "cpu")

    # Snapshot: a state of N ready tasks, compacted (the WAL after it is empty).
    wq_dir, sq_dir = ctx.dir("e-snapshot-walqueue"), ctx.dir("e-snapshot-sqlite")
    queue = Queue(wq_dir, sync=False, compact_bytes=None)
    fill(queue, "s", n_tasks)
    queue.compact()
    queue.close()
    sq = SqliteQueue(sq_dir / "queue.sqlite", durable=False)
    fill(sq, "s", n_tasks)
    sq.close()
    del queue, sq
    snapshots = files(wq_dir, "snapshot-*.snap")
    assert len(snapshots) == 1
    snap_bytes = os.path.getsize(snapshots[0])
    ctx.log(f"reopen: snapshot of {n_tasks} tasks, {snap_bytes:,} bytes")
    snap_times = interleave(_reopen_chunks(wq_dir, sq_dir, snapshots, task_id("s", n_tasks - 1)), reps)
    snap = per_op(snap_times, 1, "cpu")

    return {
        "title": "replay of N transactions; load of a snapshot of N tasks",
        "clock": "cpu",
        "params": {
            "reps": reps,
            "replay_transactions": n_tx,
            "replay_wal_bytes": wal_bytes,
            "snapshot_tasks": n_tasks,
            "snapshot_bytes": snap_bytes,
        },
        "backends": {
            "replay": backends_block(replay_times, 1, "cpu", "s/open"),
            "snapshot": backends_block(snap_times, 1, "cpu", "s/open"),
        },
        "ratios": {
            "replay_walqueue_over_floor": figure(
                time_ratio(replay, "walqueue", "floor"),
                "x time",
                target=("<=", 2.0),
                better="lower",
                note="walqueue open + first read / floor read+verify+parse of the same segments",
            ),
            "replay_walqueue_tx_per_s": figure([n_tx / t for t in replay["walqueue"]], "tx/s", note="information"),
            "snapshot_walqueue_tasks_per_s": figure(
                [n_tasks / t for t in snap["walqueue"]], "tasks/s", target=(">=", 300_000)
            ),
            "snapshot_floor_tasks_per_s": figure(
                [n_tasks / t for t in snap["floor"]],
                "tasks/s",
                note="information: what read+verify+parse alone allows on this machine",
            ),
            "snapshot_walqueue_over_floor": figure(
                time_ratio(snap, "walqueue", "floor"),
                "x time",
                better="lower",
                note="information: walqueue open + first read / floor read+verify+parse of the snapshot",
            ),
        },
    }
