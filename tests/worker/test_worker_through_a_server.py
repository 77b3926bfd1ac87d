"""A Worker whose source is a `Client` of walqueue-serve: few requests per task, and no lease left behind.

Through a server every call is a round trip, so the worker reserves
several leases at a time (again once half are used), sends the acks
waiting then in the same round trip as one `ack_many`, and keeps every
lease it holds alive with heartbeats until its handler starts; a stop gives
back at once those that never started. The counts asserted here are the
server's own (its `metrics()`), never timings.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from support.servers import served_store
from support.waiting import wait_until
from walqueue.client import Client
from walqueue.worker import Context, Job, Worker

pytestmark = pytest.mark.timeout(120)

WAIT = 30.0  # seconds: only a broken worker takes this long


@pytest.fixture
def client() -> Iterator[Client]:
    """A walqueue-serve process on a fresh queue (a short socket path, for AF_UNIX), and a client of it."""
    with served_store() as server, Client(server.socket_path, timeout=30) as opened:
        yield opened


class CountingClient:
    """A client whose round trips are counted: each call, and each pipeline (with the calls it carried)."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.round_trips: collections.Counter[str] = collections.Counter()

    def pipeline(self) -> Any:
        counter = self.round_trips
        calls: list[str] = []
        pipeline = self.client.pipeline()

        class Counted:
            def __getattr__(self, name: str) -> Any:
                if name == "execute":
                    counter["+".join(calls)] += 1
                else:
                    calls.append(name)
                return getattr(pipeline, name)

        return Counted()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.client, name)
        if not callable(method):
            return method

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.round_trips[name] += 1
            return method(*args, **kwargs)

        return counted


def requests(client: Client) -> dict[str, int]:
    """How many requests of each op the server has answered."""
    return {op: figures["count"] for op, figures in client.metrics()["request_seconds"].items()}


def test_through_a_server_leases_come_several_per_reserve_and_the_acks_ride_along_as_ack_many(client: Client) -> None:
    count = 300
    client.put_many([{"task_id": f"t{n:03}", "payload": {"n": n}} for n in range(count)])
    source = CountingClient(client)
    worker = Worker(source, lambda job, context: None, concurrency=1)  # type: ignore[arg-type]
    worker.start()
    wait_until(lambda: client.stats()["counts"]["completed"] == count)
    worker.stop()
    assert worker.wait(WAIT)
    assert worker.stats()["completed"] == count
    served = requests(client)
    assert served.get("ack", 0) == 0  # no lease was lost, so no ack went alone
    assert client.metrics()["counters"]["acks"] == count  # each acked once, by ack_many
    # Reserves ask for half the leases a worker holds (eight for one thread), not one each.
    assert served["reserve"] <= count // 4 + 5, served
    carried = source.round_trips["ack_many+reserve"]
    assert carried >= 1, source.round_trips  # acks went in the round trips of reserves
    assert client.stats()["counts"]["leased"] == 0


def test_a_stop_gives_back_every_prefetched_lease_at_once_and_the_running_one_after_its_handler(
    client: Client,
) -> None:
    client.put_many([{"task_id": f"t{n:03}", "payload": {"block": n == 40}} for n in range(200)])
    started, finish = threading.Event(), threading.Event()

    def handle(job: Job, context: Context) -> None:
        if job.payload["block"]:  # after forty quick ones: the worker has learnt to prefetch
            started.set()
            finish.wait(WAIT)

    worker = Worker(client, handle, concurrency=1, grace=60_000)
    worker.start()
    assert started.wait(WAIT)
    wait_until(lambda: client.stats()["counts"]["leased"] > 1)  # one running, the others prefetched
    worker.stop()
    # Those that never started are given back at once, while the running handler has its grace.
    wait_until(lambda: client.stats()["counts"]["leased"] == 1)
    assert not worker.done
    finish.set()
    assert worker.wait(WAIT)
    counts = client.stats()["counts"]
    stats = worker.stats()
    assert counts["leased"] == 0 and counts["completed"] == stats["completed"] == 41
    assert counts["ready"] == 159 and stats["returned"] >= 1


def test_a_worker_whose_handlers_are_slow_prefetches_nothing(client: Client) -> None:
    client.put_many([{"task_id": f"t{n}", "payload": {}} for n in range(6)])
    held: list[int] = []  # leases held, seen from each handler: its own and those prefetched

    def handle(job: Job, context: Context) -> None:
        time.sleep(0.15)  # longer than the 0.1 s a prefetched lease may wait for its thread
        counts = client.stats()["counts"]
        finished_not_acked = len(held) - counts["completed"]  # the earlier runs whose acks are on their way
        held.append(counts["leased"] - finished_not_acked)

    worker = Worker(client, handle, concurrency=1)
    worker.start()
    wait_until(lambda: client.stats()["counts"]["completed"] == 6)
    worker.stop()
    assert worker.wait(WAIT)
    assert held[0] <= 2  # one prefetched until the first run was measured
    assert max(held[2:]) == 1, held  # then only the running one


def test_prefetched_leases_get_heartbeats_while_they_wait_for_a_thread(client: Client) -> None:
    client.put_many([{"task_id": f"t{n}", "payload": {}} for n in range(8)])
    started, finish = threading.Event(), threading.Event()

    def handle(job: Job, context: Context) -> None:
        if not started.is_set():
            started.set()
            finish.wait(WAIT)

    worker = Worker(client, handle, concurrency=1, prefetch=7, lease=3_000)  # a heartbeat every second
    worker.start()
    assert started.wait(WAIT)
    wait_until(lambda: client.stats()["counts"]["leased"] == 8)  # one running, seven prefetched
    first = {task.task_id: task.deadline for task in client.tasks("leased")}
    # Every waiting lease is extended before it could run out (none is lost while its task waits).
    wait_until(lambda: all(task.deadline > first[task.task_id] for task in client.tasks("leased")))
    finish.set()
    wait_until(lambda: client.stats()["counts"]["completed"] == 8)
    worker.stop()
    assert worker.wait(WAIT)
    assert worker.stats()["lost"] == 0
    assert all(task.attempts == 1 for task in client.tasks())
