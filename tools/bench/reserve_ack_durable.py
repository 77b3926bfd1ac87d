"""reserve_ack_durable (alias b): durable reserve+ack cycles on a filled queue; the disk alone beside them."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .figures import backends_block, figure, information, per_op, speed_ratio
from .harness import DURABLE_BACKENDS, Context, fill, open_backend, warm_cycles
from .timing import cycle_chunk, interleave

#: Sizes at each scale (with the run's `reps` unless set here): `ctx.scale` during the run.
SCALES: dict[str, dict[str, int]] = {
    "tiny": {"fill": 50, "chunk": 2},
    "default": {"fill": 2000, "chunk": 6},
    "big": {"fill": 100_000, "chunk": 20},
}


#: The reserve_ack_durable members that store nothing: what the disk alone charges for a cycle's two
#: commits, by the way each one is made durable (see `_SyncProbe`).
SYNC_PROBES = ("sync_append_fsync", "sync_append_fdatasync", "sync_inplace_fdatasync")
_fdatasync: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)


class _SyncProbe:
    """A member that stores nothing: each "cycle" writes and syncs one small record twice.

    `sync_append_fsync` appends and fsyncs, as every append-only log does (the
    floor and WALQueue: each frame grows the file, so each sync also commits
    the file's new size). `sync_append_fdatasync` does the same with
    fdatasync, which on Linux still commits the new size. `sync_inplace_fdatasync`
    overwrites a region written and synced beforehand, then fdatasyncs: what
    SQLite's WAL does once the file has reached its working size (it restarts
    at the top after each checkpoint). Timed in the same rotation as the
    backends, these tell how much of reserve_ack_durable the disk decides before any engine
    runs.
    """

    RECORD = b"x" * 128  # about one reserve_ack_durable frame: a lease frame is 170 bytes, an ack frame 100
    REGION = 1 << 20  # overwritten in place, wrapping around

    def __init__(self, path: Path, mode: str) -> None:
        self._in_place = mode == "sync_inplace_fdatasync"
        flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (0 if self._in_place else os.O_APPEND)
        self._fd = os.open(path, flags, 0o644)
        self._sync = os.fsync if mode == "sync_append_fsync" else _fdatasync
        self._offset = 0
        if self._in_place:
            os.write(self._fd, bytes(self.REGION))
            os.fsync(self._fd)

    def commit(self) -> None:
        if self._in_place:
            os.pwrite(self._fd, self.RECORD, self._offset)
            self._offset = (self._offset + len(self.RECORD)) % self.REGION
        else:
            os.write(self._fd, self.RECORD)
        self._sync(self._fd)

    def reserve(self, worker: str, *, now: int, lease_seconds: int, limit: int = 1) -> list[None]:
        self.commit()
        return [None]

    def ack(self, lease: None, *, now: int) -> None:
        self.commit()

    def close(self) -> None:
        os.close(self._fd)


def _wal_size(backend: Any) -> int:
    """The size of SQLite's WAL file (0 if there is none)."""
    try:
        return os.path.getsize(backend.path + "-wal")
    except FileNotFoundError:
        return 0


def run(ctx: Context) -> dict[str, Any]:
    s = ctx.scale
    k = s["chunk"]
    opened = {name: open_backend(name, ctx.dir(f"b-{name}"), durable=True) for name in DURABLE_BACKENDS}
    probe_dir = ctx.dir("b-sync")
    opened.update({name: _SyncProbe(probe_dir / name, name) for name in SYNC_PROBES})
    try:
        for backend in opened.values():
            if not isinstance(backend, _SyncProbe):
                fill(backend, "b", s["fill"])
            warm_cycles(backend)
        ctx.log(f"reserve_ack_durable: filled {s['fill']} tasks")
        wal_before = _wal_size(opened["sqlite"])
        times = interleave({name: cycle_chunk(b, k) for name, b in opened.items()}, s["reps"])
        wal_after = _wal_size(opened["sqlite"])
    finally:
        for backend in opened.values():
            backend.close()
    per = per_op(times, k, "wall")
    commits = 2 * k * s["reps"]
    return {
        "title": "durable reserve+ack cycles on a filled queue",
        "clock": "wall",
        "params": {
            "cycles_per_chunk": k,
            "reps": s["reps"],
            "filled_tasks": s["fill"],
            "sync_*": "no engine: two writes of 128 bytes and two syncs per cycle",
            "fdatasync_call": _fdatasync.__name__,  # os.fsync where the platform has no fdatasync
            "sqlite_wal_growth_per_commit": round((wal_after - wal_before) / commits, 1),
        },
        "backends": backends_block(times, k, "wall", "s/cycle"),
        "ratios": {
            "walqueue_vs_sqlite": figure(speed_ratio(per, "walqueue", "sqlite"), "x", target=(">=", 1.2)),
            "walqueue_vs_floor": figure(speed_ratio(per, "walqueue", "floor"), "x", note="information"),
            "walqueue_vs_prealloc": figure(speed_ratio(per, "walqueue", "prealloc"), "x", note="information"),
            "floor_vs_sqlite": information(
                speed_ratio(per, "floor", "sqlite"),
                "x",
                "the floor's two appends and fsyncs per cycle against SQLite's;"
                " below 1.0x no WAL queue could reach the target on this disk",
            ),
            "inplace_vs_append_sync": information(
                speed_ratio(per, "sync_inplace_fdatasync", "sync_append_fsync"),
                "x",
                "how much faster the disk makes a commit overwritten in place and fdatasynced"
                " (SQLite's WAL at its working size) than one appended and fsynced (an append-only log)",
            ),
            "append_fdatasync_vs_fsync": information(
                speed_ratio(per, "sync_append_fdatasync", "sync_append_fsync"),
                "x",
                "what fdatasync instead of fsync would give an append-only log",
            ),
        },
    }
