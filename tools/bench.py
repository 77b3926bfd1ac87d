#!/usr/bin/env python3
"""WALQueue against SQLite and the fsync floor: one process, interleaved, ratios per repetition.

    python tools/bench.py                      default scale (a minute or two on 2 cores)
    python tools/bench.py --scale big          the big figures (several minutes)
    python tools/bench.py --scale tiny         every workload in seconds (the smoke test)
    python tools/bench.py --json out.json      also write every figure as JSON
    python tools/bench.py --only a,d,g         run some workloads only
    python tools/bench.py --dir /some/disk     where the stores go (default: the system temp dir)

Backends (tools/bench_backends.py has the two baselines):
  walqueue  the real `walqueue.Queue`; sync=True for durable workloads, sync=False for CPU ones.
  sqlite    the standard library's sqlite3 implementing the same semantics (WAL journal,
            synchronous=FULL when durable, OFF otherwise).
  floor     one frame per commit (length, canonical JSON, SHA-256) + os.write (+ os.fsync):
            the least any WAL queue can do. In (h), shared by threads under one lock: one
            writer, one fsync per operation (what a queue without group commit can do).
In (b) only, three more timed members that store nothing, two writes and syncs per cycle:
  sync_append_fsync       append + fsync, as every append-only log (the floor, walqueue)
  sync_append_fdatasync   append + fdatasync
  sync_inplace_fdatasync  overwrite in place + fdatasync, as SQLite's WAL at its working size
In (c) only, two more timed members that store nothing:
  rules_sqlite    the baseline's validation, canonical JSON and identity hash of every item
                  (what SqliteQueue.put_many does before its executemany).
  rules_walqueue  walqueue's own `put_op_from_mapping` of every item (what
                  Queue.put_many does before planning and writing).

Method: every backend is set up and warmed up first; then each repetition runs
one timed chunk per backend, the order rotating (A B C, B C A, C A B, ...), so
that a shared machine's drift hits every backend alike. A ratio is computed
within each repetition, from chunks that ran seconds apart, and the median of
those per-repetition ratios is reported, with their min..max. Absolute times
are machine-specific; ratios are the figures to compare. Nothing here is a
test: targets are printed as met / NOT MET, never asserted.

Workloads: see `WORKLOADS` below and docs/PERFORMANCE.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import math
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent


def _import_walqueue() -> Any:
    """`walqueue.Queue`, from an install if there is one, else from this checkout's three src dirs."""
    try:
        from walqueue import Queue
    except ImportError:
        for name in [name for name in sys.modules if name == "walqueue" or name.startswith("walqueue.")]:
            del sys.modules[name]
        root = _HERE.parent
        for dist in ("walqueue-cli", "walqueue-engine", "walqueue-format"):
            sys.path.insert(0, str(root / "packages" / dist / "src"))
        from walqueue import Queue
    return Queue


Queue = _import_walqueue()
from walqueue.engine.ops import put_op_from_mapping  # noqa: E402  (found by _import_walqueue)

sys.path.insert(0, str(_HERE))
from bench_backends import FloorLog, SqliteQueue, floor_read  # noqa: E402
from bench_backends import _put_row_from_mapping as sqlite_put_row_from_mapping  # noqa: E402

# -- scales ------------------------------------------------------------------------

#: Per scale: repetitions and the size of every chunk and state. The (f) sizes are
#: 1:20 at every scale; the issue's figure (200,000 / 10,000) is the big run's.
SCALES: dict[str, dict[str, int]] = {
    "tiny": {
        "h_ops": 32,
        "h_reps": 1,
        "i_tasks": 2_000,
        "i_rounds": 2,
        "i_min_pairs": 20,
        "j_ops": 48,
        "j_reps": 1,
        "j_rtt_calls": 50,
        "reps": 3,
        "a_chunk": 3,
        "b_fill": 50,
        "b_chunk": 2,
        "c_batch": 100,
        "c_chunk": 1,
        "d_put_chunk": 50,
        "d_cycle_chunk": 30,
        "e_reps": 3,
        "e_replay_tx": 300,
        "e_snapshot_tasks": 500,
        "f_small": 100,
        "f_large": 2_000,
        "f_chunk": 20,
        "g_tasks": 300,
        "k_tail_bytes": 1 << 20,
    },
    "default": {
        "h_ops": 480,
        "h_reps": 5,
        "i_tasks": 100_000,
        "i_rounds": 8,
        "i_min_pairs": 100,
        "j_ops": 480,
        "j_reps": 3,
        "j_rtt_calls": 400,
        "reps": 9,
        "a_chunk": 12,
        "b_fill": 2_000,
        "b_chunk": 6,
        "c_batch": 1_000,
        "c_chunk": 1,
        "d_put_chunk": 300,
        "d_cycle_chunk": 200,
        "e_reps": 5,
        "e_replay_tx": 5_000,
        "e_snapshot_tasks": 10_000,
        "f_small": 1_000,
        "f_large": 20_000,
        "f_chunk": 60,
        "g_tasks": 5_000,
        "k_tail_bytes": 15 << 20,
    },
    "big": {
        "h_ops": 1_920,
        "h_reps": 5,
        "i_tasks": 1_000_000,
        "i_rounds": 4,
        "i_min_pairs": 500,
        "j_ops": 2400,
        "j_reps": 5,
        "j_rtt_calls": 2000,
        "reps": 11,
        "a_chunk": 30,
        "b_fill": 100_000,
        "b_chunk": 20,
        "c_batch": 1_000,
        "c_chunk": 4,
        "d_put_chunk": 3_000,
        "d_cycle_chunk": 2_000,
        "e_reps": 5,
        "e_replay_tx": 100_000,
        "e_snapshot_tasks": 200_000,
        "f_small": 10_000,
        "f_large": 200_000,
        "f_chunk": 500,
        "g_tasks": 100_000,
        "k_tail_bytes": 15 << 20,
    },
}

WORKER = "worker-1"
NOW = 1_000
LEASE_SECONDS = 600
FILL_BATCH = 1_000

# -- inputs --------------------------------------------------------------------------


def payload(i: int) -> dict[str, Any]:
    """A realistic payload of about 110 bytes of canonical JSON."""
    return {
        "body": f"Your order #{i:08d} has shipped.",
        "kind": "email",
        "priority": i % 3,
        "to": f"customer{i:08d}@example.com",
    }


PAYLOAD_BYTES = len(json.dumps(payload(12_345_678), sort_keys=True, separators=(",", ":")).encode())


def task_id(prefix: str, i: int) -> str:
    return f"{prefix}-{i:09d}"


def puts(prefix: str, start: int, count: int) -> list[tuple[str, dict[str, Any]]]:
    return [(task_id(prefix, i), payload(i)) for i in range(start, start + count)]


def put_items(prefix: str, start: int, count: int) -> list[dict[str, Any]]:
    return [{"task_id": task_id(prefix, i), "payload": payload(i)} for i in range(start, start + count)]


# -- backends -------------------------------------------------------------------------


def open_backend(kind: str, directory: Path, *, durable: bool, compact_bytes: Any = "default") -> Any:
    directory.mkdir(parents=True, exist_ok=True)
    if kind == "walqueue":
        if compact_bytes == "default":
            return Queue(directory, sync=durable)
        return Queue(directory, sync=durable, compact_bytes=compact_bytes)
    if kind == "sqlite":
        return SqliteQueue(directory / "queue.sqlite", durable=durable)
    if kind == "floor":
        return FloorLog(directory / "floor.log", durable=durable)
    raise ValueError(kind)


def fill(backend: Any, prefix: str, count: int, start: int = 0) -> None:
    for first in range(start, start + count, FILL_BATCH):
        backend.put_many(put_items(prefix, first, min(FILL_BATCH, start + count - first)))


# -- timing ------------------------------------------------------------------------------

#: A chunk runs repetition `rep` of one backend and returns (wall seconds, CPU seconds).
Chunk = Callable[[int], tuple[float, float]]
Clock = tuple[float, float]


def clock() -> Clock:
    return time.perf_counter(), time.process_time()


def since(start: Clock) -> Clock:
    return time.perf_counter() - start[0], time.process_time() - start[1]


class Times:
    """Seconds per chunk, per backend, on both clocks."""

    def __init__(self, names: list[str]) -> None:
        self.wall: dict[str, list[float]] = {name: [] for name in names}
        self.cpu: dict[str, list[float]] = {name: [] for name in names}

    def on(self, which: str) -> dict[str, list[float]]:
        return self.wall if which == "wall" else self.cpu


def interleave(chunks: dict[str, Chunk], reps: int) -> Times:
    """Run each named chunk once per repetition, rotating the order (A B C, B C A, C A B, ...)."""
    names = list(chunks)
    times = Times(names)
    for rep in range(reps):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            gc.collect()
            wall, cpu = chunks[name](rep)
            times.wall[name].append(wall)
            times.cpu[name].append(cpu)
    return times


def summary(samples: list[float]) -> dict[str, Any]:
    median = statistics.median(samples)
    low, high = min(samples), max(samples)
    return {
        "median": median,
        "min": low,
        "max": high,
        "spread_pct": 100.0 * (high - low) / median if median else 0.0,
        "samples": samples,
    }


def figure(
    samples: list[float],
    unit: str,
    *,
    target: tuple[str, float] | None = None,
    better: str = "higher",
    note: str = "",
) -> dict[str, Any]:
    result = summary(samples)
    result["unit"] = unit
    result["better"] = better
    result["note"] = note
    if target is not None:
        op, bound = target
        value = result["median"]
        result["target"] = f"{op} {_fmt_value(bound, unit)}"
        result["met"] = value >= bound if op == ">=" else value <= bound
    else:
        result["target"] = None
        result["met"] = None
    return result


def per_op(times: Times, ops: int, which: str) -> dict[str, list[float]]:
    """Seconds per operation on clock `which` ("wall" or "cpu")."""
    return {name: [t / ops for t in values] for name, values in times.on(which).items()}


def speed_ratio(per: dict[str, list[float]], mine: str, other: str) -> list[float]:
    """Per repetition: how many times faster `mine` is than `other` (their time / my time)."""
    return [b / a for a, b in zip(per[mine], per[other], strict=True)]


def time_ratio(per: dict[str, list[float]], mine: str, other: str) -> list[float]:
    """Per repetition: my time / their time (lower is better)."""
    return [a / b for a, b in zip(per[mine], per[other], strict=True)]


def backends_block(times: Times, ops: int, primary: str, unit: str = "s/op") -> dict[str, Any]:
    """Per backend: the primary clock's figure, with the other clock's summary under `other_clock`."""
    other = "cpu" if primary == "wall" else "wall"
    main, second = per_op(times, ops, primary), per_op(times, ops, other)
    block = {}
    for name, values in main.items():
        fig = figure(values, unit, better="lower")
        fig["clock"] = primary
        fig["other_clock"] = dict(summary(second[name]), clock=other)
        block[name] = fig
    return block


class Context:
    def __init__(self, root: Path, scale: dict[str, int], verbose: bool) -> None:
        self.root = root
        self.scale = scale
        self.verbose = verbose
        self._n = 0

    def dir(self, label: str) -> Path:
        self._n += 1
        path = self.root / f"{self._n:02d}-{label}"
        path.mkdir(parents=True)
        return path

    def log(self, text: str) -> None:
        if self.verbose:
            print(f"  .. {text}", file=sys.stderr, flush=True)


BACKENDS = ("walqueue", "sqlite", "floor")


def _warm_puts(backend: Any, prefix: str, count: int = 5) -> None:
    for tid, body in puts(prefix, 0, count):
        backend.put(tid, body)


# -- (a) durable single puts --------------------------------------------------------------


def workload_a(ctx: Context) -> dict[str, Any]:
    s = ctx.scale
    k = s["a_chunk"]
    opened = {name: open_backend(name, ctx.dir(f"a-{name}"), durable=True) for name in BACKENDS}
    try:
        for backend in opened.values():
            _warm_puts(backend, "warm")
        inputs = [puts("a", rep * k, k) for rep in range(s["reps"])]

        times = interleave({name: _put_chunk(b, inputs) for name, b in opened.items()}, s["reps"])
    finally:
        for backend in opened.values():
            backend.close()
    per = per_op(times, k, "wall")
    return {
        "title": "(a) durable single puts",
        "clock": "wall",
        "params": {"ops_per_chunk": k, "reps": s["reps"], "payload_bytes": PAYLOAD_BYTES},
        "backends": backends_block(times, k, "wall"),
        "ratios": {
            "walqueue_vs_sqlite": figure(speed_ratio(per, "walqueue", "sqlite"), "x", target=(">=", 1.0)),
            "walqueue_vs_floor": figure(speed_ratio(per, "walqueue", "floor"), "x", target=(">=", 0.9)),
        },
    }


def _put_chunk(backend: Any, inputs: list[list[tuple[str, dict[str, Any]]]]) -> Chunk:
    """A timed chunk of single puts: repetition `rep` puts `inputs[rep]`, one call each."""

    def run(rep: int) -> Clock:
        put = backend.put
        items = inputs[rep]
        start = clock()
        for tid, body in items:
            put(tid, body)
        return since(start)

    return run


# -- (b) durable reserve+ack cycles on a filled queue ---------------------------------------


def _cycle_chunk(backend: Any, k: int) -> Chunk:
    def run(rep: int) -> Clock:
        reserve = backend.reserve
        ack = backend.ack
        start = clock()
        for _ in range(k):
            lease = reserve(WORKER, now=NOW, lease_seconds=LEASE_SECONDS)[0]
            ack(lease, now=NOW)
        return since(start)

    return run


def _warm_cycles(backend: Any, count: int = 5) -> None:
    for _ in range(count):
        backend.ack(backend.reserve(WORKER, now=NOW, lease_seconds=LEASE_SECONDS)[0], now=NOW)


#: The (b) members that store nothing: what the disk alone charges for a cycle's two
#: commits, by the way each one is made durable (see `_SyncProbe`).
SYNC_PROBES = ("sync_append_fsync", "sync_append_fdatasync", "sync_inplace_fdatasync")
_fdatasync: Callable[[int], None] = getattr(os, "fdatasync", os.fsync)


class _SyncProbe:
    """A (b) member that stores nothing: each "cycle" writes and syncs one small record twice.

    `sync_append_fsync` appends and fsyncs, as every append-only log does (the
    floor and WALQueue: each frame grows the file, so each sync also commits
    the file's new size). `sync_append_fdatasync` does the same with
    fdatasync, which on Linux still commits the new size. `sync_inplace_fdatasync`
    overwrites a region written and synced beforehand, then fdatasyncs: what
    SQLite's WAL does once the file has reached its working size (it restarts
    at the top after each checkpoint). Timed in the same rotation as the
    backends, these tell how much of (b) the disk decides before any engine
    runs.
    """

    RECORD = b"x" * 128  # about one (b) frame: a lease frame is 170 bytes, an ack frame 100
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


def workload_b(ctx: Context) -> dict[str, Any]:
    s = ctx.scale
    k = s["b_chunk"]
    opened = {name: open_backend(name, ctx.dir(f"b-{name}"), durable=True) for name in BACKENDS}
    probe_dir = ctx.dir("b-sync")
    opened.update({name: _SyncProbe(probe_dir / name, name) for name in SYNC_PROBES})
    try:
        for backend in opened.values():
            if not isinstance(backend, _SyncProbe):
                fill(backend, "b", s["b_fill"])
            _warm_cycles(backend)
        ctx.log(f"(b) filled {s['b_fill']} tasks")
        wal_before = _wal_size(opened["sqlite"])
        times = interleave({name: _cycle_chunk(b, k) for name, b in opened.items()}, s["reps"])
        wal_after = _wal_size(opened["sqlite"])
    finally:
        for backend in opened.values():
            backend.close()
    per = per_op(times, k, "wall")
    commits = 2 * k * s["reps"]
    return {
        "title": "(b) durable reserve+ack cycles on a filled queue",
        "clock": "wall",
        "params": {
            "cycles_per_chunk": k,
            "reps": s["reps"],
            "filled_tasks": s["b_fill"],
            "sync_*": "no engine: two writes of 128 bytes and two syncs per cycle",
            "fdatasync_call": _fdatasync.__name__,  # os.fsync where the platform has no fdatasync
            "sqlite_wal_growth_per_commit": round((wal_after - wal_before) / commits, 1),
        },
        "backends": backends_block(times, k, "wall", "s/cycle"),
        "ratios": {
            "walqueue_vs_sqlite": figure(speed_ratio(per, "walqueue", "sqlite"), "x", target=(">=", 1.0)),
            "walqueue_vs_floor": figure(speed_ratio(per, "walqueue", "floor"), "x", note="information"),
            "floor_vs_sqlite": figure(
                speed_ratio(per, "floor", "sqlite"),
                "x",
                note="information: the floor's two appends and fsyncs per cycle against SQLite's;"
                " below 1.0x no WAL queue could reach the target on this disk",
            ),
            "inplace_vs_append_sync": figure(
                speed_ratio(per, "sync_inplace_fdatasync", "sync_append_fsync"),
                "x",
                note="information: how much faster the disk makes a commit overwritten in place and"
                " fdatasynced (SQLite's WAL at its working size) than one appended and fsynced (an append-only log)",
            ),
            "append_fdatasync_vs_fsync": figure(
                speed_ratio(per, "sync_append_fdatasync", "sync_append_fsync"),
                "x",
                note="information: what fdatasync instead of fsync would give an append-only log",
            ),
        },
    }


# -- (c) durable put_many of 1,000 tasks ----------------------------------------------------


class _RulesOnly:
    """A (c) member that stores nothing: `put_many` only validates each item with `rule` and drops the result."""

    def __init__(self, rule: Callable[[Any], Any]) -> None:
        self._rule = rule

    def put_many(self, tasks: list[dict[str, Any]]) -> None:
        rule = self._rule
        rows = [rule(item) for item in tasks]  # built and freed as the real put_many does
        del rows

    def close(self) -> None:
        pass


#: The (c) members that only validate: the baseline's rules, walqueue's own.
RULES = {"rules_sqlite": sqlite_put_row_from_mapping, "rules_walqueue": put_op_from_mapping}


def workload_c(ctx: Context) -> dict[str, Any]:
    s = ctx.scale
    batch, calls = s["c_batch"], s["c_chunk"]
    opened = {name: open_backend(name, ctx.dir(f"c-{name}"), durable=True) for name in BACKENDS}
    opened.update({name: _RulesOnly(rule) for name, rule in RULES.items()})
    try:
        for backend in opened.values():
            backend.put_many(put_items("warm", 0, batch))

        def fresh_inputs() -> list[list[list[dict[str, Any]]] | None]:
            """Repetition `rep`'s lists of tasks: each member gets its own identical copy (nothing shared)."""
            return [
                [put_items("c", (rep * calls + call) * batch, batch) for call in range(calls)]
                for rep in range(s["reps"])
            ]

        def chunk_for(backend: Any, inputs: list[list[list[dict[str, Any]]] | None]) -> Chunk:
            def run(rep: int) -> Clock:
                put_many = backend.put_many
                lists = inputs[rep]
                inputs[rep] = None  # consumed once; freed after the timed region
                assert lists is not None
                start = clock()
                for items in lists:
                    put_many(items)
                return since(start)

            return run

        chunks = {name: chunk_for(b, fresh_inputs()) for name, b in opened.items()}
        times = interleave(chunks, s["reps"])
    finally:
        for backend in opened.values():
            backend.close()
    per = per_op(times, batch * calls, "wall")
    # Per repetition, the cheaper of the two validations: what an engine that stored for free would cost.
    rules_min = [min(a, b) for a, b in zip(per["rules_sqlite"], per["rules_walqueue"], strict=True)]
    return {
        "title": f"(c) durable put_many of {batch:,} tasks",
        "clock": "wall",
        "params": {
            "batch": batch,
            "calls_per_chunk": calls,
            "reps": s["reps"],
            "rules_*": "validation only, no storage",
        },
        "backends": backends_block(times, batch * calls, "wall", "s/task"),
        "ratios": {
            "walqueue_vs_sqlite": figure(speed_ratio(per, "walqueue", "sqlite"), "x", target=(">=", 1.5)),
            "walqueue_vs_floor": figure(speed_ratio(per, "walqueue", "floor"), "x", note="information"),
            "ceiling_vs_sqlite": figure(
                speed_ratio({"rules": rules_min, "sqlite": per["sqlite"]}, "rules", "sqlite"),
                "x",
                note="information: the best ratio any engine applying the same validation could reach"
                " (storage free): sqlite time / min(rules_sqlite, rules_walqueue) time",
            ),
            "rules_share_of_sqlite": figure(
                time_ratio(per, "rules_sqlite", "sqlite"),
                "share",
                better="lower",
                note="information: the part of sqlite's put_many time spent validating"
                " (rules_sqlite time / sqlite time)",
            ),
        },
    }


# -- (d) sync off: CPU per put and per reserve+ack cycle ---------------------------------------


def workload_d(ctx: Context) -> dict[str, Any]:
    s = ctx.scale
    kp, kc, reps = s["d_put_chunk"], s["d_cycle_chunk"], s["reps"]
    opened = {name: open_backend(name, ctx.dir(f"d-{name}"), durable=False) for name in BACKENDS}
    try:
        for backend in opened.values():
            _warm_puts(backend, "warm", 50)
        put_inputs = [puts("d", rep * kp, kp) for rep in range(reps)]

        put_times = interleave({name: _put_chunk(b, put_inputs) for name, b in opened.items()}, reps)
        # The cycles lease the earliest ready tasks: the warm-up and the puts above, then these.
        for backend in opened.values():
            fill(backend, "dfill", kc * reps + 50)
            _warm_cycles(backend, 50)
        cycle_times = interleave({name: _cycle_chunk(b, kc) for name, b in opened.items()}, reps)
    finally:
        for backend in opened.values():
            backend.close()
    put_per = per_op(put_times, kp, "cpu")
    cycle_per = per_op(cycle_times, kc, "cpu")
    return {
        "title": "(d) sync off: CPU per single put and per reserve+ack cycle",
        "clock": "cpu",
        "params": {"puts_per_chunk": kp, "cycles_per_chunk": kc, "reps": reps},
        "backends": {
            "put": backends_block(put_times, kp, "cpu"),
            "cycle": backends_block(cycle_times, kc, "cpu", "s/cycle"),
        },
        "ratios": {
            "put_walqueue_vs_sqlite": figure(speed_ratio(put_per, "walqueue", "sqlite"), "x", target=(">=", 1.5)),
            "cycle_walqueue_vs_sqlite": figure(speed_ratio(cycle_per, "walqueue", "sqlite"), "x", target=(">=", 2.0)),
            "put_walqueue_vs_floor": figure(speed_ratio(put_per, "walqueue", "floor"), "x", note="information"),
            "cycle_walqueue_vs_floor": figure(speed_ratio(cycle_per, "walqueue", "floor"), "x", note="information"),
        },
    }


# -- (e) reopen: replay of N transactions, and load of a snapshot of N tasks ---------------------


def _history(backend: Any, n_tx: int) -> str:
    """Commit exactly `n_tx` transactions (half single puts, then reserve+ack cycles); return a task id."""
    n_cycles = n_tx // 4
    n_puts = n_tx - 2 * n_cycles
    for tid, body in puts("e", 0, n_puts):
        backend.put(tid, body)
    for _ in range(n_cycles):
        backend.ack(backend.reserve(WORKER, now=NOW, lease_seconds=LEASE_SECONDS)[0], now=NOW)
    return task_id("e", n_puts - 1)


def _reopen_chunks(wq_dir: Path, sq_dir: Path, floor_files: list[str], probe: str) -> dict[str, Chunk]:
    def walqueue(rep: int) -> Clock:
        start = clock()
        queue = Queue(wq_dir)
        found = queue.get(probe)
        elapsed = since(start)
        queue.close()
        assert found is not None
        return elapsed

    def sqlite(rep: int) -> Clock:
        start = clock()
        queue = SqliteQueue(sq_dir / "queue.sqlite", durable=True)
        found = queue.get(probe)
        elapsed = since(start)
        queue.close()
        assert found is not None
        return elapsed

    def floor(rep: int) -> Clock:
        start = clock()
        floor_read(floor_files)
        return since(start)

    return {"walqueue": walqueue, "floor": floor, "sqlite": sqlite}


def _files(directory: Path, pattern: str) -> list[str]:
    return sorted(str(path) for path in directory.glob(pattern))


def workload_e(ctx: Context) -> dict[str, Any]:
    s = ctx.scale
    reps = s["e_reps"]
    n_tx, n_tasks = s["e_replay_tx"], s["e_snapshot_tasks"]

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
    segments = _files(wq_dir, "wal-*.log")
    wal_bytes = sum(os.path.getsize(path) for path in segments)
    ctx.log(f"(e) history of {n_tx} transactions, {wal_bytes:,} WAL bytes")
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
    snapshots = _files(wq_dir, "snapshot-*.snap")
    assert len(snapshots) == 1
    snap_bytes = os.path.getsize(snapshots[0])
    ctx.log(f"(e) snapshot of {n_tasks} tasks, {snap_bytes:,} bytes")
    snap_times = interleave(_reopen_chunks(wq_dir, sq_dir, snapshots, task_id("s", n_tasks - 1)), reps)
    snap = per_op(snap_times, 1, "cpu")

    return {
        "title": "(e) reopen: replay of N transactions; load of a snapshot of N tasks",
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


# -- (f) cost growth with the number of ready tasks --------------------------------------------


def workload_f(ctx: Context) -> dict[str, Any]:
    s = ctx.scale
    small, large, k, reps = s["f_small"], s["f_large"], s["f_chunk"], s["reps"]
    if k * (reps + 1) >= small:
        raise SystemExit(f"scale error: (f) would drain the small queue ({k} x {reps + 1} >= {small})")
    opened: dict[str, Any] = {}
    try:
        for name in ("walqueue", "sqlite"):
            for size in (small, large):
                backend = open_backend(name, ctx.dir(f"f-{name}-{size}"), durable=False)
                opened[f"{name}_{size}"] = backend
                fill(backend, "f", size)
                _warm_cycles(backend, k)
                ctx.log(f"(f) {name} filled with {size} tasks")
        # All four stores are alive at once (that is what lets the chunks interleave). Freezing
        # them keeps the cyclic GC's full passes, which visit every live object in the process,
        # from charging the large store's objects to the small store's chunks.
        gc.collect()
        gc.freeze()
        times = interleave({name: _cycle_chunk(b, k) for name, b in opened.items()}, reps)
    finally:
        gc.unfreeze()
        for backend in opened.values():
            backend.close()
    per = per_op(times, k, "cpu")
    return {
        "clock": "cpu",
        "title": f"(f) cost growth: reserve+ack with {large:,} ready tasks / with {small:,}",
        "params": {
            "small": small,
            "large": large,
            "cycles_per_chunk": k,
            "reps": reps,
            "gc": "filled stores frozen (gc.freeze)",
        },
        "backends": backends_block(times, k, "cpu", "s/cycle"),
        "ratios": {
            "walqueue_growth": figure(
                time_ratio(per, f"walqueue_{large}", f"walqueue_{small}"),
                "x time",
                target=("<=", 1.1),
                better="lower",
            ),
            "sqlite_growth": figure(
                time_ratio(per, f"sqlite_{large}", f"sqlite_{small}"), "x time", better="lower", note="information"
            ),
        },
    }


# -- (g) memory per stored task and per tombstone ---------------------------------------------


def _traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def workload_g(ctx: Context) -> dict[str, Any]:
    n = ctx.scale["g_tasks"]
    directory = ctx.dir("g-walqueue")
    tracemalloc.start()
    try:
        queue = Queue(directory, sync=False, compact_bytes=None)
        base = _traced()
        fill(queue, "g", n)
        ready = _traced() - base
        while True:
            leases = queue.reserve(WORKER, now=NOW, lease_seconds=LEASE_SECONDS, limit=FILL_BATCH)
            if not leases:
                break
            for lease in leases:
                queue.ack(lease, now=NOW)
            del lease, leases
        tombstones = _traced() - base
        assert queue.stats()["counts"]["completed"] == n
        queue.close()
        del queue

        # The same ready state loaded back from a snapshot (strings now come from the JSON decoder).
        directory = ctx.dir("g-walqueue-reopen")
        queue = Queue(directory, sync=False, compact_bytes=None)
        fill(queue, "g", n)
        queue.compact()
        queue.close()
        del queue
        base = _traced()
        queue = Queue(directory, sync=False)
        reloaded = _traced() - base
        queue.close()
        del queue
    finally:
        tracemalloc.stop()
    return {
        "clock": None,
        "title": f"(g) memory per stored task ({PAYLOAD_BYTES}-byte payload) and per tombstone",
        "params": {"tasks": n, "payload_bytes": PAYLOAD_BYTES, "method": "tracemalloc, after gc.collect()"},
        "backends": {},
        "ratios": {
            "bytes_per_ready_task": figure([ready / n], "bytes", target=("<=", 500), better="lower"),
            "bytes_per_tombstone": figure([tombstones / n], "bytes", target=("<=", 200), better="lower"),
            "bytes_per_ready_task_after_reopen": figure(
                [reloaded / n], "bytes", better="lower", note="information: state loaded from a snapshot"
            ),
        },
    }


# -- (j) several processes through walqueue-serve ------------------------------------------------
#
# Durable puts, then reserve+ack cycles, from 1, 4 and 8 client processes through one
# `walqueue-serve`, against SQLite from 8 processes (each its own connection: WAL,
# synchronous=FULL, busy_timeout) and persist-queue's SQLiteAckQueue from 8 processes when
# it is importable. Every configuration does the same total number of operations, split
# evenly over its processes; a phase's time is from the first process's start (after a
# barrier, connections already open) to the last one's end, on the system-wide monotonic
# clock. The configurations rotate in each repetition, as elsewhere.

J_CLIENTS = (1, 4, 8)
J_SQLITE_BUSY_MS = 60_000


def _j_open(kind: str, target: str) -> Any:
    if kind == "serve":
        from walqueue.cli import Client

        return Client(target, timeout=120)
    if kind == "sqlite":
        backend = SqliteQueue(target, durable=True)
        backend._db.execute(f"PRAGMA busy_timeout={J_SQLITE_BUSY_MS}")
        return backend
    if kind == "persist":
        import persistqueue

        return persistqueue.SQLiteAckQueue(target, auto_commit=True, multithreading=True)
    raise ValueError(kind)


def _j_worker(kind: str, target: str, prefix: str, count: int, barrier: Any, results: Any) -> None:
    import queue as queue_module

    backend = _j_open(kind, target)
    barrier.wait()
    put_start = time.perf_counter()
    for i in range(count):
        if kind == "persist":
            backend.put({"task_id": f"{prefix}-{i}", "payload": payload(i)})
        else:
            backend.put(f"{prefix}-{i}", payload(i))
    put_end = time.perf_counter()
    barrier.wait()
    cycle_start = time.perf_counter()
    done = 0
    while done < count:
        if kind == "persist":
            try:
                item = backend.get(block=False)
            except queue_module.Empty:
                continue
            backend.ack(item)
            done += 1
            continue
        leases = backend.reserve(f"w-{prefix}", now=NOW, lease_seconds=LEASE_SECONDS, limit=1)
        for lease in leases:
            backend.ack(lease, now=NOW + 1)
            done += 1
    cycle_end = time.perf_counter()
    results.put((put_start, put_end, cycle_start, cycle_end))
    if hasattr(backend, "close"):
        backend.close()


def _j_run(kind: str, target: str, processes: int, total: int) -> tuple[float, float]:
    """Seconds for `total` durable puts, then `total` reserve+ack cycles, split over `processes`."""
    import multiprocessing
    import queue as queue_module

    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(processes)
    results = context.Queue()
    workers = [
        context.Process(target=_j_worker, args=(kind, target, f"p{n}", total // processes, barrier, results))
        for n in range(processes)
    ]
    for worker in workers:
        worker.start()
    spans: list[tuple[float, float, float, float]] = []
    give_up = time.monotonic() + 600
    while len(spans) < processes:
        try:
            spans.append(results.get(timeout=1))
        except queue_module.Empty:
            failed = [w.exitcode for w in workers if w.exitcode not in (None, 0)]
            if failed or time.monotonic() > give_up:
                for worker in workers:
                    worker.kill()
                raise RuntimeError(f"(j) {kind} workers failed (exit codes {failed})") from None
    for worker in workers:
        worker.join(60)
        if worker.exitcode != 0:
            raise RuntimeError(f"(j) {kind} worker exited {worker.exitcode}")
    puts_seconds = max(span[1] for span in spans) - min(span[0] for span in spans)
    cycles_seconds = max(span[3] for span in spans) - min(span[2] for span in spans)
    return puts_seconds, cycles_seconds


class _Served:
    """A walqueue-serve process for one configuration (started untimed, stopped with SIGTERM)."""

    def __init__(self, directory: Path) -> None:
        import select
        import subprocess

        self.socket_dir = tempfile.mkdtemp(prefix="wq-bench-", dir="/tmp")  # sun_path: 108 bytes
        self.socket_path = f"{self.socket_dir}/s"
        env = dict(os.environ)
        import walqueue

        roots = [str(Path(entry).parent) for entry in walqueue.__path__]
        env["PYTHONPATH"] = os.pathsep.join(roots + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        command = [sys.executable, "-m", "walqueue.cli.serve", str(directory), "--socket", self.socket_path]
        self.process = subprocess.Popen(
            [*command, "--log-level", "WARNING"], stdout=subprocess.PIPE, env=env, bufsize=0
        )
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], 60)
        if not ready or not self.process.stdout.readline():
            self.process.kill()
            raise RuntimeError("(j) walqueue-serve did not start")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(60)
        shutil.rmtree(self.socket_dir, ignore_errors=True)


def _j_persist_available() -> str | None:
    try:
        import persistqueue  # noqa: F401
    except ImportError as error:
        return f"persist-queue is not importable here ({error})"
    return None


def workload_j(ctx: Context) -> dict[str, Any]:
    s = ctx.scale
    total, reps = s["j_ops"], s["j_reps"]
    configs = [(f"serve_{n}", "serve", n) for n in J_CLIENTS] + [("sqlite_8", "sqlite", 8)]
    persist_missing = _j_persist_available()
    if persist_missing is None:
        configs.append(("persist_queue_8", "persist", 8))
    puts_per: dict[str, list[float]] = {name: [] for name, _, _ in configs}
    cycles_per: dict[str, list[float]] = {name: [] for name, _, _ in configs}
    errors: dict[str, str] = {}
    for rep in range(reps):
        shift = rep % len(configs)
        for name, kind, processes in configs[shift:] + configs[:shift]:
            if name in errors:
                continue
            directory = ctx.dir(f"j-{name}")
            served = _Served(directory / "q") if kind == "serve" else None
            target = served.socket_path if served else str(directory / "queue.sqlite")
            if kind == "persist":
                target = str(directory / "persist-queue")
            if kind != "serve":
                # Its tables (and SQLite's journal mode) before 8 processes race to create them: a
                # connection upgrading its lock for CREATE TABLE gets SQLITE_BUSY without a busy wait.
                opened = _j_open(kind, target)
                if hasattr(opened, "close"):
                    opened.close()
            try:
                puts_seconds, cycles_seconds = _j_run(kind, target, processes, total)
            except Exception as error:  # persist-queue may not survive several processes
                errors[name] = f"{type(error).__name__}: {error}"
                ctx.log(f"(j) {name} failed: {errors[name]}")
                continue
            finally:
                if served is not None:
                    served.stop()
            puts_per[name].append(puts_seconds / total)
            cycles_per[name].append(cycles_seconds / total)
            ctx.log(f"(j) rep {rep} {name}: {total / puts_seconds:,.0f} puts/s, {total / cycles_seconds:,.0f} cycles/s")
    rtt = _j_round_trips(ctx, s["j_rtt_calls"])
    backends: dict[str, Any] = {}
    for label, per in (("puts", puts_per), ("cycles", cycles_per)):
        block = {}
        for name, samples in per.items():
            if samples:
                fig = figure(samples, "s/op", better="lower")
                fig["clock"] = "wall"
                fig["other_clock"] = dict(summary(samples), clock="wall")
                block[name] = fig
        backends[label] = block
    backends["round trip"] = rtt["backends"]
    ratios: dict[str, Any] = {}
    for label, per in (("puts", puts_per), ("cycles", cycles_per)):
        if per["serve_8"] and per["sqlite_8"]:
            ratios[f"{label}_serve8_vs_sqlite8"] = figure(
                [b / a for a, b in zip(per["serve_8"], per["sqlite_8"], strict=True)], "x", target=(">=", 3.0)
            )
        if per["serve_1"] and per["serve_8"]:
            ratios[f"{label}_serve8_vs_serve1"] = figure(
                [b / a for a, b in zip(per["serve_8"], per["serve_1"], strict=True)],
                "x",
                note="information: scaling from 1 to 8 client processes",
            )
        if per.get("persist_queue_8") and per["serve_8"]:
            ratios[f"{label}_serve8_vs_persist_queue8"] = figure(
                [b / a for a, b in zip(per["serve_8"], per["persist_queue_8"], strict=True)],
                "x",
                note="information: persist-queue's SQLiteAckQueue from 8 processes",
            )
    ratios.update(rtt["ratios"])
    return {
        "clock": "wall",
        "title": f"(j) several processes through walqueue-serve: {total} durable puts, then {total} reserve+ack",
        "params": {
            "ops_per_config": total,
            "reps": reps,
            "clients": list(J_CLIENTS),
            "sqlite": f"8 processes, own connections, WAL, synchronous=FULL, busy_timeout={J_SQLITE_BUSY_MS} ms",
            "persist_queue": persist_missing or "SQLiteAckQueue(auto_commit=True, multithreading=True), 8 processes",
            "errors": errors,
        },
        "series": {"puts": puts_per, "cycles": cycles_per},
        "backends": backends,
        "ratios": ratios,
    }


def _j_round_trips(ctx: Context, calls: int) -> dict[str, Any]:
    """One client's round trip (a read, a durable put) against the same call on an in-process Queue."""
    from walqueue.cli import Client

    served = _Served(ctx.dir("j-rtt-served") / "q")
    local = Queue(ctx.dir("j-rtt-local") / "q", sync=True)
    samples: dict[str, list[float]] = {"client_get": [], "queue_get": [], "client_put": [], "queue_put": []}
    try:
        with Client(served.socket_path) as client:
            client.put("present", payload(0))
            local.put("present", payload(0))
            for rep in range(3):
                for name, call in (
                    ("client_get", lambda i: client.get("present")),
                    ("queue_get", lambda i: local.get("present")),
                    ("client_put", lambda i, rep=rep: client.put(f"r{rep}-{i}", payload(i))),
                    ("queue_put", lambda i, rep=rep: local.put(f"r{rep}-{i}", payload(i))),
                ):
                    count = calls if name.endswith("get") else max(10, calls // 10)
                    start = time.perf_counter()
                    for i in range(count):
                        call(i)
                    samples[name].append((time.perf_counter() - start) / count)
    finally:
        local.close()
        served.stop()
    block = {}
    for name, values in samples.items():
        fig = figure(values, "s/op", better="lower")
        fig["clock"] = "wall"
        fig["other_clock"] = dict(summary(values), clock="wall")
        block[name] = fig
    ratios = {
        "rtt_get_client_vs_queue": figure(
            [a / b for a, b in zip(samples["client_get"], samples["queue_get"], strict=True)],
            "x time",
            better="lower",
            note="information: one client's read round trip / the same Queue.get in-process",
        ),
        "rtt_put_client_vs_queue": figure(
            [a / b for a, b in zip(samples["client_put"], samples["queue_put"], strict=True)],
            "x time",
            better="lower",
            note="information: one client's durable put / the same Queue.put in-process",
        ),
    }
    return {"backends": block, "ratios": ratios}


def plot_j(result: dict[str, Any], path: str) -> str:
    """Bars of (j)'s throughput per configuration (needs matplotlib, a tool-only dependency)."""
    plt = _pyplot()
    if plt is None:
        return f"(j) plot skipped: matplotlib is not installed (pip install matplotlib) for {path}"
    series = result["series"]
    names = [name for name in series["puts"] if series["puts"][name]]
    figure_, axis = plt.subplots(figsize=(8, 4.5))
    width = 0.38
    for offset, (label, per) in enumerate((("durable puts", series["puts"]), ("reserve+ack", series["cycles"]))):
        rates = [1 / statistics.median(per[name]) for name in names]
        low = [1 / max(per[name]) for name in names]
        high = [1 / min(per[name]) for name in names]
        positions = [i + (offset - 0.5) * width for i in range(len(names))]
        errors = [
            [r - lo for r, lo in zip(rates, low, strict=True)],
            [hi - r for r, hi in zip(rates, high, strict=True)],
        ]
        axis.bar(positions, rates, width, yerr=errors, capsize=3, label=label)
    axis.set_xticks(range(len(names)), [name.replace("_", " ") for name in names])
    axis.set_ylabel("operations per second (median, min..max)")
    axis.set_title("(j) one walqueue-serve for 1, 4, 8 client processes vs SQLite from 8 (all durable)")
    axis.legend()
    figure_.tight_layout()
    figure_.savefig(path, dpi=110)
    plt.close(figure_)
    return f"(j) plot written to {path}"


# -- (h) group commit: threads sharing one Queue ------------------------------------------------
#
# Durable puts, then reserve+ack cycles, from 1, 2, 4, 8 and 16 threads of this process: for
# walqueue all of them share ONE `Queue(sync=True)` (group commit lets one fsync cover the
# frames that several threads wrote while the previous fsync ran); for SQLite each thread has
# its own connection to one database file (WAL, synchronous=FULL, busy_timeout, as in (j));
# the floor is one `FloorLog` whose every commit (append + fsync) runs under one lock, so
# however many threads call it, it is one writer paying one fsync per operation: what a WAL
# queue without group commit can do at best. Every configuration does the same total number
# of operations per phase, split evenly over its threads; a phase's time runs from the first
# thread's start (after a barrier) to the last one's end. Configurations rotate in each
# repetition, as elsewhere.

H_THREADS = (1, 2, 4, 8, 16)
H_BACKENDS = ("walqueue", "sqlite", "floor")


class _LockedFloor:
    """The floor shared by threads: each commit (append + fsync) under one lock, one after the other."""

    def __init__(self, floor: FloorLog, lock: threading.Lock) -> None:
        self._floor = floor
        self._lock = lock

    def put(self, task_id: str, body: dict[str, Any]) -> str:
        with self._lock:
            return self._floor.put(task_id, body)

    def reserve(self, worker: str, *, now: int, lease_seconds: int, limit: int = 1) -> list[Any]:
        with self._lock:
            return self._floor.reserve(worker, now=now, lease_seconds=lease_seconds, limit=limit)

    def ack(self, lease: Any, *, now: int) -> None:
        with self._lock:
            self._floor.ack(lease, now=now)


class _FsyncCounter:
    """Counts `os.fsync` calls made from Python while installed (the queue's shared fsync and the floor's).

    SQLite syncs in C and is not counted. Installed only around (h)'s timed
    phases; the wrapper adds a Python call and a lock to each fsync, nothing
    to the rest.
    """

    def __init__(self) -> None:
        self._real = os.fsync
        self._lock = threading.Lock()
        self._calls = 0

    def __enter__(self) -> _FsyncCounter:
        real, lock = self._real, self._lock

        def counting_fsync(fd: int) -> None:
            with lock:
                self._calls += 1
            real(fd)

        os.fsync = counting_fsync
        return self

    def __exit__(self, *exc: object) -> None:
        os.fsync = self._real

    def take(self) -> int:
        """fsyncs since the last `take`."""
        with self._lock:
            calls, self._calls = self._calls, 0
        return calls


def _h_phase(callers: list[Any], phase: str, prefix: str, total: int) -> tuple[float, float]:
    """Wall seconds for `total` operations of `phase` ("puts" or "cycles"), split over one thread per caller,
    and the CPU seconds the caller threads spent meanwhile (`time.thread_time`, theirs alone, summed)."""
    count = total // len(callers)
    barrier = threading.Barrier(len(callers))
    spans: list[tuple[float, float, float] | None] = [None] * len(callers)
    errors: list[BaseException] = []

    def run(index: int, caller: Any) -> None:
        items = puts(f"{prefix}t{index}", 0, count) if phase == "puts" else []
        worker = f"w-{prefix}t{index}"
        try:
            barrier.wait()
            start, cpu = time.perf_counter(), time.thread_time()
            if phase == "puts":
                put = caller.put
                for tid, body in items:
                    put(tid, body)
            else:
                reserve, ack = caller.reserve, caller.ack
                for _ in range(count):
                    ack(reserve(worker, now=NOW, lease_seconds=LEASE_SECONDS)[0], now=NOW)
            spans[index] = (start, time.perf_counter(), time.thread_time() - cpu)
        except BaseException as error:  # reported by the main thread
            errors.append(error)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(i, c), name=f"bench-h-{i}") for i, c in enumerate(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    done = [span for span in spans if span is not None]
    return max(span[1] for span in done) - min(span[0] for span in done), sum(span[2] for span in done)


def workload_h(ctx: Context) -> dict[str, Any]:
    s = ctx.scale
    total, reps = s["h_ops"], s["h_reps"]
    if total % max(H_THREADS):
        raise SystemExit(f"scale error: (h) ops {total} must split evenly over {max(H_THREADS)} threads")
    names = [f"{backend}_{n}" for n in H_THREADS for backend in H_BACKENDS]
    callers: dict[str, list[Any]] = {}
    closers: list[Any] = []
    try:
        for n in H_THREADS:
            queue = open_backend("walqueue", ctx.dir(f"h-walqueue-{n}"), durable=True)
            closers.append(queue)
            callers[f"walqueue_{n}"] = [queue] * n
            path = str(ctx.dir(f"h-sqlite-{n}") / "queue.sqlite")
            connections = [_j_open("sqlite", path) for _ in range(n)]
            closers.extend(connections)
            callers[f"sqlite_{n}"] = connections
            floor = open_backend("floor", ctx.dir(f"h-floor-{n}"), durable=True)
            closers.append(floor)
            callers[f"floor_{n}"] = [_LockedFloor(floor, threading.Lock())] * n
        for name in names:
            first = callers[name][0]
            target = first._floor if isinstance(first, _LockedFloor) else first
            fill(target, "hfill", total * reps + 50)  # every cycle of every repetition finds a ready task
            _warm_puts(target, "warm")
            _warm_cycles(target)
        ctx.log(f"(h) {len(names)} stores filled with {total * reps + 50} tasks each")
        puts_per: dict[str, list[float]] = {name: [] for name in names}
        cycles_per: dict[str, list[float]] = {name: [] for name in names}
        fsyncs: dict[str, dict[str, list[float]]] = {"puts": {}, "cycles": {}}
        cpu_share: dict[str, dict[str, list[float]]] = {"puts": {}, "cycles": {}}
        with _FsyncCounter() as counter:
            for rep in range(reps):
                shift = rep % len(names)
                for name in names[shift:] + names[:shift]:
                    for phase, per in (("puts", puts_per), ("cycles", cycles_per)):
                        gc.collect()
                        counter.take()
                        seconds, cpu = _h_phase(callers[name], phase, f"r{rep}", total)
                        synced = counter.take()
                        per[name].append(seconds / total)
                        cpu_share[phase].setdefault(name, []).append(cpu / seconds)
                        if not name.startswith("sqlite"):
                            fsyncs[phase].setdefault(name, []).append(synced / total)
                    ctx.log(
                        f"(h) rep {rep} {name}: {1 / puts_per[name][-1]:,.0f} puts/s,"
                        f" {1 / cycles_per[name][-1]:,.0f} cycles/s"
                    )
    finally:
        for backend in closers:
            backend.close()
    backends: dict[str, Any] = {}
    for label, per in (("puts", puts_per), ("cycles", cycles_per)):
        block = {}
        for name, samples in per.items():
            fig = figure(samples, "s/op", better="lower")
            fig["clock"] = "wall"
            fig["other_clock"] = dict(summary(samples), clock="wall")
            block[name] = fig
        backends[label] = block
    ratios: dict[str, Any] = {}
    for label, per in (("puts", puts_per), ("cycles", cycles_per)):
        ratios[f"{label}_walqueue8_vs_walqueue1"] = figure(
            speed_ratio(per, "walqueue_8", "walqueue_1"), "x", target=(">=", 4.0)
        )
        ratios[f"{label}_walqueue8_vs_sqlite8"] = figure(
            speed_ratio(per, "walqueue_8", "sqlite_8"), "x", target=(">=", 4.0)
        )
        ratios[f"{label}_walqueue8_vs_floor8"] = figure(
            speed_ratio(per, "walqueue_8", "floor_8"),
            "x",
            note="information: against one writer paying one fsync per operation",
        )
        ratios[f"{label}_walqueue1_fsyncs_per_op"] = figure(
            fsyncs[label]["walqueue_1"],
            "fsyncs/op",
            better="lower",
            note="information: os.fsync calls per operation with one thread"
            + (" (a cycle commits twice)" if label == "cycles" else ""),
        )
        ratios[f"{label}_walqueue8_fsyncs_per_op"] = figure(
            fsyncs[label]["walqueue_8"],
            "fsyncs/op",
            better="lower",
            note="information: os.fsync calls per operation with 8 threads: how many operations one fsync covered",
        )
        for n in (1, 8):
            ratios[f"{label}_walqueue{n}_cpu_share"] = figure(
                cpu_share[label][f"walqueue_{n}"],
                "share",
                better="lower",
                note=f"information: CPU time of the {n} caller thread(s), summed, over the phase's wall time"
                " (the interpreter lock lets about 100% run Python at once)",
            )
    return {
        "clock": "wall",
        "title": f"(h) group commit: {total} durable puts, then {total} reserve+ack, from 1-16 threads",
        "params": {
            "ops_per_config": total,
            "reps": reps,
            "threads": list(H_THREADS),
            "walqueue": "all threads share one Queue(sync=True)",
            "sqlite": f"one connection per thread, WAL, synchronous=FULL, busy_timeout={J_SQLITE_BUSY_MS} ms",
            "floor": "one FloorLog, each commit (append + fsync) under one lock: one fsync per operation",
            "fsyncs_per_op": {
                label: {name: statistics.median(values) for name, values in per.items()}
                for label, per in fsyncs.items()
            },
            "cpu_share": {
                label: {name: statistics.median(values) for name, values in per.items()}
                for label, per in cpu_share.items()
            },
        },
        "series": {"puts": puts_per, "cycles": cycles_per},
        "backends": backends,
        "ratios": ratios,
    }


def plot_h(result: dict[str, Any], path: str) -> str:
    """(h)'s throughput against the number of threads, one line per backend (needs matplotlib)."""
    plt = _pyplot()
    if plt is None:
        return f"(h) plot skipped: matplotlib is not installed (pip install matplotlib) for {path}"
    threads = result["params"]["threads"]
    figure_, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    for axis, (label, title) in zip(
        axes, (("puts", "durable puts"), ("cycles", "durable reserve+ack cycles")), strict=True
    ):
        per = result["series"][label]
        for backend in H_BACKENDS:
            runs = [per[f"{backend}_{n}"] for n in threads]
            rates = [1 / statistics.median(samples) for samples in runs]
            errors = [
                [r - 1 / max(samples) for r, samples in zip(rates, runs, strict=True)],
                [1 / min(samples) - r for r, samples in zip(rates, runs, strict=True)],
            ]
            axis.errorbar(threads, rates, yerr=errors, marker="o", capsize=3, label=backend)
        axis.set_xscale("log", base=2)
        axis.set_xticks(threads, [str(n) for n in threads])
        axis.set_ylim(bottom=0)
        axis.set_xlabel("threads")
        axis.set_ylabel("operations per second (median, min..max)")
        axis.set_title(title)
        axis.grid(alpha=0.3)
        axis.legend()
    figure_.suptitle("(h) one walqueue.Queue shared by N threads vs SQLite (a connection each) vs the floor")
    figure_.tight_layout()
    figure_.savefig(path, dpi=110)
    plt.close(figure_)
    return f"(h) plot written to {path}"


def _pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend, or None: a tool-only dependency, imported only to plot."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


# -- (i) latency of durable calls while a large state is compacted in the background -------------
#
# Automatic compaction is due once the live WAL exceeds max(compact_bytes, 2 x the last
# snapshot's size) (compaction.compaction_threshold). Right after a snapshot of a large state,
# the next one is therefore hundreds of megabytes of WAL away, whatever compact_bytes says:
# no window of durable single calls can contain several compactions of a million tasks. So
# each round opens a fresh copy of a store filled without ever compacting (its whole state is
# live WAL, and no snapshot is published): the first durable call in the round triggers one
# automatic background snapshot of the whole state, and the window runs until that snapshot
# is published. Several rounds give several compactions. The rounds' windows are pooled, and
# set beside windows of the same length on a copy of the same store opened with
# compact_bytes=None (compaction disabled), each right after its round's compaction window.

#: Far below any template's live WAL, so that the first durable call of a round triggers compaction.
I_COMPACT_BYTES = 64 * 1024
#: A window that has not seen its compaction published by then is an error, not a figure.
I_WINDOW_LIMIT_SECONDS = 900.0
I_PERCENTILES = (("p50", 0.50), ("p99", 0.99), ("p999", 0.999), ("max", 1.0))


class _Compactions(logging.Handler):
    """When each compaction was published, and its snapshot's size (from the engine's INFO line)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.published: list[tuple[float, int]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.startswith("compacted through sequence"):
            self.published.append((time.perf_counter(), int(record.args[-1])))  # type: ignore[index]


def _i_window(
    queue: Any, prefix: str, pairs: int, until: Callable[[], bool] | None = None
) -> tuple[list[float], list[float], list[float]]:
    """Latencies of alternating durable puts and reserve+ack cycles: `pairs` of them, then more until `until()`.

    Also when each pair started (`time.perf_counter`), to place the slowest calls in the compaction's course.
    """
    put, reserve, ack = queue.put, queue.reserve, queue.ack
    put_seconds: list[float] = []
    cycle_seconds: list[float] = []
    started: list[float] = []
    give_up = time.perf_counter() + I_WINDOW_LIMIT_SECONDS
    i = 0
    while i < pairs or (until is not None and not until()):
        tid, body = task_id(prefix, i), payload(i)
        t0 = time.perf_counter()
        put(tid, body)
        t1 = time.perf_counter()
        ack(reserve(WORKER, now=NOW, lease_seconds=LEASE_SECONDS)[0], now=NOW)
        t2 = time.perf_counter()
        put_seconds.append(t1 - t0)
        cycle_seconds.append(t2 - t1)
        started.append(t0)
        i += 1
        if t2 > give_up:
            raise RuntimeError(f"(i) no compaction was published within {I_WINDOW_LIMIT_SECONDS:.0f} s")
    return put_seconds, cycle_seconds, started


def _percentile(ordered: list[float], fraction: float) -> float:
    """Nearest-rank percentile of sorted samples (fraction 1.0 is the maximum)."""
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def workload_i(ctx: Context) -> dict[str, Any]:
    s = ctx.scale
    n, rounds, min_pairs = s["i_tasks"], s["i_rounds"], s["i_min_pairs"]
    template = ctx.dir("i-template") / "q"
    queue = Queue(template, sync=False, compact_bytes=None)
    fill(queue, "i", n)
    queue.close()
    del queue
    template_bytes = sum(path.stat().st_size for path in template.iterdir())
    if template_bytes <= I_COMPACT_BYTES:
        raise SystemExit(f"scale error: (i) template of {template_bytes} bytes would not trigger compaction")
    ctx.log(f"(i) template of {n} tasks, {template_bytes:,} bytes of WAL, never compacted")

    none_dir = ctx.dir("i-none") / "q"
    shutil.copytree(template, none_dir)
    none_queue = Queue(none_dir, sync=True, compact_bytes=None)
    _warm_puts(none_queue, "warm")
    _warm_cycles(none_queue)
    watcher = _Compactions()
    logger = logging.getLogger("walqueue")
    level = logger.level
    logger.addHandler(watcher)
    logger.setLevel(logging.INFO)
    lat: dict[str, dict[str, list[float]]] = {kind: {"compaction": [], "none": []} for kind in ("put", "cycle")}
    compaction_seconds: list[float] = []
    pairs_per_round: list[int] = []
    snapshot_bytes: list[int] = []
    none_compactions = 0
    slowest: dict[str, list[list[float]]] = {"put": [], "cycle": []}
    try:

        def none_window(rep: int, pairs: int) -> None:
            nonlocal none_compactions
            before = len(watcher.published)
            gc.collect()
            put_s, cycle_s, _ = _i_window(none_queue, f"n{rep}", pairs)
            none_compactions += len(watcher.published) - before
            lat["put"]["none"] += put_s
            lat["cycle"]["none"] += cycle_s

        def compaction_window(rep: int) -> int:
            directory = ctx.dir(f"i-compaction-{rep}")
            shutil.copytree(template, directory / "q")
            queue = Queue(directory / "q", sync=True, compact_bytes=I_COMPACT_BYTES)
            try:
                before = len(watcher.published)
                snapshot_seq = queue.stats()["snapshot_seq"]
                gc.collect()
                start = time.perf_counter()
                put_s, cycle_s, started = _i_window(
                    queue, f"c{rep}", min_pairs, lambda: len(watcher.published) > before
                )
                published = watcher.published[before:]
                if queue.stats()["snapshot_seq"] == snapshot_seq:
                    raise RuntimeError("(i) the engine logged a compaction that stats() does not show")
            finally:
                queue.close()
            shutil.rmtree(directory)
            compaction_seconds.extend(at - start for at, _ in published)
            published_at = published[0][0]
            for kind, seconds in (("put", put_s), ("cycle", cycle_s)):
                slowest[kind] += [
                    [round(seconds[k], 6), rep, round(started[k] - start, 3), round(published_at - started[k], 3)]
                    for k in sorted(range(len(seconds)), key=seconds.__getitem__)[-5:]
                ]
            snapshot_bytes.extend(size for _, size in published)
            lat["put"]["compaction"] += put_s
            lat["cycle"]["compaction"] += cycle_s
            pairs_per_round.append(len(put_s))
            ctx.log(f"(i) round {rep}: compaction published after {published[0][0] - start:.2f} s, {len(put_s)} pairs")
            return len(put_s)

        for rep in range(rounds):
            # The none window right after, as long: the two modes seconds apart, alike in size.
            none_window(rep, compaction_window(rep))
    finally:
        logger.removeHandler(watcher)
        logger.setLevel(level)
        none_queue.close()
    if none_compactions:
        raise RuntimeError(f"(i) {none_compactions} compactions with compact_bytes=None")
    stats: dict[str, dict[str, dict[str, float]]] = {}
    for kind, modes in lat.items():
        stats[kind] = {}
        for mode, samples in modes.items():
            samples.sort()
            stats[kind][mode] = {name: _percentile(samples, fraction) for name, fraction in I_PERCENTILES}
    ratios: dict[str, Any] = {}
    for kind in ("put", "cycle"):
        for mode in ("compaction", "none"):
            for name, _ in I_PERCENTILES:
                target = ("<=", 0.050) if (kind, mode, name) == ("put", "compaction", "max") else None
                ratios[f"{kind}_{name}_{mode}"] = figure(
                    [stats[kind][mode][name]],
                    "s/op",
                    target=target,
                    better="lower",
                    note="" if target else f"information: {kind} latency, {name}, pooled over the rounds",
                )
        ratios[f"{kind}_p99_compaction_over_none"] = figure(
            [stats[kind]["compaction"]["p99"] / stats[kind]["none"]["p99"]],
            "x time",
            target=("<=", 2.0),
            better="lower",
        )
    ratios["compactions"] = figure(
        [float(len(compaction_seconds))], "compactions", note="information: automatic compactions in the windows"
    )
    ratios["compaction_seconds"] = figure(
        compaction_seconds,
        "s/compaction",
        better="lower",
        note="information: from the call that triggered it to the publication, per round",
    )
    return {
        "clock": "wall",
        "title": f"(i) latency of durable puts and reserve+ack cycles with {n:,} tasks, compacting or not",
        "params": {
            "tasks": n,
            "rounds": rounds,
            "min_pairs_per_window": min_pairs,
            "pairs_per_round": pairs_per_round,
            "compact_bytes": I_COMPACT_BYTES,
            "template_wal_bytes": template_bytes,
            "snapshot_bytes": snapshot_bytes,
            "next_compaction_after_wal_bytes": [2 * size for size in snapshot_bytes],
            "compactions_with_compaction_disabled": none_compactions,
            "slowest_while_compacting": {
                "columns": ["seconds", "round", "started after the trigger (s)", "started before the publication (s)"],
                **{kind: sorted(rows, reverse=True)[:10] for kind, rows in slowest.items()},
            },
            "window": "alternating durable put and reserve+ack, one thread, until the compaction is published",
        },
        "series": {
            kind: {mode: [round(x, 7) for x in samples] for mode, samples in modes.items()}
            for kind, modes in lat.items()
        },
        "backends": {},
        "ratios": ratios,
    }


def plot_i(result: dict[str, Any], path: str) -> str:
    """(i)'s latency distributions, compaction against none, as the share of calls slower than x (needs matplotlib)."""
    plt = _pyplot()
    if plt is None:
        return f"(i) plot skipped: matplotlib is not installed (pip install matplotlib) for {path}"
    figure_, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
    for axis, (kind, title) in zip(axes, (("put", "durable put"), ("cycle", "durable reserve+ack")), strict=True):
        for mode, label in (("compaction", "a background compaction per window"), ("none", "compaction disabled")):
            ordered = sorted(result["series"][kind][mode])
            count = len(ordered)
            slower = [(count - i) / count for i in range(count)]
            axis.step([x * 1e3 for x in ordered], slower, where="post", label=label)
        if kind == "put":
            axis.axvline(50, color="grey", linestyle=":", label="target: longest put <= 50 ms")
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("latency (ms)")
        axis.set_title(title)
        axis.grid(alpha=0.3, which="both")
        axis.legend(fontsize="small")
    axes[0].set_ylabel("share of calls at least this slow")
    figure_.suptitle(f"(i) {result['params']['tasks']:,} tasks: latency while compacting vs with compaction disabled")
    figure_.tight_layout()
    figure_.savefig(path, dpi=110)
    plt.close(figure_)
    return f"(i) plot written to {path}"


# -- (k) a damaged tail opens at the cost of a healthy segment --------------------------------


def _torn_tail_store(directory: Path, tail_bytes: int) -> Path:
    """A store whose newest segment ends in a torn frame announcing 16 MiB, then zeros: `tail_bytes` in all."""
    queue = Queue(directory, sync=False, compact_bytes=None)
    queue.put("probe", payload(0))
    queue.close()
    [segment] = _files(directory, "wal-*.log")
    with open(segment, "ab") as file:
        file.write((16 * 2**20).to_bytes(4, "big") + bytes(tail_bytes - 4))
    return Path(segment)


def workload_k(ctx: Context) -> dict[str, Any]:
    """Opening a store whose last frame is torn, with megabytes of zeros after its length.

    The torn-tail rule must look for a complete frame anywhere after the
    torn one's start (SPEC §4.5); that scan runs in C over the tail, so the
    open costs about what reading that many bytes of healthy log costs.
    """
    s = ctx.scale
    reps = s["e_reps"]
    tail_bytes = s["k_tail_bytes"]
    healthy_dir = ctx.dir("k-healthy")
    queue = Queue(healthy_dir, sync=False, compact_bytes=None)
    n = 0
    while queue.stats()["wal_bytes"] < tail_bytes:
        batch = [{"task_id": task_id("k", n + i), "payload": payload(n + i)} for i in range(FILL_BATCH)]
        for item in batch:
            queue.put(item["task_id"], item["payload"])
        n += FILL_BATCH
    healthy_bytes = queue.stats()["wal_bytes"]
    queue.close()
    torn_dir = ctx.dir("k-torn")
    # The announced frame must stay incomplete: at most 16 MiB + 35 bytes of tail.
    segment = _torn_tail_store(torn_dir, min(healthy_bytes, 16 * 2**20 + 35))
    pristine = segment.read_bytes()
    ctx.log(f"(k) healthy segment of {healthy_bytes:,} bytes, torn tail of {healthy_bytes:,} bytes")

    def healthy(rep: int) -> Clock:
        start = clock()
        Queue(healthy_dir, sync=False, compact_bytes=None).close()
        return since(start)

    def torn(rep: int) -> Clock:
        segment.write_bytes(pristine)  # opening cuts the tail: put it back first (not timed)
        start = clock()
        reopened = Queue(torn_dir, sync=False, compact_bytes=None)
        elapsed = since(start)
        assert reopened.get("probe") is not None
        reopened.close()
        return elapsed

    times = interleave({"healthy": healthy, "torn": torn}, reps)
    per = per_op(times, 1, "wall")
    return {
        "title": "(k) open: a torn 16 MiB frame followed by zeros, against a healthy segment of the same size",
        "clock": "wall",
        "params": {"reps": reps, "bytes": healthy_bytes, "healthy_tasks": n},
        "backends": {"open": backends_block(times, 1, "wall", "s/open")},
        "ratios": {
            "torn_over_healthy": figure(
                time_ratio(per, "torn", "healthy"), "x time", target=("<=", 2.0), better="lower"
            ),
        },
    }


WORKLOADS: dict[str, Callable[[Context], dict[str, Any]]] = {
    "a": workload_a,
    "b": workload_b,
    "c": workload_c,
    "d": workload_d,
    "e": workload_e,
    "f": workload_f,
    "g": workload_g,
    "h": workload_h,
    "i": workload_i,
    "k": workload_k,
    "j": workload_j,
}

# -- reporting ------------------------------------------------------------------------------------


def _fmt_value(value: float, unit: str) -> str:
    if unit.startswith("s/"):
        if value >= 1:
            return f"{value:.3f} s"
        if value >= 1e-3:
            return f"{value * 1e3:.3f} ms"
        return f"{value * 1e6:.1f} us"
    if unit in ("x", "x time"):
        return f"{value:.2f}x"
    if unit == "share":
        return f"{100 * value:.1f}%"
    if unit == "fsyncs/op":
        return f"{value:.2f} fsyncs/op"
    if unit == "compactions":
        return f"{value:.0f} compactions"
    if unit in ("tx/s", "tasks/s"):
        return f"{value:,.0f} {unit}"
    if unit == "bytes":
        return f"{value:,.0f} B"
    return f"{value:g} {unit}"


def _print_backends(block: dict[str, Any], label: str = "") -> None:
    for name, fig in block.items():
        unit = fig["unit"]
        other = fig["other_clock"]
        rate = f"{1 / fig['median']:>9,.0f}/s" if fig["median"] and unit != "s/open" else " " * 11
        print(
            f"    {label + name:<22} {fig['clock']} {_fmt_value(fig['median'], unit):>10}"
            f"  [{_fmt_value(fig['min'], unit)} .. {_fmt_value(fig['max'], unit)}, spread {fig['spread_pct']:.0f}%]"
            f" {rate}   ({other['clock']} {_fmt_value(other['median'], unit)})"
        )


def _verdict(fig: dict[str, Any]) -> str:
    if fig["met"] is None:
        return "(information)"
    return f"target {fig['target']}: {'met' if fig['met'] else 'NOT MET'}"


def print_result(result: dict[str, Any]) -> None:
    clock_note = {"wall": "wall clock", "cpu": "process CPU time", None: "tracemalloc"}[result["clock"]]
    print(f"\n{result['title']}  [{clock_note}]\n    {json.dumps(result['params'])}")
    backends = result["backends"]
    if backends:
        first = next(iter(backends.values()))
        if "median" in first:
            _print_backends(backends)
        else:
            for label, block in backends.items():
                _print_backends(block, f"{label}: ")
    for name, fig in result["ratios"].items():
        unit = fig["unit"]
        spread = (
            "" if len(fig["samples"]) == 1 else f"[{_fmt_value(fig['min'], unit)} .. {_fmt_value(fig['max'], unit)}]"
        )
        print(f"  = {name:<34} {_fmt_value(fig['median'], unit):>15} {spread:<32} {_verdict(fig)}")
        if fig["note"].startswith("information: "):
            print(f"      ({fig['note'].removeprefix('information: ')})")


def targets_table(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for key, result in results.items():
        for name, fig in result["ratios"].items():
            if fig["target"] is not None:
                rows.append(
                    {
                        "workload": key,
                        "figure": name,
                        "value": fig["median"],
                        "unit": fig["unit"],
                        "target": fig["target"],
                        "met": fig["met"],
                    }
                )
    return rows


def markdown(report: dict[str, Any]) -> str:
    """Render a run's JSON as the two Markdown tables of docs/PERFORMANCE.md: ratios, then absolutes."""
    meta = report["meta"]
    lines = [
        f"Scale `{meta['scale']}`, Python {meta['python']}, SQLite {meta['sqlite']}, {meta['cpus']} CPUs,"
        f" stores on {meta['filesystem']}, load average {_load_text(meta.get('loadavg_start'))} at the start,"
        f" {meta['seconds']:.0f} s in all.",
        "",
        "| workload | figure | median | min .. max (per repetition) | target | |",
        "|---|---|---:|---|---|---|",
    ]
    for key, result in report["workloads"].items():
        for name, fig in result["ratios"].items():
            unit = fig["unit"]
            spread = (
                "(one measurement)"
                if len(fig["samples"]) == 1
                else f"{_fmt_value(fig['min'], unit)} .. {_fmt_value(fig['max'], unit)}"
            )
            verdict = "" if fig["met"] is None else ("met" if fig["met"] else "**not met**")
            target = fig["target"] or "(information)"
            lines.append(f"| ({key}) | {name} | {_fmt_value(fig['median'], unit)} | {spread} | {target} | {verdict} |")
    lines += [
        "",
        "Absolute figures (machine-specific; median per operation, on the workload's clock):",
        "",
        "| workload | backend | clock | median | min .. max | other clock (median) |",
        "|---|---|---|---:|---|---:|",
    ]
    for key, result in report["workloads"].items():
        backends = result["backends"]
        if not backends:
            continue
        groups = (
            {"": backends} if "median" in next(iter(backends.values())) else {f"{g}: ": b for g, b in backends.items()}
        )
        for label, block in groups.items():
            for name, fig in block.items():
                unit = fig["unit"]
                other = fig["other_clock"]
                lines.append(
                    f"| ({key}) | {label}{name} | {fig['clock']} | {_fmt_value(fig['median'], unit)}"
                    f" | {_fmt_value(fig['min'], unit)} .. {_fmt_value(fig['max'], unit)}"
                    f" | {other['clock']} {_fmt_value(other['median'], unit)} |"
                )
    return "\n".join(lines)


def _load_text(load: list[float] | None) -> str:
    return "unknown" if not load else " / ".join(f"{x:.1f}" for x in load)


def _filesystem(path: Path) -> str:
    """The mount point and file-system type that holds `path` (best effort, Linux)."""
    try:
        best = ("", "?")
        real = str(path.resolve())
        with open("/proc/mounts") as mounts:
            for line in mounts:
                fields = line.split()
                if len(fields) >= 3 and (real == fields[1] or real.startswith(fields[1].rstrip("/") + "/")):
                    if len(fields[1]) >= len(best[0]):
                        best = (fields[1], fields[2])
        return f"{best[1]} at {best[0]}"
    except OSError:
        return "unknown"


def _loadavg() -> list[float] | None:
    try:
        return list(os.getloadavg())
    except OSError:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", choices=sorted(SCALES), default="default")
    parser.add_argument("--json", metavar="FILE", help="write every figure to FILE as JSON")
    parser.add_argument("--only", metavar="LIST", help=f"comma-separated workloads among {','.join(WORKLOADS)}")
    parser.add_argument("--dir", metavar="DIR", help="parent directory of the stores (default: system temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the stores after the run")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    parser.add_argument("--markdown", metavar="JSON", help="print the tables of an earlier run's JSON and exit")
    parser.add_argument(
        "--plot-h", metavar="PNG", help="draw (h)'s throughput per thread count into PNG (needs matplotlib)"
    )
    parser.add_argument("--plot-i", metavar="PNG", help="draw (i)'s latency distributions into PNG (needs matplotlib)")
    parser.add_argument("--plot-j", metavar="PNG", help="draw (j)'s throughput bars into PNG (needs matplotlib)")
    args = parser.parse_args(argv)
    if args.markdown:
        with open(args.markdown, encoding="utf-8") as file:
            print(markdown(json.load(file)))
        return 0
    selected = list(WORKLOADS) if not args.only else [w.strip() for w in args.only.split(",") if w.strip()]
    unknown = [w for w in selected if w not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workload(s) {unknown}")
    scale = SCALES[args.scale]

    root = Path(tempfile.mkdtemp(prefix="walqueue-bench-", dir=args.dir))
    import walqueue

    meta = {
        "scale": args.scale,
        "scale_params": scale,
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "filesystem": _filesystem(root),
        "walqueue_from": os.path.dirname(walqueue.__file__),
        "loadavg_start": _loadavg(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    print(
        f"walqueue bench: scale {args.scale}, Python {meta['python']}, SQLite {meta['sqlite']}, "
        f"{meta['cpus']} CPUs, stores on {meta['filesystem']}, load {meta['loadavg_start']}"
    )
    if "tmpfs" in meta["filesystem"]:
        print("  warning: the stores are on tmpfs: fsync costs nothing there, durable figures mean little")
    ctx = Context(root, scale, verbose=not args.quiet)
    results: dict[str, dict[str, Any]] = {}
    started = time.perf_counter()
    try:
        for key in selected:
            t0 = time.perf_counter()
            result = WORKLOADS[key](ctx)
            result["seconds"] = time.perf_counter() - t0
            results[key] = result
            print_result(result)
            for letter, plot, png in (
                ("h", plot_h, args.plot_h),
                ("i", plot_i, args.plot_i),
                ("j", plot_j, args.plot_j),
            ):
                if key == letter and png:
                    print(plot(result, png))
            sys.stdout.flush()
    finally:
        if args.keep:
            print(f"\nstores kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    meta["seconds"] = time.perf_counter() - started
    meta["loadavg_end"] = _loadavg()
    targets = targets_table(results)
    print(f"\nTargets (medians of per-repetition ratios; {meta['seconds']:.0f} s in all):")
    for row in targets:
        print(
            f"  ({row['workload']}) {row['figure']:<34} {_fmt_value(row['value'], row['unit']):>16}"
            f"   {row['target']:<12} {'met' if row['met'] else 'NOT MET'}"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"meta": meta, "workloads": results, "targets": targets}, out, indent=2)
            out.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
