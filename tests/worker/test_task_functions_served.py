"""Tasks as functions across processes: walqueue-worker DIR|--socket S module:app, Client and AsyncClient producers.

The worker runs the app on its own source (the app module's `App()` has
none); the producers bind theirs. Results come back through the server's
`result` and `wait` calls.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import functions_app as tasks
import pytest

from support.children import child_environment
from support.servers import served_store
from walqueue import Queue
from walqueue.client import AsyncClient, Client
from walqueue.worker import TaskFailed

pytestmark = pytest.mark.timeout(120)
WAIT = 30.0
HERE = Path(__file__).parent


def _worker(env: dict[str, str], *place: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "walqueue.worker", *place, "functions_app:app", "--concurrency", "4"]
    return subprocess.Popen(command, cwd=HERE, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _stop(process: subprocess.Popen[bytes]) -> int:
    process.send_signal(signal.SIGTERM)
    return process.wait(WAIT)


@pytest.fixture
def served() -> Iterator[tuple[str, dict[str, str]]]:
    """walqueue-serve on a fresh queue, and a walqueue-worker running functions_app:app through it."""
    env = child_environment()
    with served_store() as server:
        worker = _worker(env, "--socket", server.socket_path)
        try:
            yield server.socket_path, env
        finally:
            assert _stop(worker) == 0


def test_a_web_process_enqueues_through_a_client_and_reads_results_and_chains(
    served: tuple[str, dict[str, str]],
) -> None:
    socket_path, _ = served
    with Client(socket_path, timeout=30) as client:
        tasks.app.bind(client)
        assert tasks.add.enqueue(20, 22).result(timeout=WAIT) == 42
        with pytest.raises(TaskFailed, match="ValueError: full"):
            tasks.broken.enqueue("full").result(timeout=WAIT)
        first = tasks.step.enqueue(1, 3)
        assert tasks.app.handle(f"{first.id}/1/1").result(timeout=WAIT) == 3
        assert client.get(f"{first.id}/1/1/1") is None


def test_an_asgi_process_awaits_results_through_an_async_client(served: tuple[str, dict[str, str]]) -> None:
    socket_path, _ = served

    async def main() -> list[object]:
        async with AsyncClient(socket_path) as client:
            tasks.app.bind(client)
            handles = [await tasks.slow_double.aenqueue(n, 0.01) for n in range(5)]
            return [await handle.aresult(timeout=WAIT) for handle in handles]

    assert asyncio.run(main()) == [0, 2, 4, 6, 8]


def test_walqueue_worker_runs_an_app_on_a_directory_and_stops_cleanly(src_pythonpath: str, tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=src_pythonpath)
    with Queue(tmp_path / "q") as queue:
        tasks.app.bind(queue)
        handle = tasks.greet.enqueue("ada")
        unknown = queue.put("u", {"kind": "gone.task", "args": [], "kwargs": {}})
    log = tmp_path / "worker.log"
    with log.open("wb") as output:
        command = [sys.executable, "-m", "walqueue.worker", str(tmp_path / "q"), "functions_app:app"]
        worker = subprocess.Popen(command, cwd=HERE, env=env, stdout=subprocess.DEVNULL, stderr=output)
    give_up = time.monotonic() + WAIT
    while not all(f"{word} {task}" in log.read_text() for word, task in (("completed", handle.id), ("dead", "u"))):
        assert worker.poll() is None, log.read_text()
        assert time.monotonic() < give_up, log.read_text()
        time.sleep(0.05)  # the store is the worker's while it runs: its log says when the tasks are done
    assert _stop(worker) == 0
    with Queue(tmp_path / "q") as queue:
        tasks.app.bind(queue)
        assert handle.result(timeout=5) == "hello ada!"
        dead = queue.get(unknown)
        assert dead is not None and dead.status == "dead" and dead.last_error is not None
        assert dead.last_error.type == "UnknownKind"
