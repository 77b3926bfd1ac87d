"""Long jobs on a short lease: `walqueue.worker` keeps the lease alive with heartbeats, and stops a cancelled job.

    python examples/heartbeat.py DIRECTORY

Without heartbeats a worker must take a lease as long as its slowest job,
and the task of a worker that crashed waits that long before another
worker gets it. Here the lease is 1 s and each job takes 2.5 s: the
`Worker` extends the lease every third of it (`Queue.extend`) while the
handler runs. If the worker died, its heartbeats would die with it and the
task would be free again within 1 s.

When an extend finds the lease gone (it expired, a later reserve took the
task, or an operator cancelled it), the worker tells the handler through
its context: `context.check()` raises `LeaseLost`, and whatever the handler
does next is discarded, never acked. Two jobs, on the real clock in
milliseconds (the worker's default unit):

1. `report-1`: while it runs, "worker-2" tries to reserve after the first
   deadline has passed and finds nothing; the job finishes and is acked;
2. `report-2`: an operator cancels it 1 s in (`Queue.cancel`); the next
   heartbeat finds the lease stale and the job stops at its next step.

It leaves `report-1` completed and `report-2` dead, with 1 attempt of 3 (a
cancelled task keeps its attempts; `examples/redrive.py` can bring it
back). Running it again finds nothing to do and writes nothing. Exits 0.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

try:
    from walqueue import Queue, WrongStatus
    from walqueue.worker import Context, Job, LeaseLost, Worker
except ImportError:  # not installed, or a version without the worker: run from a checkout
    for _name in [name for name in sys.modules if name == "walqueue" or name.startswith("walqueue.")]:
        del sys.modules[_name]
    _packages = Path(__file__).resolve().parent.parent / "packages"
    sys.path[:0] = [str(_packages / dist / "src") for dist in ("walqueue-format", "walqueue-engine", "walqueue-cli")]
    from walqueue import Queue, WrongStatus
    from walqueue.worker import Context, Job, LeaseLost, Worker

LEASE_MS = 1000  # a crashed worker's task waits at most this long; a heartbeat every 333 ms
STEP_MS = 50  # the job checks its context this often
JOBS: dict[str, dict[str, Any]] = {
    "report-1": {"steps": 50},  # 50 x 50 ms = 2.5 s, 2.5 leases
    "report-2": {"steps": 50, "cancel_at_step": 20},
}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def make_handler(queue: Queue) -> Any:
    def handle(job: Job, context: Context) -> None:
        start = now_ms()
        print(f"worker-1: {job.id} started (attempt {job.attempts})")
        try:
            for step in range(job.payload["steps"]):
                context.check()  # raises LeaseLost once the task is no longer ours
                time.sleep(STEP_MS / 1000)  # the real work would go here
                if step == 30 and job.id == "report-1":  # 1.5 s in: past the deadline the lease was taken with
                    taken = queue.reserve("worker-2", now=now_ms(), lease_seconds=LEASE_MS)
                    print(f"  t+{now_ms() - start} ms worker-2 reserves: {[t.task_id for t in taken] or 'nothing'}")
                if step == job.payload.get("cancel_at_step"):
                    try:
                        queue.cancel(job.id)  # an operator, from anywhere (walqueue-serve, another thread)
                    except WrongStatus as error:
                        print(f"  cancel refused: {error}")
                    else:
                        print(f"  t+{now_ms() - start} ms an operator cancels {job.id}")
        except LeaseLost:
            print(f"worker-1: {job.id} lease lost after {now_ms() - start} ms ({context.reason}); job stopped, no ack")
            raise
        print(f"worker-1: {job.id} done after {now_ms() - start} ms, {context.heartbeats} extends")

    return handle


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {argv[0]} DIRECTORY", file=sys.stderr)
        return 2
    with Queue(argv[1]) as queue:
        worker = Worker(queue, make_handler(queue), lease=LEASE_MS, name="worker-1")
        worker.start()
        for task_id, payload in JOBS.items():  # one at a time, so that worker-2 finds nothing else
            queue.put(task_id, payload)  # an identical retry on a second run, which then finds nothing to do
            while (task := queue.get(task_id)) is not None and task.status in ("ready", "leased"):
                queue.wait(1.0)  # until the worker's ack, release or the cancel commits
        worker.stop()
        worker.wait()
        stats = worker.stats()
        print(f"acked {stats['completed']}, leases lost {stats['lost']}")
        for task in queue.tasks():
            print(f"{task.task_id}: {task.status}, {task.attempts} of {task.max_attempts} attempts")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
