"""Redrive dead letters: list the dead tasks, then make them ready again.

    python examples/redrive.py DIRECTORY [--dry-run] [--extra-attempts N] [--now T] [TASK_ID ...]

`Queue.redrive(task_id, available_at=T, extra_attempts=N)` makes a dead task
ready at `T` with `N` more attempts (`max_attempts` grows by N). It is the
same task: its id, key, payload and identity stay, so a producer retrying
the original put still gets an identical retry (never a second task), and
`attempts` and `generation` keep counting, so a worker still holding a
token from before the task died stays fenced off (`StaleLease`).

Without TASK_IDs every dead task is redriven; with them, only those, and
one that is unknown or not dead is reported (`WrongStatus`, which writes
nothing) and makes the script exit 1. `--dry-run` lists what would be
redriven and writes nothing. `--now` is the time the tasks become due
(default: `int(time.time())`, in seconds like the other examples).

On a directory without any task it first makes two dead letters on a fake
clock: `import-7` failed both of its 2 attempts, and `import-8` was
cancelled by an operator while ready (dead with 0 of 3 attempts used). It
then leaves both ready: `import-7` with 2 attempts of 3, `import-8` with 0
of 4. Running it again finds no dead letter and writes nothing. Exits 0
(1 if a named task could not be redriven, 2 on a usage error).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

try:
    from walqueue import Queue, WrongStatus
except ImportError:  # not installed, or a version without redrive (no WrongStatus): run from a checkout
    for _name in [name for name in sys.modules if name == "walqueue" or name.startswith("walqueue.")]:
        del sys.modules[_name]
    _packages = Path(__file__).resolve().parent.parent / "packages"
    sys.path[:0] = [str(_packages / dist / "src") for dist in ("walqueue-format", "walqueue-engine", "walqueue-cli")]
    from walqueue import Queue, WrongStatus

START = 1_700_000_000  # the fake clock of the demo, in seconds


def make_demo_dead_letters(queue: Queue) -> None:
    """One task that fails until it is out of attempts, and one an operator cancels."""
    queue.put("import-7", {"file": "orders-7.csv"}, max_attempts=2)
    queue.put("import-8", {"file": "orders-8.csv"}, available_at=START + 3600)
    for attempt in range(2):
        [lease] = queue.reserve("w1", now=START + 100 * attempt, lease_seconds=30)
        queue.release(lease, now=START + 100 * attempt + 1, delay=10)  # failed; the 2nd release makes it dead
    queue.cancel("import-8")  # e.g. the file turned out to be incomplete; fixed later


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=argv[0], description="Redrive dead letters.")
    parser.add_argument("directory")
    parser.add_argument("task_ids", nargs="*", metavar="TASK_ID", help="redrive only these (default: every dead task)")
    parser.add_argument("--dry-run", action="store_true", help="list what would be redriven; write nothing")
    parser.add_argument("--extra-attempts", type=int, default=1, metavar="N", help="attempts to add (default 1)")
    parser.add_argument("--now", type=int, default=None, metavar="T", help="when they become due (default: now)")
    return parser.parse_intermixed_args(argv[1:])


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    available_at = int(time.time()) if args.now is None else args.now
    status = 0
    with Queue(args.directory) as queue:
        if not queue.tasks():
            print("no tasks: making two dead letters first")
            make_demo_dead_letters(queue)

        dead = queue.tasks("dead")
        print(f"{len(dead)} dead letter(s):")
        for task in dead:
            print(f"  {task.task_id}: {task.attempts} of {task.max_attempts} attempts, payload {task.payload}")

        chosen = args.task_ids or [task.task_id for task in dead]
        if not chosen:
            print("nothing to redrive")
        before = queue.last_seq
        for task_id in chosen:
            task = queue.get(task_id)
            if args.dry_run:
                state = "unknown" if task is None else task.status
                verdict = "would redrive" if state == "dead" else f"would refuse ({state})"
                print(f"  {task_id}: {verdict}")
                continue
            try:
                queue.redrive(task_id, available_at=available_at, extra_attempts=args.extra_attempts)
            except (WrongStatus, ValueError) as error:  # WrongStatus is a ValueError too; so is a bad N
                print(f"  {task_id}: not redriven: {type(error).__name__}: {error}")
                status = 1
                continue
            task = queue.get(task_id)
            assert task is not None
            print(f"  {task_id}: ready at {task.available_at}, {task.attempts} of {task.max_attempts} attempts")
        print(f"wrote {queue.last_seq - before} transaction(s); counts {queue.stats()['counts']}")
    return status


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
