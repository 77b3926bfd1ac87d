"""Campaign ``client-kill``: SIGKILL client processes in the middle of requests: each
request is completed or never started, and the server serves on.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from harness import seeded

from model import view
from walqueue import Queue

from .harness import Report
from .served import CLIENT_KILL_DELAY, SERVER_START_TIMEOUT, ServedQueue, served_scratch, start_victim

CLIENT_VICTIM = r"""
import json, socket, sys, time
path, prefix, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.connect(path)
reader = sock.makefile("rb")
print("ready", flush=True)
for step in range(steps):
    items = [{"task_id": f"{prefix}-{step}-{i}", "payload": {"step": step, "i": i}} for i in range(3)]
    line = json.dumps({"op": "put_many", "tasks": items, "id": step}).encode() + b"\n"
    print("begin", step, flush=True)
    cut = len(line) // 2
    sock.sendall(line[:cut])
    time.sleep(0.002)
    sock.sendall(line[cut:])
    answer = json.loads(reader.readline())
    assert answer == {"id": step, "ok": True, "task_ids": [item["task_id"] for item in items]}, answer
    print("done", step, flush=True)
"""


def campaign_client_kill(seed: int, budget: float, report: Report) -> None:
    """SIGKILL client processes in the middle of their requests; each request is completed or never started.

    Each victim sends `put_many` requests of three tasks, each line in two
    writes, printing ``begin``/``done`` around it, and dies by SIGKILL at a
    random moment. Afterwards the server must hold every done request's
    tasks, all or none of the one in flight, nothing of later ones, and
    still answer another client; at the end SIGTERM exits 0 and the
    reopened directory equals what was served.
    """
    deadline = time.monotonic() + budget
    rng = seeded("client-kill", seed)
    with served_scratch("torture-clients-") as (root, sockets):
        _client_kill_run(rng, root, f"{sockets}/s", deadline, report, f"--seed {seed} client-kill")


def _client_kill_run(
    rng: random.Random, root: Path, socket_path: str, deadline: float, report: Report, where: str
) -> None:
    from walqueue.client import Client

    server = ServedQueue(root / "q", socket_path)
    try:
        with Client(socket_path, timeout=60) as observer:
            victim_number = 0
            while victim_number < 10 or time.monotonic() < deadline:
                _kill_one_client(rng, victim_number, socket_path, observer, report, where)
                victim_number += 1
            served = view(observer)  # type: ignore[arg-type]  # a Client has the reads of a Queue
        if server.stop() != 0:
            report.diverge("client-kill: SIGTERM did not exit 0")
        with Queue(root / "q", sync=False) as reopened:
            if view(reopened) != served:
                report.diverge("client-kill: the reopened directory differs from what the server answered")
    finally:
        server.kill()


def _kill_one_client(
    rng: random.Random, number: int, socket_path: str, observer: Any, report: Report, where: str
) -> None:
    prefix = f"v{number}"
    victim = start_victim(CLIENT_VICTIM, [socket_path, prefix, "1000"], f"{where}: victim {number}")
    time.sleep(rng.uniform(*CLIENT_KILL_DELAY))
    victim.kill()
    output, _ = victim.communicate(timeout=SERVER_START_TIMEOUT)
    begun = done = -1
    for line in output.split(b"\n"):
        words = line.split()
        if len(words) == 2 and words[0] == b"begin":
            begun = int(words[1])
        elif len(words) == 2 and words[0] == b"done":
            done = int(words[1])
    report.count("client kills")
    time.sleep(0.05)  # the server may still be executing the request the victim sent last
    present = {task.task_id for task in observer.tasks() if task.task_id.startswith(prefix + "-")}
    steps_present = {int(task_id.split("-")[1]) for task_id in present}
    for step in steps_present:
        if {f"{prefix}-{step}-{i}" for i in range(3)} - present:
            report.diverge(f"{where} victim {number}: request {step} was applied in part")
    if steps_present - set(range(begun + 1)) or set(range(done + 1)) - steps_present:
        report.diverge(f"{where} victim {number}: begun {begun}, done {done}, applied {sorted(steps_present)}")
    report.count("requests completed", len(steps_present))
    if begun > done:
        report.count("in flight at the kill")
        report.count("in-flight completed" if begun in steps_present else "in-flight never started")
