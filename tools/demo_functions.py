"""The demo's task queue: decorated functions, a worker fleet, a retry, a dead task, results and a chain.

`bash tools/demo.sh` runs this file as a script (the producer), which
starts walqueue-serve on a temporary directory and two walqueue-worker
processes running this same module's `app` (``demo_functions:app``), puts
the tasks through a `Client`, reads the results back, and stops them all.
The task names are given (``name=``), so that the producer (this file run
as ``__main__``) and the workers (this file imported) agree on them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from walqueue.client import Client
from walqueue.worker import App, RetryPolicy, TaskFailed, current

app = App()
QUICK = RetryPolicy(base=200, cap=400)  # milliseconds: the demo's retries come back at once


@app.task(name="demo.thumbnail")
def thumbnail(image: str, width: int) -> str:
    return f"{image.removesuffix('.png')}-{width}px.png"


@app.task(name="demo.flaky_fetch", retry=QUICK)
def flaky_fetch(url: str) -> int:
    """Fails on its first attempt (a network hiccup), succeeds on the retry."""
    if current().attempts == 1:
        raise ConnectionError(f"{url}: connection reset by peer")
    return 200


@app.task(name="demo.charge_card", max_attempts=2, retry=QUICK)
def charge_card(card: str) -> None:
    raise ValueError(f"card {card} was declined")


@app.task(name="demo.fetch")
def fetch(order: int) -> dict[str, int]:
    current().enqueue(parse, order)  # committed with this task's completion, as <this id>/1
    return {"order": order, "bytes": 1200}


@app.task(name="demo.parse")
def parse(order: int) -> dict[str, int]:
    current().enqueue(store, order, 3)
    return {"order": order, "lines": 3}


@app.task(name="demo.store")
def store(order: int, lines: int) -> str:
    return f"order {order}: {lines} lines stored"


def _start(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as output:
        return subprocess.Popen(command, stdout=output, stderr=output, cwd=Path(__file__).parent)


def main(work: Path) -> int:
    queue_dir, socket_path = work / "queue", str(work / "queue.sock")
    python = sys.executable
    print(f"== walqueue-serve {queue_dir} --socket {socket_path}")
    server = _start([python, "-m", "walqueue.serve", str(queue_dir), "--socket", socket_path], work / "serve.log")
    while not os.path.exists(socket_path):
        if server.poll() is not None:
            print((work / "serve.log").read_text(), file=sys.stderr)
            return 1
        time.sleep(0.01)
    print("== a worker fleet: 2 x walqueue-worker --socket ... demo_functions:app --concurrency 2")
    worker = [python, "-m", "walqueue.worker", "--socket", socket_path, "demo_functions:app", "--concurrency", "2"]
    fleet = [_start([*worker, "--name", f"worker-{n}"], work / f"worker-{n}.log") for n in (1, 2)]
    try:
        with Client(socket_path) as client:
            app.bind(client)
            _produce(client)
    finally:
        for process in [*fleet, server]:
            process.send_signal(signal.SIGTERM)
            process.wait(30)
    print("== the fleet stopped on SIGTERM (each worker gave back what it held); its retries, deaths and summaries:")
    for n in (1, 2):
        for line in (work / f"worker-{n}.log").read_text().splitlines():
            if any(word in line for word in (" retried ", " dead ", " summary: ")):  # each worker's own summary too
                print("   ", line.split(" ", 2)[-1][:110])
    print(f"== the dashboard: walqueue-serve {queue_dir} --socket {socket_path} --http 127.0.0.1:8080")
    print("   would serve it at http://127.0.0.1:8080/ (the queue's counts, dead letters and their errors)")
    return 0


def _produce(client: Client) -> None:
    print("== decorated functions enqueued (thumbnail.enqueue(...) returns a handle at once)")
    thumbs = [thumbnail.enqueue(f"photo-{n}.png", width=320) for n in range(4)]
    for handle in thumbs:
        print(f"   {handle.id}  {handle.status()}")
    fetched, charged = flaky_fetch.enqueue("https://example.org/feed"), charge_card.enqueue("4242-0001")
    first = fetch.enqueue(7)
    print("== results read back (handle.result(timeout=10): the server's wait, no polling)")
    for handle in thumbs:
        print(f"   {handle.id} -> {handle.result(timeout=10)!r}")
    print(f"== a retry: flaky_fetch failed once, then -> {fetched.result(timeout=10)!r}")
    try:
        charged.result(timeout=10)
    except TaskFailed as failed:
        error = failed.last_error
        assert error is not None
        print(f"== a dead task after {error.attempt} attempts, with its last error: {error.type}: {error.message}")
    print("== a follow-up chain, each step committed with the completion of the one before it:")
    for step, task_id in zip(("fetch", "parse", "store"), (first.id, f"{first.id}/1", f"{first.id}/1/1"), strict=True):
        print(f"   {step:<6} {task_id:<38} -> {app.handle(task_id).result(timeout=10)!r}")
    counts = client.stats()["counts"]
    print(f"== counts: {counts}")


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
