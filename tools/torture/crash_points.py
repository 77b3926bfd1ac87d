"""Campaign ``crash-points``: randomized workloads (every operation, the lease
lifecycle calls extend, redrive, cancel and fail included, errors recorded
by release, fail and cancel, explicit and
automatic compaction, reaps) are killed with `InjectedCrash` at every
phase call of every step, on a copy of the directory. Each copy is reopened
at once (first crashing again at each recovery phase) and must equal the
model before the step, or after exactly those of its transactions whose
frames were complete (the ``wal.append.written`` phases reached, CONTRACT §4
rules 6 and 7). The workload then goes on, sometimes from a crashed copy.
The first unit opens with the forced lifecycle (lifecycle.py): every kind
of call, every phase and a crash copy to go on from, however slow the
machine.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from harness import Dirs, scratch, tmpfs, units

from model import Model
from walqueue import PHASES, InjectedCrash, Queue

from . import lifecycle
from .checks import check_answered, check_poisoned, compare_views, open_through_recovery_crashes
from .harness import Abort, Budget, Report, guarded, remove
from .workload import Expected, Op, PhaseLog, count_lifecycle_call, expected_states, outcome, unit_start

CRASH_STEPS = 160
ADOPT_PROBABILITY = 0.3


def campaign_crash_points(seed: int, budget: float, report: Report) -> None:
    """Crash every phase call of every step of seeded workloads, on copies of the directory."""
    clock = Budget(budget, report)  # past its budget (up to the overtime) while short of the caller's targets
    crashed: set[str] = set()
    with scratch("walqueue-crash-", tmpfs()) as tmp:
        for unit in units(clock.over):
            report.count("workloads")
            with guarded(report, f"unit {unit}"):
                _crash_workload(seed, unit, Dirs(tmp / f"u{unit}"), clock, report, crashed)
    report.counts["phases crashed"] = len(crashed)
    missing = sorted(set(PHASES) - crashed)
    if missing:
        report.gaps.append(f"phases never crashed at: {missing}")


def _crash_workload(seed: int, unit: int, dirs: Dirs, clock: Budget, report: Report, crashed: set[str]) -> None:
    rng, workload, main = unit_start("crash", seed, unit, dirs)
    options: dict[str, Any] = {"sync": False, "compact_bytes": rng.choice([600, 1200, 2500])}
    model = Model()
    recorder = PhaseLog()
    queue = Queue(main, hook=recorder, **options)
    ops = lifecycle.first_unit(workload, unit)  # the first unit covers every kind of call, however slow
    try:
        for step in range(ops.steps + CRASH_STEPS):
            if step >= 10 and ops.done and clock.over():
                break
            where = f"--seed {seed} crash-points unit {unit} step {step}"
            forced = not ops.done
            op = ops.next_op(model)
            where += f" ({op.describe()})"
            expected = expected_states(model, op)
            pre = dirs.new(copy_of=main)
            recorder.phases = []
            answer = outcome(op, queue)
            report.count("steps")
            check_answered(queue, answer, expected, report, where)
            count_lifecycle_call(report, op, answer, "applied")
            phases = list(recorder.phases)
            adopt_at = _adopted(rng, phases, forced=forced)
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


def _adopted(rng: random.Random, phases: list[str], *, forced: bool) -> int | None:
    """The crash point the workload goes on from (None: none), of the step's `phases`.

    Any, `ADOPT_PROBABILITY` of the time; in the forced lifecycle, always
    one whose every frame was written (its state is the step's outcome,
    which the next step of the lifecycle expects).
    """
    if not forced:
        return rng.randrange(len(phases)) if phases and rng.random() < ADOPT_PROBABILITY else None
    frames = phases.count("wal.append.written")
    complete = [at for at in range(len(phases)) if phases[: at + 1].count("wal.append.written") == frames]
    return rng.choice(complete) if complete else None


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
        count_lifecycle_call(report, op, expected.answer, "crash points in")
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
