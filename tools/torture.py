#!/usr/bin/env python3
"""The torture harness: WALQueue against its reference model, under every fault we can make.

    python tools/torture.py [--seed N] [--seconds S] [--campaign NAME ...]

Ten campaigns, each seeded and reproducible, each comparing the real
`walqueue.Queue` (or `walqueue-serve`) with the reference model of `tests/model.py`:

1. ``crash-points``: randomized workloads (every operation, the extend,
   redrive and cancel of issue #16 included, explicit and
   automatic compaction, reaps) are killed with `InjectedCrash` at every
   phase call of every step, on a copy of the directory. Each copy is reopened
   at once (first crashing again at each recovery phase) and must equal the
   model before the step, or after exactly those of its transactions whose
   frames were complete (the ``wal.append.written`` phases reached, SPEC §4
   rules 6 and 7). The workload then goes on, sometimes from a crashed copy.
2. ``kill``: a child process (forked by this very file run as
   ``--kill-zygote``) opens the store and runs a seeded workload with
   ``sync=True``, reporting ``begin i`` before and ``done i <digest>`` after
   each call; the parent SIGKILLs it at random moments (also while it
   recovers), reopens, and requires the model's replay of the done
   operations, with the one in-flight operation applied, not applied, or (a
   reserve) only reaped. Every other life runs 4 or 16 threads on one
   queue (group commit, some with background compactions), replayed in
   the log order of the frames each thread wrote.
3. ``bytes``: stores with CURRENT, a snapshot, orphans, a leftover segment
   and three live segments are damaged one way at a time (every truncation
   offset, single-bit flips of every file): opening recovers exactly the
   model's state (minus the cut transactions, only for a torn tail of the
   newest segment) or raises `CorruptStore`, and ``walqueue-fsck --replay``
   agrees (2 iff `CorruptStore`, 1 iff opening cut a torn tail).
4. ``os-faults``: `OSError` (ENOSPC, EIO) at the k-th ``os`` call (write,
   fsync, replace/rename, unlink, open, ftruncate) of a step, for every k:
   the error reaches the caller unwrapped, the queue is poisoned
   (`QueueClosed`, ``close()`` silent), and reopening gives the model's state
   before or after the step (same rule as campaign 1). Opening itself is
   faulted too, with and without a torn tail to cut.
4b. ``background``: automatic compaction without a hook (its snapshot
   written by a thread of its own while calls go on): the directory is
   copied before every os call of that thread (a SIGKILL there) and each
   copy must reopen to a model state no older than the last answer, and
   compact without orphans; or the k-th os call of that thread fails
   (ENOSPC, EIO): nothing answered may be lost.
5. ``bad-input``: seeded fuzzing of every API call and every CLI line with
   hostile values: only the documented exceptions (or CLI answers), the
   model's answer for every call that succeeds, and not one byte written by
   a call that fails.
6. ``environment``: what an ordinary process does around a queue, between
   and inside calls: ``chdir`` under a queue opened by a relative path,
   a repointed symlink it was opened through (decoy stores under both
   names), forks whose children try every call (also a fork inside a write,
   from the hook), signal handlers that ``close()`` the queue mid-call (from
   the hook, and from a CPU-time timer with no hook at all), FIFOs,
   directories and symlinks at every name compaction creates and every
   name opening reads, and LOCK deleted or replaced under the owner. Each
   life is compared with the model on reopen, every step runs under a
   watchdog (a hang is a divergence), and a canary tree beside the store
   must be byte-identical at the end.
7. ``server-kill``: SIGKILL `walqueue-serve` under load from several
   clients; after each kill the directory holds the model's state before or
   after the call in flight, every answered call is durable, and a put
   retried by `Client` across the restart is applied exactly once.
8. ``client-kill``: SIGKILL client processes in the middle of requests: each
   request is completed or never started, and the server serves on.
9. ``hostile-clients``: the bad-input campaign's lines over the socket, some
   split into small writes, among junk connections: every answer is the
   in-process protocol's.

One line per campaign gives its counts and divergences; the last line is
``N passed, M failed``. The exit status is 0 only when every campaign passed.
A divergence names the seed, campaign, work unit, step and fault, so the same
command reproduces it (the kill campaign's moments of death are seeded too,
but when a signal lands depends on the machine's speed). `--seconds` is shared
out among the campaigns; each does a fixed minimum of work however short its
share (every truncation of its first store, for the bytes campaign).
Faults are injected only from outside the engine: the hook of SPEC §5, the
``os`` module's functions, the bytes of files, and SIGKILL.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import enum
import errno
import hashlib
import importlib.util
import itertools
import json
import logging
import os
import random
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import IO, Any

# -- finding the code under test -----------------------------------------------------

_ROOT = Path(__file__).resolve().parent.parent
_SRC_DIRS = [_ROOT / "packages" / name / "src" for name in ("walqueue-format", "walqueue-engine", "walqueue-cli")]
_TESTS_DIR = _ROOT / "tests"


def _setup_path() -> None:
    """Make `walqueue` and the model importable from a checkout as well as from an install.

    The model lives in tests/ and is never installed. The src directories are
    added only when `walqueue` is not importable already, so an installed
    distribution is what gets tested when there is one.
    """
    if str(_TESTS_DIR) not in sys.path:
        sys.path.insert(0, str(_TESTS_DIR))
    if importlib.util.find_spec("walqueue") is None:
        for directory in reversed(_SRC_DIRS):
            if directory.is_dir():
                sys.path.insert(0, str(directory))


_setup_path()

from model import SPECIAL_KINDS, Model, directory_digest, place_special, read_frames, render, view  # noqa: E402
from walqueue import (  # noqa: E402
    PHASES,
    CorruptStore,
    DirectoryLocked,
    InjectedCrash,
    KeyConflict,
    Lease,
    Queue,
    QueueClosed,
    StaleLease,
    Task,
    WrongStatus,
)
from walqueue.format.current import read_current  # noqa: E402
from walqueue.format.names import CURRENT_TMP_NAME, LOCK_NAME, parse_wal_name, snapshot_name  # noqa: E402

CAMPAIGNS = (
    "crash-points",
    "kill",
    "bytes",
    "os-faults",
    "background",
    "bad-input",
    "environment",
    "server-kill",
    "client-kill",
    "hostile-clients",
)
#: Share of --seconds each campaign gets (renormalized over the ones selected).
BUDGET_SHARES = {
    "crash-points": 0.19,
    "kill": 0.19,
    "bytes": 0.19,
    "os-faults": 0.15,
    "background": 0.12,
    "bad-input": 0.14,
    "environment": 0.14,
}
BUDGET_SHARES.update({"server-kill": 0.1, "client-kill": 0.06, "hostile-clients": 0.06})  # walqueue-serve
DEFAULT_SECONDS = 60.0
RECOVERY_PHASES = ("recover.truncate.before", "recover.truncate.after")
#: The errors a call may raise without anything being wrong (SPEC §2).
DOCUMENTED_ERRORS: tuple[type[Exception], ...] = (KeyConflict, StaleLease, TypeError, ValueError)
#: How many divergence messages a campaign keeps (it counts them all).
MAX_MESSAGES = 12
#: How far past its budget, as a multiple of it, a campaign that honours
#: `Report.targets` may run to reach them (see `Report.short_of_targets`).
TARGET_OVERTIME = 1.0


# ---------------------------------------------------------------------------
# Reports


@dataclass
class Report:
    """What one campaign did (ordered counts) and what went wrong.

    `divergences` are disagreements with the model or the SPEC; `gaps` are
    coverage promises the run did not keep (a phase never crashed at). Either
    fails the campaign.
    """

    name: str
    counts: dict[str, int] = field(default_factory=dict)
    divergences: list[str] = field(default_factory=list)
    divergence_count: int = 0
    gaps: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: Counts the caller wants reached (a bounded test run's minimums). A
    #: campaign whose work comes in luck-dependent kinds (where a kill lands)
    #: keeps going past its budget, up to `TARGET_OVERTIME` of it, while
    #: short of them, so that a slow machine gets more time rather than a
    #: thinner run; it never stops early because of them.
    targets: dict[str, int] = field(default_factory=dict)

    def count(self, what: str, n: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + n

    def diverge(self, message: str) -> None:
        self.divergence_count += 1
        if len(self.divergences) < MAX_MESSAGES:
            self.divergences.append(message)

    @property
    def passed(self) -> bool:
        return self.divergence_count == 0 and not self.gaps

    def short_of_targets(self) -> bool:
        return any(self.counts.get(what, 0) < least for what, least in self.targets.items())

    def line(self) -> str:
        counts = ", ".join(f"{value} {what}" for what, value in self.counts.items())
        notes = "".join(f"; {note}" for note in self.notes)
        gaps = "".join(f"; GAP {gap}" for gap in self.gaps)
        verdict = "ok" if self.passed else "FAILED"
        return (
            f"{self.name}: {counts}{notes}; {self.divergence_count} divergences{gaps} ({self.seconds:.1f} s) {verdict}"
        )


class Abort(Exception):
    """Stop the current work unit after a divergence: its model no longer describes the store."""


@contextlib.contextmanager
def quiet_walqueue_logging() -> Iterator[None]:
    """Silence the engine's torn-tail warnings (thousands of expected ones), restoring the logger after."""
    logger = logging.getLogger("walqueue")
    saved = (logger.level, logger.propagate, list(logger.handlers))
    handler = logging.NullHandler()
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


def scratch_root() -> str | None:
    """Where in-process campaigns keep their copies: tmpfs when there is one.

    Those campaigns never cut power, so durability plays no part in them and
    a RAM-backed directory only makes each of their many thousand copies and
    opens cheaper. The kill campaign keeps the default (a real disk), where
    its fsyncs are real.
    """
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


class Dirs:
    """Fresh, never-reused directory names under one temporary root."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._counter = itertools.count()

    def new(self, copy_of: Path | None = None) -> Path:
        path = self.root / f"d{next(self._counter)}"
        if copy_of is None:
            path.mkdir()
        else:
            shutil.copytree(copy_of, path)
        return path


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------------------
# Operations and the seeded workload shared by campaigns 1, 2, 3 and 4


@dataclass(frozen=True)
class Op:
    """One call of the public API, as data, so that a child process and its parent build the same."""

    kind: str
    args: dict[str, Any]

    def describe(self) -> str:
        """A one-line text that identifies the call (the kill campaign compares it across processes)."""
        a = self.args
        if self.kind == "put":
            spec = a["spec"]
            return f"put {spec['task_id']} key={spec.get('key')} at={spec.get('available_at', 0)}"
        if self.kind == "put_many":
            return "put_many " + ",".join(item["task_id"] for item in a["items"])
        if self.kind == "reserve":
            return f"reserve {a['worker']} now={a['now']} for={a['lease_seconds']} limit={a['limit']}"
        if self.kind in ("ack", "release", "extend"):
            lease = a["lease"]
            return f"{self.kind} {lease.task_id} {lease.worker} g{lease.generation} now={a['now']}"
        if self.kind == "redrive":
            return f"redrive {a['task_id']} at={a['available_at']} extra={a['extra_attempts']}"
        if self.kind == "cancel":
            return f"cancel {a['task_id']}"
        if self.kind == "get":
            return f"get {a['task_id']}"
        if self.kind == "tasks":
            return f"tasks {a['status']}"
        return self.kind


def perform(op: Op, target: Any) -> Any:
    """Run `op` on a `Queue` or a `Model` (they share the API)."""
    a = op.args
    if op.kind == "put":
        return target.put(**copy.deepcopy(a["spec"]))
    if op.kind == "put_many":
        return target.put_many(copy.deepcopy(a["items"]))
    if op.kind == "reserve":
        return target.reserve(a["worker"], now=a["now"], lease_seconds=a["lease_seconds"], limit=a["limit"])
    if op.kind == "ack":
        return target.ack(a["lease"], now=a["now"])
    if op.kind == "release":
        return target.release(a["lease"], now=a["now"], delay=a["delay"])
    if op.kind == "extend":
        return target.extend(a["lease"], now=a["now"], lease_seconds=a["lease_seconds"])
    if op.kind == "redrive":
        return target.redrive(a["task_id"], available_at=a["available_at"], extra_attempts=a["extra_attempts"])
    if op.kind == "cancel":
        return target.cancel(a["task_id"])
    if op.kind == "compact":
        return target.compact()
    if op.kind == "get":
        return target.get(a["task_id"])
    if op.kind == "tasks":
        return target.tasks(a["status"])
    raise AssertionError(f"unknown op kind {op.kind}")


def outcome(op: Op, target: Any) -> str:
    """The call's answer as exact text: the rendered result, or the documented error's class."""
    try:
        value = perform(op, target)
    except DOCUMENTED_ERRORS as exc:
        return "error " + type(exc).__name__
    return "ok " + render(value)


#: The op kinds of issue #16, counted apart in every campaign's report so that a run shows it applied them.
ISSUE_16_KINDS = ("extend", "redrive", "cancel")


def count_issue_16(report: Report, op: Op, answer: str, what: str) -> None:
    """Count an issue-16 call that succeeded (`answer` from `outcome`), as "`what` `kind`"."""
    if op.kind in ISSUE_16_KINDS and answer.startswith("ok "):
        report.count(f"{what} {op.kind}")


def text_digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def token_for(task: Task) -> Lease:
    """The lease token a worker would hold for a leased task (also used to forge stale ones)."""
    return Lease(
        task_id=task.task_id,
        worker=task.worker or "w1",
        generation=task.generation,
        deadline=task.deadline or 0,
        attempts=task.attempts,
        payload=task.payload or {},
    )


class Workload:
    """A seeded stream of calls that depends only on its seed and on the state it reads.

    Tokens are rebuilt from `tasks()` rather than remembered, so a child
    process reading its queue and a parent reading the model make the same
    choices as long as the two states agree, and a workload can go on from a
    crashed copy whose last answer nobody saw.
    """

    KINDS = (
        ("put", "retry", "conflict", "put_many", "reserve", "ack", "release", "stale", "compact", "get", "tasks")
        + ("extend", "redrive", "cancel")  # issue #16
    )
    WEIGHTS = (6, 1, 1, 2, 5, 4, 2, 1, 1, 1, 1) + (3, 2, 1)

    def __init__(self, seed: str, *, prefix: str = "t", now: int = 0, weights: dict[str, int] | None = None) -> None:
        self.rng = random.Random(seed)
        self.prefix = prefix
        self.now = now
        self.next_id = 0
        self.puts: list[dict[str, Any]] = []
        self.weights = list(self.WEIGHTS)
        for kind, weight in (weights or {}).items():
            self.weights[self.KINDS.index(kind)] = weight

    def _payload(self, n: int) -> dict[str, Any]:
        rng = self.rng
        payload: dict[str, Any] = {"n": n}
        shape = rng.random()
        if shape < 0.5:
            payload["blob"] = "x" * rng.randrange(0, 40)
        elif shape < 0.7:
            payload["f"] = rng.choice([1.5, -0.0, 1e300, 0.1, 2.0])
            payload["b"] = rng.choice([True, False, None, 1])
        elif shape < 0.85:
            payload["nested"] = {"l": [1, "two", {"three": [3.0]}], "u": 'é\u2028\x00"\\'}
        else:
            payload["big"] = rng.randrange(2**62)
        return payload

    def new_spec(self) -> dict[str, Any]:
        rng = self.rng
        self.next_id += 1
        spec: dict[str, Any] = {
            "task_id": f"{self.prefix}{self.next_id:04d}",
            "payload": self._payload(self.next_id),
            "available_at": self.now + rng.choice([0, 0, 0, 3]),
            "max_attempts": rng.choice([1, 2, 3]),
        }
        if rng.random() < 0.3:
            spec["key"] = f"k-{self.prefix}{self.next_id:04d}"
        self.puts.append(spec)
        return spec

    def next_op(self, target: Any) -> Op:
        """Choose the next call from the seed and from `target`'s state (a Queue or a Model)."""
        rng = self.rng
        self.now += rng.choice([0, 1, 1, 2, 5])
        now = self.now
        kind = rng.choices(self.KINDS, weights=self.weights)[0]
        if kind in ("retry", "conflict") and self.puts:
            spec = dict(rng.choice(self.puts))
            if kind == "conflict":
                spec["payload"] = {"other": rng.randrange(3)}
            return Op("put", {"spec": spec})
        if kind == "put_many":
            items = [self.new_spec() for _ in range(rng.randrange(1, 4))]
            if len(self.puts) > len(items) and rng.random() < 0.4:
                items.append(dict(rng.choice(self.puts[: -len(items)])))
            return Op("put_many", {"items": items})
        if kind == "reserve":
            return Op(
                "reserve",
                {
                    "worker": rng.choice(["w1", "w2", "w3"]),
                    "now": now,
                    "lease_seconds": rng.choice([1, 2, 4, 10]),
                    "limit": rng.choice([1, 2, 3, 5]),
                },
            )
        if kind in ("ack", "release"):
            leased = target.tasks("leased")
            if leased:
                lease = token_for(rng.choice(leased))
                if kind == "ack":
                    return Op("ack", {"lease": lease, "now": now})
                return Op("release", {"lease": lease, "now": now, "delay": rng.choice([0, 1, 3])})
        if kind == "extend":
            leased = target.tasks("leased")
            if leased:
                # Mostly a heartbeat of a lease not yet over; sometimes one at or past its deadline (stale).
                live = [t for t in leased if t.deadline is not None and t.deadline > now]
                task = rng.choice(live if live and rng.random() < 0.85 else leased)
                lease = token_for(task)
                if rng.random() < 0.3:
                    lease = Lease(lease.task_id, lease.worker, lease.generation)  # the three fields alone
                return Op("extend", {"lease": lease, "now": now, "lease_seconds": rng.choice([1, 2, 4, 10])})
        if kind in ("redrive", "cancel"):
            tasks = target.tasks()
            wanted = ("dead",) if kind == "redrive" else ("ready", "leased")
            fitting = [t.task_id for t in tasks if t.status in wanted]
            if fitting or tasks:
                # Mostly a task in the status the call needs; sometimes any task or an unknown one (WrongStatus).
                roll = rng.random()
                if fitting and roll < 0.8:
                    task_id = rng.choice(fitting)
                elif tasks and roll < 0.95:
                    task_id = rng.choice(tasks).task_id
                else:
                    task_id = f"{self.prefix}missing"
                if kind == "cancel":
                    return Op("cancel", {"task_id": task_id})
                return Op(
                    "redrive",
                    {
                        "task_id": task_id,
                        "available_at": now + rng.choice([0, 0, 2]),
                        "extra_attempts": rng.choice([1, 1, 2]),
                    },
                )
        if kind == "stale":
            touched = [t for t in target.tasks() if t.generation > 0]
            if touched:
                lease = token_for(rng.choice(touched))
                forged = rng.choice(["generation", "worker", "as-is"])
                if forged == "generation":
                    lease = Lease(lease.task_id, lease.worker, lease.generation - 1, 0, 0, {})
                elif forged == "worker":
                    lease = Lease(lease.task_id, "w9", lease.generation, 0, 0, {})
                # Forged for every lease call this workload makes (a weight of 0 turns extend off).
                verbs = ["ack", "release"] + (["extend"] if self.weights[self.KINDS.index("extend")] else [])
                verb = rng.choice(verbs)
                return Op(verb, {"lease": lease, "now": now, "delay": 0, "lease_seconds": 5})
        if kind == "compact":
            return Op("compact", {})
        if kind == "get":
            known = [t.task_id for t in target.tasks()]
            task_id = rng.choice(known) if known and rng.random() < 0.8 else f"{self.prefix}missing"
            return Op("get", {"task_id": task_id})
        if kind == "tasks":
            return Op("tasks", {"status": rng.choice([None, "ready", "leased", "completed", "dead"])})
        return Op("put", {"spec": self.new_spec()})


def reap_only(model: Model, now: int) -> Model:
    """The model after the reap transaction of `reserve(now=now)` and before its lease transaction."""
    reaped = model.clone()
    reap = getattr(reaped, "reap", None)
    if callable(reap):
        reap(now)
        return reaped
    # The model has no public reap (yet): do exactly what its reserve does first.
    records = sorted(reaped._tasks.items())
    expired = [r for _, r in records if r["status"] == "leased" and r["deadline"] <= now]
    if expired:
        reaped._expire([{"op": "expire", "task": r["task"], "generation": r["generation"]} for r in expired])
    return reaped


@dataclass
class Expected:
    """The model states a step may leave, by `last_seq`, and the answer it must give."""

    by_seq: dict[int, Model]
    before: Model
    after: Model
    answer: str

    def state_after(self, complete: int) -> Model | None:
        """The state once `complete` of the step's transactions are durable (None: no such state)."""
        return self.by_seq.get(self.before.last_seq + complete)


def expected_states(model: Model, op: Op) -> Expected:
    before = model.clone()
    by_seq = {before.last_seq: before}
    if op.kind == "reserve":
        reaped = reap_only(model, op.args["now"])
        by_seq.setdefault(reaped.last_seq, reaped)
    after = model.clone()
    answer = outcome(op, after)
    by_seq[after.last_seq] = after
    return Expected(by_seq, before, after, answer)


class PhaseLog:
    """A hook that records phases and raises `InjectedCrash` at call number `crash_at`, or at `crash_phase`."""

    def __init__(self, crash_at: int | None = None, crash_phase: str | None = None) -> None:
        self.crash_at = crash_at
        self.crash_phase = crash_phase
        self.phases: list[str] = []

    def __call__(self, phase: str) -> None:
        self.phases.append(phase)
        if self.crash_at is not None and len(self.phases) - 1 == self.crash_at:
            raise InjectedCrash(phase)
        if self.crash_phase == phase:
            self.crash_phase = None
            raise InjectedCrash(phase)


def check_poisoned(queue: Queue, where: str, report: Report) -> None:
    """After a crash or an OS error: every call raises QueueClosed, close() raises nothing (SPEC §2)."""
    probes: list[tuple[str, Callable[[], Any]]] = [
        ("tasks()", lambda: queue.tasks()),
        ("last_seq", lambda: queue.last_seq),
        ("put()", lambda: queue.put("poison-probe", {})),
    ]
    for name, probe in probes:
        try:
            probe()
        except QueueClosed:
            continue
        except Exception as exc:
            report.diverge(f"{where}: {name} on a poisoned queue raised {type(exc).__name__}, not QueueClosed")
        else:
            report.diverge(f"{where}: {name} on a poisoned queue succeeded")
    for _ in range(2):
        try:
            queue.close()
        except BaseException as exc:  # close() must never raise
            report.diverge(f"{where}: close() on a poisoned queue raised {type(exc).__name__}")


def open_through_recovery_crashes(path: Path, report: Report, crashed: set[str], where: str, **options: Any) -> Queue:
    """Open `path`, first dying at each recovery phase call in turn (SPEC §4 rule 5, §5).

    Opening may report only `recover.truncate.*`, each at most once; a crash
    at either must leave a directory that opens to the same state. fsck,
    asked before the first attempt, must agree with what opening found.
    """
    from walqueue.format.fsck import check

    verdict = check(path, replay=True)
    torn = False
    for attempt in range(len(RECOVERY_PHASES) + 2):
        log = PhaseLog(crash_at=attempt)
        try:
            queue = Queue(path, hook=log, **options)
        except InjectedCrash:
            crashed.add(log.phases[-1])
            report.count("recovery crashes")
            _check_recovery_phases(log.phases, report, where)
            torn = torn or attempt == 0
            continue
        _check_recovery_phases(log.phases, report, where)
        agree_with_fsck(verdict, queue, torn or bool(log.phases), report, where)
        return queue
    raise Abort(f"{where}: opening reported more phases than recovery has")


def open_checked_by_fsck(path: Path, report: Report, where: str, **options: Any) -> Queue:
    """Ask `walqueue-fsck --replay` about `path`, then open it; the two must agree (SPEC §7).

    After a crash, a kill or an OS error nothing is corrupt: fsck must say 1
    exactly when opening cuts a torn tail and 0 otherwise, and its replay
    must end at the sequence and counts that opening recovers.
    """
    from walqueue.format.fsck import check

    verdict = check(path, replay=True)
    log = PhaseLog()
    queue = Queue(path, hook=log, **options)
    _check_recovery_phases(log.phases, report, where)
    agree_with_fsck(verdict, queue, "recover.truncate.before" in log.phases, report, where)
    return queue


def agree_with_fsck(verdict: Any, queue: Queue, torn: bool, report: Report, where: str) -> None:
    want = 1 if torn else 0
    replay = verdict.replay
    if verdict.exit_code != want:
        findings = "; ".join(f"{f.severity} {f.kind} {f.file}@{f.offset}: {f.message}" for f in verdict.findings[:3])
        report.diverge(f"{where}: fsck exit {verdict.exit_code}, opening implies {want} ({findings})")
    elif replay is None or replay.last_seq != queue.last_seq or replay.counts != queue.stats()["counts"]:
        report.diverge(f"{where}: fsck replay ends at {replay and replay.last_seq}, opening at {queue.last_seq}")
    else:
        report.count("fsck agreed")


def _check_recovery_phases(phases: list[str], report: Report, where: str) -> None:
    if phases and tuple(phases) != RECOVERY_PHASES[: len(phases)]:
        report.diverge(f"{where}: opening reported phases {phases}")


def compare_views(actual: Queue, expected: Model, report: Report, where: str) -> bool:
    got, want = view(actual), view(expected)
    if got == want:
        return True
    report.diverge(f"{where}: state differs from the model: {_view_difference(got, want)}")
    return False


def _view_difference(got: dict[str, Any], want: dict[str, Any]) -> str:
    if got["last_seq"] != want["last_seq"]:
        return f"last_seq {got['last_seq']} != model {want['last_seq']}"
    extra = sorted(set(got["tasks"]) - set(want["tasks"]))[:2]
    missing = sorted(set(want["tasks"]) - set(got["tasks"]))[:2]
    return f"counts {got['counts']} vs model {want['counts']}; only in queue {extra}; only in model {missing}"


# ---------------------------------------------------------------------------
# Campaign 1: crash points


CRASH_STEPS = 160
ADOPT_PROBABILITY = 0.3


def campaign_crash_points(seed: int, budget: float, report: Report) -> None:
    """Crash every phase call of every step of seeded workloads, on copies of the directory."""
    deadline = time.monotonic() + budget
    crashed: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="walqueue-crash-", dir=scratch_root()) as tmp:
        for unit in itertools.count():
            if unit and time.monotonic() >= deadline:
                break
            report.count("workloads")
            try:
                _crash_workload(seed, unit, Dirs(Path(tmp) / f"u{unit}"), deadline, report, crashed)
            except Abort as exc:
                report.diverge(str(exc))
            except Exception:
                report.diverge(f"unit {unit}: unexpected exception\n{traceback.format_exc(limit=6)}")
    report.counts["phases crashed"] = len(crashed)
    missing = sorted(set(PHASES) - crashed)
    if missing:
        report.gaps.append(f"phases never crashed at: {missing}")


def _crash_workload(seed: int, unit: int, dirs: Dirs, deadline: float, report: Report, crashed: set[str]) -> None:
    dirs.root.mkdir()
    rng = random.Random(f"crash:{seed}:{unit}")
    workload = Workload(f"crash-ops:{seed}:{unit}")
    options: dict[str, Any] = {"sync": False, "compact_bytes": rng.choice([600, 1200, 2500])}
    main = dirs.new()
    model = Model()
    recorder = PhaseLog()
    queue = Queue(main, hook=recorder, **options)
    try:
        for step in range(CRASH_STEPS):
            if step >= 10 and time.monotonic() >= deadline:
                break
            where = f"--seed {seed} crash-points unit {unit} step {step}"
            op = workload.next_op(model)
            where += f" ({op.describe()})"
            expected = expected_states(model, op)
            pre = dirs.new(copy_of=main)
            recorder.phases = []
            answer = outcome(op, queue)
            report.count("steps")
            if answer != expected.answer:
                raise Abort(f"{where}: answered {answer[:200]!r}, model {expected.answer[:200]!r}")
            if not compare_views(queue, expected.after, report, where):
                raise Abort(f"{where}: aborted")
            count_issue_16(report, op, answer, "applied")
            phases = list(recorder.phases)
            adopt_at = rng.randrange(len(phases)) if phases and rng.random() < ADOPT_PROBABILITY else None
            adopted: tuple[Path, Model] | None = None
            for crash_at in range(len(phases)):
                crashed_dir, state = _crash_once(
                    pre, op, crash_at, phases, expected, options, dirs, report, crashed, where
                )
                if crash_at == adopt_at:
                    adopted = (crashed_dir, state)
                else:
                    remove(crashed_dir)
            remove(pre)
            if adopted is None:
                model = expected.after
            else:
                queue.close()
                remove(main)
                main, model = adopted
                queue = Queue(main, hook=recorder, **options)
                report.count("continued from a crash")
        queue.close()
        final = Queue(main, **options)
        compare_views(final, model, report, f"--seed {seed} crash-points unit {unit}: final reopen")
        final.close()
    finally:
        queue.close()
        remove(dirs.root)


def _crash_once(
    pre: Path,
    op: Op,
    crash_at: int,
    phases: list[str],
    expected: Expected,
    options: dict[str, Any],
    dirs: Dirs,
    report: Report,
    crashed: set[str],
    where: str,
) -> tuple[Path, Model]:
    """Replay the step on a copy of `pre`, die at phase call `crash_at`, reopen at once and compare."""
    scratch = dirs.new(copy_of=pre)
    where = f"{where} crash at phase call {crash_at} ({phases[crash_at]})"
    crasher = PhaseLog(crash_at=crash_at)
    crashing = Queue(scratch, hook=crasher, **options)
    try:
        outcome(op, crashing)
    except InjectedCrash:
        pass
    else:
        raise Abort(f"{where}: the replayed step never reached that phase call")
    report.count("crash points")
    if expected.after.last_seq != expected.before.last_seq:
        count_issue_16(report, op, expected.answer, "crash points in")
    crashed.add(crasher.phases[-1])
    if crasher.phases != phases[: crash_at + 1]:
        report.diverge(f"{where}: phases {crasher.phases} differ from the uninterrupted run")
    check_poisoned(crashing, where, report)
    complete = crasher.phases.count("wal.append.written")
    state = expected.state_after(complete)
    if state is None:
        raise Abort(f"{where}: {complete} complete frames, but the model's step has fewer transactions")
    # Reopen at once: the dead object still exists, and must have let go of the lock.
    reopened = open_through_recovery_crashes(scratch, report, crashed, where, sync=False, compact_bytes=None)
    try:
        if not compare_views(reopened, state, report, where):
            raise Abort(f"{where}: aborted")
    finally:
        reopened.close()
    del crashing
    return scratch, state


# ---------------------------------------------------------------------------
# Campaign 2: kill -9


KILL_COMPACT_BYTES = 3000
KILL_CHILD_STEPS = 400
KILLS_PER_UNIT = 40
KILL_MAX_DELAY = 0.05
STARTUP_KILL_PROBABILITY = 0.1
CHILD_TIMEOUT = 60.0


#: The zygote's entry point: import this file as a module (its bytecode is cached, a script's is
#: not) and run its `main` with the zygote's arguments.
_TOOLS_DIR = str(Path(__file__).resolve().parent)
CHILD_BOOTSTRAP = (
    f"import sys; sys.path.insert(0, {_TOOLS_DIR!r}); import torture; sys.exit(torture.main(sys.argv[1:]))"
)


def kill_workload(seed: int, unit: int, epoch: int) -> Workload:
    """The child's workload for one life (epoch) of one store (unit); the parent rebuilds the same."""
    return Workload(f"kill:{seed}:{unit}:{epoch}", prefix=f"e{epoch}.", now=epoch * 1000)


def kill_child(directory: str, seed: int, unit: int, epoch: int, compact_bytes: int | None = KILL_COMPACT_BYTES) -> int:
    """The victim: open the queue, then run the workload, reporting each call before and after it.

    Lines go to stdout with one `os.write` each (shorter than PIPE_BUF, so
    never torn); `done` carries a digest of the exact answer.
    """
    out = sys.stdout.fileno()
    queue = Queue(directory, sync=True, compact_bytes=compact_bytes)
    os.write(out, b"ready\n")
    workload = kill_workload(seed, unit, epoch)
    for index in range(KILL_CHILD_STEPS):
        op = workload.next_op(queue)
        os.write(out, f"begin {index} {op.describe()}\n".encode())
        answer = outcome(op, queue)
        os.write(out, f"done {index} {text_digest(answer)}\n".encode())
    queue.close()
    return 0


#: Threads per life, cycling over the lives of a store: every other life has one (the begin/done protocol,
#: which the bounded run counts on), the others 4 and 16 (group commit).
KILL_THREADS = (1, 4, 1, 16)
KILL_THREAD_STEPS = 60
#: compact_bytes of a threaded life: small ones make the background snapshot run while threads write.
KILL_THREADED_COMPACT_BYTES = (None, 1500, 4000)


def kill_life_options(seed: int, unit: int, epoch: int) -> tuple[int, int | None]:
    """(threads, compact_bytes) of one life; the parent and the child agree on them through the request."""
    threads = KILL_THREADS[epoch % len(KILL_THREADS)]
    if threads == 1:
        return 1, KILL_COMPACT_BYTES
    return threads, random.Random(f"kill-life:{seed}:{unit}:{epoch}").choice(KILL_THREADED_COMPACT_BYTES)


def answer_of(op: Op, target: Any) -> tuple[str, Any]:
    """`outcome` and the value itself (None for a documented error)."""
    try:
        value = perform(op, target)
    except DOCUMENTED_ERRORS as exc:
        return "error " + type(exc).__name__, None
    return "ok " + render(value), value


class ThreadOps:
    """One thread's calls in a threaded kill life: chosen from its seed and its own answers only.

    Another thread's calls change what `reserve`, `tasks()` and `get` see, so
    nothing here reads the queue: a thread puts its own tasks, reserves as its
    own worker, acks, releases or extends only leases it was given, and
    redrives or cancels only its own tasks (whoever holds them). The parent
    builds the same stream by feeding it the model's answers.
    """

    def __init__(self, seed: int, unit: int, epoch: int, thread: str) -> None:
        self.rng = random.Random(f"kill-threads:{seed}:{unit}:{epoch}:{thread}")
        self.thread = thread
        self.prefix = f"e{epoch}.{thread}."
        self.now = epoch * 1000
        self.next_id = 0
        self.specs: list[dict[str, Any]] = []
        self.held: list[Lease] = []

    def _spec(self) -> dict[str, Any]:
        self.next_id += 1
        task_id = f"{self.prefix}{self.next_id:03d}"
        spec: dict[str, Any] = {"task_id": task_id, "payload": {"n": self.next_id, "by": self.thread}}
        spec["max_attempts"] = self.rng.choice([1, 2, 3])
        if self.rng.random() < 0.3:
            spec["key"] = f"k-{task_id}"
        self.specs.append(spec)
        return spec

    def next_op(self) -> Op:
        rng = self.rng
        self.now += rng.choice([0, 1, 2])
        kind = rng.choices(
            ["put", "put_many", "retry", "reserve", "ack", "release", "get", "tasks", "extend", "redrive", "cancel"],
            [5, 2, 1, 4, 3, 2, 1, 1, 2, 1, 1],
        )[0]
        if kind == "retry" and self.specs:
            return Op("put", {"spec": dict(rng.choice(self.specs))})
        if kind == "put_many":
            return Op("put_many", {"items": [self._spec() for _ in range(rng.randrange(1, 4))]})
        if kind == "reserve":
            limit = rng.choice([1, 2, 3])
            return Op(
                "reserve",
                {"worker": self.thread, "now": self.now, "lease_seconds": rng.choice([2, 5, 50]), "limit": limit},
            )
        if kind in ("ack", "release") and self.held:
            lease = self.held.pop(rng.randrange(len(self.held)))
            if kind == "ack":
                return Op("ack", {"lease": lease, "now": self.now})
            return Op("release", {"lease": lease, "now": self.now, "delay": rng.choice([0, 1])})
        if kind == "extend" and self.held:
            # A heartbeat: the lease stays held (its old token stays valid), and its answer replaces it.
            lease = self.held[rng.randrange(len(self.held))]
            return Op("extend", {"lease": lease, "now": self.now, "lease_seconds": rng.choice([2, 5, 50])})
        if kind in ("redrive", "cancel") and self.specs:
            # One of its own tasks, whatever its status now: another thread's reserve may have leased it,
            # so a cancel may hit a lease held elsewhere, and either call may be WrongStatus.
            task_id = rng.choice(self.specs)["task_id"]
            if kind == "cancel":
                return Op("cancel", {"task_id": task_id})
            return Op("redrive", {"task_id": task_id, "available_at": self.now, "extra_attempts": rng.choice([1, 2])})
        if kind == "get" and self.specs:
            return Op("get", {"task_id": rng.choice(self.specs)["task_id"]})
        if kind == "tasks":
            return Op("tasks", {"status": rng.choice(["leased", "dead", "completed"])})
        return Op("put", {"spec": self._spec()})

    def feed(self, op: Op, value: Any) -> None:
        """The answer to the call `next_op` gave last (the queue's in the child, the model's in the parent)."""
        if op.kind == "reserve" and value:
            self.held.extend(value)
        elif op.kind == "extend" and value is not None:
            self.held[self.held.index(op.args["lease"])] = value


def _forward_wal_frames(out: int) -> None:
    """In a threaded victim: after each frame the engine writes to a WAL segment, report ``frame SEQ THREAD``.

    The frame is written under the queue's lock, so the lines come in log
    order, each naming the thread whose call wrote it; a frame written just
    before the kill may lack its line (the parent then tries the threads
    whose call was in flight). `os.write` is wrapped, the engine untouched.
    """
    original = os.write
    pending: dict[int, bytearray] = {}

    def write(fd: int, data: Any) -> int:
        count = original(fd, data)
        if fd == out:
            return count
        try:
            name = os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            return count
        if not name.startswith("wal-"):
            return count
        buffer = pending.setdefault(fd, bytearray())
        buffer += bytes(memoryview(data)[:count])
        while len(buffer) >= 4:
            (length,) = struct.unpack(">I", buffer[:4])
            if len(buffer) < 4 + length + 32:
                break
            seq = json.loads(bytes(buffer[4 : 4 + length]))["seq"]
            del buffer[: 4 + length + 32]
            original(out, f"frame {seq} {threading.current_thread().name}\n".encode())
        return count

    os.write = write


def kill_threads_child(
    directory: str, seed: int, unit: int, epoch: int, threads: int, compact_bytes: int | None
) -> int:
    """The threaded victim: `threads` threads share one Queue (group commit); each reports its acknowledged calls."""
    out = sys.stdout.fileno()
    write = os.write
    _forward_wal_frames(out)
    queue = Queue(directory, sync=True, compact_bytes=compact_bytes)
    write(out, b"ready\n")
    failures: list[str] = []

    def run(name: str) -> None:
        try:
            ops = ThreadOps(seed, unit, epoch, name)
            for index in range(KILL_THREAD_STEPS):
                op = ops.next_op()
                text, value = answer_of(op, queue)
                write(out, f"done {name} {index} {text_digest(text)}\n".encode())
                ops.feed(op, value)
        except BaseException:
            failures.append(traceback.format_exc())

    workers = [threading.Thread(target=run, args=(f"T{n}",), name=f"T{n}") for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    queue.close()
    if failures:
        sys.stderr.write(failures[0])
        return 1
    return 0


def kill_zygote() -> int:
    """A warm process that forks one victim per request line and reports its pid and its end.

    Starting an interpreter and importing walqueue costs far more than a
    life worth killing, so the process started with `sys.executable` does it
    once and forks each victim from there: a real process, with its own
    descriptors and lock, that opens and recovers the store itself and dies
    by SIGKILL. Lines on stdout: ``child PID`` after each fork (the victim's
    own lines may come before it), ``exit PID STATUS`` once it is dead
    (after every line the victim wrote, since the zygote waits for it first).
    """
    out = sys.stdout.fileno()
    while request := sys.stdin.buffer.readline():
        directory, seed, unit, epoch, threads, compact = request.decode().split()
        compact_bytes = None if compact == "none" else int(compact)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                if int(threads) == 1:
                    code = kill_child(directory, int(seed), int(unit), int(epoch), compact_bytes)
                else:
                    code = kill_threads_child(directory, int(seed), int(unit), int(epoch), int(threads), compact_bytes)
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        os.write(out, f"child {pid}\n".encode())
        _, status = os.waitpid(pid, 0)
        os.write(out, f"exit {pid} {os.waitstatus_to_exitcode(status)}\n".encode())
    return 0


def child_environment() -> dict[str, str]:
    """PYTHONPATH for a child that imports exactly the walqueue (and model) this process imports."""
    import walqueue

    entries: list[str] = []
    for package_dir in walqueue.__path__:  # every src (or site) directory that contributes to walqueue
        parent = str(Path(package_dir).resolve().parent)
        if parent not in entries:
            entries.append(parent)
    entries.append(str(_TESTS_DIR))
    env = dict(os.environ)
    inherited = env.get("PYTHONPATH")
    env["PYTHONPATH"] = os.pathsep.join(entries + ([inherited] if inherited else []))
    return env


@dataclass
class ChildLife:
    """What the parent learned from one killed child: its lines, in order."""

    ready: bool = False
    begun: list[tuple[int, str]] = field(default_factory=list)
    done: dict[int, str] = field(default_factory=dict)
    #: Threaded lives: each thread's acknowledged calls (index -> digest), and the log's frames (seq, thread).
    thread_done: dict[str, dict[int, str]] = field(default_factory=dict)
    frames: list[tuple[int, str]] = field(default_factory=list)
    pid: int | None = None
    returncode: int | None = None


class Zygote:
    """The parent's side of `kill_zygote`: spawn a victim, wait for a line, kill, collect everything."""

    def __init__(self, env: dict[str, str], errors: IO[bytes]) -> None:
        command = [sys.executable, "-S", "-c", CHILD_BOOTSTRAP, "--kill-zygote"]
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, env=env, bufsize=0
        )
        self.errors = errors
        self._buffer = b""

    def spawn(
        self, directory: Path, seed: int, unit: int, epoch: int, threads: int = 1, compact_bytes: int | None = None
    ) -> ChildLife:
        assert self.process.stdin is not None
        compact = "none" if compact_bytes is None else str(compact_bytes)
        self.process.stdin.write(f"{directory} {seed} {unit} {epoch} {threads} {compact}\n".encode())
        life = ChildLife()
        self.read_until(life, lambda lived: lived.pid is not None)
        return life

    def read_until(self, life: ChildLife, enough: Callable[[ChildLife], bool]) -> None:
        """Read and record lines until `enough(life)` (or the victim's end, or a hung zygote)."""
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        limit = time.monotonic() + CHILD_TIMEOUT
        while not enough(life) and life.returncode is None:
            while b"\n" in self._buffer and not enough(life) and life.returncode is None:
                line, self._buffer = self._buffer.split(b"\n", 1)
                self._record(life, line.decode())
            if enough(life) or life.returncode is not None:
                return
            ready, _, _ = select.select([fd], [], [], max(0.0, limit - time.monotonic()))
            chunk = os.read(fd, 65536) if ready else b""
            if not chunk:
                raise Abort(f"the kill zygote hung or died:\n{self.stderr_tail()}")
            self._buffer += chunk

    @staticmethod
    def _record(life: ChildLife, line: str) -> None:
        if line == "ready":
            life.ready = True
            return
        word, first, rest = (line.split(" ", 2) + [""])[:3]
        if word == "child":
            life.pid = int(first)
        elif word == "exit":
            life.returncode = int(rest)
        elif word == "begin":
            life.begun.append((int(first), rest))
        elif word == "done" and first.startswith("T"):
            index, digest = rest.split()
            life.thread_done.setdefault(first, {})[int(index)] = digest
        elif word == "done":
            life.done[int(first)] = rest
        elif word == "frame":
            life.frames.append((int(first), rest))
        else:
            raise Abort(f"the victim wrote {line!r}")

    def kill(self, life: ChildLife) -> None:
        assert life.pid is not None
        if life.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(life.pid, signal.SIGKILL)
        self.read_until(life, lambda lived: lived.returncode is not None)

    def stderr_tail(self) -> str:
        self.errors.seek(0)
        return self.errors.read().decode("utf-8", "replace")[-2000:]

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=CHILD_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def campaign_kill(seed: int, budget: float, report: Report) -> None:
    """SIGKILL a child running a seeded workload at random moments; reopen and compare after each kill."""
    deadline = time.monotonic() + budget
    overtime = deadline + budget * TARGET_OVERTIME
    report.counts.update({"kills": 0, "operations done": 0, "in flight": 0})

    def over() -> bool:
        now = time.monotonic()
        if now < deadline:
            return False
        if now < overtime and report.short_of_targets():
            if "ran past its budget to reach its targets" not in report.notes:
                report.notes.append("ran past its budget to reach its targets")
            return False
        return True

    with tempfile.TemporaryDirectory(prefix="walqueue-kill-") as tmp, tempfile.TemporaryFile() as errors:
        zygote = Zygote(child_environment(), errors)
        try:
            for unit in itertools.count():
                if unit and over():
                    break
                try:
                    _kill_unit(seed, unit, Path(tmp) / f"u{unit}", over, zygote, report)
                except Abort as exc:
                    report.diverge(str(exc))
                    if zygote.process.poll() is not None:
                        break
                except Exception:
                    report.diverge(f"kill unit {unit}: unexpected exception\n{traceback.format_exc(limit=6)}")
        finally:
            zygote.close()


def _kill_unit(seed: int, unit: int, directory: Path, over: Callable[[], bool], zygote: Zygote, report: Report) -> None:
    rng = random.Random(f"kill-timing:{seed}:{unit}")
    model = Model()
    try:
        for epoch in range(KILLS_PER_UNIT):
            if (unit or epoch >= 5) and over():
                break
            threads, compact_bytes = kill_life_options(seed, unit, epoch)
            where = f"--seed {seed} kill unit {unit} epoch {epoch} ({threads} threads, compact_bytes={compact_bytes})"
            life = zygote.spawn(directory, seed, unit, epoch, threads, compact_bytes)
            if rng.random() < STARTUP_KILL_PROBABILITY:
                time.sleep(rng.uniform(0.0, 0.02))  # may land while it opens and recovers
            else:
                zygote.read_until(life, lambda lived: lived.ready)
                time.sleep(rng.uniform(0.0, KILL_MAX_DELAY))
            zygote.kill(life)
            report.count("kills")
            if life.returncode not in (-signal.SIGKILL, 0):
                raise Abort(f"{where}: the child died by itself (status {life.returncode}):\n{zygote.stderr_tail()}")
            report.count(f"lives with {threads} thread{'s' if threads > 1 else ''}")
            _count_unpublished_snapshot(directory, report)
            if threads == 1:
                model = _check_life(directory, seed, unit, epoch, life, model, report, where)
            else:
                model = _check_threaded_life(directory, seed, unit, epoch, threads, life, model, report, where)
    finally:
        remove(directory)


def _check_life(
    directory: Path, seed: int, unit: int, epoch: int, life: ChildLife, model: Model, report: Report, where: str
) -> Model:
    """Replay the child's reported calls in the model; the reopened store must match (SPEC §4 rules 6, 7)."""
    workload = kill_workload(seed, unit, epoch)
    in_flight: tuple[Op, Expected] | None = None
    for position, (index, description) in enumerate(life.begun):
        if index != position:
            raise Abort(f"{where}: the child reported call {index} at position {position}")
        op = workload.next_op(model)
        if op.describe() != description:
            raise Abort(f"{where} call {index}: child ran {description!r}, the replay {op.describe()!r}")
        if index in life.done:
            # Certain: replay it on the model itself (cloning is for the uncertain one only).
            answer = outcome(op, model)
            if life.done[index] != text_digest(answer):
                raise Abort(f"{where} call {index} ({description}): answer differs from the model's")
            report.count("operations done")
            count_issue_16(report, op, answer, "acknowledged")
        else:
            if position != len(life.begun) - 1:
                raise Abort(f"{where}: call {index} began but never finished, and another one began")
            in_flight = (op, expected_states(model, op))
    if in_flight is None:
        candidates = [model]  # every call it began, it finished: nothing is uncertain
    else:
        # before the call, after it, or (a reserve) after its reap only
        candidates = sorted(in_flight[1].by_seq.values(), key=lambda m: m.last_seq)
    if not directory.exists():
        # Killed before `Queue` created its directory: only a first life,
        # killed while starting, can leave none. Nothing was written, fsck
        # (which never creates anything) rightly finds no store to read, and
        # the next life starts from nothing, as the model does.
        if life.ready or life.begun or model.last_seq:
            raise Abort(f"{where}: no directory after a life that had opened it")
        report.count("killed before creating the directory")
        return model
    reopened = open_checked_by_fsck(directory, report, where, sync=True, compact_bytes=KILL_COMPACT_BYTES)
    try:
        got = view(reopened)
    finally:
        reopened.close()
    for candidate in candidates:
        if view(candidate) == got:
            _count_resolution(report, life, in_flight, candidate)
            return candidate
    flight = "nothing" if in_flight is None else in_flight[0].describe()
    raise Abort(
        f"{where}: reopened state matches no allowed state (in flight: {flight}): "
        f"{_view_difference(got, view(candidates[-1]))}"
    )


def _count_unpublished_snapshot(directory: Path, report: Report) -> None:
    """Count the kills that left a snapshot CURRENT does not name (a background snapshot was being written)."""
    if not directory.is_dir():
        return
    try:
        current = read_current(directory)
    except Exception:  # noqa: BLE001 - opening will judge it
        return
    named = None if current is None else current.snapshot
    if any(p.name.startswith("snapshot-") and p.name != named for p in directory.iterdir()):
        report.count("killed with a snapshot unpublished")


class _ThreadReplay:
    """The parent's copy of one thread of a threaded life: its calls, rebuilt from the model's answers."""

    def __init__(self, ops: ThreadOps, done: dict[int, str]) -> None:
        self.ops = ops
        self.done = done
        self.index = 0
        self._head: Op | None = None

    def head(self) -> Op | None:
        if self._head is None and self.index < KILL_THREAD_STEPS:
            self._head = self.ops.next_op()
        return self._head

    @property
    def acknowledged(self) -> bool:
        return self.index in self.done

    def consume(self, value: Any) -> None:
        assert self._head is not None
        self.ops.feed(self._head, value)
        self._head = None
        self.index += 1


def _place_without_writing(replay: _ThreadReplay, model: Model) -> int:
    """Place the thread's next acknowledged calls that write nothing and answer as reported at `model`'s state."""
    placed = 0
    while replay.acknowledged:
        op = replay.head()
        assert op is not None
        digest = replay.done[replay.index]
        if op.kind in ("put", "put_many"):
            specs = [op.args["spec"]] if op.kind == "put" else op.args["items"]
            if any(model.get(spec["task_id"]) is None for spec in specs):
                return placed  # a new task: this call writes
            text, value = answer_of(op, model)  # identical retries: nothing changes
        elif op.kind in ("get", "tasks"):
            text, value = answer_of(op, model)
        else:
            if op.kind == "reserve" and digest != text_digest("ok []"):
                return placed  # it leased something: it wrote
            if op.kind in ("ack", "release", "redrive", "cancel") and digest == text_digest("ok null"):
                return placed
            trial = model.clone()
            text, value = answer_of(op, trial)
            if trial.last_seq != model.last_seq:
                return placed
        if text_digest(text) != digest:
            return placed  # not at this state; perhaps at a later one
        replay.consume(value)
        placed += 1
    return placed


def _check_threaded_life(
    directory: Path,
    seed: int,
    unit: int,
    epoch: int,
    threads: int,
    life: ChildLife,
    model: Model,
    report: Report,
    where: str,
) -> Model:
    """Replay a threaded life in the model in log order; every acknowledged call must be there, answered alike.

    The frames' lines give the log order and each frame's thread. A call
    that wrote is replayed where its frames are, on the model itself, and
    must write exactly that many frames; an acknowledged call that wrote
    nothing (a read, a retry, a stale token, an empty reserve) is placed at
    the earliest state, between its thread's neighbours, where the model
    gives its answer. At the end every acknowledged call must be placed and
    the reopened store must equal the model: nothing lost, nothing applied
    twice, and the order one that the model can reach.
    """
    if not directory.exists():
        if life.ready or life.frames or life.thread_done or model.last_seq:
            raise Abort(f"{where}: no directory after a life that had opened it")
        report.count("killed before creating the directory")
        return model
    reopened = open_checked_by_fsck(directory, report, where, sync=True, compact_bytes=KILL_COMPACT_BYTES)
    try:
        got = view(reopened)
    finally:
        reopened.close()
    start, end = model.last_seq, got["last_seq"]
    owners = dict(life.frames)
    if sorted(owners) != list(range(start + 1, start + 1 + len(owners))):
        raise Abort(f"{where}: the frames reported are not consecutive from {start + 1}")
    if owners and max(owners) > end:
        raise Abort(f"{where}: frame {max(owners)} was written before the kill, the reopened store ends at {end}")
    log = [owners.get(seq) for seq in range(start + 1, end + 1)]
    replays = {
        f"T{n}": _ThreadReplay(ThreadOps(seed, unit, epoch, f"T{n}"), life.thread_done.get(f"T{n}", {}))
        for n in range(threads)
    }
    position = 0
    while position < len(log):
        for replay in replays.values():
            _place_without_writing(replay, model)
        owner = log[position]
        if owner is None:
            break  # the last frames, written just before the kill, without their lines
        replay = replays.get(owner)
        op = None if replay is None else replay.head()
        if replay is None or op is None:
            raise Abort(f"{where}: frame {start + position + 1} is from {owner}, which has no call left")
        label = f"{where} {owner} call {replay.index} ({op.describe()}) at frame {start + position + 1}"
        before = model.clone() if not replay.acknowledged else None
        text, value = answer_of(op, model)
        wrote = model.last_seq - (start + position)
        span = log[position : position + wrote]
        if wrote == 0:
            raise Abort(f"{label}: the model writes nothing here")
        if any(who not in (owner, None) for who in span) or (replay.acknowledged and None in span):
            raise Abort(f"{label}: the model writes {wrote} frames, the log has {span}")
        if replay.acknowledged:
            if text_digest(text) != replay.done[replay.index]:
                raise Abort(f"{label}: answered differently from the model")
            report.count("threaded operations done")
            count_issue_16(report, op, text, "threaded acknowledged")
        else:
            report.count("threaded in flight applied")
            if len(span) < wrote:  # the log ends inside the call: a reserve, reaped only
                if op.kind != "reserve" or before is None or len(span) != 1:
                    raise Abort(f"{label}: {len(span)} of its {wrote} frames in the log")
                model = reap_only(before, op.args["now"])
                report.count("threaded in flight reaped only")
        replay.consume(value)
        position += wrote
    if position < len(log):  # frames without lines: the call in flight of one of the threads
        model = _resolve_unreported_tail(replays, model, got, report, where)
    for name, replay in replays.items():
        _place_without_writing(replay, model)
        if replay.acknowledged:
            op = replay.head()
            assert op is not None
            raise Abort(
                f"{where}: {name}'s acknowledged call {replay.index} ({op.describe()}) is not in the reopened "
                "store, or no state the model passed through gives its answer"
            )
    if view(model) != got:
        raise Abort(
            f"{where}: the reopened store differs from the model's replay: {_view_difference(got, view(model))}"
        )
    return model


def _resolve_unreported_tail(
    replays: dict[str, _ThreadReplay], model: Model, got: dict[str, Any], report: Report, where: str
) -> Model:
    """The last frames lack their lines: one thread's call in flight wrote them; find which, by the state."""
    for replay in replays.values():
        op = replay.head()
        if op is None or replay.acknowledged:
            continue
        trial = model.clone()
        answer_of(op, trial)
        candidates = [trial]
        if op.kind == "reserve":
            candidates.append(reap_only(model, op.args["now"]))
        for candidate in candidates:
            if candidate.last_seq == got["last_seq"] and view(candidate) == got:
                report.count("threaded in flight applied, unreported")
                replay.consume(None)
                return candidate
    raise Abort(f"{where}: frames up to {got['last_seq']} lack their lines and no call in flight wrote them")


def _count_resolution(report: Report, life: ChildLife, in_flight: tuple[Op, Expected] | None, state: Model) -> None:
    if not life.ready:
        report.count("killed while opening")
    if in_flight is None:
        return
    report.count("in flight")
    _, expected = in_flight
    if state.last_seq == expected.before.last_seq:
        report.count("in-flight not applied")
    elif state.last_seq == expected.after.last_seq:
        report.count("in-flight applied")
    else:
        report.count("in-flight reaped only")


# ---------------------------------------------------------------------------
# Campaign 3: bytes (truncations and bit flips, and fsck's agreement)


EVERY_BIT_BUDGET = 90.0
FIRST_STORE_FLIPS = 300
STORE_WEIGHTS = {
    "put": 1, "retry": 1, "conflict": 0, "put_many": 0, "reserve": 4, "ack": 3, "release": 3,
    "stale": 0, "compact": 0, "get": 0, "tasks": 0, "extend": 3, "redrive": 3, "cancel": 2,
}  # fmt: skip
#: Compactions interrupted while building a store, and what each leaves behind.
STORE_INTERRUPTIONS = (
    "current.published",  # the published snapshot, and a leftover segment below CURRENT.wal
    "current.written",  # CURRENT.tmp, a complete orphan snapshot, a second live segment
    "snapshot.partial",  # a partial orphan snapshot, a third live segment
)


@dataclass
class Frame:
    start: int
    end: int
    seq: int


@dataclass
class Store:
    """A store built by a workload, its model states by sequence, and the role of each file."""

    directory: Path
    views: dict[int, dict[str, Any]]
    final_seq: int
    snapshot_seq: int
    files: dict[str, bytes]
    live: list[str]  # live segment names, oldest first
    frames: dict[str, list[Frame]]  # live segment name -> its frames
    authoritative: set[str]  # CURRENT and the snapshot it names

    @property
    def newest(self) -> str:
        return self.live[-1]


def build_store(seed: int, unit: int, directory: Path, report: Report) -> Store:
    """A small store with every kind of file, written by a seeded workload checked against the model."""
    # Few tasks, many state changes: every byte of the store is damaged in turn, so a small
    # store is a thorough one, and snapshots grow with the number of tasks.
    workload = Workload(f"bytes-ops:{seed}:{unit}", weights=STORE_WEIGHTS)
    rng = random.Random(f"bytes:{seed}:{unit}")
    model = Model()
    views = {0: view(model)}
    where = f"--seed {seed} bytes unit {unit} (building)"

    def lifecycle(index: int) -> Op:
        """A task that is leased, extended, cancelled and redriven: every issue-16 op, whatever the seed."""
        if index == 0:
            return Op("put", {"spec": {**workload.new_spec(), "available_at": 0}})
        if index == 1:
            return Op("reserve", {"worker": "w1", "now": workload.now, "lease_seconds": 10, "limit": 1})
        if index in (2, 3):
            task = max(model.tasks("leased"), key=lambda t: t.deadline or 0)  # the lease just granted
            if index == 2:
                return Op("extend", {"lease": token_for(task), "now": workload.now, "lease_seconds": 20})
            return Op("cancel", {"task_id": task.task_id})
        return Op("redrive", {"task_id": model.tasks("dead")[0].task_id, "available_at": workload.now,
                              "extra_attempts": 1})  # fmt: skip

    def run_ops(count: int, *, with_lifecycle: bool = False) -> None:
        nonlocal model
        with Queue(directory, sync=False, compact_bytes=None) as queue:
            for index in range(count + (5 if with_lifecycle else 0)):
                # A put first, so that every compaction below has something to compact.
                if with_lifecycle and index < 5:
                    op = lifecycle(index)
                else:
                    op = Op("put", {"spec": workload.new_spec()}) if index == 0 else workload.next_op(model)
                expected = expected_states(model, op)
                if outcome(op, queue) != expected.answer:
                    raise Abort(f"{where}: {op.describe()} answered differently from the model")
                count_issue_16(report, op, expected.answer, "in stores:")
                for seq, state in expected.by_seq.items():
                    views.setdefault(seq, view(state))
                model = expected.after
            if not compare_views(queue, model, report, where):
                raise Abort(f"{where}: aborted")

    run_ops(rng.randrange(3, 5))
    for phase in STORE_INTERRUPTIONS:
        run_ops(rng.randrange(2, 4))
        dying = Queue(directory, hook=PhaseLog(crash_phase=phase), sync=False, compact_bytes=None)
        try:
            dying.compact()
        except InjectedCrash:
            pass
        else:
            raise Abort(f"{where}: compaction never reached {phase}")
    run_ops(rng.randrange(3, 5), with_lifecycle=True)
    return _describe_store(directory, views, model.last_seq)


def _describe_store(directory: Path, views: dict[int, dict[str, Any]], final_seq: int) -> Store:
    current = read_current(directory)
    assert current is not None
    files = {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.name != LOCK_NAME}
    live = sorted(
        (name for name in files if (parse_wal_name(name) or 0) >= current.wal),
        key=lambda name: parse_wal_name(name) or 0,
    )
    frames: dict[str, list[Frame]] = {}
    for name in live:
        parsed = read_frames(directory / name)
        ends = [offset for offset, _ in parsed[1:]] + [len(files[name])]
        frames[name] = [Frame(offset, end, body["seq"]) for (offset, body), end in zip(parsed, ends, strict=True)]
    return Store(
        directory=directory,
        views=views,
        final_seq=final_seq,
        snapshot_seq=current.seq,
        files=files,
        live=live,
        frames=frames,
        authoritative={"CURRENT", current.snapshot},
    )


@dataclass
class Allowed:
    """What opening a damaged store may do: raise CorruptStore, or give the state of `seq` (torn or not)."""

    corrupt: bool
    seq: int | None = None
    torn: bool | None = None  # None: either


def _seq_before(store: Store, name: str, offset: int) -> int:
    """The last sequence whose frame ends at or before `offset` of live segment `name` (or earlier)."""
    seq = store.snapshot_seq
    for segment in store.live:
        for frame in store.frames[segment]:
            if segment == name and frame.end > offset:
                return seq
            seq = frame.seq
        if segment == name:
            return seq
    raise AssertionError(name)


def _allowed_outside_the_log(store: Store, name: str) -> Allowed:
    """CURRENT and its snapshot: any damage is CorruptStore. Anything else is never read: no effect."""
    if name in store.authoritative:
        return Allowed(corrupt=True)
    return Allowed(corrupt=False, seq=store.final_seq, torn=False)


def allowed_after_truncation(store: Store, name: str, size: int) -> Allowed:
    if name not in store.live:
        return _allowed_outside_the_log(store, name)
    frames = store.frames[name]
    boundary = size == 0 or any(frame.end == size for frame in frames)
    seq = _seq_before(store, name, size)
    if name == store.newest:
        return Allowed(corrupt=False, seq=seq, torn=not boundary)
    later = store.live[store.live.index(name) + 1 :]
    if boundary and not any(store.frames[segment] for segment in later):
        # A sealed segment cut at a frame boundary, with nothing after it: indistinguishable
        # from a shorter log (see docs/RELIABILITY.md, limits).
        return Allowed(corrupt=True, seq=seq, torn=False)
    return Allowed(corrupt=True)


def allowed_after_flip(store: Store, name: str, offset: int) -> Allowed:
    if name not in store.live:
        return _allowed_outside_the_log(store, name)
    frames = store.frames[name]
    if name == store.newest and frames and frames[-1].start <= offset < frames[-1].start + 4:
        # A damaged length in the very last frame looks exactly like a torn write (SPEC §4 rule 5).
        return Allowed(corrupt=True, seq=_seq_before(store, name, frames[-1].start), torn=True)
    return Allowed(corrupt=True)


def campaign_bytes(seed: int, budget: float, report: Report) -> None:
    """Every truncation and single-bit flip of every file of seeded stores: recover exactly, or refuse."""
    from walqueue.format.fsck import check

    deadline = time.monotonic() + budget
    every_bit = budget >= EVERY_BIT_BUDGET
    report.notes.append("every bit of every byte" if every_bit else "one random bit of every byte")
    report.counts.update({"stores": 0, "variants": 0, "truncations": 0, "bit flips": 0})
    with tempfile.TemporaryDirectory(prefix="walqueue-bytes-", dir=scratch_root()) as tmp:
        for unit in itertools.count():
            if unit and time.monotonic() >= deadline:
                break
            directory = Path(tmp) / f"u{unit}"
            try:
                store = build_store(seed, unit, directory, report)
                report.count("stores")
                _damage_store(store, seed, unit, every_bit, deadline, check, report)
            except Abort as exc:
                report.diverge(str(exc))
            except Exception:
                report.diverge(f"bytes unit {unit}: unexpected exception\n{traceback.format_exc(limit=6)}")
            finally:
                remove(directory)


def _damage_store(
    store: Store,
    seed: int,
    unit: int,
    every_bit: bool,
    deadline: float,
    check: Callable[..., Any],
    report: Report,
) -> None:
    """Truncations first, then bit flips in a shuffled order (a sample cut by the deadline is spread out).

    The first store always gets every truncation, and every flip in
    every-bit mode (FIRST_STORE_FLIPS of them otherwise), whatever the
    deadline: that is the coverage a run promises.
    """
    rng = random.Random(f"bytes-bits:{seed}:{unit}")
    first = unit == 0
    for name, data in store.files.items():
        for size in range(len(data)):
            if not first and time.monotonic() >= deadline:
                report.notes.append(f"store {unit} stopped by the time limit during truncations")
                return
            where = f"--seed {seed} bytes unit {unit}: {name} cut to {size} bytes"
            _variant(store, name, data[:size], allowed_after_truncation(store, name, size), check, report, where)
            report.count("truncations")
    places = _flip_order(store, rng)
    forced = (len(places) if every_bit else FIRST_STORE_FLIPS) if first else 0
    for done, (name, offset) in enumerate(places):
        if done >= forced and time.monotonic() >= deadline:
            report.notes.append(f"store {unit}: flips in {done} of {len(places)} bytes")
            return
        bits = range(8) if every_bit else [rng.randrange(8)]
        for bit in bits:
            damaged = bytearray(store.files[name])
            damaged[offset] ^= 1 << bit
            where = f"--seed {seed} bytes unit {unit}: {name} bit {bit} of byte {offset} flipped"
            _variant(store, name, bytes(damaged), allowed_after_flip(store, name, offset), check, report, where)
            report.count("bit flips")


def _flip_order(store: Store, rng: random.Random) -> list[tuple[str, int]]:
    """Every (file, byte offset), each file's in a random order, the files taken in turn.

    Any prefix of this order (a run cut short by its deadline) has damaged
    every file about equally, at random places.
    """
    per_file = [
        [(name, offset) for offset in rng.sample(range(len(data)), len(data))] for name, data in store.files.items()
    ]
    return [place for row in itertools.zip_longest(*per_file) for place in row if place is not None]


def _variant(
    store: Store, name: str, data: bytes, allowed: Allowed, check: Callable[..., Any], report: Report, where: str
) -> None:
    """Write one damaged file, ask fsck, open, judge, and put the original bytes back."""
    directory = store.directory
    report.count("variants")
    (directory / name).write_bytes(data)
    try:
        fsck = check(directory, replay=True)
        log = PhaseLog()
        try:
            queue = Queue(directory, hook=log, sync=False, compact_bytes=None)
        except CorruptStore:
            result: dict[str, Any] | None = None
            report.count("refused")
        except Exception as exc:
            report.diverge(f"{where}: opening raised {type(exc).__name__}: {exc}")
            return
        else:
            try:
                result = view(queue)
            finally:
                queue.close()
        torn = "recover.truncate.before" in log.phases
        if result is not None:
            report.count("recovered torn" if torn else "recovered")
        _judge(store, result, torn, allowed, where, report)
        _judge_fsck(fsck, result, torn, where, report)
    finally:
        (directory / name).write_bytes(store.files[name])
        (directory / store.newest).write_bytes(store.files[store.newest])


def _judge(
    store: Store, result: dict[str, Any] | None, torn: bool, allowed: Allowed, where: str, report: Report
) -> None:
    if result is None:
        if not allowed.corrupt:
            report.diverge(f"{where}: CorruptStore, but this damage must be recovered (state {allowed.seq})")
        return
    if allowed.seq is None:
        report.diverge(f"{where}: opened (last_seq {result['last_seq']}), but this damage must be CorruptStore")
        return
    if result != store.views[allowed.seq]:
        report.diverge(
            f"{where}: opened to a state other than the model's at seq {allowed.seq}: "
            f"{_view_difference(result, store.views[allowed.seq])}"
        )
    if allowed.torn is not None and torn != allowed.torn:
        report.diverge(f"{where}: opening {'cut' if torn else 'did not cut'} a torn tail")


def _judge_fsck(fsck: Any, result: dict[str, Any] | None, torn: bool, where: str, report: Report) -> None:
    """fsck --replay says 2 iff opening raised CorruptStore, 1 iff it cut a torn tail, else 0 (SPEC §7)."""
    want = 2 if result is None else 1 if torn else 0
    if fsck.exit_code != want:
        findings = "; ".join(f"{f.severity} {f.kind} {f.file}@{f.offset}: {f.message}" for f in fsck.findings[:3])
        report.diverge(f"{where}: fsck exit {fsck.exit_code}, opening implies {want} ({findings})")
        return
    report.count("fsck agreed")
    if result is not None and fsck.replay is not None:
        counts = json.loads(result["counts"])
        if fsck.replay.last_seq != result["last_seq"] or fsck.replay.counts != counts:
            report.diverge(
                f"{where}: fsck replay ends at {fsck.replay.last_seq} {fsck.replay.counts}, "
                f"opening at {result['last_seq']} {counts}"
            )


# ---------------------------------------------------------------------------
# Campaign 4: OS faults


FAULTABLE = ("write", "fsync", "replace", "rename", "unlink", "open", "ftruncate")
FAULT_ERRNOS = (errno.ENOSPC, errno.EIO)
FAULT_STEPS = 60
REOPEN_EVERY = 6


class FaultInjector:
    """Wraps `os.<name>` for the names in FAULTABLE; while armed, counts calls and fails call `fail_at`.

    The engine and the format layer call these through the `os` module at
    call time, so the wrapper sees every one of them. No power is lost in
    this campaign, so a counted fsync that does not fail is skipped: it
    could change nothing that a reopen in this process sees.

    `threads` says whose calls are counted: ``"caller"`` (the thread that
    armed it: a background snapshot's thread runs alongside and fails no
    call of the caller), ``"others"`` (every other thread: the background
    snapshot's, for the background campaign) or ``"all"``. `before`, if set,
    runs before each counted call with its index and name (the background
    campaign copies the directory there: a death just before that call);
    os calls made inside it are neither counted nor faulted. `hold`, if set,
    makes each counted fsync wait until it is set (so that callers pile up
    behind it) before it fails or returns.
    """

    def __init__(self) -> None:
        self.armed = False
        self.thread = threading.current_thread()
        self.threads = "caller"
        self.calls: list[str] = []
        #: The file each counted call acted on (a name, or "" when it is not known).
        self.targets: list[str] = []
        self.fail_at: int | None = None
        self.error_number = errno.EIO
        self.raised: OSError | None = None
        self.before: Callable[[int, str], None] | None = None
        self.hold: threading.Event | None = None
        #: (descriptor, bytes) of every os.write that succeeded while armed.
        self.written: list[tuple[int, bytes]] = []
        self._originals: dict[str, Callable[..., Any]] = {}
        self._count_lock = threading.Lock()
        self._inside = threading.local()

    def install(self) -> None:
        for name in FAULTABLE:
            original = getattr(os, name)
            self._originals[name] = original
            setattr(os, name, self._wrap(name, original))

    def uninstall(self) -> None:
        for name, original in self._originals.items():
            setattr(os, name, original)
        self._originals.clear()

    def arm(
        self,
        fail_at: int | None,
        error_number: int = errno.EIO,
        *,
        threads: str = "caller",
        before: Callable[[int, str], None] | None = None,
        hold: threading.Event | None = None,
    ) -> None:
        assert threads in ("caller", "others", "all")
        self.thread = threading.current_thread()
        self.threads = threads
        self.calls = []
        self.targets = []
        self.written = []
        self.fail_at = fail_at
        self.error_number = error_number
        self.raised = None
        self.before = before
        self.hold = hold
        self.armed = True

    def disarm(self) -> None:
        self.armed = False

    def _watched(self) -> bool:
        if not self.armed or getattr(self._inside, "active", False):
            return False
        if self.threads == "all":
            return True
        return (threading.current_thread() is self.thread) == (self.threads == "caller")

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def faulty(*args: Any, **kwargs: Any) -> Any:
            if self._watched():
                with self._count_lock:
                    index = len(self.calls)
                    self.calls.append(name)
                    self.targets.append(_call_target(name, args))
                if self.before is not None:
                    self._inside.active = True
                    try:
                        self.before(index, name)
                    finally:
                        self._inside.active = False
                if name == "fsync" and self.hold is not None:
                    self.hold.wait()
                if index == self.fail_at:
                    message = f"injected {errno.errorcode[self.error_number]} at os.{name} (call {index})"
                    self.raised = OSError(self.error_number, message)
                    raise self.raised
                if name == "fsync":
                    return None
                if name == "write":
                    count = original(*args, **kwargs)
                    self.written.append((args[0], bytes(memoryview(args[1])[:count])))
                    return count
            return original(*args, **kwargs)

        faulty.__wrapped__ = original  # type: ignore[attr-defined]
        return faulty


def _call_target(name: str, args: tuple[Any, ...]) -> str:
    """The base name of the file an os call acts on (by path argument, or by its descriptor)."""
    if not args:
        return ""
    first = args[0]
    if isinstance(first, int) and name in ("write", "fsync", "ftruncate"):
        try:
            return os.path.basename(os.readlink(f"/proc/self/fd/{first}"))
        except OSError:
            return ""
    if isinstance(first, (str, bytes, os.PathLike)):
        return os.path.basename(os.fsdecode(first))
    return ""


def transactions_written(written: list[tuple[int, bytes]]) -> int:
    """How many complete WAL transaction frames the successful writes of one step hold.

    This is what SPEC §4 rule 6 turns on, read from the bytes themselves, so
    it needs no hook: each descriptor's writes of the step start at a frame
    boundary (appends, a new snapshot, a new CURRENT.tmp), so each stream
    parses from its start; only bodies of the form {"seq", "ops"} count.
    """
    streams: dict[int, bytearray] = {}
    for fd, data in written:
        streams.setdefault(fd, bytearray()).extend(data)
    complete = 0
    for stream in streams.values():
        offset = 0
        while offset + 4 <= len(stream):
            (length,) = struct.unpack(">I", stream[offset : offset + 4])
            end = offset + 4 + length + 32
            if end > len(stream):
                break
            body = json.loads(stream[offset + 4 : offset + 4 + length])
            if isinstance(body, dict) and set(body) == {"seq", "ops"}:
                complete += 1
            offset = end
    return complete


@contextlib.contextmanager
def injected(injector: FaultInjector) -> Iterator[FaultInjector]:
    injector.install()
    try:
        yield injector
    finally:
        injector.disarm()
        injector.uninstall()


def campaign_os_faults(seed: int, budget: float, report: Report) -> None:
    """Fail the k-th os call of each step (and of reopening) for every k; check poison, error and recovery."""
    deadline = time.monotonic() + budget
    report.counts.update({"steps": 0, "faults": 0, "faults without a hook": 0, "open faults": 0})
    called: set[str] = set()
    temporary = tempfile.TemporaryDirectory(prefix="walqueue-faults-", dir=scratch_root())
    with temporary as tmp, injected(FaultInjector()) as injector:
        for unit in itertools.count():
            if unit and time.monotonic() >= deadline:
                break
            dirs = Dirs(Path(tmp) / f"u{unit}")
            try:
                _fault_workload(seed, unit, dirs, deadline, injector, report, called)
            except Abort as exc:
                report.diverge(str(exc))
            except Exception:
                report.diverge(f"os-faults unit {unit}: unexpected exception\n{traceback.format_exc(limit=6)}")
            finally:
                remove(dirs.root)
    report.notes.append("failed " + "/".join(name for name in FAULTABLE if name in called))
    missing = sorted(set(FAULTABLE) - called - {"rename"})  # the engine replaces; rename is watched in case
    if missing:
        report.gaps.append(f"never failed os.{', os.'.join(missing)}")


def _open_and_close(directory: Path, options: dict[str, Any]) -> None:
    Queue(directory, **options).close()


def _expect_injected_oserror(
    report: Report, injector: FaultInjector, label: str, what: str, call: Callable[[], object]
) -> None:
    """Run `call`, which must fail with exactly the OSError the injector raised, unwrapped."""
    try:
        call()
    except OSError as exc:
        if exc is not injector.raised:
            report.diverge(f"{label}: a different OSError reached the caller: {exc!r}")
    except Exception as exc:
        report.diverge(f"{label}: the OSError reached the caller as {type(exc).__name__}: {exc}")
    else:
        report.diverge(f"{label}: {what} succeeded although an os call failed")


def _fault_workload(
    seed: int, unit: int, dirs: Dirs, deadline: float, injector: FaultInjector, report: Report, called: set[str]
) -> None:
    dirs.root.mkdir()
    rng = random.Random(f"faults:{seed}:{unit}")
    workload = Workload(f"faults-ops:{seed}:{unit}")
    # Every other unit runs without a hook: the engine may take another path (one write
    # per frame) when nobody observes its phases, and that path must fail safely too.
    hooked = unit % 2 == 0
    options: dict[str, Any] = {"sync": True, "compact_bytes": rng.choice([800, 1600])}
    main = dirs.new()
    model = Model()
    recorder = PhaseLog()
    step_options = {**options, "hook": recorder if hooked else None}
    queue = Queue(main, **step_options)
    try:
        for step in range(FAULT_STEPS):
            if step >= 10 and time.monotonic() >= deadline:
                break
            where = f"--seed {seed} os-faults unit {unit} step {step}"
            if step % REOPEN_EVERY == REOPEN_EVERY - 1:
                queue.close()
                if rng.random() < 0.5:
                    model = _leave_torn_tail(main, workload, model, options, where, report)
                _fault_open(main, model, options, dirs, injector, report, called, where)
                queue = Queue(main, **step_options)
                continue
            op = workload.next_op(model)
            where += f" ({op.describe()})"
            expected = expected_states(model, op)
            pre = dirs.new(copy_of=main)
            recorder.phases = []
            injector.arm(None)
            try:
                answer = outcome(op, queue)
            finally:
                injector.disarm()
            calls = list(injector.calls)
            report.count("steps")
            if answer != expected.answer:
                raise Abort(f"{where}: answered {answer[:200]!r}, model {expected.answer[:200]!r}")
            if not compare_views(queue, expected.after, report, where):
                raise Abort(f"{where}: aborted")
            count_issue_16(report, op, answer, "applied")
            if calls:
                count_issue_16(report, op, answer, "faulted")
            for fail_at in range(len(calls)):
                _fault_once(pre, op, fail_at, calls, expected, hooked, options, dirs, injector, rng, report, where)
                called.add(calls[fail_at])
            remove(pre)
            model = expected.after
    finally:
        queue.close()


def _fault_once(
    pre: Path,
    op: Op,
    fail_at: int,
    calls: list[str],
    expected: Expected,
    hooked: bool,
    options: dict[str, Any],
    dirs: Dirs,
    injector: FaultInjector,
    rng: random.Random,
    report: Report,
    where: str,
) -> None:
    scratch = dirs.new(copy_of=pre)
    error_number = rng.choice(FAULT_ERRNOS)
    hook_note = "" if hooked else ", no hook"
    where = f"{where} os.{calls[fail_at]} call {fail_at} fails ({errno.errorcode[error_number]}{hook_note})"
    log = PhaseLog()
    queue = Queue(scratch, hook=log if hooked else None, **options)
    injector.arm(fail_at, error_number)
    try:
        _expect_injected_oserror(report, injector, where, "the call", lambda: outcome(op, queue))
    finally:
        injector.disarm()
    report.count("faults")
    if not hooked:
        report.count("faults without a hook")
    check_poisoned(queue, where, report)
    complete = transactions_written(injector.written)
    if hooked and complete != log.phases.count("wal.append.written"):
        report.diverge(
            f"{where}: {complete} frames written, but {log.phases.count('wal.append.written')} "
            "wal.append.written phases reported"
        )
    state = expected.state_after(complete)
    if state is None:
        raise Abort(f"{where}: {complete} complete frames, but the model's step has fewer transactions")
    reopened = open_checked_by_fsck(scratch, report, where, sync=False, compact_bytes=None)
    try:
        if not compare_views(reopened, state, report, where):
            raise Abort(f"{where}: aborted")
    finally:
        reopened.close()
    remove(scratch)


def _leave_torn_tail(
    main: Path, workload: Workload, model: Model, options: dict[str, Any], where: str, report: Report
) -> Model:
    """Die half-way through writing a put's frame, so that the next opening has a torn tail to cut."""
    op = Op("put", {"spec": workload.new_spec()})
    dying = Queue(main, hook=PhaseLog(crash_phase="wal.append.partial"), **options)
    try:
        outcome(op, dying)
    except InjectedCrash:
        return model
    finally:
        dying.close()
    raise Abort(f"{where}: a put never reached wal.append.partial")


def _fault_open(
    main: Path,
    model: Model,
    options: dict[str, Any],
    dirs: Dirs,
    injector: FaultInjector,
    report: Report,
    called: set[str],
    where: str,
) -> None:
    """Fail each os call of opening `main` in turn (on copies); the error must surface and change nothing."""
    where = f"{where} (reopen)"
    dry = dirs.new(copy_of=main)
    injector.arm(None)
    try:
        Queue(dry, **options).close()
    finally:
        injector.disarm()
    calls = list(injector.calls)
    remove(dry)
    for fail_at in range(len(calls)):
        scratch = dirs.new(copy_of=main)
        label = f"{where} os.{calls[fail_at]} call {fail_at} fails"
        injector.arm(fail_at, FAULT_ERRNOS[fail_at % 2])
        try:
            _expect_injected_oserror(report, injector, label, "opening", partial(_open_and_close, scratch, options))
        finally:
            injector.disarm()
        report.count("open faults")
        called.add(calls[fail_at])
        reopened = open_checked_by_fsck(scratch, report, label, sync=False, compact_bytes=None)
        try:
            if not compare_views(reopened, model, report, label):
                raise Abort(f"{label}: aborted")
        finally:
            reopened.close()
        remove(scratch)


# ---------------------------------------------------------------------------
# Campaign 4b: background compaction (the snapshot thread, unobserved)


BACKGROUND_STEPS = 150
#: The os calls of a background compaction that a run must have died just before.
BACKGROUND_MUST_CRASH = ("open", "write", "fsync", "replace", "unlink")
BACKGROUND_FAULT_SPAN = 18  # a background compaction makes about this many watched os calls


def campaign_background(seed: int, budget: float, report: Report) -> None:
    """Die (or fail) at every os call of the background snapshot thread while calls go on; reopen and compare.

    Without a hook, automatic compaction writes its snapshot in a thread of
    its own and publishes it under the queue's lock; that path has no phases
    to crash at. So the os functions are wrapped for every thread but this
    one: in a crash unit, before each os call of the snapshot thread the
    directory is copied (the disk as a SIGKILL just before that call would
    leave it: the page cache survives, nothing else does), while this thread
    goes on calling the queue. Each copy must reopen (fsck first) to the
    model's state at some sequence between the last one acknowledged before
    the copy and the last one written, and a compaction of the reopened copy
    must leave no orphan, leftover or CURRENT.tmp behind (FORMAT §8). In a
    fault unit the k-th os call of the thread fails with ENOSPC or EIO: a
    failure writing the snapshot must leave the queue usable and lose
    nothing; a failure while publishing may poison it; either way the
    reopened store holds every acknowledged call.
    """
    deadline = time.monotonic() + budget
    report.counts.update({"steps": 0, "crash copies": 0, "faults": 0})
    crashed_before: set[str] = set()
    temporary = tempfile.TemporaryDirectory(prefix="walqueue-background-", dir=scratch_root())
    with temporary as tmp, injected(FaultInjector()) as injector:
        for unit in itertools.count():
            if unit >= 2 and time.monotonic() >= deadline:
                break
            dirs = Dirs(Path(tmp) / f"u{unit}")
            try:
                _background_unit(seed, unit, dirs, deadline, injector, report, crashed_before)
            except Abort as exc:
                report.diverge(str(exc))
            except Exception:
                report.diverge(f"background unit {unit}: unexpected exception\n{traceback.format_exc(limit=6)}")
            finally:
                injector.disarm()
                remove(dirs.root)
    report.notes.append("died before os." + "/".join(n for n in FAULTABLE if n in crashed_before))
    missing = sorted(set(BACKGROUND_MUST_CRASH) - crashed_before)
    if missing:
        report.gaps.append(f"never died before a background os.{', os.'.join(missing)}")


@dataclass
class _CrashCopy:
    directory: Path
    acknowledged: int  # every call answered before the copy began covers this sequence
    call: str
    target: str


def _background_unit(
    seed: int, unit: int, dirs: Dirs, deadline: float, injector: FaultInjector, report: Report, crashed: set[str]
) -> None:
    dirs.root.mkdir()
    rng = random.Random(f"background:{seed}:{unit}")
    workload = Workload(f"background-ops:{seed}:{unit}")
    faulting = unit % 2 == 1
    options: dict[str, Any] = {"sync": True, "compact_bytes": rng.choice([400, 700, 1200])}
    main = dirs.new()
    model = Model()
    states: dict[int, Model] = {0: model.clone()}
    acknowledged = [0]
    copies: list[_CrashCopy] = []
    base = f"--seed {seed} background unit {unit}"

    def copy_before(index: int, name: str) -> None:  # in the snapshot thread, before its os call
        answered = acknowledged[0]  # read before the copy begins: every answer so far is in it
        copies.append(_CrashCopy(dirs.new(copy_of=main), answered, name, injector.targets[index]))

    def arm() -> None:
        if faulting:
            injector.arm(rng.randrange(BACKGROUND_FAULT_SPAN), rng.choice(FAULT_ERRNOS), threads="others")
        else:
            injector.arm(None, threads="others", before=copy_before)

    queue = Queue(main, **options)
    arm()
    try:
        for step in range(BACKGROUND_STEPS):
            if step >= 20 and time.monotonic() >= deadline:
                break
            op = workload.next_op(model)
            where = f"{base} step {step} ({op.describe()})"
            expected = expected_states(model, op)
            for seq, state in expected.by_seq.items():
                states.setdefault(seq, state)
            try:
                answer: str | None = outcome(op, queue)
            except QueueClosed:
                answer = None
            except OSError as exc:
                raise Abort(f"{where}: {exc!r} reached the caller without a fault of its own") from exc
            report.count("steps")
            if answer is None:
                queue, model = _background_poisoned(queue, main, expected, injector, options, report, where)
                arm()
                continue
            if answer != expected.answer:
                raise Abort(f"{where}: answered {answer[:200]!r}, model {expected.answer[:200]!r}")
            count_issue_16(report, op, answer, "applied")
            model = expected.after
            acknowledged[0] = model.last_seq
            if faulting and injector.raised is not None:
                queue, model = _background_fault_settled(queue, main, model, injector, options, report, where)
                arm()
            _judge_crash_copies(copies, states, model.last_seq, report, crashed, base)
        try:
            queue.compact()  # waits for a background snapshot under way
        except QueueClosed:
            if not (faulting and injector.raised is not None):
                raise Abort(f"{base}: the queue closed without a fault") from None
        injector.disarm()
        queue.close()
        _judge_crash_copies(copies, states, model.last_seq, report, crashed, base)
        final = open_checked_by_fsck(main, report, f"{base}: final reopen", sync=False, compact_bytes=None)
        try:
            compare_views(final, model, report, f"{base}: final reopen")
        finally:
            final.close()
    finally:
        injector.disarm()
        queue.close()


def _background_poisoned(
    queue: Queue,
    main: Path,
    expected: Expected,
    injector: FaultInjector,
    options: dict[str, Any],
    report: Report,
    where: str,
) -> tuple[Queue, Model]:
    """A call met a queue closed under it: only a failed publication of a background snapshot may do that."""
    failed = injector.raised
    injector.disarm()
    if failed is None:
        raise Abort(f"{where}: QueueClosed, but no os call failed")
    _judge_background_fault(injector, poisoned=True, report=report, where=where)
    check_poisoned(queue, where, report)
    reopened = open_checked_by_fsck(main, report, where, sync=False, compact_bytes=None)
    try:
        got = view(reopened)
    finally:
        reopened.close()
    for state in expected.by_seq.values():  # the call in flight: in or out (or a reserve's reap only)
        if view(state) == got:
            return Queue(main, **options), state
    raise Abort(f"{where}: after the poisoning the store lost something: {_view_difference(got, view(expected.after))}")


def _background_fault_settled(
    queue: Queue, main: Path, model: Model, injector: FaultInjector, options: dict[str, Any], report: Report, where: str
) -> tuple[Queue, Model]:
    """A background os call failed: let that snapshot end, then the queue is usable with everything, or poisoned."""
    try:
        queue.compact()  # waits for the failed snapshot's thread; then compacts in this (unwatched) thread
    except QueueClosed:
        injector.disarm()
        _judge_background_fault(injector, poisoned=True, report=report, where=where)
        check_poisoned(queue, where, report)
    else:
        injector.disarm()
        _judge_background_fault(injector, poisoned=False, report=report, where=where)
        if not compare_views(queue, model, report, f"{where} (after a background fault)"):
            raise Abort(f"{where}: aborted")
    queue.close()
    reopened = open_checked_by_fsck(main, report, where, sync=False, compact_bytes=None)
    try:
        if not compare_views(reopened, model, report, f"{where} (reopened after a background fault)"):
            raise Abort(f"{where}: aborted")
    finally:
        reopened.close()
    return Queue(main, **options), model


def _judge_background_fault(injector: FaultInjector, *, poisoned: bool, report: Report, where: str) -> None:
    assert injector.fail_at is not None and injector.raised is not None
    name, target = injector.calls[injector.fail_at], injector.targets[injector.fail_at]
    writing = name in ("open", "write", "fsync") and target.startswith("snapshot-")
    where = f"{where}: background os.{name} of {target or '?'} failed ({errno.errorcode[injector.raised.errno or 0]})"
    report.count("faults")
    if writing:
        report.count("faults writing the snapshot")
        if poisoned:
            report.diverge(f"{where}: a failure writing the background snapshot poisoned the queue")
    else:
        report.count("faults publishing, poisoned" if poisoned else "faults publishing, went on")


def _judge_crash_copies(
    copies: list[_CrashCopy], states: dict[int, Model], written: int, report: Report, crashed: set[str], base: str
) -> None:
    """Reopen each copy made so far: a state of the model between its acknowledged and written sequences."""
    while copies:
        copied = copies.pop(0)
        where = f"{base}: died before background os.{copied.call} of {copied.target or '?'}"
        report.count("crash copies")
        crashed.add(copied.call)
        reopened = open_checked_by_fsck(copied.directory, report, where, sync=False, compact_bytes=None)
        try:
            got = view(reopened)
            seq = got["last_seq"]
            if not copied.acknowledged <= seq <= written or seq not in states:
                report.diverge(f"{where}: reopened at sequence {seq}, acknowledged {copied.acknowledged}")
            elif got != view(states[seq]):
                report.diverge(f"{where}: {_view_difference(got, view(states[seq]))}")
            else:
                if seq > copied.acknowledged:
                    report.count("copies with unacknowledged calls")
                _check_orphans_cleared(reopened, copied.directory, report, where)
        finally:
            reopened.close()
            remove(copied.directory)


def _check_orphans_cleared(queue: Queue, directory: Path, report: Report, where: str) -> None:
    """Orphan rules (FORMAT §8): the next compaction deletes every file that CURRENT does not need."""
    leftovers = sorted(n for n in os.listdir(directory) if n.startswith("snapshot-") or n == CURRENT_TMP_NAME)
    queue.compact()
    current = read_current(directory)
    if current is None:
        return
    needed = {"CURRENT", LOCK_NAME, current.snapshot}
    extra = sorted(
        name
        for name in os.listdir(directory)
        if name not in needed and not ((parse_wal_name(name) or -1) >= current.wal)
    )
    if extra:
        report.diverge(f"{where}: after reopening and compacting, files CURRENT does not need remain: {extra}")
    elif len(leftovers) > 1:
        report.count("orphans cleared")


# ---------------------------------------------------------------------------
# Campaign 5: bad input (API calls and CLI lines)


BAD_CALLS_PER_UNIT = 400
BAD_CALLS_FIRST_UNIT = 150  # whatever the deadline (about 70% of calls are hostile, the rest move the state on)
CLI_LINES_PER_UNIT = 200
VIEW_EVERY = 25
INT_LIMIT = 2**63
MAX_PAYLOAD_INT_BITS = 14_000
FRAME_BOUND = 16 * 2**20
RECORD_MARGIN = 8192


class _Str(str):
    """A str subclass: may encode differently than it compares, so the queue refuses it."""


class _Int(int):
    pass


class _Float(float):
    pass


class _Dict(dict):  # type: ignore[type-arg]
    pass


class _Color(enum.IntEnum):
    RED = 1


def _nested(depth: int, container: str) -> dict[str, Any]:
    """A payload `depth` containers deep (the payload itself is level 1)."""
    inner: Any = {} if container == "dict" else []
    for _ in range(depth - 2):
        inner = {"d": inner} if container == "dict" else [inner]
    return {"d": inner} if depth > 1 else {}


def _cyclic() -> dict[str, Any]:
    payload: dict[str, Any] = {"a": 1}
    payload["self"] = payload
    return payload


HOSTILE_SCALARS: tuple[Any, ...] = (
    None, True, False, 0, 1, -1, 2**63 - 1, 2**63, 2**64, -(2**63), 10**40, 0.0, -0.0, 1.0, 1.5,
    float("nan"), float("inf"), float("-inf"), "", "0", "x", b"x", bytearray(b"x"), (), (1,), [], [1], {}, {"a": 1},
    set(), frozenset(), complex(1, 2), range(3), _Int(1), _Str("x"), _Float(1.0), _Color.RED,
)  # fmt: skip
HOSTILE_NAMES: tuple[Any, ...] = (
    "a", "é", "\x00", "\x01" * 1024, "x" * 1024, "x" * 1025, "é" * 512, "é" * 513, "日本" * 170, "日本" * 171,
    "\ud800", "a\udcff", " ", "\n", "\u2028", "x" * 100_000, "", _Str("t"), b"t", 1, None, True, 1.0, ["t"],
)  # fmt: skip
HOSTILE_INTS: tuple[Any, ...] = (
    0, 1, 2, 2**63 - 1, 2**63, 2**63 - 2, -1, -(2**63), 10**100, True, False, 1.0, 0.5, float("nan"), "1", None,
    _Int(1), _Color.RED, b"1", [1],
)  # fmt: skip
HOSTILE_STATUSES: tuple[Any, ...] = (
    None, "ready", "dead", "READY", "", "leased ", 1, b"ready", _Str("ready"), ["ready"],
)  # fmt: skip


def hostile_payload(rng: random.Random) -> Any:
    """A payload that is wrong, or right only just (depth and size limits, exotic but valid values)."""
    makers: list[Callable[[], Any]] = [
        lambda: {"ok": 1},
        lambda: {"f": 1e308, "neg": -0.0, "u": "\u2028\x00é", "b": [True, None, 1, 1.0]},
        lambda: _nested(64, "dict"),
        lambda: _nested(64, "list"),
        lambda: _nested(65, "dict"),
        lambda: _nested(65, "list"),
        lambda: _nested(3000, "dict"),
        lambda: _cyclic(),
        lambda: {"big": 2**MAX_PAYLOAD_INT_BITS - 1},
        lambda: {"big": 2**MAX_PAYLOAD_INT_BITS},
        lambda: {"neg": -(2**200)},
        lambda: {"nan": float("nan")},
        lambda: {"inf": float("inf")},
        lambda: {1: "int key"},
        lambda: {None: 1},
        lambda: {("t",): 1},
        lambda: {"t": (1, 2)},
        lambda: {"s": {1, 2}},
        lambda: {"b": b"bytes"},
        lambda: {"s": "\ud800"},
        lambda: {"\udfff": 1},
        lambda: {"sub": _Str("x")},
        lambda: {"sub": _Int(2)},
        lambda: {"sub": _Float(2.0)},
        lambda: {"enum": _Color.RED},
        lambda: _Dict(a=1),
        lambda: {"inner": _Dict(a=1)},
        lambda: {"o": object()},
        lambda: [1, 2],
        lambda: "payload",
        lambda: None,
        lambda: 1,
        lambda: {"wide": list(range(20_000))},
        lambda: {"long": "y" * 200_000},
    ]
    return rng.choice(makers)()


def is_plain(value: Any, depth: int = 0, seen: set[int] | None = None) -> bool:
    """True when `value` holds only exact JSON types (no subclass, tuple, cycle or monster int).

    For such values the engine may not be stricter than the model: refusing
    one that the model accepts is a divergence.
    """
    seen = set() if seen is None else seen
    kind = type(value)
    if value is None or kind in (bool, str, float):
        return True
    if kind is int:
        return int(value).bit_length() <= MAX_PAYLOAD_INT_BITS
    if kind in (list, dict):
        if id(value) in seen or depth > 100:
            return False
        seen.add(id(value))
        if kind is dict:
            return all(type(k) is str and is_plain(v, depth + 1, seen) for k, v in value.items())
        return all(is_plain(v, depth + 1, seen) for v in value)
    if kind is Lease:
        return all(is_plain(getattr(value, name), depth + 1, seen) for name in ("task_id", "worker", "generation"))
    return False


@dataclass
class Call:
    """One hostile API call: what it is, how to make it, and the arguments to judge its plainness by."""

    description: str
    invoke: Callable[[Any], Any]
    arguments: list[Any]


def _attempt(call: Call, target: Any) -> tuple[str, Any]:
    """('ok', rendered result) or (error category, exception)."""
    try:
        value = call.invoke(target)
    except KeyConflict as exc:
        return "KeyConflict", exc
    except StaleLease as exc:
        return "StaleLease", exc
    except WrongStatus as exc:  # a ValueError, but about the state, not the arguments
        return "WrongStatus", exc
    except (TypeError, ValueError) as exc:
        return "argument", exc
    except Exception as exc:
        return "undocumented", exc
    return "ok", render(value)


class HostileCalls:
    """Seeded hostile calls against the queue's current state (read through the model)."""

    def __init__(self, rng: random.Random, foreign: list[Lease]) -> None:
        self.rng = rng
        self.foreign = foreign
        self.serial = 0
        self.specs: list[dict[str, Any]] = []

    def pick(self, pool: Sequence[Any], valid: Any) -> Any:
        return self.rng.choice(pool) if self.rng.random() < 0.5 else valid

    def token(self, model: Model) -> Any:
        rng = self.rng
        leased = model.tasks("leased")
        touched = [t for t in model.tasks() if t.generation > 0]
        makers: list[Callable[[], Any]] = [
            lambda: token_for(rng.choice(leased)) if leased else None,
            lambda: token_for(rng.choice(touched)) if touched else None,
            lambda: rng.choice(self.foreign),
            lambda: Lease(1, None, "1", 0, 0, {}),  # type: ignore[arg-type]
            lambda: Lease("b1", "w", True, 0, 0, {}),
            lambda: Lease("b1", "w", 2**70, 0, 0, {}),
            lambda: Lease("x" * 5000, "w" * 5000, 1, 0, 0, {}),
            lambda: Lease(_Str("b1"), "w", 1, 0, 0, {}),
            lambda: rng.choice(leased).to_dict() if leased else {},
            lambda: rng.choice(touched) if touched else None,
            lambda: rng.choice(HOSTILE_SCALARS),
        ]
        return rng.choice(makers)()

    def put_spec(self) -> dict[str, Any]:
        rng = self.rng
        if self.specs and rng.random() < 0.3:
            spec = dict(rng.choice(self.specs))  # a retry, or a conflict once something is changed
        else:
            self.serial += 1
            spec = {"task_id": f"b{self.serial}", "payload": {"n": self.serial}, "max_attempts": rng.choice([1, 2])}
            if rng.random() < 0.3:
                spec["key"] = f"kb{self.serial}"
            self.specs.append(dict(spec))
        for _ in range(rng.choice([1, 1, 2])):
            name = rng.choice(["task_id", "key", "payload", "available_at", "max_attempts", "extra"])
            if name in ("task_id", "key"):
                spec[name] = rng.choice(HOSTILE_NAMES)
            elif name == "payload":
                spec[name] = hostile_payload(rng)
            elif name == "extra":
                spec[rng.choice(["priority", "task", "Key"])] = 1
            else:
                spec[name] = rng.choice(HOSTILE_INTS)
        return spec

    def next_call(self, model: Model, now: int) -> Call:
        rng = self.rng
        kind = rng.choice(
            ["put", "put", "put_many", "reserve", "ack", "release", "get", "tasks", "extend", "redrive", "cancel"]
        )
        if kind == "put":
            spec = self.put_spec()
            return Call(f"put {_short(spec)}", lambda t: t.put(**spec), list(spec.values()))
        if kind == "put_many":
            items: Any = [
                self.put_spec() if rng.random() < 0.5 else self._valid_item() for _ in range(rng.randrange(4))
            ]
            if rng.random() < 0.3:
                items.insert(rng.randrange(len(items) + 1), rng.choice(HOSTILE_SCALARS + ({"payload": {}},)))
            container = rng.random()
            if container < 0.1:
                items = rng.choice([None, "tasks", b"x", {"task_id": "b", "payload": {}}, 7])
            elif container < 0.2:
                items = tuple(items)
            elif container < 0.3:
                listed = list(items)  # a generator, made anew for each target (the first would drain it)
                return Call(
                    f"put_many (generator of) {_short(listed)}",
                    lambda t: t.put_many(item for item in listed),
                    listed,
                )
            arguments = list(items) if isinstance(items, (list, tuple)) else [items]
            return Call(f"put_many {_short(items)}", lambda t: t.put_many(items), arguments)
        if kind == "reserve":
            worker = self.pick(HOSTILE_NAMES, "w1")
            when = self.pick(HOSTILE_INTS, now)
            lease_seconds = self.pick(HOSTILE_INTS, rng.choice([1, 5]))
            limit = self.pick(HOSTILE_INTS, rng.choice([1, 3]))
            return Call(
                f"reserve {_short([worker, when, lease_seconds, limit])}",
                lambda t: t.reserve(worker, now=when, lease_seconds=lease_seconds, limit=limit),
                [worker, when, lease_seconds, limit],
            )
        if kind in ("ack", "release"):
            lease = self.token(model)
            when = self.pick(HOSTILE_INTS, now)
            if kind == "ack":
                return Call(f"ack {_short([lease, when])}", lambda t: t.ack(lease, now=when), [lease, when])
            delay = self.pick(HOSTILE_INTS, 0)
            return Call(
                f"release {_short([lease, when, delay])}",
                lambda t: t.release(lease, now=when, delay=delay),
                [lease, when, delay],
            )
        if kind == "extend":
            lease = self.token(model)
            when = self.pick(HOSTILE_INTS, now)
            lease_seconds = self.pick(HOSTILE_INTS, rng.choice([1, 5]))
            return Call(
                f"extend {_short([lease, when, lease_seconds])}",
                lambda t: t.extend(lease, now=when, lease_seconds=lease_seconds),
                [lease, when, lease_seconds],
            )
        if kind in ("redrive", "cancel"):
            wanted = ("dead",) if kind == "redrive" else ("ready", "leased")
            fitting = [t.task_id for t in model.tasks() if t.status in wanted] or ["b1"]
            task_id = self.pick(HOSTILE_NAMES + ("b1", "b2", "nobody"), rng.choice(fitting))
            if kind == "cancel":
                return Call(f"cancel {_short(task_id)}", lambda t: t.cancel(task_id), [task_id])
            available_at = self.pick(HOSTILE_INTS, now)
            if rng.random() < 0.3:  # the default extra_attempts
                return Call(
                    f"redrive {_short([task_id, available_at])}",
                    lambda t: t.redrive(task_id, available_at=available_at),
                    [task_id, available_at],
                )
            extra = self.pick(HOSTILE_INTS, rng.choice([1, 2]))
            return Call(
                f"redrive {_short([task_id, available_at, extra])}",
                lambda t: t.redrive(task_id, available_at=available_at, extra_attempts=extra),
                [task_id, available_at, extra],
            )
        if kind == "get":
            task_id = rng.choice(HOSTILE_NAMES + ("b1", "b2"))
            return Call(f"get {_short(task_id)}", lambda t: t.get(task_id), [task_id])
        status = rng.choice(HOSTILE_STATUSES)
        return Call(f"tasks {_short(status)}", lambda t: t.tasks(status), [status])

    def _valid_item(self) -> dict[str, Any]:
        self.serial += 1
        item = {"task_id": f"b{self.serial}", "payload": {"m": self.serial}}
        self.specs.append(dict(item))
        return item


def _short(value: Any) -> str:
    """A bounded description; a subclass of a builtin shows its class (its repr looks like the base's)."""
    try:
        text = repr(value)
    except Exception:  # a cyclic or monstrous value: its type is enough
        text = type(value).__name__
    kind = type(value)
    if kind.__module__ != "builtins" and not isinstance(value, Lease):
        text = f"{kind.__name__}({text})"
    return text if len(text) <= 80 else text[:77] + "..."


def campaign_bad_input(seed: int, budget: float, report: Report) -> None:
    """Hostile API calls and CLI lines: documented errors only, the model's answers, and no stray bytes."""
    deadline = time.monotonic() + budget
    report.counts.update({"API calls": 0, "CLI lines": 0, "refused": 0})
    with tempfile.TemporaryDirectory(prefix="walqueue-input-", dir=scratch_root()) as tmp:
        root = Path(tmp)
        try:
            _frame_bound_checks(root / "bound", report)
        except Exception:
            report.diverge(f"--seed {seed} bad-input frame bound: unexpected\n{traceback.format_exc(limit=6)}")
        for unit in itertools.count():
            if unit and time.monotonic() >= deadline:
                break
            try:
                _bad_input_unit(seed, unit, root / f"u{unit}", deadline, report)
            except Abort as exc:
                report.diverge(str(exc))
            except Exception:
                report.diverge(f"bad-input unit {unit}: unexpected exception\n{traceback.format_exc(limit=6)}")


def _frame_bound_checks(directory: Path, report: Report) -> None:
    """The largest task that fits is accepted, one byte more is refused, and so is a put_many too big to frame."""
    limit = FRAME_BOUND - RECORD_MARGIN - len(b'"big"') * 2 - len(b'{"s":""}')
    model = Model()
    with Queue(directory, sync=False) as queue:
        calls = [
            Call("put at the bound", lambda t: t.put("big", {"s": "x" * limit}), []),
            Call("put one byte over", lambda t: t.put("big2", {"s": "x" * (limit + 1)}, key="big"), []),
            Call(
                "put_many over the frame",
                lambda t: t.put_many([{"task_id": f"m{i}", "payload": {"s": "x" * (limit // 2)}} for i in range(3)]),
                [],
            ),
        ]
        for call in calls:
            before = directory_digest(directory)
            got, _ = _attempt(call, queue)
            want, _ = _attempt(call, model)
            report.count("API calls")
            if got != want:
                report.diverge(f"bad-input {call.description}: queue {got}, model {want}")
            if got != "ok" and directory_digest(directory) != before:
                report.diverge(f"bad-input {call.description}: refused, but the directory changed")
        if view(queue) != view(model):
            report.diverge("bad-input frame bound: state differs from the model")


def _foreign_tokens(directory: Path) -> list[Lease]:
    """Valid tokens of another queue, some with the same task ids and workers as ours."""
    with Queue(directory, sync=False) as other:
        other.put_many([{"task_id": f"b{i}", "payload": {"other": i}} for i in range(1, 6)])
        leases = other.reserve("w1", now=0, lease_seconds=1000, limit=3)
        leases += other.reserve("w2", now=0, lease_seconds=5, limit=2)
    return leases


def _bad_input_unit(seed: int, unit: int, directory: Path, deadline: float, report: Report) -> None:
    rng = random.Random(f"bad-input:{seed}:{unit}")
    foreign = _foreign_tokens(directory.with_name(directory.name + "-other"))
    hostile = HostileCalls(rng, foreign)
    workload = Workload(f"bad-input-ops:{seed}:{unit}", prefix="v")
    model = Model()
    where = f"--seed {seed} bad-input unit {unit}"
    with Queue(directory, sync=False) as queue:
        for index in range(BAD_CALLS_PER_UNIT):
            if index >= (BAD_CALLS_FIRST_UNIT if unit == 0 else 50) and time.monotonic() >= deadline:
                break
            if rng.random() < 0.3:
                op = workload.next_op(model)
                expected = expected_states(model, op)
                if outcome(op, queue) != expected.answer:
                    raise Abort(f"{where} call {index} ({op.describe()}): answer differs from the model's")
                count_issue_16(report, op, expected.answer, "applied")
                model = expected.after
                continue
            call = hostile.next_call(model, workload.now)
            model = _judge_call(call, queue, model, directory, report, f"{where} call {index} {call.description}")
            if index % VIEW_EVERY == 0 and not compare_views(queue, model, report, f"{where} call {index}"):
                raise Abort(f"{where}: aborted")
        if not compare_views(queue, model, report, f"{where} (API)"):
            raise Abort(f"{where}: aborted")
    _cli_phase(rng, directory, model, foreign, report, where)


def _judge_call(call: Call, queue: Queue, model: Model, directory: Path, report: Report, where: str) -> Model:
    """Run one hostile call on the queue and on a clone of the model; return the model to go on with."""
    before = directory_digest(directory)
    got, error = _attempt(call, queue)
    report.count("API calls")
    kind = call.description.split(" ", 1)[0]
    if kind in ISSUE_16_KINDS:
        report.count(f"hostile {kind} {'applied' if got == 'ok' else 'refused'}")
    if got == "undocumented":
        raise Abort(f"{where}: raised {type(error).__name__}: {str(error)[:200]}")
    if got != "ok":
        report.count("refused")
        if directory_digest(directory) != before:
            report.diverge(f"{where}: refused with {got}, but the directory changed")
    candidate = model.clone()
    want, model_error = _attempt(call, candidate)
    if want == "undocumented":
        raise Abort(f"{where}: the model raised {type(model_error).__name__}: {model_error}")
    if got == "ok":
        if want != "ok" or error != model_error:
            raise Abort(f"{where}: the queue answered {str(error)[:120]}, the model {want} {str(model_error)[:120]}")
        return candidate
    if got == "argument" and want == "ok":
        if all(is_plain(argument) for argument in call.arguments):
            report.diverge(f"{where}: refused ({error}), but the model accepts it")
        else:
            report.count("stricter than the model")
        return model
    if got != want:
        report.diverge(f"{where}: the queue raised {got}, the model {want}")
    return model


# -- the CLI --------------------------------------------------------------------------


_JSON_VALUES: tuple[Any, ...] = (
    None, True, False, 0, -1, 1, 2**63 - 1, 2**63, 2**64, -(2**63), 10**400, 1.0, 1e308, 1.5, -0.0,
    float("nan"), float("inf"), "", "x", "x" * 1025, "é" * 513, "\ud800", "\x00", [], {}, [1], {"a": 1},
)  # fmt: skip
_RAW_LINES: tuple[bytes, ...] = (
    b"\xff\xfe", b"\xc0\xaf", b"\xed\xa0\x80", b'{"op":"put"', b"[]", b"null", b'"str"', b"1", b"{}", b'{"op":1}',
    b'{"op":"get","op":"get","task_id":"a"}', b'\xef\xbb\xbf{"op":"stats"}', b'{"op":"stats"} trailing',
    b'{"op":"stats"}\x0c', b'{"op":"get","task_id":"\xff"}', b'{"op":"get","task_id":"\\ud800"}',
    b'{"op":"stats","id":NaN}', b'{"op":"reserve","worker":"w","now":1e400,"lease_seconds":1}',
    b'{"op":"put","task_id":"t","payload":{"a":1,"a":2}}', b"   ", b"\t", b"\r", b'{"op":"tasks","status":null}',
    b'{"op":"reserve","worker":"w","now":0,"lease_seconds":1,"limit":1.0}',
    b'{"op":"put","task_id":"t","payload":{},"max_attempts":true}',
)  # fmt: skip


def _cli_request(rng: random.Random, model: Model, foreign: list[Lease], serial: int) -> dict[str, Any]:
    op = rng.choice(
        ["put", "put", "put_many", "reserve", "ack", "release", "extend", "redrive", "cancel"]
        + ["get", "tasks", "stats", "compact"]
    )
    request: dict[str, Any] = {"op": op}
    if op == "put":
        request.update({"task_id": f"c{serial}", "payload": {"n": serial}})
    elif op == "put_many":
        request["tasks"] = [{"task_id": f"c{serial}.{i}", "payload": {}} for i in range(rng.randrange(3))]
    elif op == "reserve":
        request.update({"worker": "w1", "now": 10 + serial, "lease_seconds": rng.choice([1, 100])})
    elif op in ("ack", "release", "extend"):
        leased = model.tasks("leased")
        token = token_for(rng.choice(leased)) if leased and rng.random() < 0.7 else rng.choice(foreign)
        lease = token.to_dict()
        if rng.random() < 0.3:  # only the three fields that identify the holder
            lease = {name: lease[name] for name in ("task_id", "worker", "generation")}
        request.update({"lease": lease, "now": 10 + serial})
        if op == "extend":
            request["lease_seconds"] = rng.choice([1, 50])
    elif op in ("redrive", "cancel"):
        known = [task.task_id for task in model.tasks()]
        request["task_id"] = rng.choice([*known, "nope"]) if known else "nope"
        if op == "redrive":
            request["available_at"] = rng.choice([0, 10 + serial])
            if rng.random() < 0.5:
                request["extra_attempts"] = rng.choice([1, 2])
    elif op == "get":
        request["task_id"] = rng.choice(["c1", "b1", "nope"])
    elif op == "tasks" and rng.random() < 0.5:
        request["status"] = rng.choice(["ready", "leased", "dead"])
    for _ in range(rng.choice([0, 1, 1, 2])):
        _spoil(rng, request)
    if rng.random() < 0.5:
        request["id"] = rng.choice((*_JSON_VALUES, serial, _nested(300, "list")))
    return request


def _spoil(rng: random.Random, request: dict[str, Any]) -> None:
    """Replace, add, remove or deepen one field of a request."""
    targets = [name for name in request if name != "op"]
    action = rng.random()
    if action < 0.5 and targets:
        name = rng.choice(targets)
        if name == "lease" and isinstance(request["lease"], dict) and rng.random() < 0.5:
            lease = dict(request["lease"])
            field_name = rng.choice([*lease, "extra"])
            lease[field_name] = rng.choice(_JSON_VALUES)
            if rng.random() < 0.3:
                lease.pop(rng.choice(list(lease)))
            request["lease"] = lease
        else:
            request[name] = rng.choice(_JSON_VALUES)
    elif action < 0.65 and targets:
        del request[rng.choice(targets)]
    elif action < 0.8:
        request[rng.choice(["extra", "Op", "payload", "now"])] = rng.choice(_JSON_VALUES)
    elif action < 0.9:
        request["op"] = rng.choice(["PUT", "nope", 1, None, "", "put "])
    else:
        request["payload"] = rng.choice([_nested(255, "list"), _nested(300, "dict"), {"d": [1] * 1000}])


def cli_line(rng: random.Random, model: Model, foreign: list[Lease], serial: int) -> bytes:
    """One hostile request line (never containing a newline)."""
    shape = rng.random()
    if shape < 0.15:
        line = rng.choice(_RAW_LINES)
    elif shape < 0.2:
        line = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
    else:
        request = _cli_request(rng, model, foreign, serial)
        text = json.dumps(request, ensure_ascii=rng.random() < 0.5, allow_nan=True)
        line = text.encode("utf-8", "surrogatepass")
        if rng.random() < 0.15:
            damaged = bytearray(line)
            position = rng.randrange(len(damaged))
            damaged[position : position + 1] = rng.choice([b"\xff", b"", b"\x00", b"}", b'"', b"\x80\x80"])
            line = bytes(damaged)
    return line.replace(b"\n", b" ")


def _cli_phase(
    rng: random.Random, directory: Path, model: Model, foreign: list[Lease], report: Report, where: str
) -> None:
    """Hostile lines in-process (one by one, bytes checked) and then through a real consumer process."""
    from walqueue.cli.protocol import encode_answer, is_blank, respond

    process_dir = directory.with_name(directory.name + "-cli")
    shutil.copytree(directory, process_dir)
    lines: list[bytes] = []
    answers: list[dict[str, Any]] = []
    allowed_errors = {"BadRequest", "KeyConflict", "StaleLease", "WrongStatus"}
    with Queue(directory, sync=False) as queue:
        for serial in range(CLI_LINES_PER_UNIT):
            line = cli_line(rng, model, foreign, serial)
            lines.append(line)
            if is_blank(line):
                continue
            before = directory_digest(directory)
            reply = respond(line, queue)
            report.count("CLI lines")
            answer = reply.answer
            label = f"{where} CLI line {serial} {_short(line)}"
            encoded = encode_answer(answer)
            if encoded.count(b"\n") != 1 or not encoded.endswith(b"\n") or json.loads(encoded) is None:
                report.diverge(f"{label}: answer is not one JSON line")
            if reply.fatal or (not answer.get("ok") and answer.get("error") not in allowed_errors):
                raise Abort(f"{label}: answered {answer}")
            if not answer["ok"]:
                report.count("refused")
                if directory_digest(directory) != before:
                    report.diverge(f"{label}: refused ({answer['error']}), but the directory changed")
            answers.append(json.loads(encoded))
            model = _mirror(queue)
    _compare_with_process(lines, answers, process_dir, report, where)


def _mirror(queue: Queue) -> Model:
    """A stand-in with `tasks()` for the line generator: the queue's own state (the CLI is not modelled)."""

    class Snapshot:
        def __init__(self, tasks: list[Task]) -> None:
            self._tasks = tasks

        def tasks(self, status: str | None = None) -> list[Task]:
            return [t for t in self._tasks if status is None or t.status == status]

    return Snapshot(queue.tasks())  # type: ignore[return-value]


def _compare_with_process(
    lines: list[bytes], answers: list[dict[str, Any]], directory: Path, report: Report, where: str
) -> None:
    """The real consumer, fed every line at once, answers each exactly as `respond` did in-process."""
    env = child_environment()
    completed = subprocess.run(
        [sys.executable, "-m", "walqueue.cli", str(directory)],
        input=b"\n".join(lines) + b"\n",
        capture_output=True,
        env=env,
        timeout=300,
        check=False,
    )
    if completed.returncode != 0:
        report.diverge(f"{where}: the consumer exited {completed.returncode}: {completed.stderr[-500:]!r}")
        return
    got = [json.loads(line) for line in completed.stdout.splitlines()]
    if len(got) != len(answers):
        report.diverge(f"{where}: the consumer answered {len(got)} lines, in-process {len(answers)}")
        return
    for index, (process_answer, own) in enumerate(zip(got, answers, strict=True)):
        process_answer.pop("message", None)
        own.pop("message", None)
        if process_answer != own:
            report.diverge(f"{where}: consumer answer {index} {_short(process_answer)} != {_short(own)}")
            return
    report.count("consumer lines agreed", len(got))
    shutil.rmtree(directory, ignore_errors=True)


# ---------------------------------------------------------------------------
# Campaign 6: the environment of an ordinary process


#: What the environment campaign does between and inside calls.
ENV_EVENTS = (
    "chdir",
    "repoint",
    "fork",
    "fork-in-hook",
    "signal-close",
    "timer-close",
    "obstacle",
    "special-file",
    "lock",
)
ENV_WEIGHTS = (3, 2, 2, 1, 2, 2, 2, 2, 1)
#: Seconds any one step may take before it counts as a hang.
ENV_STEP_TIMEOUT = 20.0
#: The names an obstacle is put under while the queue is open (the first three are created by compaction).
ENV_OBSTACLE_KINDS = ("fifo", "directory", "outside-file", "dev-zero", "dangling")
ENV_SPECIAL_KINDS = SPECIAL_KINDS


class Hang(Exception):
    """A step of the environment campaign outlived `ENV_STEP_TIMEOUT`."""


@contextlib.contextmanager
def watchdog(seconds: float) -> Iterator[None]:
    """Raise `Hang` in this thread if the block runs longer than `seconds` (SIGALRM interrupts a blocked call)."""

    def expire(signum: int, frame: Any) -> None:
        raise Hang(f"no answer within {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class EnvHook:
    """The hook of an environment life: silent until armed, then forks or signals at one phase call."""

    def __init__(self) -> None:
        self.action: str | None = None
        self.at = 0
        self.calls = 0
        self.children: list[int] = []

    def arm(self, action: str, at: int) -> None:
        self.action, self.at, self.calls = action, at, 0

    def __call__(self, phase: str) -> None:
        if self.action is None or phase.startswith("recover."):
            return
        self.calls += 1
        if self.calls - 1 != self.at:
            return
        action, self.action = self.action, None
        if action == "signal":
            os.kill(os.getpid(), signal.SIGUSR1)
        elif action == "fork":
            pid = os.fork()
            if pid == 0:
                # The child returns into the write it interrupted; it must be stopped there.
                # The caller of the step sees the exception in the child and exits it.
                return
            self.children.append(pid)


def _remove_entry(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.is_symlink() or path.exists():
        path.unlink()


def _wait_child(pid: int, seconds: float) -> int | None:
    """The exit status of child `pid`, or None (after killing it) if it outlived `seconds`."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


#: What a forked child tries on its inherited queue: each must be QueueClosed (close() must be silent).
CHILD_PROBES: tuple[tuple[str, Callable[[Queue], Any]], ...] = (
    ("put", lambda q: q.put("child-put", {})),
    ("put_many", lambda q: q.put_many([{"task_id": "child-many", "payload": {}}])),
    ("reserve", lambda q: q.reserve("child", now=2**40, lease_seconds=1)),
    ("ack", lambda q: q.ack(Lease("t", "w", 1, 0, 0, {}), now=0)),
    ("release", lambda q: q.release(Lease("t", "w", 1, 0, 0, {}), now=0)),
    ("extend", lambda q: q.extend(Lease("t", "w", 1), now=0, lease_seconds=1)),
    ("redrive", lambda q: q.redrive("t", available_at=0)),
    ("cancel", lambda q: q.cancel("t")),
    ("wait", lambda q: q.wait(0)),
    ("compact", lambda q: q.compact()),
    ("get", lambda q: q.get("t")),
    ("tasks", lambda q: q.tasks()),
    ("stats", lambda q: q.stats()),
    ("last_seq", lambda q: q.last_seq),
)


def _child_tries_everything(queue: Queue) -> int:
    """In a forked child: 0 if every call is refused with QueueClosed and close() is silent."""
    for _, probe in CHILD_PROBES:
        try:
            probe(queue)
        except QueueClosed:
            continue
        except BaseException:
            return 3
        return 2
    try:
        queue.close()
    except BaseException:
        return 4
    return 0


class EnvLife:
    """One store in the environment campaign: the queue, the model, the canary tree beside it."""

    def __init__(self, seed: int, unit: int, root: Path, report: Report) -> None:
        self.rng = random.Random(f"{seed}-environment-{unit}")
        self.where = f"--seed {seed} environment unit {unit}"
        self.report = report
        self.home = root / "home"
        self.store = self.home / "q"
        #: Another name of the store: the queue is sometimes opened through it, and it is repointed.
        self.link = self.home / "link"
        self.canary = root / "canary"
        self.outside = self.canary / "outside.txt"
        self.home.mkdir(parents=True)
        (self.canary / "sub").mkdir(parents=True)
        self.outside.write_text("canary: never written")
        # Decoys under the same relative name: a queue that followed its path
        # string after a chdir would write into one of them.
        for decoy in (self.canary / "q", self.canary / "sub" / "q"):
            with Queue(decoy, sync=False, compact_bytes=None) as queue:
                queue.put("decoy", {"n": 1})
        self.canary_digest = directory_digest(self.canary)
        self.root_names = sorted(os.listdir(root))
        self.root = root
        self.with_hook = self.rng.random() < 0.6
        self.hook = EnvHook()
        self.compact_bytes = self.rng.choice([None, 400, 2_000])
        self.model = Model()
        self.workload = Workload(f"{seed}-environment-{unit}")
        self.queue: Queue | None = None
        self.closed_by_signal = False

    # -- opening ----------------------------------------------------------------

    def open(self, relative: bool) -> Queue:
        """Open the store (by a relative path from `home` when `relative`, maybe through the link)."""
        os.chdir(self.home)
        path: str | Path = "q" if relative else self.store
        if self.store.is_dir():
            if self.link.is_symlink():
                self.link.unlink()
            self.link.symlink_to("q")
            if relative and self.rng.random() < 0.5:
                path = "link"
        queue = Queue(path, sync=False, compact_bytes=self.compact_bytes, hook=self.hook if self.with_hook else None)
        self.queue = queue
        return queue

    def reopen_and_compare(self, allowed: list[Model], what: str) -> None:
        """Close whatever is open, reopen by a relative path, and require one of the `allowed` states."""
        if self.queue is not None:
            self.queue.close()
        queue = self.open(relative=True)
        got = view(queue)
        for candidate in allowed:
            if got == view(candidate):
                self.model = candidate.clone()
                return
        self.report.diverge(f"{self.where} after {what}: {_view_difference(got, view(allowed[-1]))}")
        raise Abort("the state diverged")

    # -- events -------------------------------------------------------------------

    def step(self, number: int) -> None:
        rng = self.rng
        where = f"{self.where} step {number}"
        event = rng.choices(ENV_EVENTS, weights=ENV_WEIGHTS)[0] if rng.random() < 0.45 else "op"
        if event in ("fork-in-hook", "signal-close") and not self.with_hook:
            event = "timer-close" if event == "signal-close" else "fork"
        self.report.count(f"{event}s" if event != "op" else "operations")
        getattr(self, "_" + event.replace("-", "_"))(where)

    def _op(self, where: str) -> None:
        assert self.queue is not None
        op = self.workload.next_op(self.model)
        expected = expected_states(self.model, op)
        answer = outcome(op, self.queue)
        if answer != expected.answer:
            self.report.diverge(f"{where}: {op.describe()} answered {answer[:120]}, model {expected.answer[:120]}")
            raise Abort("the answer diverged")
        count_issue_16(self.report, op, answer, "applied")
        self.model = expected.after

    def _chdir(self, where: str) -> None:
        os.chdir(self.rng.choice([self.canary, self.canary / "sub", self.root, self.home, self.store]))
        self._op(where)

    def _repoint(self, where: str) -> None:
        """Repoint the link to the store at a decoy store; whatever the queue was opened through, it stays put."""
        if self.link.is_symlink():
            self.link.unlink()
        self.link.symlink_to(self.canary / "q")
        self._op(where)
        assert self.queue is not None
        self.queue.compact()
        self.model.compact()
        self._op(where)

    def _fork(self, where: str) -> None:
        assert self.queue is not None
        queue = self.queue
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            status = 5
            try:
                status = _child_tries_everything(queue)
            finally:
                os._exit(status)
        status = _wait_child(pid, ENV_STEP_TIMEOUT)
        if status != 0:
            self.report.diverge(f"{where}: a forked child's inherited queue {'hung' if status is None else status}")
        else:
            self.report.count("child calls refused", len(CHILD_PROBES))
        self._op(where)

    def _fork_in_hook(self, where: str) -> None:
        """Fork inside a write (at a random phase): the child must be stopped, the parent's call complete."""
        assert self.queue is not None
        self.hook.arm("fork", self.rng.randrange(4))
        parent = os.getpid()
        try:
            self._op(where)
        except BaseException as exc:
            if os.getpid() != parent:  # pragma: no cover - the child, stopped inside the write
                os._exit(0 if isinstance(exc, QueueClosed) else 6)
            raise
        if os.getpid() != parent:  # pragma: no cover - a child that was not stopped
            os._exit(7)
        self.hook.action = None
        for pid in self.hook.children:
            status = _wait_child(pid, ENV_STEP_TIMEOUT)
            if status != 0:
                self.report.diverge(f"{where}: a child forked in the hook went on writing ({status})")
            else:
                self.report.count("children stopped in a write")
        self.hook.children.clear()

    def _close_by_signal(
        self, where: str, signum: signal.Signals, arm: Callable[[], None], disarm: Callable[[], None]
    ) -> None:
        """Run ops until a signal handler's close() ends the life; every reopen state must be explainable."""
        assert self.queue is not None
        queue = self.queue
        previous = signal.signal(signum, lambda s, f: queue.close())
        interrupted: Expected | None = None
        try:
            arm()
            for _ in range(50):
                op = self.workload.next_op(self.model)
                expected = expected_states(self.model, op)
                try:
                    answer = outcome(op, queue)
                except QueueClosed:
                    interrupted = expected
                    break
                if answer != expected.answer:
                    self.report.diverge(f"{where}: {op.describe()} answered {answer[:100]} under a signal")
                    raise Abort("the answer diverged")
                self.model = expected.after
        finally:
            disarm()
            signal.signal(signum, previous)
        self.report.count("closed by a handler" if interrupted is not None else "handler never closed")
        allowed = [self.model] if interrupted is None else list(interrupted.by_seq.values())
        if interrupted is None:
            queue.close()  # no handler closed it (or one did after the last call): reopening needs the lock
        self.queue = None
        self.reopen_and_compare(allowed, f"{where} (close from a signal handler)")

    def _signal_close(self, where: str) -> None:
        at = self.rng.randrange(6)
        self._close_by_signal(
            where, signal.SIGUSR1, lambda: self.hook.arm("signal", at), lambda: setattr(self.hook, "action", None)
        )

    def _timer_close(self, where: str) -> None:
        delay = self.rng.uniform(1e-5, 3e-3)
        self._close_by_signal(
            where,
            signal.SIGVTALRM,
            lambda: signal.setitimer(signal.ITIMER_VIRTUAL, delay),
            lambda: signal.setitimer(signal.ITIMER_VIRTUAL, 0),
        )

    def _obstacle(self, where: str) -> None:
        """Something in the way of a file compaction creates: refused or removed, never written through."""
        assert self.queue is not None
        queue = self.queue
        if not self.with_hook:
            # A background snapshot could publish the very name an obstacle is put
            # under (an operator racing a live compaction): let it finish first.
            queue.compact()
        stats = queue.stats()
        names = [CURRENT_TMP_NAME, snapshot_name(stats["last_seq"]), snapshot_name(stats["last_seq"] + 10**6)]
        name = self.rng.choice(names)
        kind = self.rng.choice(ENV_OBSTACLE_KINDS)
        path = self.store / name
        if stats["last_seq"] == stats["snapshot_seq"] and name == snapshot_name(stats["last_seq"]):
            return  # the published snapshot's own name: not an obstacle, the store's file
        place_special(path, kind, self.outside)
        self.report.count("obstacles placed")
        try:
            queue.compact()
        except FileExistsError:
            self.report.count("obstacles refused")
        if path.is_symlink() or (path.exists() and not path.is_file()):
            _remove_entry(path)  # still the obstacle (a regular file there is the snapshot compaction wrote)
        self._op(where)

    def _special_file(self, where: str) -> None:
        """Close, put a special file where the store has (or could have) a file opening reads, reopen."""
        assert self.queue is not None
        self.queue.close()
        self.queue = None
        names = sorted(p.name for p in self.store.iterdir())
        candidates = [n for n in names if n == "CURRENT" or n.startswith(("snapshot-", "wal-")) or n == LOCK_NAME]
        candidates.append("CURRENT")
        name = self.rng.choice(candidates)
        kind = self.rng.choice(ENV_SPECIAL_KINDS)
        path = self.store / name
        saved = self.root / "saved"
        had = path.exists() and not path.is_symlink()
        if had:
            shutil.move(path, saved)
        place_special(path, kind, self.outside)
        from walqueue.format.fsck import EXIT_CORRUPT, check

        verdict = check(self.store, replay=True)
        try:
            Queue(self.store, sync=False, compact_bytes=None).close()
        except CorruptStore as exc:
            if verdict.exit_code != EXIT_CORRUPT:
                self.report.diverge(f"{where}: {name} as {kind}: opening refused it, fsck exit {verdict.exit_code}")
            elif exc.path is None or os.path.basename(exc.path) != name:
                self.report.diverge(f"{where}: {name} as {kind}: CorruptStore names {exc.path}")
            else:
                self.report.count("special files refused")
        else:
            if verdict.exit_code == EXIT_CORRUPT:
                self.report.diverge(f"{where}: {name} as {kind}: opening succeeded, fsck says corrupt")
            else:
                self.report.count("special files ignored")  # an orphan snapshot's name, say
        _remove_entry(path)
        if had:
            shutil.move(saved, path)
        self.reopen_and_compare([self.model], f"{where} ({name} as {kind}, then restored)")

    def _lock(self, where: str) -> None:
        """Delete or replace LOCK under the live owner: a second opener is still refused."""
        lock = self.store / LOCK_NAME
        if lock.exists():
            lock.unlink()
        if self.rng.random() < 0.5:
            lock.write_bytes(b"")
        try:
            Queue(self.store, sync=False, compact_bytes=None).close()
        except DirectoryLocked:
            self.report.count("second owners refused")
        else:
            self.report.diverge(f"{where}: a second Queue opened while the first owns the directory")
        self._op(where)

    # -- the end of a life -----------------------------------------------------------

    def finish(self) -> None:
        if self.queue is not None:
            self.queue.close()
        self.reopen_and_compare([self.model], f"{self.where} (final reopen)")
        if self.queue is not None:
            self.queue.close()
        if directory_digest(self.canary) != self.canary_digest or not self.outside.exists():
            self.report.diverge(f"{self.where}: the canary tree beside the store was written")
        stray = sorted(set(os.listdir(self.root)) - set(self.root_names) - {"saved"})
        if stray:
            self.report.diverge(f"{self.where}: files appeared beside the store: {stray}")
        self.report.count("canaries intact")


def campaign_environment(seed: int, budget: float, report: Report) -> None:
    """chdir, forks, signal handlers that close, special files and LOCK games, between and inside calls."""
    deadline = time.monotonic() + budget
    root = Path(tempfile.mkdtemp(prefix="walqueue-env-", dir=scratch_root()))
    cwd = os.getcwd()
    try:
        unit = 0
        while unit < 2 or time.monotonic() < deadline:
            life = EnvLife(seed, unit, root / f"u{unit}", report)
            report.count("lives")
            try:
                with watchdog(ENV_STEP_TIMEOUT):
                    life.open(relative=True)
                for number in range(40):
                    with watchdog(ENV_STEP_TIMEOUT):
                        life.step(number)
                with watchdog(ENV_STEP_TIMEOUT):
                    life.finish()
            except Abort:
                pass
            except Hang as exc:
                report.diverge(f"{life.where}: a hang: {exc}")
            finally:
                if life.queue is not None:
                    life.queue.close()
                os.chdir(cwd)
                remove(root / f"u{unit}")
            unit += 1
    finally:
        os.chdir(cwd)
        remove(root)


# ---------------------------------------------------------------------------
# Campaigns 7-9: walqueue-serve (issue #17). The server is a real process
# (`python -m walqueue.cli.serve`, sync=True); clients are `walqueue.cli.Client`
# objects in this process, or killed child processes, all over its Unix socket.

SERVER_START_TIMEOUT = 30.0
SERVER_CLIENTS = 3
SERVER_KILL_DELAY = (0.05, 0.4)
CLIENT_KILL_DELAY = (0.0, 0.15)
HOSTILE_LINES_PER_UNIT = 150


class ServedQueue:
    """A `walqueue-serve` process on `directory`; `restart()` after a kill reuses the (stale) socket."""

    def __init__(self, directory: Path, socket_path: str) -> None:
        self.directory = directory
        self.socket_path = socket_path
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        command = [sys.executable, "-m", "walqueue.cli.serve", str(self.directory), "--socket", self.socket_path]
        command += ["--log-level", "WARNING"]
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=child_environment(), bufsize=0
        )
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], SERVER_START_TIMEOUT)
        if not ready or not self.process.stdout.readline():
            self.process.kill()
            self.process.wait(SERVER_START_TIMEOUT)
            raise Abort(f"walqueue-serve on {self.directory} did not start (exit {self.process.returncode})")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
        if self.process is not None:
            self.process.wait(SERVER_START_TIMEOUT)

    def stop(self) -> int:
        """SIGTERM: the graceful stop; its exit status."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(SERVER_START_TIMEOUT)


def _socket_dir() -> str:
    return tempfile.mkdtemp(prefix="wq-torture-", dir="/tmp")  # sun_path holds 108 bytes: keep it short


def campaign_server_kill(seed: int, budget: float, report: Report) -> None:
    """SIGKILL the server under load from several clients; every answered call is durable, none applied twice.

    Calls go one at a time, round-robin over `SERVER_CLIENTS` clients (so the
    model knows their order), while reader threads load the server with
    concurrent `stats`/`tasks` calls and a killer thread SIGKILLs it at
    random moments, reopens the directory in this process (the state must be
    the model's before or after the call in flight, or only its reap), and
    restarts the server. A `put` in flight is retried by the client across
    the restart and must answer as the model does (applied exactly once); an
    `ack`, `release` or `reserve` in flight raises `ConnectionError`.
    """
    from walqueue.cli import Client

    deadline = time.monotonic() + budget
    root = Path(tempfile.mkdtemp(prefix="torture-serve-", dir=scratch_root()))
    sockets = _socket_dir()
    try:
        unit = 0
        while unit == 0 or time.monotonic() < deadline:
            _server_kill_unit(seed, unit, root / f"u{unit}", f"{sockets}/s{unit}", deadline, report, Client)
            unit += 1
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(sockets, ignore_errors=True)


def _server_kill_unit(
    seed: int, unit: int, directory: Path, socket_path: str, deadline: float, report: Report, client_class: Any
) -> None:
    import threading

    where = f"--seed {seed} server-kill unit {unit}"
    rng = random.Random(f"server-kill:{seed}:{unit}")
    workload = Workload(f"server-kill-ops:{seed}:{unit}", prefix="s", weights={"compact": 0})
    server = ServedQueue(directory, socket_path)
    clients = [client_class(socket_path, timeout=60, reconnect_seconds=60) for _ in range(SERVER_CLIENTS)]
    stopping = threading.Event()
    views_after_kill: list[dict[str, Any]] = []
    kill_errors: list[str] = []
    kills_started = [0]

    def killer() -> None:
        try:
            while not stopping.wait(rng.uniform(*SERVER_KILL_DELAY)):
                kills_started[0] += 1
                server.kill()
                with Queue(directory, sync=False) as reopened:
                    views_after_kill.append(view(reopened))
                report.count("server kills")
                server.start()  # also when stopping: the clients' retries and the final check need it
        except Exception:
            kill_errors.append(traceback.format_exc(limit=5))

    def reader(number: int) -> None:
        with client_class(socket_path, timeout=60, reconnect_seconds=60) as loader:
            while not stopping.is_set():
                try:
                    loader.stats() if number % 2 else loader.tasks("ready")
                    report.count("concurrent reads")
                except (ConnectionError, OSError):
                    time.sleep(0.01)

    threads = [threading.Thread(target=killer, daemon=True)]
    threads += [threading.Thread(target=reader, args=(n,), daemon=True) for n in range(2)]
    for thread in threads:
        thread.start()
    model = Model()
    try:
        step = 0
        while step < 400 and (step < 40 or time.monotonic() < deadline):
            op = workload.next_op(model)
            expected = expected_states(model, op)
            kills_before = len(views_after_kill)
            client = clients[step % SERVER_CLIENTS]
            try:
                answer: str | None = outcome(op, client)
            except ConnectionError:
                answer = None
            settle = time.monotonic() + 60
            while kills_started[0] > len(views_after_kill) and time.monotonic() < settle:
                time.sleep(0.005)  # a kill is under way: wait for its reopened view
            kills = views_after_kill[kills_before:]
            label = f"{where} step {step} ({op.describe()})"
            if answer is not None:
                report.count("operations answered")
                if answer != expected.answer:
                    raise Abort(f"{label}: answered {answer[:120]}, the model {expected.answer[:120]}")
            if kills:
                report.count("steps hit by a kill")
                candidates = {id(state): state for state in expected.by_seq.values()}
                for seen in kills:
                    if not any(seen == view(state) for state in candidates.values()):
                        report.diverge(f"{label}: after a kill the store holds a state the model never had")
                        raise Abort(label)
                if answer is None:
                    report.count("in flight, not retried")
                    matching = [state for state in expected.by_seq.values() if view(state) == kills[-1]]
                    model = matching[-1]
                    report.count(
                        "in-flight applied" if model.last_seq > expected.before.last_seq else "in-flight not applied"
                    )
                else:
                    if op.kind in ("put", "put_many"):
                        report.count("puts retried across a restart")
                    model = expected.after
            elif answer is None:
                raise Abort(f"{label}: ConnectionError without a kill")
            else:
                model = expected.after
            step += 1
        report.count("steps", step)
    finally:
        stopping.set()
        for thread in threads:
            thread.join(60)
        for client in clients:
            client.close()
    if kill_errors:
        raise Abort(f"{where}: the killer failed\n{kill_errors[0]}")
    if server.process is not None and server.process.poll() is None:
        with client_class(socket_path, timeout=60, reconnect_seconds=10) as final:
            if view(final) != view(model):
                report.diverge(f"{where}: the served state differs from the model at the end")
        if server.stop() != 0:
            report.diverge(f"{where}: SIGTERM did not exit 0")
    server.kill()
    with Queue(directory, sync=False) as reopened:
        if not compare_views(reopened, model, report, f"{where} (reopened at the end)"):
            raise Abort(f"{where}: aborted")


CLIENT_VICTIM = r"""
import json, socket, sys, time
path, prefix, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.connect(path)
reader = sock.makefile("rb")
print("ready", flush=True)
for step in range(steps):
    items = [{"task_id": f"{prefix}-{step}-{i}", "payload": {"step": step, "i": i}} for i in range(3)]
    line = json.dumps({"op": "put_many", "tasks": items, "id": step}).encode() + b"\n"
    print("begin", step, flush=True)
    cut = len(line) // 2
    sock.sendall(line[:cut])
    time.sleep(0.002)
    sock.sendall(line[cut:])
    answer = json.loads(reader.readline())
    assert answer == {"id": step, "ok": True, "task_ids": [item["task_id"] for item in items]}, answer
    print("done", step, flush=True)
"""


def campaign_client_kill(seed: int, budget: float, report: Report) -> None:
    """SIGKILL client processes in the middle of their requests; each request is completed or never started.

    Each victim sends `put_many` requests of three tasks, each line in two
    writes, printing ``begin``/``done`` around it, and dies by SIGKILL at a
    random moment. Afterwards the server must hold every done request's
    tasks, all or none of the one in flight, nothing of later ones, and
    still answer another client; at the end SIGTERM exits 0 and the
    reopened directory equals what was served.
    """
    from walqueue.cli import Client

    deadline = time.monotonic() + budget
    rng = random.Random(f"client-kill:{seed}")
    root = Path(tempfile.mkdtemp(prefix="torture-clients-", dir=scratch_root()))
    sockets = _socket_dir()
    socket_path = f"{sockets}/s"
    server = ServedQueue(root / "q", socket_path)
    try:
        with Client(socket_path, timeout=60) as observer:
            victim_number = 0
            while victim_number < 10 or time.monotonic() < deadline:
                _kill_one_client(rng, victim_number, socket_path, observer, report, f"--seed {seed} client-kill")
                victim_number += 1
            served = view(observer)
        if server.stop() != 0:
            report.diverge("client-kill: SIGTERM did not exit 0")
        with Queue(root / "q", sync=False) as reopened:
            if view(reopened) != served:
                report.diverge("client-kill: the reopened directory differs from what the server answered")
    finally:
        server.kill()
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(sockets, ignore_errors=True)


def _kill_one_client(
    rng: random.Random, number: int, socket_path: str, observer: Any, report: Report, where: str
) -> None:
    prefix = f"v{number}"
    victim = subprocess.Popen(
        [sys.executable, "-c", CLIENT_VICTIM, socket_path, prefix, "1000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=child_environment(),
        # Unbuffered: `readline` below must not read past "ready" into a buffer that
        # `communicate` (which reads the raw descriptor) never looks at.
        bufsize=0,
    )
    assert victim.stdout is not None
    ready, _, _ = select.select([victim.stdout], [], [], SERVER_START_TIMEOUT)
    if not ready or victim.stdout.readline() != b"ready\n":
        victim.kill()
        victim.wait(SERVER_START_TIMEOUT)
        raise Abort(f"{where}: victim {number} did not start")
    time.sleep(rng.uniform(*CLIENT_KILL_DELAY))
    victim.kill()
    output, _ = victim.communicate(timeout=SERVER_START_TIMEOUT)
    begun = done = -1
    for line in output.split(b"\n"):
        words = line.split()
        if len(words) == 2 and words[0] == b"begin":
            begun = int(words[1])
        elif len(words) == 2 and words[0] == b"done":
            done = int(words[1])
    report.count("client kills")
    time.sleep(0.05)  # the server may still be executing the request the victim sent last
    present = {task.task_id for task in observer.tasks() if task.task_id.startswith(prefix + "-")}
    steps_present = {int(task_id.split("-")[1]) for task_id in present}
    for step in steps_present:
        if {f"{prefix}-{step}-{i}" for i in range(3)} - present:
            report.diverge(f"{where} victim {number}: request {step} was applied in part")
    if steps_present - set(range(begun + 1)) or set(range(done + 1)) - steps_present:
        report.diverge(f"{where} victim {number}: begun {begun}, done {done}, applied {sorted(steps_present)}")
    report.count("requests completed", len(steps_present))
    if begun > done:
        report.count("in flight at the kill")
        report.count("in-flight completed" if begun in steps_present else "in-flight never started")


def campaign_hostile_clients(seed: int, budget: float, report: Report) -> None:
    """The CLI's bad-input corpus over the socket: each answer is the in-process protocol's, none harms another.

    Hostile lines (the generator of the bad-input campaign) go to a server
    over several connections, some split into many small writes; between
    them, junk connections send random bytes or half a line and hang up.
    Each answer must equal `respond(line)` on a copy of the store in this
    process (messages aside), and the served state must equal the copy's.
    """
    from walqueue.cli.protocol import is_blank, respond

    deadline = time.monotonic() + budget
    root = Path(tempfile.mkdtemp(prefix="torture-hostile-", dir=scratch_root()))
    sockets = _socket_dir()
    try:
        unit = 0
        while unit == 0 or time.monotonic() < deadline:
            rng = random.Random(f"hostile-clients:{seed}:{unit}")
            where = f"--seed {seed} hostile-clients unit {unit}"
            served_dir, local_dir = root / f"served{unit}", root / f"local{unit}"
            foreign = _foreign_tokens(root / f"other{unit}")
            with Queue(served_dir, sync=False) as seeding:
                seeding.put_many([{"task_id": f"b{i}", "payload": {"n": i}} for i in range(1, 4)])
                seeding.reserve("w1", now=0, lease_seconds=1000)
            shutil.copytree(served_dir, local_dir)
            server = ServedQueue(served_dir, f"{sockets}/s{unit}")
            try:
                with Queue(local_dir, sync=False) as local:
                    _hostile_unit(rng, server.socket_path, local, foreign, is_blank, respond, report, where)
                    expected = view(local)
                if server.stop() != 0:
                    report.diverge(f"{where}: SIGTERM did not exit 0")
                with Queue(served_dir, sync=False) as reopened:
                    if view(reopened) != expected:
                        report.diverge(f"{where}: the served state differs from the in-process one")
            finally:
                server.kill()
            unit += 1
            if time.monotonic() >= deadline:
                break
    finally:
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(sockets, ignore_errors=True)


def _hostile_unit(
    rng: random.Random,
    socket_path: str,
    local: Queue,
    foreign: list[Lease],
    is_blank: Callable[[bytes], bool],
    respond: Callable[..., Any],
    report: Report,
    where: str,
) -> None:
    import socket

    def connect() -> tuple[socket.socket, Any]:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(60)
        sock.connect(socket_path)
        return sock, sock.makefile("rb")

    connections = [connect() for _ in range(3)]
    for serial in range(HOSTILE_LINES_PER_UNIT):
        if rng.random() < 0.1:  # a junk connection: random bytes or half a line, then gone
            junk, _ = connect()
            junk.sendall(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))).replace(b"\n", b""))
            junk.close()
            report.count("junk connections")
        line = cli_line(rng, _mirror(local), foreign, serial)
        if is_blank(line):
            continue
        sock, answers = rng.choice(connections)
        data = line + b"\n"
        if rng.random() < 0.3:
            cuts = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, 4))) if len(data) > 1 else []
            for start, end in zip([0, *cuts], [*cuts, len(data)], strict=True):
                sock.sendall(data[start:end])
        else:
            sock.sendall(data)
        raw = answers.readline()
        report.count("socket lines")
        if not raw.endswith(b"\n"):
            report.diverge(f"{where} line {serial} {_short(line)}: the connection closed without an answer")
            return
        got = json.loads(raw)
        own = json.loads(json.dumps(respond(line, local).answer))
        got.pop("message", None)
        own.pop("message", None)
        if got != own:
            report.diverge(f"{where} line {serial} {_short(line)}: served {_short(got)}, in-process {_short(own)}")
            return
        if not got.get("ok"):
            report.count("refused")
        report.count("socket lines agreed")
    for sock, answers in connections:
        answers.close()
        sock.close()


# ---------------------------------------------------------------------------
# Running


RUNNERS: dict[str, Callable[[int, float, Report], None]] = {
    "crash-points": campaign_crash_points,
    "kill": campaign_kill,
    "bytes": campaign_bytes,
    "os-faults": campaign_os_faults,
    "background": campaign_background,
    "bad-input": campaign_bad_input,
    "environment": campaign_environment,
    "server-kill": campaign_server_kill,
    "client-kill": campaign_client_kill,
    "hostile-clients": campaign_hostile_clients,
}


def budgets(seconds: float, names: Sequence[str]) -> dict[str, float]:
    """Split `seconds` over the selected campaigns by their shares."""
    total = sum(BUDGET_SHARES[name] for name in names)
    return {name: seconds * BUDGET_SHARES[name] / total for name in names}


def run_campaign(name: str, seed: int, budget: float, targets: dict[str, int] | None = None) -> Report:
    """Run one campaign in this process and return its report (never raises for a divergence).

    `targets` are counts the caller will require (see `Report.targets`).
    """
    report = Report(name, targets=dict(targets or {}))
    started = time.monotonic()
    with quiet_walqueue_logging():
        try:
            RUNNERS[name](seed, budget, report)
        except Exception:
            report.diverge(f"{name}: the harness failed\n{traceback.format_exc(limit=8)}")
    report.seconds = time.monotonic() - started
    return report


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["--kill-zygote"]:
        return kill_zygote()
    parser = argparse.ArgumentParser(prog="torture.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=1, help="the seed of every campaign (default 1)")
    parser.add_argument(
        "--seconds", type=float, default=DEFAULT_SECONDS, help="total time, split across campaigns (default 60)"
    )
    parser.add_argument(
        "--campaign",
        action="extend",
        nargs="+",
        choices=CAMPAIGNS,
        metavar="NAME",
        help=f"run only these, in the usual order (one of {', '.join(CAMPAIGNS)}; repeatable)",
    )
    options = parser.parse_args(arguments)
    names = options.campaign or list(CAMPAIGNS)
    names = [name for name in CAMPAIGNS if name in names]
    print(f"torture: seed {options.seed}, {options.seconds:g} s over {', '.join(names)}", flush=True)
    passed = failed = 0
    finish = time.monotonic() + options.seconds
    for position, name in enumerate(names):
        # Each campaign gets its share of the time that is left, so one that overruns
        # (the bytes campaign always finishes its first store) shortens the ones after it.
        budget = budgets(max(0.0, finish - time.monotonic()), names[position:])[name]
        report = run_campaign(name, options.seed, budget)
        print(report.line(), flush=True)
        for message in report.divergences:
            print("  DIVERGENCE " + message.replace("\n", "\n    "), flush=True)
        if report.divergence_count > len(report.divergences):
            print(f"  ... and {report.divergence_count - len(report.divergences)} more", flush=True)
        if report.passed:
            passed += 1
        else:
            failed += 1
    print(f"{passed} passed, {failed} failed", flush=True)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
