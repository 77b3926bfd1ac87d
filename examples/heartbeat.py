"""A worker whose long jobs keep their lease alive with a heartbeat thread.

    python examples/heartbeat.py DIRECTORY

Without a heartbeat a worker must take a lease as long as its slowest job,
and a task whose worker crashed waits that long before another worker gets
it. Here the lease is short (1 s) and a thread calls `Queue.extend` every
0.2 s while the job runs, moving the deadline to `now + 1 s` each time; the
job itself takes 2.5 s. If the worker dies, its heartbeat dies with it and
the task is free again at most 1 s later.

`extend` raises `StaleLease` when the lease is no longer this worker's: it
expired before a beat came (the process stalled for more than a lease), a
later `reserve` took the task, or an operator cancelled it. The heartbeat
then stops and tells the job, which gives up at its next step; the worker
sends no ack (it would be `StaleLease` as well).

This demo runs on the real clock, in milliseconds (`now` may be in any
unit, as long as every call uses the same one), and does two jobs:

1. `report-1` (2.5 s of work): while it runs, "worker-2" tries to reserve
   after the first deadline has passed and finds nothing; the job is acked;
2. `report-2`: an operator cancels it 1 s in (`Queue.cancel`); the next
   beat gets `StaleLease`, the job stops early and is not acked.

It leaves `report-1` completed and `report-2` dead, with 1 attempt of 3 (a
cancelled task keeps the attempts it had; `examples/redrive.py` can bring
it back). Running it again finds nothing to do and writes nothing. Exits 0.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

try:
    from walqueue import Lease, Queue, QueueClosed, StaleLease, WrongStatus
except ImportError:  # not installed, or a version without extend/cancel (no WrongStatus): run from a checkout
    for _name in [name for name in sys.modules if name == "walqueue" or name.startswith("walqueue.")]:
        del sys.modules[_name]
    _packages = Path(__file__).resolve().parent.parent / "packages"
    sys.path[:0] = [str(_packages / dist / "src") for dist in ("walqueue-format", "walqueue-engine", "walqueue-cli")]
    from walqueue import Lease, Queue, QueueClosed, StaleLease, WrongStatus

LEASE_MS = 1000  # the lease taken and renewed: how long a crashed worker's task waits
BEAT_MS = 200  # a beat every fifth of a lease: four beats may be late before the lease is lost
STEP_MS = 50  # the job checks for a lost lease this often

JOBS: dict[str, dict[str, Any]] = {
    "report-1": {"steps": 50},  # 50 x 50 ms = 2.5 s, 2.5 leases
    "report-2": {"steps": 50, "cancel_at_step": 20},
}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Heartbeat:
    """Extend `lease` every `BEAT_MS` until stopped; `lost` is set once the lease is no longer ours.

    Use it as a context manager around the job: leaving the block stops the
    thread and waits for it, so no beat runs after the job's ack or release.
    """

    def __init__(self, queue: Queue, lease: Lease) -> None:
        self.queue = queue
        self.lease = lease  # the latest token; the first one stays valid too
        self.beats = 0
        self.lost = threading.Event()
        self.error: Exception | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat {lease.task_id}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(BEAT_MS / 1000):
            try:
                self.lease = self.queue.extend(self.lease, now=now_ms(), lease_seconds=LEASE_MS)
            except (StaleLease, QueueClosed) as error:  # not ours any more, or the queue is gone
                self.error = error
                self.lost.set()
                return
            self.beats += 1


def do_job(queue: Queue, lease: Lease, lost: threading.Event, start: int) -> bool:
    """The long job, in steps; True if it finished, False if it gave up because the lease was lost."""
    for step in range(lease.payload["steps"]):
        if lost.is_set():
            return False
        time.sleep(STEP_MS / 1000)  # the real work would go here
        if step == 30 and lease.task_id == "report-1":
            # 1.5 s in, past the deadline the lease was taken with: another worker finds nothing
            # (its reserve would first expire the lease, had no beat moved the deadline).
            taken = queue.reserve("worker-2", now=now_ms(), lease_seconds=LEASE_MS)
            print(f"  t+{now_ms() - start} ms worker-2 reserves: {[t.task_id for t in taken] or 'nothing'}")
        if step == lease.payload.get("cancel_at_step"):
            try:
                queue.cancel(lease.task_id)  # an operator, from another thread or through walqueue-serve
            except WrongStatus as error:  # the task was no longer ready or leased: nothing written
                print(f"  cancel refused: {error}")
            else:
                print(f"  t+{now_ms() - start} ms an operator cancels {lease.task_id}")
    return True


def work(queue: Queue, worker: str) -> None:
    """Serve until nothing is ready (a real worker would loop and wait)."""
    while True:
        start = now_ms()
        leases = queue.reserve(worker, now=start, lease_seconds=LEASE_MS)
        if not leases:
            return
        [lease] = leases
        print(f"{worker}: {lease.task_id} reserved, deadline t+{lease.deadline - start} ms")
        with Heartbeat(queue, lease) as heartbeat:
            finished = do_job(queue, lease, heartbeat.lost, start)
        # The heartbeat has stopped: from here on only this thread uses the lease.
        took = now_ms() - start
        if not finished:
            print(f"{worker}: {lease.task_id} lease lost after {took} ms ({heartbeat.error}); job stopped, no ack")
            continue
        try:
            queue.ack(heartbeat.lease, now=now_ms())
        except StaleLease as error:  # lost between the last beat and the ack
            print(f"{worker}: {lease.task_id} finished but the lease was lost ({error}); a later reserve redoes it")
        else:
            print(f"{worker}: {lease.task_id} done after {took} ms, {heartbeat.beats} extends; acked")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {argv[0]} DIRECTORY", file=sys.stderr)
        return 2
    with Queue(argv[1]) as queue:
        for task_id, payload in JOBS.items():  # one at a time, so that worker-2 finds nothing else
            queue.put(task_id, payload)  # an identical retry on a second run, which then finds nothing to do
            work(queue, "worker-1")
        for task in queue.tasks():
            print(f"{task.task_id}: {task.status}, {task.attempts} of {task.max_attempts} attempts")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
