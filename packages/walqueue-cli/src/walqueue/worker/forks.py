"""A process forked by a handler never goes on as the worker: it ends where the handler returned.

`os.fork()` in a handler copies the worker, but only the forking thread
runs in the child. Were that thread to return into the worker's loop, the
child would ack or release the task a second time, then run the prefetched
tasks it found in its copy of the hand-off (the parent runs them too), and
write to the queue from a process that does not own it. So when a handler
returns, or raises, in a process other than the worker's, that process
exits at once with `os._exit`: status 0 if the handler returned, the code
of a `SystemExit`, else 1. Nothing is flushed or acked from it; the parent
settles the task as usual. docs/DECISIONS.md §36 gives the rule: a forked
child should end itself (`os._exit`), or `exec`; this is the safety net.
"""

from __future__ import annotations

import os
import sys

__all__ = ["leave_if_forked"]


def leave_if_forked(worker_pid: int, task_id: str, error: BaseException | None) -> None:
    """End this process at once unless it is the worker's own (`worker_pid`): a handler forked it."""
    if os.getpid() == worker_pid:
        return
    status = 0 if error is None else 1
    if isinstance(error, SystemExit):
        status = error.code if isinstance(error.code, int) else (0 if error.code is None else 1)
    try:
        sys.stderr.write(
            f"walqueue-worker: a process forked by the handler of {task_id!r:.100} returned from it; "
            f"it exits ({status}) instead of going on as the worker (end a forked child with os._exit)\n"
        )
        sys.stderr.flush()
    except Exception:  # noqa: BLE001, S110 - nothing may keep this process from ending
        pass
    os._exit(status)
