"""Judging a store after a fault: poison, recovery through crashes, fsck's agreement, the model's view."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from model import Model, view
from walqueue import (
    InjectedCrash,
    Queue,
    QueueClosed,
)

from .harness import RECOVERY_PHASES, Abort, Report
from .workload import PhaseLog


def check_poisoned(queue: Queue, where: str, report: Report) -> None:
    """After a crash or an OS error: every call raises QueueClosed, close() raises nothing (CONTRACT §2)."""
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
    """Open `path`, first dying at each recovery phase call in turn (CONTRACT §4 rule 5, §5).

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
        count_zero_tail(path, queue, report)
        return queue
    raise Abort(f"{where}: opening reported more phases than recovery has")


def open_checked_by_fsck(path: Path, report: Report, where: str, **options: Any) -> Queue:
    """Ask `walqueue-fsck --replay` about `path`, then open it; the two must agree (CONTRACT §7).

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
    count_zero_tail(path, queue, report)
    return queue


def count_zero_tail(path: Path, queue: Queue, report: Report) -> None:
    """Count an opening that found zeros after the newest segment's frames: the preallocated room a crash left."""
    stats = queue.stats()
    live = sorted(path.glob("wal-*.log"))[-stats["segments"] :]
    if sum(segment.stat().st_size for segment in live) > stats["wal_bytes"]:
        report.count("opened over a zero tail")


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
    report.diverge(f"{where}: state differs from the model: {view_difference(got, want)}")
    return False


def view_difference(got: dict[str, Any], want: dict[str, Any]) -> str:
    if got["last_seq"] != want["last_seq"]:
        return f"last_seq {got['last_seq']} != model {want['last_seq']}"
    extra = sorted(set(got["tasks"]) - set(want["tasks"]))[:2]
    missing = sorted(set(want["tasks"]) - set(got["tasks"]))[:2]
    return f"counts {got['counts']} vs model {want['counts']}; only in queue {extra}; only in model {missing}"


def reopened_view(path: Path, report: Report, where: str, **options: Any) -> dict[str, Any]:
    """The model's view of the store at `path`, opened after fsck agreed (`open_checked_by_fsck`), then closed."""
    reopened = open_checked_by_fsck(path, report, where, **options)
    try:
        return view(reopened)
    finally:
        reopened.close()


def check_reopened(path: Path, expected: Model, report: Report, where: str) -> None:
    """Reopen `path` (sync off, no compaction) after fsck agreed: it must equal `expected`, or the unit aborts."""
    reopened = open_checked_by_fsck(path, report, where, sync=False, compact_bytes=None)
    try:
        if not compare_views(reopened, expected, report, where):
            raise Abort(f"{where}: aborted")
    finally:
        reopened.close()


def check_answered(queue: Queue, answer: str, expected: Any, report: Report, where: str) -> None:
    """A step's answer must be the model's, and the queue must then equal the model after it; else the unit aborts."""
    if answer != expected.answer:
        raise Abort(f"{where}: answered {answer[:200]!r}, model {expected.answer[:200]!r}")
    if not compare_views(queue, expected.after, report, where):
        raise Abort(f"{where}: aborted")
