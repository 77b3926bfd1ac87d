"""The words of fsck: the human-readable check, salvage and export reports.

Everything a person reads comes from here, so that a file name is escaped
the same way everywhere (`show`) and sequences are always written as
ranges the same way (`walqueue.format.survey.ranges_text`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

from walqueue.format.fsck.report import DeadLetters, Report
from walqueue.format.fsck.salvage import ExportResult, SalvageResult
from walqueue.format.salvage_plan import END_OF_LOG, NO_FRAME
from walqueue.format.survey import SalvagePlan, ranges_text

__all__ = ["describe_plan", "plural", "render_export", "render_salvage", "render_text", "show"]

#: Stops that the lost/intact ranges already explain (a state machine's refusal is worth spelling out).
_PLAIN_STOPS = (NO_FRAME, END_OF_LOG)
#: Characters of an example message shown in the text report (the --json report has it whole).
EXAMPLE_CHARS = 100


def show(text: str) -> str:
    """A file name printable on any terminal (undecodable bytes escaped, never an encoding error)."""
    return os.fsencode(text).decode("utf-8", "backslashreplace").encode("ascii", "backslashreplace").decode("ascii")


def plural(count: int, word: str) -> str:
    """`1 task`, `2 tasks`."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def render_text(report: Report) -> str:
    """The human-readable report: a summary of the store, then every finding, then the verdict."""
    lines = [f"walqueue-fsck {show(report.directory)}"]
    lines.extend(_summary_lines(report))
    for f in report.findings:
        where = "" if f.file is None else show(f.file)
        if f.offset is not None:
            where += f" at byte {f.offset}"
        lines.append(f"{f.severity.upper():8}{where + ': ' if where else ''}{f.message} [{f.kind}]")
    for cause in report.causes:
        lines.append(f"CAUSE   {show(cause.message)} [{cause.kind}]")
    lines.extend(_survey_lines(report))
    lines.append(f"result: {report.status} (exit {report.exit_code})")
    return "\n".join(lines)


def _survey_lines(report: Report) -> Iterator[str]:
    found = report.survey
    if found is None:
        return
    verified = [f"{s.file} (seq {s.seq})" for s in found.snapshots if s.valid]
    yield f"  survives  intact transactions: seq {ranges_text(found.intact())}"
    yield f"  survives  snapshots that verify: {', '.join(verified) or 'none'}"
    unreadable = found.unreadable()
    if unreadable:
        yield f"  unknown   cannot read {', '.join(map(show, unreadable))}: what they hold is not counted"
    plan = found.plan
    if plan is not None:
        for line in describe_plan(plan):
            yield f"  salvage   {line}"
        if plan.intact_dropped and plan.base is None and plan.last_seq == 0:
            yield "  salvage   keeps nothing: export the intact transactions after the gap with --export-suffix OUT"


def _summary_lines(report: Report) -> Iterator[str]:
    current = report.current
    if current is not None:
        yield f"  CURRENT   {current.snapshot} (seq {current.seq}), first live segment {current.wal}"
    snapshot = report.snapshot
    if snapshot is not None:
        tasks = plural(snapshot.tasks, "task")
        yield f"  snapshot  {snapshot.file}: seq {snapshot.seq}, {tasks}, {snapshot.size} bytes"
    for s in report.segments:
        seqs = "" if s.first_seq is None else f", seq {s.first_seq}..{s.last_seq}"
        if s.size is None:  # an OSError stopped the read: what it holds is unknown, not empty
            verified = f"{plural(s.frames, 'frame')} verified before that{seqs}" if s.frames else "no frame verified"
            yield f"  segment   {s.file}: could not be read to its end, so its size is unknown; {verified}"
        else:
            yield f"  segment   {s.file}: {s.size} bytes, {plural(s.frames, 'frame')}{seqs}"
    for left in report.leftover_segments:
        size = "size unknown (cannot stat it)" if left.size is None else f"{left.size} bytes"
        yield f"  leftover  {left.file}: {size} (not read)"
    if report.last_seq is not None:
        yield f"  last seq  {report.last_seq}"
    replay = report.replay
    if replay is not None:
        counts = "n/a" if replay.counts is None else ", ".join(f"{k} {v}" for k, v in replay.counts.items())
        state = "complete" if replay.complete else "stopped by damage"
        yield f"  replay    {state}: {plural(replay.applied, 'transaction')} applied, last seq {replay.last_seq}"
        yield f"  counts    {counts}"
        if replay.dead_letters is not None:
            yield from _dead_letter_lines(replay.dead_letters)


def quoted(text: str, limit: int = EXAMPLE_CHARS) -> str:
    """`text` as a one-line ASCII JSON string, cut to `limit` characters (an error message may hold anything)."""
    cut = text if len(text) <= limit else text[:limit] + "..."
    return json.dumps(cut)


def _dead_letter_lines(dead: DeadLetters) -> Iterator[str]:
    """One line per group of dead letters (by last error type, the largest first), then how many more."""
    for group in dead.groups:
        if group.type is None:
            yield f"  dead      {group.count} without a recorded error"
            continue
        example = "" if group.example is None else f", e.g. {quoted(group.example)}"
        yield f"  dead      {group.count} {quoted(group.type)[1:-1]}{example}"
        if group.traceback:  # its last line (the exception) here; --json has it whole
            yield f"            traceback ending {quoted(group.traceback.rstrip().rsplit(chr(10), 1)[-1])}"
    if dead.more_groups:
        more = f"{plural(dead.more_groups, 'more error type')} ({plural(dead.more_tasks, 'dead letter')})"
        yield f"  dead      and {more}"


def describe_plan(plan: SalvagePlan) -> list[str]:
    """The plan in a few lines: what a salvage keeps, what it drops, and what it cannot know."""
    if plan.base is None:
        base = "an empty state (seq 0)"
    else:
        base = f"{plan.base} (seq {plan.base_seq}, {plan.base_tasks} tasks)"
    lines = [
        f"keeps the history through seq {plan.last_seq}: {base} and {plan.kept_transactions} transactions after it"
    ]
    at_least = "" if plan.complete else "at least "
    if plan.dropped_transactions:
        parts = []
        if plan.lost:
            parts.append(f"seq {ranges_text(plan.lost)} in no intact frame")
        if plan.intact_dropped:
            parts.append(f"seq {ranges_text(plan.intact_dropped)} intact but after the gap")
        why = "" if plan.stop in _PLAIN_STOPS else f" ({plan.stop})"
        lines.append(f"drops {at_least}{plan.dropped_transactions} transactions: {'; '.join(parts)}{why}")
    elif plan.complete:
        lines.append("drops no transaction")
    if not plan.complete:
        lines.append(
            f"cannot read {', '.join(map(show, plan.unreadable))}: the transactions there are unknown and not "
            "counted; a salvage refuses until every file can be read"
        )
    return lines


def render_salvage(result: SalvageResult) -> str:
    """The human-readable salvage report."""
    lines = [f"walqueue-fsck --salvage {show(result.out)} {show(result.directory)}"]
    lines += [f"  {line}" for line in describe_plan(result.plan)]
    engine = "replayed with the engine's state machine" if result.plan.engine_checked else "not replayed (no engine)"
    lines.append(f"  wrote     {', '.join(result.files)} in {show(result.out)} ({engine})")
    unused = [s.file for s in result.survey.snapshots if s.file != result.plan.base]
    if unused:
        lines.append(f"  unused    {', '.join(unused)}")
    for segment in result.survey.segments:
        for damage in segment.damage:
            lines.append(f"  damaged   {damage.file} at byte {damage.offset}: {damage.bytes} bytes ({damage.reason})")
    lines.append(f"  check     {show(result.out)}: {result.check_status}")
    lines.append(f"result: salvaged, {result.plan.dropped_transactions} transactions dropped")
    return "\n".join(lines)


def render_export(result: ExportResult) -> str:
    """The human-readable export report: what was written, and what it is for."""
    return "\n".join(
        [
            f"walqueue-fsck --export-suffix {show(result.out)} {show(result.directory)}",
            *(f"  {line}" for line in describe_plan(result.plan)),
            f"  exported  seq {ranges_text(result.exported)}: {plural(result.transactions, 'transaction')}, "
            f"one JSON line each, to {show(result.out)}",
            "  next      replay them by hand into the repaired store (walqueue-fsck --help-repair)",
            f"result: exported {plural(result.transactions, 'transaction')}",
        ]
    )
