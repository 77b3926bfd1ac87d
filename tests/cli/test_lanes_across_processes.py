"""Lanes' limits hold exactly across processes: 8 worker processes through one walqueue-serve.

The proof is read from the log, not from the workers' reports: after the
run every transaction is applied again, in order, to a fresh state, and at
every commit the number of leased tasks of the limited queue must be within
its concurrency limit; every n+1 consecutive leases of the rate-limited
queue (their `at`, the `now` each reserve gave) must span at least the
window.
"""

from __future__ import annotations

import multiprocessing
import random
import time
from pathlib import Path

import pytest

from model import wal_bodies
from support.servers import running_server, short_directory
from walqueue.client import Client
from walqueue.engine.records import view
from walqueue.engine.state import State, apply

pytestmark = pytest.mark.timeout(240)

_fork = multiprocessing.get_context("fork")
PROCESSES = 8
CONCURRENCY = 3
RATE, WINDOW = 4, 150  # at most 4 leases per 150 ms
TASKS = {"api": 90, "partner": 30, "default": 60}


def _now() -> int:
    return int(time.time() * 1000)


def _work(socket_path: str, name: str, seed: int) -> None:
    """A worker: reserve up to two tasks from every queue, hold each a few ms, ack; until all are done."""
    rng = random.Random(seed)
    total = sum(TASKS.values())
    give_up = time.monotonic() + 180
    with Client(socket_path) as client:
        while time.monotonic() < give_up:
            leases = client.reserve(name, now=_now(), lease_seconds=60_000, limit=rng.choice([1, 2]))
            for lease in leases:
                time.sleep(rng.uniform(0, 0.004))
                client.ack(lease, now=_now())
            if not leases:
                if client.stats()["counts"]["completed"] == total:
                    return
                time.sleep(0.002)
    raise SystemExit(1)


def test_eight_processes_never_exceed_a_queues_concurrency_and_its_rate_holds_exactly() -> None:
    with short_directory() as place:
        directory: Path = place / "q"
        with running_server(directory, place / "s") as server:
            with Client(server.socket_path) as client:
                client.configure_queue("api", concurrency=CONCURRENCY)
                client.configure_queue("partner", rate=[RATE, WINDOW])
                for queue, count in TASKS.items():
                    client.put_many([{"task_id": f"{queue}-{n}", "payload": {}, "queue": queue} for n in range(count)])
            workers = [_fork.Process(target=_work, args=(server.socket_path, f"w{n}", n)) for n in range(PROCESSES)]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join(200)
            assert [worker.exitcode for worker in workers] == [0] * PROCESSES
        # The sampler: every commit of the log, replayed in order.
        state = State()
        peak = 0
        partner_times: list[int] = []
        for body in wal_bodies(directory):
            apply(state, body, decoded=True)
            leased = {q["name"]: q["counts"]["leased"] for q in state.queues()}
            assert leased.get("api", 0) <= CONCURRENCY, f"transaction {body['seq']}: {leased}"
            peak = max(peak, leased.get("api", 0))
            leases = [op for op in body["ops"] if op["op"] == "lease"]
            partner_times += [op["at"] for op in leases if view(state.tasks[op["task"]]).queue == "partner"]
        assert peak == CONCURRENCY  # the limit was reached, and held
        assert len(partner_times) >= TASKS["partner"]
        for first, last in zip(partner_times, partner_times[RATE:], strict=False):
            assert last - first >= WINDOW, (first, last)
        assert state.counts()["completed"] == sum(TASKS.values())
