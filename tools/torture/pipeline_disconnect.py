"""Campaign ``pipeline-disconnect``: clients send many requests before reading, then vanish mid-pipeline:
every answered request is durable on reopen, each request is applied whole or not at all, and none runs twice.
"""

from __future__ import annotations

import json
import random
import signal
import time
from typing import Any

from harness import seeded

from model import view
from walqueue import Queue

from .harness import Report
from .served import SERVER_START_TIMEOUT, ServedQueue, served_scratch, start_victim

#: A victim: one pipeline of `count` requests in one write (put_many of three new tasks, or a reserve of one
#: task for a worker named after the step), reads `read` answers, printing each, then leaves as `how` says.
PIPELINE_VICTIM = r"""
import json, os, signal, socket, sys
path, prefix, count, read, how = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
lines = []
for step in range(count):
    if step % 4 == 3:
        request = {"op": "reserve", "worker": f"{prefix}-w{step}", "now": 1, "lease_seconds": 10**6, "id": step}
    else:
        items = [{"task_id": f"{prefix}-{step}-{i}", "payload": {"step": step}} for i in range(3)]
        request = {"op": "put_many", "tasks": items, "id": step}
    lines.append(json.dumps(request).encode() + b"\n")
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.connect(path)
print("ready", flush=True)
sock.sendall(b"".join(lines))
reader = sock.makefile("rb")
for _ in range(read):
    answer = json.loads(reader.readline())
    assert answer["ok"] is True, answer
    print("answered", answer["id"], json.dumps(answer.get("leases", [])), flush=True)
if how == "close":
    os._exit(0)  # unread answers in its buffer: the server sees the connection reset
if how == "half":
    sock.shutdown(socket.SHUT_WR)
    os._exit(0)
signal.pause()  # "kill": the parent kills it
"""

_HOWS = ("close", "half", "kill")


def campaign_pipeline_disconnect(seed: int, budget: float, report: Report) -> None:
    """Pipelining clients that disconnect mid-pipeline (close, half-close, SIGKILL) against one server.

    Afterwards every answered request's effect is present (also after a
    reopen), each put_many is applied whole or not at all, each reserve
    leased at most one task (a request run twice would lease two, or
    write a second transaction), and the log holds exactly one transaction
    per applied request; SIGTERM exits 0 and the reopened directory equals
    what was served.
    """
    deadline = time.monotonic() + budget
    rng = seeded("pipeline-disconnect", seed)
    with served_scratch("torture-pipelines-") as (root, sockets):
        _pipeline_run(
            rng, ServedQueue(root / "q", f"{sockets}/s"), deadline, report, f"--seed {seed} pipeline-disconnect"
        )


def _pipeline_run(rng: random.Random, server: ServedQueue, deadline: float, report: Report, where: str) -> None:
    from walqueue.client import Client

    answered: dict[str, list[tuple[int, list[Any]]]] = {}
    counts: dict[str, int] = {}
    try:
        with Client(server.socket_path, timeout=60) as observer:
            number = 0
            while number < 6 or time.monotonic() < deadline:
                prefix = f"v{number}"
                count = rng.randint(4, 60)
                answered[prefix] = _one_victim(rng, server.socket_path, prefix, count, report)
                counts[prefix] = count
                number += 1
            time.sleep(0.1)  # a reset connection's requests already read may still be executing
            served = view(observer)  # type: ignore[arg-type]  # a Client has the reads of a Queue
            transactions = observer.last_seq
        if server.stop() != 0:
            report.diverge("pipeline-disconnect: SIGTERM did not exit 0")
        with Queue(server.directory, sync=False) as reopened:
            if view(reopened) != served:
                report.diverge("pipeline-disconnect: the reopened directory differs from what the server answered")
            _check(reopened, answered, counts, transactions, report, where)
    finally:
        server.kill()


def _one_victim(rng: random.Random, socket_path: str, prefix: str, count: int, report: Report) -> list[Any]:
    """Run one victim to its end; the (step, leases) of every answer it read."""
    how = rng.choice(_HOWS)
    read = rng.randint(0, count)
    arguments = [socket_path, prefix, str(count), str(read), how]
    victim = start_victim(PIPELINE_VICTIM, arguments, f"pipeline-disconnect: victim {prefix}")
    if how == "kill":
        time.sleep(rng.uniform(0.0, 0.1))
        victim.send_signal(signal.SIGKILL)
    output, _ = victim.communicate(timeout=SERVER_START_TIMEOUT)
    report.count(f"pipelines cut ({how})")
    got = []
    for line in output.split(b"\n"):
        words = line.split(b" ", 2)
        if len(words) == 3 and words[0] == b"answered":
            got.append((int(words[1]), json.loads(words[2])))
    report.count("requests answered", len(got))
    return got


def _check(
    queue: Queue,
    answered: dict[str, list[tuple[int, list[Any]]]],
    counts: dict[str, int],
    transactions: int,
    report: Report,
    where: str,
) -> None:
    tasks = {task.task_id: task for task in queue.tasks()}
    applied = 0
    for prefix, count in counts.items():
        done = {step: leases for step, leases in answered[prefix]}
        for step in range(count):
            if step % 4 == 3:
                holders = [t for t in tasks.values() if t.worker == f"{prefix}-w{step}"]
                if len(holders) > 1:
                    report.diverge(f"{where}: reserve {prefix}/{step} leased {len(holders)} tasks (it ran twice)")
                if step in done and [h.task_id for h in holders] != [lease["task_id"] for lease in done[step]]:
                    report.diverge(f"{where}: reserve {prefix}/{step} answered {done[step]}, holds {holders}")
                applied += len(holders)
                continue
            present = sum(f"{prefix}-{step}-{i}" in tasks for i in range(3))
            if present not in (0, 3):
                report.diverge(f"{where}: put_many {prefix}/{step} applied in part ({present} of 3)")
            if step in done and present != 3:
                report.diverge(f"{where}: put_many {prefix}/{step} was answered but is not durable")
            applied += present == 3
            if present == 3 and step not in done:
                report.count("requests applied but not answered")
    if queue.last_seq != transactions or transactions != applied:
        report.diverge(f"{where}: {transactions} transactions for {applied} applied requests (one ran twice?)")
