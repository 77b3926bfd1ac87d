"""Campaign ``chains``: SIGKILL workers and the server through chains of task functions, and between return and ack.

Each unit puts chain heads of an `App` (``chainapp:app``, written into the
unit's directory): step n of a chain enqueues step n + 1 through
`current().enqueue` until its last step; one chain in four has a step that
fails permanently (dead at once, its last error naming the step). The app's handler SIGKILLs its own
process, at random, **after the task function returned and before the
worker commits the completion** (between a handler's return and its ack).
``walqueue-worker DIR chainapp:app --processes 2`` runs it (its
supervisor restarts what dies), and the campaign SIGKILLs a worker process
or the server at random moments until every chain has finished. Then
SIGTERM, and the checks, on the store:

- every chain's tasks are exactly ``head, head/1, head/1/1, ...`` up to its
  first step that is not completed: each follow-up exists exactly once,
  and none exists for a task that did not complete;
- every completed step has its stored result (the step's number);
- a chain with a failing step ends with that step dead, its last error
  naming the step; every other chain is completed to its last step;
- no lease is held.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from walqueue import Queue

from .harness import Report, socket_units
from .workers import _children

APP = """
import os, random, signal
from walqueue.worker import App, Permanent, current

class KillingApp(App):
    # Dies now and then after the function returned, before the worker sends the completion.
    def __call__(self, job, context):
        completion = super().__call__(job, context)
        if random.random() < KILL_AFTER_RETURN:
            path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "returned.log")
            with open(path, "a") as log:
                log.write(f"{job.id} {job.attempts}\\n")
            os.kill(os.getpid(), signal.SIGKILL)
        return completion

KILL_AFTER_RETURN = 0.08
app = KillingApp()

@app.task(name="chain.step", max_attempts=25)
def step(n, last, broken):
    if n == broken:
        raise Permanent(f"step {n} is broken")
    if n < last:
        current().enqueue(step, n + 1, last, broken)
    return n
"""

CHAINS_PER_UNIT = 12
UNIT_SECONDS = 90.0


@dataclass
class Unit:
    directory: Path
    rng: random.Random
    report: Report
    where: str
    chains: dict[str, tuple[int, int]] = field(default_factory=dict)  # head id -> (last step, broken step or 0)

    @property
    def store(self) -> Path:
        return self.directory / "q"


def campaign_chains(seed: int, budget: float, report: Report) -> None:
    """Units of chains under kills until the budget is spent (at least one)."""
    socket_units(
        "chains", seed, budget, report, lambda directory, rng, where: _run_unit(Unit(directory, rng, report, where))
    )


def _put_chains(unit: Unit) -> None:
    items = []
    for number in range(CHAINS_PER_UNIT):
        last = unit.rng.randint(2, 5)
        broken = unit.rng.randint(2, last) if unit.rng.random() < 0.25 else 0
        head = f"chain-{number:02}"
        unit.chains[head] = (last, broken)
        payload = {"kind": "chain.step", "args": [1, last, broken], "kwargs": {}}
        items.append({"task_id": head, "payload": payload, "max_attempts": 25})
    with Queue(unit.store) as queue:
        queue.put_many(items)


def _start(unit: Unit) -> subprocess.Popen[bytes]:
    (unit.directory / "chainapp.py").write_text(APP)
    command = [sys.executable, "-m", "walqueue.worker", str(unit.store), "chainapp:app", "--processes", "2"]
    command += ["--concurrency", "2", "--lease", "1", "--grace", "1", "--log-level", "ERROR", "--summary", "0"]
    import walqueue

    env = dict(os.environ)
    roots = [str(Path(entry).parent) for entry in walqueue.__path__]
    env["PYTHONPATH"] = os.pathsep.join(roots + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return subprocess.Popen(
        command,
        cwd=unit.directory,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _finished(unit: Unit) -> bool:
    """Whether nothing is ready or leased any more (asked of the server; False while it is away)."""
    from walqueue.client import Client

    try:
        with Client(unit.store / "worker.sock", timeout=5, reconnect_seconds=0.5) as client:
            counts = client.stats()["counts"]
    except Exception:  # noqa: BLE001 - the server is being killed or restarted: ask again later
        return False
    return bool(counts["ready"] == 0 and counts["leased"] == 0 and counts["completed"] > 0)


def _kill_one(unit: Unit, supervisor: subprocess.Popen[bytes]) -> None:
    children = _children(supervisor.pid)
    servers = [pid for pid, kind in children if kind == "server"]
    workers = [pid for pid, kind in children if kind == "worker"]
    if servers and unit.rng.random() < 0.3:
        target, what = servers[0], "server kills"
    elif workers:
        target, what = unit.rng.choice(workers), "worker kills"
    else:
        return
    try:
        os.kill(target, signal.SIGKILL)
    except ProcessLookupError:
        return
    unit.report.count(what)


def _run_unit(unit: Unit) -> None:
    unit.directory.mkdir(parents=True)
    _put_chains(unit)
    supervisor = _start(unit)
    give_up = time.monotonic() + UNIT_SECONDS
    try:
        while not _finished(unit):
            if supervisor.poll() is not None:
                unit.report.diverge(f"{unit.where}: the supervisor exited {supervisor.returncode} under load")
                return
            if time.monotonic() > give_up:
                unit.report.diverge(f"{unit.where}: chains still not done after {UNIT_SECONDS:.0f} s")
                return
            time.sleep(unit.rng.uniform(0.1, 0.5))
            if unit.rng.random() < 0.5:
                _kill_one(unit, supervisor)
        supervisor.send_signal(signal.SIGTERM)
        if (status := supervisor.wait(30)) != 0:
            unit.report.diverge(f"{unit.where}: the supervisor exited {status} after SIGTERM")
    finally:
        if supervisor.poll() is None:
            os.killpg(supervisor.pid, signal.SIGKILL)
            supervisor.wait()
    _check(unit)


def _check(unit: Unit) -> None:
    report, where = unit.report, unit.where
    returned = unit.directory / "returned.log"
    report.count("kills between return and ack", len(returned.read_text().splitlines()) if returned.exists() else 0)
    with Queue(unit.store) as queue:
        tasks = {task.task_id: task for task in queue.tasks()}
        results = {task_id: queue.result(task_id) for task_id in tasks}
    if any(task.status == "leased" for task in tasks.values()):
        report.diverge(f"{where}: a lease is still held after the clean stop")
    expected_ids: set[str] = set()
    for head, (last, broken) in unit.chains.items():
        report.count("chains")
        task_id, n = head, 1
        while True:
            expected_ids.add(task_id)
            task = tasks.get(task_id)
            if task is None:
                report.diverge(f"{where}: step {n} of {head} ({task_id}) is missing")
                break
            if task.status != "completed":
                _check_stop(unit, head, task, n, broken)
                break
            report.count("completed steps")
            stored: Any = results.get(task_id)
            if stored is None or stored["value"] != n:
                report.diverge(f"{where}: {task_id} completed without its result (stored: {stored!r})")
            if n == last:
                if broken:
                    report.diverge(f"{where}: {head} completed past its broken step {broken}")
                break
            task_id, n = f"{task_id}/1", n + 1
    for extra in sorted(set(tasks) - expected_ids):
        report.diverge(f"{where}: {extra} exists, but it is no follow-up of a completed step (or a second one)")


def _check_stop(unit: Unit, head: str, task: Any, n: int, broken: int) -> None:
    """A chain stopped at step `n` (`task`): only its broken step may stop it, dead, with the step's error."""
    if task.status == "dead" and n == broken:
        error = task.last_error
        unit.report.count("chains stopped at a dead step")
        if error is None or f"step {n} is broken" not in error.message:
            unit.report.diverge(f"{unit.where}: the dead step {task.task_id} has last error {error!r}")
        return
    if task.status == "dead" and task.last_error is not None and task.last_error.type == "LeaseExpired":
        unit.report.count("chains stopped by kills")  # its attempts all ended in kills: dead, and the chain stops
        return
    unit.report.diverge(f"{unit.where}: {head} stopped at step {n} ({task.task_id}), {task.status}")
