"""Dead letters: inspect them, then re-enqueue them under new task ids.

    python examples/dead_letters.py DIRECTORY

A task becomes `dead` when its attempts reach `max_attempts` and it is
released, or its lease expires, once more. A dead task keeps its payload and
stays dead until `redrive` brings it back (examples/redrive.py does that, under
its own id): `tasks("dead")` is the dead-letter list, and a put with the dead
task's id or key never brings it back (task ids and keys are never reused).
This script shows the other way to try again, put a NEW task, for work that
should be a fresh task of its own: here with the id `<old id>~redo` and
the key `redo:<old key>`, both derived from the dead task, so running this
script twice re-enqueues nothing twice (the second put is an identical
retry). Every field of the new put comes from the dead task, none from the
clock, or the second run would be a `KeyConflict` instead.

Each dead letter says why it died: `task.last_error` holds the type and
message of the error its worker reported to `release` (or `fail`, or a
`cancel`'s reason), the attempt that failed and when; a lease that expired
records `LeaseExpired` at its deadline. It is kept durably, with the task.

On a directory without any task it first makes two dead letters with a fake
clock: `sync-42` (released twice with an error, `max_attempts=2`) and
`sync-43` (its worker never came back: the lease expired with
`max_attempts=1`). It then
leaves 2 dead tasks and 2 ready ones. On a directory that has tasks (say,
after examples/worker.py) it works on the dead letters it finds. Re-enqueued
tasks that die again are left for a human. Exits 0.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

try:
    from walqueue import Queue
except ImportError:  # not installed: run from a checkout
    for _name in [name for name in sys.modules if name == "walqueue" or name.startswith("walqueue.")]:
        del sys.modules[_name]
    _packages = Path(__file__).resolve().parent.parent / "packages"
    sys.path[:0] = [str(_packages / dist / "src") for dist in ("walqueue-format", "walqueue-engine", "walqueue-cli")]
    from walqueue import Queue

START = 1_700_000_000  # the fake clock of the demo, in seconds
REDO_PREFIX = "redo:"


def make_demo_dead_letters(queue: Queue) -> None:
    """Two tasks that die: one released until out of attempts, one whose lease expires."""
    now = START
    queue.put("sync-42", {"account": 42, "action": "sync"}, max_attempts=2)
    queue.put("sync-43", {"account": 43, "action": "sync"}, max_attempts=1)
    leases = {lease.task_id: lease for lease in queue.reserve("w1", now=now, lease_seconds=30, limit=2)}
    timeout = {"type": "TimeoutError", "message": "the accounts API did not answer in 10 s"}
    queue.release(leases["sync-42"], now=now + 1, delay=10, error=timeout)  # attempt 1 of 2 failed
    # sync-43's worker dies: nobody acks or releases it. At t+31 its lease has
    # expired; the reap in this reserve makes it dead (1 attempt of 1).
    [retry] = queue.reserve("w1", now=now + 31, lease_seconds=30)
    refused = {"type": "PermissionError", "message": "account 42 is locked"}
    queue.release(retry, now=now + 32, delay=10, error=refused)  # attempt 2 of 2 failed: dead


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {argv[0]} DIRECTORY", file=sys.stderr)
        return 2
    with Queue(argv[1]) as queue:
        if not queue.tasks():
            print("no tasks: making two dead letters first")
            make_demo_dead_letters(queue)

        dead = queue.tasks("dead")
        print(f"{len(dead)} dead letter(s):")
        for task in dead:
            print(
                f"  {task.task_id} (key {task.key!r}): {task.attempts} of {task.max_attempts} attempts,"
                f" last due at {task.available_at}, payload {task.payload}"
            )
            error = task.last_error
            if error is not None:
                print(f"    last error (attempt {error.attempt}, at {error.at}): {error.type}: {error.message}")

        redo: list[dict[str, Any]] = []
        for task in dead:
            if task.key.startswith(REDO_PREFIX):
                print(f"  {task.task_id} was itself a re-enqueued task: left for a human")
                continue
            redo.append(
                {
                    "task_id": f"{task.task_id}~redo",
                    "key": REDO_PREFIX + task.key,
                    "payload": task.payload,
                    "max_attempts": task.max_attempts,
                    "available_at": 0,  # due at once; a fixed value keeps the retry identical
                }
            )
        if redo:
            before = queue.last_seq
            task_ids = queue.put_many(redo)  # all or nothing; identical retries write nothing
            wrote = "1 transaction" if queue.last_seq > before else "nothing (already re-enqueued)"
            print(f"re-enqueued {task_ids}: wrote {wrote}")
        print(f"counts {queue.stats()['counts']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
