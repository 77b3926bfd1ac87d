"""Campaign ``background``: automatic compaction without a hook (its snapshot
written by a thread of its own while calls go on): the directory is
copied before every os call of that thread (a SIGKILL there) and each
copy must reopen to a model state no older than the last answer, and
compact without orphans; or the k-th os call of that thread fails
(ENOSPC, EIO): nothing answered may be lost.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import Dirs, scratch, tmpfs, units

from model import Model, view
from walqueue import Queue, QueueClosed
from walqueue.format.current import read_current
from walqueue.format.names import CURRENT_TMP_NAME, LOCK_NAME, parse_wal_name

from .checks import check_poisoned, compare_views, open_checked_by_fsck, reopened_view, view_difference
from .faults import FAULT_ERRNOS, FAULTABLE, FaultInjector, injected
from .harness import Abort, Budget, Report, guarded, remove
from .workload import Expected, count_lifecycle_call, expected_states, outcome, unit_start

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
    clock = Budget(budget, report)
    report.counts.update({"steps": 0, "crash copies": 0, "faults": 0, "final reopens": 0})
    crashed_before: set[str] = set()
    with scratch("walqueue-background-", tmpfs()) as tmp, injected(FaultInjector()) as injector:
        for unit in units(clock.over, least=2):
            dirs = Dirs(tmp / f"u{unit}")
            with guarded(report, f"background unit {unit}", scratch=dirs.root):
                try:
                    _background_unit(seed, unit, dirs, clock, injector, report, crashed_before)
                finally:
                    injector.disarm()
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
    seed: int, unit: int, dirs: Dirs, clock: Budget, injector: FaultInjector, report: Report, crashed: set[str]
) -> None:
    rng, workload, main = unit_start("background", seed, unit, dirs)
    faulting = unit % 2 == 1
    options: dict[str, Any] = {"sync": True, "compact_bytes": rng.choice([400, 700, 1200])}
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
            if step >= 20 and clock.over():
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
            count_lifecycle_call(report, op, answer, "applied")
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
        report.count("final reopens")
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
    got = reopened_view(main, report, where, sync=False, compact_bytes=None)
    for state in expected.by_seq.values():  # the call in flight: in or out (or a reserve's reap only)
        if view(state) == got:
            return Queue(main, **options), state
    raise Abort(f"{where}: after the poisoning the store lost something: {view_difference(got, view(expected.after))}")


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
                report.diverge(f"{where}: {view_difference(got, view(states[seq]))}")
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
