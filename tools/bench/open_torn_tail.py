"""open_torn_tail (alias k): a damaged tail opens at the cost of a healthy segment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from walqueue import Queue

from .figures import backends_block, figure, per_op, time_ratio
from .harness import Context
from .inputs import FILL_BATCH, payload, task_id
from .reopen import files
from .timing import Clock, clock, interleave, since

#: Sizes at each scale (with the run's `reps` unless set here): `ctx.scale` during the run.
SCALES: dict[str, dict[str, int]] = {
    "tiny": {"reps": 3, "tail_bytes": 1 << 20},
    "default": {"reps": 5, "tail_bytes": 15 << 20},
    "big": {"reps": 5, "tail_bytes": 15 << 20},
}


def _torn_tail_store(directory: Path, tail_bytes: int) -> Path:
    """A store whose newest segment ends in a torn frame announcing 16 MiB, then zeros: `tail_bytes` in all."""
    queue = Queue(directory, sync=False, compact_bytes=None)
    queue.put("probe", payload(0))
    queue.close()
    [segment] = files(directory, "wal-*.log")
    with open(segment, "ab") as file:
        file.write((16 * 2**20).to_bytes(4, "big") + bytes(tail_bytes - 4))
    return Path(segment)


def run(ctx: Context) -> dict[str, Any]:
    """Opening a store whose last frame is torn, with megabytes of zeros after its length.

    The torn-tail rule must look for a complete frame anywhere after the
    torn one's start (CONTRACT §4.5); that scan runs in C over the tail, so the
    open costs about what reading that many bytes of healthy log costs.
    """
    s = ctx.scale
    reps = s["reps"]
    tail_bytes = s["tail_bytes"]
    healthy_dir = ctx.dir("k-healthy")
    queue = Queue(healthy_dir, sync=False, compact_bytes=None)
    n = 0
    while queue.stats()["wal_bytes"] < tail_bytes:
        for i in range(n, n + FILL_BATCH):
            queue.put(task_id("k", i), payload(i))
        n += FILL_BATCH
    healthy_bytes = queue.stats()["wal_bytes"]
    queue.close()
    torn_dir = ctx.dir("k-torn")
    # The announced frame must stay incomplete: at most 16 MiB + 35 bytes of tail.
    segment = _torn_tail_store(torn_dir, min(healthy_bytes, 16 * 2**20 + 35))
    pristine = segment.read_bytes()
    ctx.log(f"open_torn_tail: healthy segment of {healthy_bytes:,} bytes, torn tail of {healthy_bytes:,} bytes")

    def healthy(rep: int) -> Clock:
        start = clock()
        Queue(healthy_dir, sync=False, compact_bytes=None).close()
        return since(start)

    def torn(rep: int) -> Clock:
        segment.write_bytes(pristine)  # opening cuts the tail: put it back first (not timed)
        start = clock()
        reopened = Queue(torn_dir, sync=False, compact_bytes=None)
        elapsed = since(start)
        assert reopened.get("probe") is not None
        reopened.close()
        return elapsed

    times = interleave({"healthy": healthy, "torn": torn}, reps)
    per = per_op(times, 1, "wall")
    return {
        "title": "open: a torn 16 MiB frame followed by zeros, against a healthy segment of the same size",
        "clock": "wall",
        "params": {"reps": reps, "bytes": healthy_bytes, "healthy_tasks": n},
        "backends": {"open": backends_block(times, 1, "wall", "s/open")},
        "ratios": {
            "torn_over_healthy": figure(
                time_ratio(per, "torn", "healthy"), "x time", target=("<=", 2.0), better="lower"
            ),
        },
    }
