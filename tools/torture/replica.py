"""Campaign ``replica``: kill -9 a writer with its replicator under store faults; restores must match the model.

Each unit runs several lives of a child process that opens a store, starts
a `Replicator` (to a file:// replica behind a store that fails at random:
errors before a write, partial writes, in a third of the units synchronous
mode) and puts tasks one at a time, printing ``done I`` after each answer
and ``confirmed H`` whenever the replica's head moved. The parent SIGKILLs
it at a random moment (writer and replicator die together), then restores
the replica into a new directory, at its newest point and at a random
earlier one, and requires:

- no restore fails (a gap, a damaged object): the chain is always whole;
- the restored store passes fsck and equals the reference model after its
  first N puts (each put is one transaction), for N no older than the last
  confirmed upload (asynchronous) or than the newest acknowledged put
  (synchronous), and no newer than what the writer committed;
- the next life resumes the replica (or begins a new generation) and the
  restores after it hold its puts too.
"""

from __future__ import annotations

import contextlib
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness import scratch, seeded, tmpfs, units
from processes import child_environment

from model import Model, view
from walqueue import Queue
from walqueue.backup.layout import ChainError
from walqueue.backup.restore import execute, make_plan
from walqueue.backup.stores import FileStore
from walqueue.format.fsck import check

from .checks import view_difference
from .harness import Abort, Budget, Report, guarded

LIVES_PER_UNIT = 4
LIFE_SECONDS = (0.15, 0.8)
CHILD_TIMEOUT = 30.0

_CHILD = r"""
import random, sys
from walqueue import Queue
from walqueue.backup import Replicator
from walqueue.backup.stores import FileStore, StoreUnavailable

store_dir, replica_dir = sys.argv[1], sys.argv[2]
seed, sync, fault = int(sys.argv[3]), sys.argv[4] == "1", float(sys.argv[5])
rng = random.Random(seed)

class Faulty:
    def __init__(self, inner):
        self.inner, self.url = inner, inner.url
    def _maybe_fail(self, what):
        if rng.random() < fault:
            raise StoreUnavailable(what + ": injected 500")
    def put(self, key, data, *, if_none_match=False, if_match=None):
        self._maybe_fail("put")
        if key.endswith(".wal") and rng.random() < fault / 3:
            self.inner.put(key, data[: len(data) // 2])
            raise StoreUnavailable("put: injected partial upload")
        return self.inner.put(key, data, if_none_match=if_none_match, if_match=if_match)
    def put_file(self, key, source, size, *, if_none_match=False):
        self._maybe_fail("put")
        return self.inner.put_file(key, source, size, if_none_match=if_none_match)
    def get(self, key):
        self._maybe_fail("get")
        return self.inner.get(key)
    def read_into(self, key, sink):
        self._maybe_fail("get")
        return self.inner.read_into(key, sink)
    def list(self, prefix):
        self._maybe_fail("list")
        return self.inner.list(prefix)
    def delete(self, key):
        self.inner.delete(key)

queue = Queue(store_dir)
replicator = Replicator(queue, Faulty(FileStore(replica_dir)), interval=0.01, sync=sync).start()
replicator.retry_at = 0.0
index, head = queue.last_seq, -1
print("ready", index, flush=True)
while True:
    queue.put(f"t{index}", {"i": index})
    print("done", index, flush=True)
    index += 1
    if replicator.head != head:
        head = replicator.head
        print("confirmed", head, flush=True)
"""


def campaign_replica(seed: int, budget: float, report: Report) -> None:
    """Units of killed lives and restores until the budget is spent (at least one unit)."""
    spent = Budget(budget, report)  # past its budget (up to the overtime) while short of the caller's targets
    with scratch("torture-replica-", tmpfs()) as root:
        for unit in units(spent.over):
            with guarded(report, f"unit {unit}", name_aborts=True):
                _unit(seeded(seed, "replica", unit), root / f"u{unit}", report)
            report.count("units")


def _unit(rng: random.Random, directory: Path, report: Report) -> None:
    directory.mkdir(parents=True)
    store, replica = directory / "store", directory / "replica"
    sync = rng.random() < 0.33
    fault = rng.choice([0.0, 0.05, 0.2])
    confirmed = last_done = -1
    report.count("sync units" if sync else "async units")
    if fault:
        report.count("units with store faults")
    for life in range(LIVES_PER_UNIT):
        done, life_confirmed = _life(store, replica, rng.randrange(2**32), sync, fault, rng.uniform(*LIFE_SECONDS))
        report.count("kills")
        report.count("acknowledged puts", max(0, done - last_done))
        last_done = max(last_done, done)
        confirmed = max(confirmed, life_confirmed)
        newest_acknowledged = done
        with Queue(store) as queue:
            committed = queue.last_seq
        floor = newest_acknowledged + 1 if sync else max(confirmed, 0)
        restored = _restore_and_check(replica, directory / f"r{life}", None, report)
        if restored is None:
            continue
        if not floor <= restored <= committed:
            raise Abort(
                f"life {life}: the restore ends at {restored}, outside [{floor}, {committed}] "
                f"({'sync' if sync else 'async'}, confirmed {confirmed}, acknowledged through put {done})"
            )
        if restored > 0:
            point = rng.randint(0, restored)
            _restore_and_check(replica, directory / f"p{life}", point, report)
            report.count("point restores")
    shutil.rmtree(directory, ignore_errors=True)


def _life(store: Path, replica: Path, seed: int, sync: bool, fault: float, seconds: float) -> tuple[int, int]:
    """Run one child for `seconds`, SIGKILL it; return the last acknowledged put's index and the last confirmed head."""
    command = [sys.executable, "-c", _CHILD, str(store), str(replica), str(seed), "1" if sync else "0", str(fault)]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=child_environment(), bufsize=0
    )
    assert process.stdout is not None
    done, confirmed, buffer = -1, -1, b""
    stop_at = time.monotonic() + seconds
    try:
        while time.monotonic() < stop_at:
            ready, _, _ = select.select([process.stdout], [], [], max(0.0, stop_at - time.monotonic()))
            if ready:
                chunk = os.read(process.stdout.fileno(), 65536)
                if not chunk:
                    break
                buffer += chunk
        process.send_signal(signal.SIGKILL)
        rest, _ = process.communicate(timeout=CHILD_TIMEOUT)
        buffer += rest
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
    for line in buffer.decode().split("\n")[:-1]:  # the last line may be cut by the kill
        word, _, value = line.partition(" ")
        if word == "done":
            done = int(value)
        elif word == "confirmed":
            confirmed = max(confirmed, int(value))
    return done, confirmed


def _restore_and_check(replica: Path, target: Path, to_seq: int | None, report: Report) -> int | None:
    """Restore (newest, or through `to_seq`), fsck it, compare with the model; return its last sequence."""
    store = FileStore(str(replica))
    try:
        plan = make_plan(store, to_seq=to_seq)
    except ChainError as exc:
        if "holds no generation" in str(exc) or "no snapshot" in str(exc):
            return None  # killed before its first generation was written
        raise Abort(f"a restore failed: {exc}") from None
    execute(store, plan, str(target))
    verdict = check(target)
    if verdict.status != "healthy":
        raise Abort(f"the restore at {target} is {verdict.status} by fsck")
    with Queue(target, create=False) as queue:
        got = view(queue)
        last = queue.last_seq
    model = Model()
    for index in range(last):
        model.put(f"t{index}", {"i": index})
    want = view(model)
    if got != want:
        raise Abort(f"the restore through {last} differs from the model: {view_difference(got, want)}")
    if to_seq is not None and last != to_seq:
        raise Abort(f"--to-seq {to_seq} restored through {last}")
    report.count("restores")
    shutil.rmtree(target, ignore_errors=True)
    return last
