#!/usr/bin/env python3
"""The per-task floor of put_many(1000): the work the format requires, against the engine's whole, in thread CPU.

    python3.12 tools/put_floor.py                  the working tree (or whichever walqueue PYTHONPATH names)
    python3.12 tools/put_floor.py --reps 60 --json out.json

The floor is what any implementation of this store does per task (the
payload's canonical JSON, the identity's SHA-256, the task id's and the
op's JSON, and its share of the frame's splice, SHA-256 and write), each
timed alone over the bench's 1,000 items (tools/bench `put_items`),
collector off. Beside it: validation alone (`put_op_from_mapping`), planning
(`plan_puts`) and applying (`apply`) alone, and the whole `put_many`
(sync=False, collector on). Each figure is the best of
`--reps` runs of thread CPU time, so other processes on a shared machine
count less than in wall time; compare trees in interleaved runs. Nothing
here is a test.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from hashlib import sha256
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench.inputs import put_items  # noqa: E402 - tools/ on the path first

from walqueue import Queue  # noqa: E402
from walqueue.engine import ops  # noqa: E402
from walqueue.engine.state import OP_KINDS, State, apply  # noqa: E402
from walqueue.format.canonical import canonical_json, encode_str  # noqa: E402
from walqueue.format.frame import encode_body  # noqa: E402

BATCH = 1_000
# The identity document of a default-lane put at put's default numbers, in the pieces around payload and task.
HEAD, MIDDLE, TAIL = b'{"available_at":0,"max_attempts":3,"payload":', b',"task":', b"}"


def best(work: Callable[[], object], reps: int) -> float:
    """Microseconds per task: the least thread CPU time of `reps` runs of `work` (one batch each)."""
    least = min(_timed(work) for _ in range(reps))
    return least / BATCH / 1000


def _timed(work: Callable[[], object]) -> int:
    start = time.thread_time_ns()
    work()
    return time.thread_time_ns() - start


def measure(reps: int) -> dict[str, float]:
    """Each piece of the floor, their sum, validation alone and the whole put_many, in µs per task."""
    items = put_items("floor", 0, BATCH)
    payloads = [item["payload"] for item in items]
    ids = [item["task_id"] for item in items]
    payload_json = [canonical_json(payload) for payload in payloads]
    task_json = [encode_str(task_id).encode() for task_id in ids]
    splice = OP_KINDS["put"].splice
    pairs = list(zip(payload_json, task_json, strict=True))
    op_json = [splice(available_at=0, key=t, max_attempts=3, payload=p, task=t) for p, t in pairs]
    body = b'{"ops":[%b],"seq":%d}' % (b",".join(op_json), 1)
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="walqueue-put-floor-") as temp:
        fd = os.open(os.path.join(temp, "frames"), os.O_WRONLY | os.O_CREAT)
        try:
            gc.disable()
            figures = {
                "canonical JSON of the payload": best(lambda: [canonical_json(p) for p in payloads], reps),
                "identity SHA-256": best(
                    lambda: [sha256(b"".join((HEAD, p, MIDDLE, t, TAIL))).digest() for p, t in pairs], reps
                ),
                "task id JSON": best(lambda: [encode_str(task_id).encode() for task_id in ids], reps),
                "op JSON": best(
                    lambda: [splice(available_at=0, key=t, max_attempts=3, payload=p, task=t) for p, t in pairs], reps
                ),
                "frame: body, SHA-256, header": best(
                    lambda: encode_body(b'{"ops":[%b],"seq":%d}' % (b",".join(op_json), 1)), reps
                ),
                "write(2) of the frame": best(lambda: os.pwrite(fd, body, 0), reps),
            }
            figures["floor (the sum above)"] = sum(figures.values())
            figures["validation alone (put_op_from_mapping)"] = best(
                lambda: [ops.put_op_from_mapping(i) for i in items], reps
            )
            figures.update(_planned_and_applied(items, reps))
        finally:
            gc.enable()
            os.close(fd)
        batches = iter([put_items(f"b{n}", 0, BATCH) for n in range(reps + 1)])
        with Queue(os.path.join(temp, "store"), sync=False, compact_bytes=None) as queue:
            queue.put_many(next(batches))
            figures["whole put_many (sync=False, collector on)"] = best(lambda: queue.put_many(next(batches)), reps)
    return figures


def _planned_and_applied(items: list[dict[str, Any]], reps: int) -> dict[str, float]:
    """`plan_puts` of the batch's ops, and `apply` of its plan as `Queue` applies it, each into an empty state."""
    put_ops = [ops.put_op_from_mapping(item) for item in items]
    plan, _ = ops.plan_puts(State(), put_ops)
    # `_fresh_puts` as `Queue._commit` passes it, where the tree has it (a tree before DECISIONS §58 has not).
    fresh = {"_fresh_puts": True} if getattr(plan, "fresh_puts", False) else {}
    return {
        "planning (plan_puts)": best(lambda: ops.plan_puts(State(), put_ops), reps),
        "applying the plan (apply)": best(
            lambda: apply(State(), {"seq": 1, "ops": plan.ops}, _planned=True, **fresh), reps
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=40, help="runs of each piece; the least counts (default 40)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return 64 if exit_.code == 2 else int(exit_.code or 0)
    if args.reps < 1:
        print("put_floor: --reps must be at least 1", file=sys.stderr)
        return 64
    figures = measure(args.reps)
    for name, micros in figures.items():
        print(f"{micros:7.3f} µs/task  {name}")
    if args.json is not None:
        args.json.write_text(json.dumps({"python": sys.version.split()[0], "us_per_task": figures}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
