#!/usr/bin/env python3
"""Instruction counts of the five standard engine workloads, for one tree or several (valgrind's callgrind).

    python3.12 tools/instructions.py                     the working tree
    python3.12 tools/instructions.py --rev 409e5c8 --rev HEAD   two commits, side by side, with the change
    python3.12 tools/instructions.py --only put_reserve_ack --json out.json

Wall-clock ratios on a shared 2-core machine swing by 10-15% between runs
of one tree; instructions executed repeat to a few parts in 10,000, so they
can tell a 2% loss from noise. Each figure is the difference between the
callgrind instruction count (Ir) of a child that does the work and of the
same child doing none of it, so interpreter start-up and imports cancel.
The stores a workload opens are made beforehand, outside the measurement,
by the tree being measured.

A `--rev` is exported with `git archive` into a temporary directory (only
`packages/`), so any commit can be measured without touching the checkout.
Needs valgrind (`apt-get install valgrind`); it prints why and exits 2
without it. Under callgrind the five workloads take several minutes per
tree. Nothing here is a test.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("walqueue-format", "walqueue-engine", "walqueue-cli")

# The child: makes a store (`prepare`) or runs a workload against it (`work`)
# or only imports and opens nothing (`idle`). Kept as source text so that it
# runs against whichever tree's `packages/` is on PYTHONPATH.
CHILD = r"""
import sys
mode, workload, directory = sys.argv[1], sys.argv[2], sys.argv[3]
from walqueue import Queue

def fill_wal(count):
    with Queue(directory, sync=False, compact_bytes=None) as queue:
        for n in range(count):
            queue.put(f"task-{n:07d}", {"n": n, "to": "someone@example.org"})

def fill_snapshot(count):
    with Queue(directory, sync=False, compact_bytes=None) as queue:
        for start in range(0, count, 1000):
            queue.put_many([{"task_id": f"task-{n:07d}", "payload": {"n": n}} for n in range(start, start + 1000)])
        queue.compact()

PREPARE = {
    "replay_20k": lambda: fill_wal(20_000),
    "replay_100k": lambda: fill_wal(100_000),
    "snapshot_40k": lambda: fill_snapshot(40_000),
}

def open_only():
    Queue(directory, sync=False, compact_bytes=None).close()

def put_reserve_ack():
    with Queue(directory, sync=False, compact_bytes=None) as queue:
        for n in range(5_000):
            queue.put(f"task-{n:05d}", {"n": n})
        for n in range(5_000):
            (lease,) = queue.reserve("worker", now=n, lease_seconds=60)
            queue.ack(lease, now=n)

def put_many_batches():
    with Queue(directory, sync=False, compact_bytes=None) as queue:
        for batch in range(10):
            queue.put_many([{"task_id": f"task-{batch}-{n:04d}", "payload": {"n": n}} for n in range(1_000)])

def order(n):  # the bench's payload (tools/bench/harness.py `payload`): about 110 bytes, four fields
    to = f"customer{n:08d}@example.com"
    return {"body": f"Your order #{n:08d} has shipped.", "kind": "email", "priority": n % 3, "to": to}

def puts_orders():
    with Queue(directory, sync=False, compact_bytes=None) as queue:
        for n in range(5_000):
            queue.put(f"task-{n:05d}", order(n))

def put_many_orders():
    with Queue(directory, sync=False, compact_bytes=None) as queue:
        for batch in range(10):
            queue.put_many([{"task_id": f"task-{batch}-{n:04d}", "payload": order(n)} for n in range(1_000)])

WORK = {
    "puts_orders": puts_orders,
    "put_many_orders": put_many_orders,
    "replay_20k": open_only,
    "replay_100k": open_only,
    "snapshot_40k": open_only,
    "put_reserve_ack": put_reserve_ack,
    "put_many_batches": put_many_batches,
}

if mode == "prepare":
    PREPARE.get(workload, lambda: None)()
elif mode == "work":
    WORK[workload]()
"""


@dataclass(frozen=True)
class Workload:
    name: str
    what: str
    prepared: bool  # whether the store is made beforehand (then `work` only opens it)


WORKLOADS = (
    Workload("replay_20k", "open: replay a 20,000-transaction WAL", True),
    Workload("replay_100k", "open: replay a 100,000-transaction WAL", True),
    Workload("snapshot_40k", "open: load a 40,000-task snapshot", True),
    Workload("put_reserve_ack", "5,000 puts, then 5,000 reserve+ack (sync=False)", False),
    Workload("put_many_batches", "10 put_many of 1,000 tasks (sync=False)", False),
    Workload("puts_orders", "5,000 puts of the bench's payload (sync=False)", False),
    Workload("put_many_orders", "10 put_many of 1,000 tasks of the bench's payload (sync=False)", False),
)

_COLLECTED = re.compile(rb"Collected\s*:\s*(\d+)")


def _child_env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(str(tree / "packages" / layer / "src") for layer in LAYERS)
    env["PYTHONHASHSEED"] = "0"  # the same dict and set layouts in every run
    return env


def _instructions(python: str, tree: Path, mode: str, workload: str, directory: Path) -> int:
    """The Ir count of one child run under callgrind."""
    command = [
        "valgrind",
        "--tool=callgrind",
        "--callgrind-out-file=/dev/null",
        python,
        "-c",
        CHILD,
        mode,
        workload,
        str(directory),
    ]
    done = subprocess.run(command, env=_child_env(tree), capture_output=True, check=False)
    found = _COLLECTED.findall(done.stderr)
    if done.returncode != 0 or not found:
        raise RuntimeError(f"callgrind run failed ({mode} {workload}): {done.stderr[-2000:].decode(errors='replace')}")
    return int(found[-1])


def measure(python: str, tree: Path, workload: Workload, scratch: Path) -> int:
    """Ir of the work minus Ir of an idle child, on a store prepared by `tree`."""
    store = scratch / workload.name
    shutil.rmtree(store, ignore_errors=True)
    if workload.prepared:
        subprocess.run([python, "-c", CHILD, "prepare", workload.name, str(store)], env=_child_env(tree), check=True)
    work = _instructions(python, tree, "work", workload.name, store)
    idle = _instructions(python, tree, "idle", workload.name, scratch / "unused")
    shutil.rmtree(store, ignore_errors=True)
    return work - idle


def _export(rev: str, into: Path) -> Path:
    """`packages/` of commit `rev`, unpacked under `into`."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "packages"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def _table(revs: list[str], counts: dict[str, dict[str, int]], chosen: list[Workload]) -> str:
    header = "| work | " + " | ".join(f"{rev} (Ir)" for rev in revs)
    header += " | change |" if len(revs) == 2 else " |"
    lines = [header, "|---|" + "---:|" * (len(revs) + (1 if len(revs) == 2 else 0))]
    for workload in chosen:
        cells = [f"{counts[rev][workload.name]:.3e}" for rev in revs]
        row = f"| {workload.what} | " + " | ".join(cells)
        if len(revs) == 2:
            before, after = (counts[rev][workload.name] for rev in revs)
            row += f" | {100 * (after - before) / before:+.1f}%"
        lines.append(row + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rev", action="append", default=[], help="a commit to measure (repeat; default: the tree)")
    known = ", ".join(w.name for w in WORKLOADS)
    parser.add_argument("--only", default="", help=f"comma-separated workload names: {known}")
    parser.add_argument("--python", default=sys.executable, help="the interpreter to measure with (default: this one)")
    parser.add_argument("--json", type=Path, help="also write the counts as JSON")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return 64 if exit_.code == 2 else int(exit_.code or 0)
    if shutil.which("valgrind") is None:
        print("instructions: valgrind is not installed; `apt-get install valgrind`, then run again", file=sys.stderr)
        return 2
    names = {w.name: w for w in WORKLOADS}
    wanted = [name for name in args.only.split(",") if name]
    unknown = [name for name in wanted if name not in names]
    if unknown:
        print(f"instructions: unknown workload(s) {', '.join(unknown)}; known: {', '.join(names)}", file=sys.stderr)
        return 64
    chosen = [names[name] for name in wanted] if wanted else list(WORKLOADS)
    revs = args.rev or ["tree"]
    counts: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory(prefix="walqueue-instructions-") as temp:
        scratch = Path(temp)
        for rev in revs:
            tree = ROOT if rev == "tree" else _export(rev, Path(tempfile.mkdtemp(dir=scratch)))
            counts[rev] = {}
            for workload in chosen:
                counts[rev][workload.name] = measure(args.python, tree, workload, scratch)
                print(f"{rev:>12}  {workload.name:<18} {counts[rev][workload.name]:.4e} Ir", flush=True)
    print()
    print(_table(revs, counts, chosen))
    if args.json is not None:
        report: dict[str, object] = {"python": args.python, "revs": revs, "counts": counts}
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
