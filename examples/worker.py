"""A worker loop: reserve, work, ack; release with exponential back-off; let crashed leases expire.

    python examples/worker.py DIRECTORY

The queue never reads a clock: every call takes `now`. In production the
clock is the `time` module (`now = int(time.time())`, `time.sleep(1)` when
idle); this demo passes a fake clock with the same two methods, starting at
a fixed time, so that a run takes no real time and prints the same lines
every time.

What it does, on a new directory:

1. puts four jobs (identical retries if they exist already), `max_attempts=4`:
   `resize-1` and `resize-4` succeed, `resize-2` fails twice and then
   succeeds, `resize-3` always fails;
2. "worker-0" reserves one job and dies holding its lease: it closes the
   queue without ack or release, as a killed process would;
3. "worker-1" runs the loop until no task is ready or leased. A failed job
   is released with `delay = min(300, 5 * 2**(attempts - 1))` seconds. The
   crashed lease is never touched by hand: once its deadline has passed,
   the next `reserve` expires it (the reap) and the job is leased again.

It leaves 3 completed tasks and 1 dead one (`resize-3`, after 4 attempts).
Running it again finds nothing to do. Exits 0.

One process owns a queue directory at a time (`DirectoryLocked` otherwise):
several workers are threads sharing one `Queue`, or clients of one process
that owns it (the JSON-lines consumer `python -m walqueue.cli DIR`).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any, Protocol

try:
    from walqueue import Lease, Queue
except ImportError:  # not installed: run from a checkout
    for _name in [name for name in sys.modules if name == "walqueue" or name.startswith("walqueue.")]:
        del sys.modules[_name]
    _packages = Path(__file__).resolve().parent.parent / "packages"
    sys.path[:0] = [str(_packages / dist / "src") for dist in ("walqueue-format", "walqueue-engine", "walqueue-cli")]
    from walqueue import Lease, Queue

START = 1_700_000_000  # the fake clock's first reading, in seconds
LEASE_SECONDS = 30
POLL_SECONDS = 1
MAX_ATTEMPTS = 4

#: job -> payload. "fail_first": the job fails while its attempt number is at most this.
JOBS: dict[str, dict[str, Any]] = {
    "resize-1": {"image": "cat.png"},
    "resize-2": {"image": "dog.png", "fail_first": 2},
    "resize-3": {"image": "broken.png", "fail_first": 99},
    "resize-4": {"image": "owl.png"},
}


class Clock(Protocol):
    """What the loop needs of a clock; the `time` module has both."""

    def time(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class FakeClock:
    """A clock that moves only when the loop sleeps."""

    def __init__(self, start: int) -> None:
        self.now = start

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += int(seconds)


def backoff(attempts: int) -> int:
    """Seconds before a failed task is due again: 5, 10, 20, 40, ... at most 300."""
    return min(300, 5 * int(2 ** (attempts - 1)))


def do_work(lease: Lease) -> None:
    """The job itself. Raising means failure."""
    if lease.attempts <= lease.payload.get("fail_first", 0):
        raise RuntimeError(f"could not resize {lease.payload['image']}")


def run_worker(queue: Queue, clock: Clock, worker: str) -> None:
    """Serve until no task is ready or leased (a real worker would loop forever)."""
    while True:
        now = int(clock.time())
        # reserve first expires every lease whose deadline <= now, then leases.
        leases = queue.reserve(worker, now=now, lease_seconds=LEASE_SECONDS)
        if not leases:
            counts = queue.stats()["counts"]
            if counts["ready"] == 0 and counts["leased"] == 0:
                return
            clock.sleep(POLL_SECONDS)  # something is leased or not yet due: wait
            continue
        [lease] = leases
        t = now - START
        try:
            do_work(lease)
        except Exception as error:
            delay = backoff(lease.attempts)
            # Past max_attempts the release makes the task dead instead.
            queue.release(lease, now=int(clock.time()), delay=delay)
            task = queue.get(lease.task_id)
            outcome = "dead" if task is not None and task.status == "dead" else f"released, due again in {delay} s"
            print(f"t+{t:<4} {worker}: {lease.task_id} attempt {lease.attempts} failed ({error}); {outcome}")
        else:
            queue.ack(lease, now=int(clock.time()))
            print(f"t+{t:<4} {worker}: {lease.task_id} attempt {lease.attempts} done")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {argv[0]} DIRECTORY", file=sys.stderr)
        return 2
    directory = argv[1]
    # The library logs recovery actions through the "walqueue" logger; show them.
    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s: %(message)s")
    clock = FakeClock(START)

    with Queue(directory) as queue:
        for task_id, payload in JOBS.items():
            queue.put(task_id, payload, max_attempts=MAX_ATTEMPTS)
        crashed = queue.reserve("worker-0", now=int(clock.time()), lease_seconds=LEASE_SECONDS)
        for lease in crashed:
            print(f"t+0    worker-0: reserved {lease.task_id} until t+{lease.deadline - START}, then died")
    # worker-0's process is gone; its lease is on disk. A new process takes over.

    with Queue(directory) as queue:
        run_worker(queue, clock, "worker-1")
        stats = queue.stats()
        print(f"done at t+{int(clock.time()) - START}: counts {stats['counts']}")
        for task in queue.tasks("dead"):
            print(f"dead letter: {task.task_id} after {task.attempts} attempts, payload {task.payload}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
