"""Campaign ``os-faults``: `OSError` (ENOSPC, EIO) at the k-th ``os`` call (write,
fsync, replace/rename, unlink, open, ftruncate) of a step, for every k:
the error reaches the caller unwrapped, the queue is poisoned
(`QueueClosed`, ``close()`` silent), and reopening gives the model's state
before or after the step (same rule as campaign 1). Opening itself is
faulted too, with and without a torn tail to cut.
"""

from __future__ import annotations

import errno
import random
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from harness import Dirs, scratch, tmpfs, units

from model import Model
from walqueue import InjectedCrash, Queue

from . import lifecycle
from .checks import check_answered, check_poisoned, check_reopened
from .faults import FAULT_ERRNOS, FAULTABLE, FaultInjector, injected, transactions_written
from .harness import Abort, Budget, Report, guarded, remove
from .workload import Expected, Op, PhaseLog, Workload, count_lifecycle_call, expected_states, outcome, unit_start

FAULT_STEPS = 60
REOPEN_EVERY = 6


def campaign_os_faults(seed: int, budget: float, report: Report) -> None:
    """Fail the k-th os call of each step (and of reopening) for every k; check poison, error and recovery."""
    clock = Budget(budget, report)  # past its budget (up to the overtime) while short of the caller's targets
    report.counts.update({"steps": 0, "faults": 0, "faults without a hook": 0, "open faults": 0})
    called: set[str] = set()
    with scratch("walqueue-faults-", tmpfs()) as tmp, injected(FaultInjector()) as injector:
        for unit in units(clock.over, least=2):  # both paths (unit 1 without a hook), however slow the machine
            dirs = Dirs(tmp / f"u{unit}")
            with guarded(report, f"os-faults unit {unit}", scratch=dirs.root):
                _fault_workload(seed, unit, dirs, clock, injector, report, called)
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
    seed: int, unit: int, dirs: Dirs, clock: Budget, injector: FaultInjector, report: Report, called: set[str]
) -> None:
    rng, workload, main = unit_start("faults", seed, unit, dirs)
    # Every other unit runs without a hook: the engine may take another path (one write
    # per frame) when nobody observes its phases, and that path must fail safely too.
    hooked = unit % 2 == 0
    options: dict[str, Any] = {"sync": True, "compact_bytes": rng.choice([800, 1600])}
    model = Model()
    recorder = PhaseLog()
    step_options = {**options, "hook": recorder if hooked else None}
    queue = Queue(main, **step_options)
    ops = lifecycle.first_unit(workload, unit)  # the first unit covers every kind of call, however slow
    try:
        for step in range(FAULT_STEPS + ops.steps):
            if step >= 10 and ops.done and clock.over():
                break
            where = f"--seed {seed} os-faults unit {unit} step {step}"
            if step % REOPEN_EVERY == REOPEN_EVERY - 1:
                queue.close()
                if rng.random() < 0.5:
                    model = _leave_torn_tail(main, workload, model, options, where, report)
                _fault_open(main, model, options, dirs, injector, report, called, where)
                queue = Queue(main, **step_options)
                continue
            op = ops.next_op(model)
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
            check_answered(queue, answer, expected, report, where)
            count_lifecycle_call(report, op, answer, "applied")
            if calls:
                count_lifecycle_call(report, op, answer, "faulted")
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
    check_reopened(scratch, state, report, where)
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
        check_reopened(scratch, model, report, label)
        remove(scratch)
