"""The likely causes of damage: what most probably happened, from fsck's findings and the survey.

A finding says what is wrong with which bytes; a cause says what probably
happened to the store (a deleted CURRENT, a lost segment, a bit flip, a
file fsck may not read), which is what a repairer acts on. Each cause kind
has its procedure in docs/REPAIR.md (`walqueue-fsck --help-repair`).
"""

from __future__ import annotations

from walqueue.format.fsck.report import Cause, Finding, Report
from walqueue.format.names import DirectoryListing, wal_name
from walqueue.format.survey import Survey, ranges_text

__all__ = ["likely_causes"]


def likely_causes(report: Report, found: Survey, listing: DirectoryListing) -> list[Cause]:
    """Name what most probably happened, from the findings and the survey (docs/REPAIR.md per cause)."""
    bad = [f for f in report.findings if f.severity in ("corrupt", "error")]
    held = f"the segments hold intact seq {ranges_text(found.intact())}"
    causes = _unreadable_causes(found)
    current_missing = _current_missing(found, listing)
    causes += _current_causes(found, current_missing, held)
    causes += _snapshot_causes(found, bad)
    if not current_missing:
        causes += [
            Cause(
                "segment-lost",
                f"{finding.file} is missing, probably deleted or lost ({finding.message}); "
                f"the transactions it held are gone, {held}",
            )
            for finding in bad
            if finding.kind == "segment-missing"
        ]
    causes += _frame_causes(found)
    if not causes and any(f.kind == "sequence" for f in bad):
        causes.append(Cause("sequence-gap", f"the WAL's sequences do not follow each other; {held}"))
    return causes


def _unreadable_causes(found: Survey) -> list[Cause]:
    """Files that could not be read: a permission or I/O problem, which says nothing about their bytes."""
    reasons = {s.file: s.reason for s in found.snapshots if not s.readable}
    reasons.update({s.file: s.unreadable for s in found.segments if s.unreadable is not None})
    if not found.current_readable:
        reasons["CURRENT"] = found.current_problem
    return [
        Cause(
            "unreadable",
            f"{name} cannot be read ({reason}): a permission or I/O problem, not damaged bytes; "
            "what it holds is unknown until it can be read (ls -l, dmesg), then check again",
        )
        for name, reason in reasons.items()
    ]


def _current_missing(found: Survey, listing: DirectoryListing) -> bool:
    numbers = [s.number for s in found.segments]
    intact = found.intact()
    return not found.current_present and (
        bool(listing.snapshots) or (bool(numbers) and numbers[0] != 1) or (bool(intact) and intact[0][0] != 1)
    )


def _newest_snapshot_text(found: Survey) -> str:
    valid = [s for s in found.snapshots if s.valid]
    newest = max(valid, key=lambda s: s.seq, default=None)
    return "no snapshot file verifies" if newest is None else f"{newest.file} verifies (seq {newest.seq})"


def _current_causes(found: Survey, current_missing: bool, held: str) -> list[Cause]:
    snap = _newest_snapshot_text(found)
    if current_missing:
        numbers = [s.number for s in found.segments]
        first = "no WAL segment" if not numbers else wal_name(numbers[0])
        return [
            Cause(
                "current-missing",
                f"CURRENT is missing, but the store was compacted: {snap}, the WAL starts at {first} and {held}; "
                "CURRENT was probably deleted or lost",
            )
        ]
    if found.current_present and found.current is None and found.current_readable:
        return [
            Cause(
                "current-damaged",
                f"CURRENT is damaged ({found.current_problem}), probably truncated or overwritten; {snap}; {held}",
            )
        ]
    return []


def _snapshot_causes(found: Survey, bad: list[Finding]) -> list[Cause]:
    if found.current is None:
        return []
    named = next((s for s in found.snapshots if s.file == found.current.snapshot), None)
    problems = [f for f in bad if f.kind == "snapshot"]
    if not problems or (named is not None and not named.readable):
        return []
    reason = problems[0].message if named is None or named.valid else named.reason
    return [
        Cause(
            "snapshot-damaged",
            f"the snapshot CURRENT names, {found.current.snapshot}, is damaged or missing ({reason})",
        )
    ]


def _frame_causes(found: Survey) -> list[Cause]:
    causes: list[Cause] = []
    newest_segment = found.segments[-1].number if found.segments else None
    for segment in found.segments:
        for damage in segment.damage:
            causes.append(
                Cause(
                    "damaged-frame",
                    f"{damage.bytes} bytes of {damage.file} from byte {damage.offset} hold no readable "
                    f"transaction ({damage.reason}): a bit flip, an overwrite or a bad disk block",
                )
            )
        if segment.torn is not None and segment.number != newest_segment:
            causes.append(
                Cause(
                    "damaged-frame",
                    f"{segment.file} ends in an incomplete frame at byte {segment.torn[0]} although a later "
                    "segment follows: its end was cut or lost",
                )
            )
    return causes
