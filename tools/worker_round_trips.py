#!/usr/bin/env python3
"""What a task costs the server through walqueue-serve: round trips, requests, fsyncs and CPU per task.

    python tools/worker_round_trips.py                 4,000 no-op tasks, 4 worker processes of 1 thread
    python tools/worker_round_trips.py --tasks 8000    more tasks
    python tools/worker_round_trips.py --prefetch 7    a fixed prefetch instead of the default

A walqueue-serve process is started on a fresh queue, the tasks are put,
then 4 forked processes each run `Worker(Client(socket), noop,
concurrency=1)` until the queue is drained (bench (l)'s processes
configuration, without the supervisor). Round trips are counted in each
worker by a wrapper of its client (each call, and each pipeline's
`execute`, is one); requests and fsyncs are the server's own counters
(`metrics()`); CPU is the server's (from /proc) and the workers' (from
`os.times`), from the workers' start to their stop. One line of JSON.
Nothing here is a test and no figure is a target: the counts say what a
change of the worker's batching did, the rate is noisy on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from multiprocessing.queues import Queue as ProcessQueue
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

from walqueue.client import Client
from walqueue.worker import Worker


class CountingClient:
    """A client whose round trips are counted: each call, and each pipeline's `execute`."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.round_trips = 0

    def pipeline(self) -> Any:
        outer = self
        pipeline = self.client.pipeline()

        class Counted:
            def __getattr__(self, name: str) -> Any:
                if name == "execute":
                    outer.round_trips += 1
                return getattr(pipeline, name)

        return Counted()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.client, name)
        if not callable(method):
            return method

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.round_trips += 1
            return method(*args, **kwargs)

        return counted


def _worker(socket_path: str, index: int, prefetch: int | None, stop: Event, out: ProcessQueue[Any]) -> None:
    client = CountingClient(Client(socket_path))
    worker = Worker(client, lambda job, context: None, concurrency=1, name=f"w{index}", prefetch=prefetch)
    began = os.times()
    worker.start()
    stop.wait()
    worker.stop()
    worker.wait(60)
    ended = os.times()
    cpu = (ended.user - began.user) + (ended.system - began.system)
    out.put((client.round_trips, worker.stats()["completed"], cpu))
    client.client.close()


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(tasks: int, processes: int, prefetch: int | None) -> dict[str, Any]:
    place = Path(tempfile.mkdtemp(prefix="wq-", dir="/tmp"))
    socket_path = str(place / "s")
    server = subprocess.Popen(
        [sys.executable, "-m", "walqueue.serve", str(place / "q"), "--socket", socket_path],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while not os.path.exists(socket_path):
            if server.poll() is not None:
                raise RuntimeError("walqueue-serve exited")
            time.sleep(0.02)
        with Client(socket_path) as client:
            client.put_many([{"task_id": f"t{n:07}", "payload": {"n": n}} for n in range(tasks)])
            before, server_before = client.metrics(), _cpu_seconds(server.pid)
            context = multiprocessing.get_context("fork")
            stop, out = context.Event(), context.Queue()
            workers = [
                context.Process(target=_worker, args=(socket_path, index, prefetch, stop, out))
                for index in range(processes)
            ]
            started = time.perf_counter()
            for process in workers:
                process.start()
            while client.stats()["counts"]["completed"] < tasks:
                time.sleep(0.005)
            seconds = time.perf_counter() - started
            after, server_cpu = client.metrics(), _cpu_seconds(server.pid) - server_before
            stop.set()
            results = [out.get(timeout=120) for _ in workers]
            for process in workers:
                process.join(60)
            leased = client.stats()["counts"]["leased"]
    finally:
        server.terminate()
        server.wait(60)
    requests = Counter(
        {
            op: figures["count"] - before["request_seconds"].get(op, {"count": 0})["count"]
            for op, figures in after["request_seconds"].items()
            if op not in ("metrics", "stats")
        }
    )
    return {
        "tasks": tasks,
        "processes": processes,
        "prefetch": "default" if prefetch is None else prefetch,
        "tasks_per_second": round(tasks / seconds),
        "round_trips_per_task": round(sum(result[0] for result in results) / tasks, 3),
        "requests_per_task": round(sum(requests.values()) / tasks, 3),
        "requests": dict(+requests),
        "fsyncs": after["counters"]["fsyncs"] - before["counters"]["fsyncs"],
        "server_cpu_us_per_task": round(server_cpu / tasks * 1e6),
        "workers_cpu_us_per_task": round(sum(result[2] for result in results) / tasks * 1e6),
        "leased_after_stop": leased,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tasks", type=int, default=4000)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--prefetch", type=int, default=None)
    arguments = parser.parse_args()
    print(json.dumps(measure(arguments.tasks, arguments.processes, arguments.prefetch)))


if __name__ == "__main__":
    main()
