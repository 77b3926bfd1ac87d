"""server_processes (alias j): several processes through walqueue-serve, against SQLite (and persist-queue).

Also: the server's CPU per request, and its user part (from /proc, with a server whose fsync is
off, so the disk is out of the figure) and the client processes' CPU, for
8 processes of puts and then of gets; and one client's 100 puts sent as one
pipeline (one round trip) against 100 single calls.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from processes import serve_command, socket_dir, start_ready

from walqueue import Queue

from .backends import SqliteQueue
from .figures import wall_block
from .harness import LEASE_SECONDS, NOW, Context, figure, payload, pyplot, run_forked, summary

#: Sizes at each scale (with the run's `reps` unless set here): `ctx.scale` during the run.
SCALES: dict[str, dict[str, int]] = {
    "tiny": {"ops": 48, "reps": 1, "rtt_calls": 50, "cpu_ops": 2000, "pipelines": 3},
    "default": {"ops": 480, "reps": 3, "rtt_calls": 400, "cpu_ops": 8000, "pipelines": 20},
    "big": {"ops": 2400, "reps": 5, "rtt_calls": 2000, "cpu_ops": 24000, "pipelines": 60},
}


#
# Durable puts, then reserve+ack cycles, from 1, 4 and 8 client processes through one
# `walqueue-serve`, against SQLite from 8 processes (each its own connection: WAL,
# synchronous=FULL, busy_timeout) and persist-queue's SQLiteAckQueue from 8 processes when
# it is importable. Every configuration does the same total number of operations, split
# evenly over its processes; a phase's time is from the first process's start (after a
# barrier, connections already open) to the last one's end, on the system-wide monotonic
# clock. The configurations rotate in each repetition, as elsewhere.

CLIENTS = (1, 4, 8)
SQLITE_BUSY_MS = 60_000


def open_for_processes(kind: str, target: str) -> Any:
    if kind == "serve":
        from walqueue.client import Client

        return Client(target, timeout=120)
    if kind == "sqlite":
        backend = SqliteQueue(target, durable=True)
        backend._db.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_MS}")
        return backend
    if kind == "persist":
        import persistqueue  # type: ignore[import-not-found]  # optional: compared with when installed

        return persistqueue.SQLiteAckQueue(target, auto_commit=True, multithreading=True)
    raise ValueError(kind)


def _process_worker(kind: str, target: str, prefix: str, count: int, barrier: Any, results: Any) -> None:
    import queue as queue_module

    backend = open_for_processes(kind, target)
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


def _run_processes(kind: str, target: str, processes: int, total: int) -> tuple[float, float]:
    """Seconds for `total` durable puts, then `total` reserve+ack cycles, split over `processes`."""
    try:
        spans = run_forked(_process_worker, (kind, target), processes, total // processes)
    except RuntimeError as error:
        raise RuntimeError(f"server_processes: {kind} workers: {error}") from None
    puts_seconds = max(span[1] for span in spans) - min(span[0] for span in spans)
    cycles_seconds = max(span[3] for span in spans) - min(span[2] for span in spans)
    return puts_seconds, cycles_seconds


#: A server with its fsync off (`Server(sync=False)`; the command line has no such option on purpose).
_UNSYNCED_SERVER = (
    "import sys; from walqueue.serve.server import Server; "
    "server = Server(sys.argv[1], sys.argv[2], sync=False); server.start(); "
    "print('listening', flush=True); sys.exit(server.serve_forever())"
)


class _Served:
    """A walqueue-serve process for one configuration (started untimed, stopped with SIGTERM)."""

    def __init__(self, directory: Path, *, sync: bool = True) -> None:
        self.socket_dir = socket_dir("wq-bench-")
        self.socket_path = f"{self.socket_dir}/s"
        command = serve_command(directory, self.socket_path)
        if not sync:
            command = [sys.executable, "-c", _UNSYNCED_SERVER, str(directory), self.socket_path]
        process = start_ready(command, timeout=60, stderr=None)
        if process is None:
            raise RuntimeError("server_processes: walqueue-serve did not start")
        self.process = process

    def cpu_seconds(self) -> tuple[float, float]:
        """User and system CPU the server process has used so far (/proc/PID/stat), apart.

        Apart because they answer different questions: user time is the
        interpreter's work (the protocol, the queue), system time the
        kernel's on its behalf (socket calls, epoll, writes, memory maps).
        """
        with open(f"/proc/{self.process.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        return int(fields[11]) / ticks, int(fields[12]) / ticks

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(60)
        shutil.rmtree(self.socket_dir, ignore_errors=True)


def _persist_available() -> str | None:
    try:
        import persistqueue  # noqa: F401
    except ImportError as error:
        return f"persist-queue is not importable here ({error})"
    return None


def run(ctx: Context) -> dict[str, Any]:
    s = ctx.scale
    total, reps = s["ops"], s["reps"]
    configs = [(f"serve_{n}", "serve", n) for n in CLIENTS] + [("sqlite_8", "sqlite", 8)]
    persist_missing = _persist_available()
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
                opened = open_for_processes(kind, target)
                if hasattr(opened, "close"):
                    opened.close()
            try:
                puts_seconds, cycles_seconds = _run_processes(kind, target, processes, total)
            except Exception as error:  # persist-queue may not survive several processes
                errors[name] = f"{type(error).__name__}: {error}"
                ctx.log(f"server_processes: {name} failed: {errors[name]}")
                continue
            finally:
                if served is not None:
                    served.stop()
            puts_per[name].append(puts_seconds / total)
            cycles_per[name].append(cycles_seconds / total)
            ctx.log(
                f"server_processes: rep {rep} {name}: {total / puts_seconds:,.0f} puts/s,"
                f" {total / cycles_seconds:,.0f} cycles/s"
            )
    rtt = _round_trips(ctx, s["rtt_calls"])
    cpu = _server_cpu(ctx, s["cpu_ops"], reps)
    pipelined = _pipelined(ctx, s["pipelines"])
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
            scaling = [b / a for a, b in zip(per["serve_8"], per["serve_1"], strict=True)]
            if label == "puts":  # one fsync for the requests of a turn: 8 clients must gain 3x over 1
                ratios[f"{label}_serve8_vs_serve1"] = figure(scaling, "x", target=(">=", 3.0))
            else:
                ratios[f"{label}_serve8_vs_serve1"] = figure(
                    scaling, "x", note="information: scaling from 1 to 8 client processes"
                )
        if per.get("persist_queue_8") and per["serve_8"]:
            ratios[f"{label}_serve8_vs_persist_queue8"] = figure(
                [b / a for a, b in zip(per["serve_8"], per["persist_queue_8"], strict=True)],
                "x",
                note="information: persist-queue's SQLiteAckQueue from 8 processes",
            )
    ratios.update(rtt["ratios"])
    ratios.update(cpu)
    ratios.update(pipelined)
    return {
        "clock": "wall",
        "title": f"several processes through walqueue-serve: {total} durable puts, then {total} reserve+ack",
        "params": {
            "ops_per_config": total,
            "reps": reps,
            "clients": list(CLIENTS),
            "sqlite": f"8 processes, own connections, WAL, synchronous=FULL, busy_timeout={SQLITE_BUSY_MS} ms",
            "persist_queue": persist_missing or "SQLiteAckQueue(auto_commit=True, multithreading=True), 8 processes",
            "errors": errors,
        },
        "series": {"puts": puts_per, "cycles": cycles_per},
        "backends": backends,
        "ratios": ratios,
    }


def _cpu_worker(op: str, target: str, prefix: str, count: int, barrier: Any, results: Any) -> None:
    from walqueue.client import Client

    client = Client(target, timeout=120)
    client.stats()
    barrier.wait()
    # process_time, not os.times: the latter counts in clock ticks (10 ms), more than a tiny run's whole CPU.
    before = time.process_time()
    if op == "put":
        for i in range(count):
            client.put(f"{prefix}-{i}", payload(i))
    else:
        for i in range(count):
            client.get(f"{prefix}-{i}")
    results.put(time.process_time() - before)
    client.close()


def _cpu_phase(served: _Served, op: str, total: int, processes: int = 8) -> tuple[float, float, float]:
    """Server CPU, its user part, and client CPU (seconds, all processes) for `total` calls of `op`."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(processes + 1)
    results = context.Queue()
    workers = [
        context.Process(
            target=_cpu_worker, args=(op, served.socket_path, f"p{n}", total // processes, barrier, results)
        )
        for n in range(processes)
    ]
    for worker in workers:
        worker.start()
    barrier.wait(120)
    user_before, system_before = served.cpu_seconds()
    client_cpu = sum(results.get(timeout=600) for _ in workers)
    user_after, system_after = served.cpu_seconds()
    for worker in workers:
        worker.join(60)
    user = user_after - user_before
    return user + system_after - system_before, user, client_cpu


def _server_cpu(ctx: Context, total: int, reps: int) -> dict[str, Any]:
    """CPU per request of the server (fsync off) and of its clients, from 8 processes: puts, then gets."""
    samples: dict[str, list[float]] = {f"{who}{op}": [] for who in ("", "user_", "client_") for op in ("put", "get")}
    for rep in range(reps):
        served = _Served(ctx.dir(f"j-cpu-{rep}") / "q", sync=False)
        try:
            for op in ("put", "get"):
                server_cpu, user_cpu, client_cpu = _cpu_phase(served, op, total)
                samples[op].append(server_cpu / total)
                samples[f"user_{op}"].append(user_cpu / total)
                samples[f"client_{op}"].append(client_cpu / total)
                server_us, user_us, client_us = (cpu / total * 1e6 for cpu in (server_cpu, user_cpu, client_cpu))
                ctx.log(
                    f"server_processes: rep {rep} server CPU per {op} {server_us:.1f} us (user {user_us:.1f} us,"
                    f" system {server_us - user_us:.1f} us), clients' {client_us:.1f} us"
                )
        finally:
            served.stop()
    return {
        "server_cpu_per_put": figure(samples["put"], "s/op", target=("<=", 80e-6), better="lower"),
        "server_cpu_per_get": figure(samples["get"], "s/op", target=("<=", 40e-6), better="lower"),
        # The user part (the interpreter: protocol, queue, loop), not the system part: at the tiny
        # scale the kernel's few ms can round to zero clock ticks. The system part is the difference.
        "server_user_cpu_per_put": figure(
            samples["user_put"], "s/op", better="lower", note="information: user part of server_cpu_per_put"
        ),
        "server_user_cpu_per_get": figure(
            samples["user_get"], "s/op", better="lower", note="information: user part of server_cpu_per_get"
        ),
        "clients_cpu_per_put": figure(samples["client_put"], "s/op", better="lower", note="information: 8 clients"),
        "clients_cpu_per_get": figure(samples["client_get"], "s/op", better="lower", note="information: 8 clients"),
    }


def _pipelined(ctx: Context, rounds: int) -> dict[str, Any]:
    """One client: 100 durable puts in one pipeline (one round trip) against 100 single puts."""
    from walqueue.client import Client

    served = _Served(ctx.dir("j-pipeline") / "q")
    ratios: list[float] = []
    try:
        with Client(served.socket_path, timeout=120) as client:
            for n in range(rounds):
                start = time.perf_counter()
                for i in range(100):
                    client.put(f"single-{n}-{i}", payload(i))
                single = time.perf_counter() - start
                start = time.perf_counter()
                with client.pipeline() as batch:
                    for i in range(100):
                        batch.put(f"piped-{n}-{i}", payload(i))
                piped = time.perf_counter() - start
                ratios.append(single / piped)
    finally:
        served.stop()
    ctx.log(f"server_processes: 100 puts in one pipeline are {statistics.median(ratios):.1f}x faster than 100 calls")
    return {
        "pipeline_100_puts_vs_100_calls": figure(
            ratios, "x", note="information: one client, durable puts, one round trip against 100"
        )
    }


def _round_trips(ctx: Context, calls: int) -> dict[str, Any]:
    """One client's round trip (a read, a durable put) against the same call on an in-process Queue."""
    from walqueue.client import Client

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
    block = wall_block(samples)
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


def plot(result: dict[str, Any], path: str) -> str:
    """Bars of server_processes's throughput per configuration (needs matplotlib, a tool-only dependency)."""
    plt = pyplot()
    if plt is None:
        return f"server_processes plot skipped: matplotlib is not installed (pip install matplotlib) for {path}"
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
    axis.set_title("one walqueue-serve for 1, 4, 8 client processes vs SQLite from 8 (all durable)")
    axis.legend()
    figure_.tight_layout()
    figure_.savefig(path, dpi=110)
    plt.close(figure_)
    return f"server_processes plot written to {path}"
