"""A worker whose server was SIGKILLed still stops within its grace: no heartbeat or give-back waits for a reconnect.

The client keeps reconnecting for 10 s by default; a heartbeat stuck in
that loop holds its run's lock, and the stop waited for it (and then for
each release, 10 s apiece), past the supervisor's kill. Heartbeats are
bounded by the grace and the beat interval, and once the stop begins each
call is tried once.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.servers import served_store
from walqueue.client import Client
from walqueue.protocol.exchange import DEFAULT_RECONNECT_SECONDS
from walqueue.worker import Context, Job, Worker


@pytest.fixture
def served() -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    with served_store() as server:
        yield server.process, Path(server.socket_path)


@pytest.mark.timeout(120)
def test_a_worker_whose_server_died_stops_within_its_grace(served: tuple[subprocess.Popen[bytes], Path]) -> None:
    server, socket_path = served
    running = threading.Event()
    beat_tried = threading.Event()

    def handle(job: Job, context: Context) -> None:
        running.set()
        context.lost.wait(60)

    with Client(str(socket_path)) as client:  # the default reconnect: 10 s
        client.put_many([{"task_id": f"t{n}", "payload": {}} for n in range(4)])
        worker = Worker(client, handle, concurrency=1, prefetch=2, lease=900, grace=300)
        worker.start()
        assert running.wait(30)
        server.send_signal(signal.SIGKILL)
        server.wait(30)
        original = worker._monitor.beat

        def beat(*args: object) -> None:
            beat_tried.set()
            original(*args)  # type: ignore[arg-type]

        worker._monitor.beat = beat  # type: ignore[method-assign]
        assert beat_tried.wait(30)  # a heartbeat is under way towards the dead server
        began = time.monotonic()
        worker.stop()
        assert worker.wait(30)
        took = time.monotonic() - began
    # The grace (0.3 s), plus a heartbeat bounded by it, plus one try per call: less than one reconnect's window.
    assert took < DEFAULT_RECONNECT_SECONDS, f"the stop took {took:.1f} s"
    assert worker.stats()["running"] == 0
