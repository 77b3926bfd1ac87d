"""fsck's report: what it found (`Finding`), the likely causes (`Cause`), the summaries and the verdict.

Only data and the verdict rule live here; `check` fills a `Report`,
`causes` adds its causes, `render` turns it into text and `cli` into an
exit status. The `--json` layout (`Report.to_json`) is versioned by
`REPORT_VERSION`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from walqueue.format.current import Current
from walqueue.format.errors import CorruptStore
from walqueue.format.jsonfields import FieldsJson, fields_json
from walqueue.format.survey import Survey

__all__ = [
    "EXIT_CORRUPT",
    "EXIT_HEALTHY",
    "EXIT_NOT_A_STORE",
    "EXIT_TORN",
    "REPORT_VERSION",
    "SEVERITIES",
    "DEAD_LETTER_GROUPS",
    "Cause",
    "DeadLetterGroup",
    "DeadLetters",
    "Finding",
    "LeftoverSummary",
    "ReplaySummary",
    "Report",
    "SegmentSummary",
    "SnapshotSummary",
    "file_name",
    "group_dead_letters",
]

EXIT_HEALTHY = 0
EXIT_TORN = 1
EXIT_CORRUPT = 2
#: A directory holding no store file and files WALQueue never writes: a mistyped path, not a queue.
EXIT_NOT_A_STORE = 3

#: The version of the `--json` report's layout (the `fsck` field).
REPORT_VERSION = 1

#: Severities, worst first. `error`: fsck could not read something (or the
#: directory is not a store); `corrupt`: opening would raise CorruptStore;
#: `torn`: opening would cut a torn tail; `note`: worth knowing, harmless to opening.
SEVERITIES = ("error", "corrupt", "torn", "note")
_STATUS_EXIT = {
    "not-a-store": EXIT_NOT_A_STORE,
    "error": EXIT_CORRUPT,
    "corrupt": EXIT_CORRUPT,
    "torn": EXIT_TORN,
    "healthy": EXIT_HEALTHY,
}


def file_name(path: str | None) -> str | None:
    """Findings name files relative to the directory: every file of a store sits directly in it."""
    return None if path is None else os.path.basename(path)


@dataclass(frozen=True, slots=True)
class Finding(FieldsJson):
    """One thing fsck found: how bad, what kind, where (file name and byte offset), and why."""

    severity: str
    kind: str
    file: str | None
    offset: int | None
    message: str
    #: For a torn tail: the number of bytes opening would cut.
    bytes: int | None = None


@dataclass(frozen=True, slots=True)
class Cause(FieldsJson):
    """The likely cause of the damage fsck found, in words a repairer can act on (docs/REPAIR.md)."""

    kind: str
    message: str


@dataclass(frozen=True, slots=True)
class SnapshotSummary(FieldsJson):
    """The snapshot CURRENT names, as read and verified."""

    file: str
    seq: int
    tasks: int
    size: int
    sha256: str


@dataclass(slots=True)
class SegmentSummary(FieldsJson):
    """One live WAL segment: its size, how many frames were verified, their sequence range, its end."""

    file: str
    number: int
    size: int | None = None
    frames: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    torn_offset: int | None = None
    torn_bytes: int = 0

    def saw(self, seq: int) -> None:
        """Count one verified frame holding transaction `seq`."""
        self.frames += 1
        if self.first_seq is None:
            self.first_seq = seq
        self.last_seq = seq


@dataclass(frozen=True, slots=True)
class LeftoverSummary(FieldsJson):
    """A segment below CURRENT.wal: never read, as opening never reads it."""

    file: str
    number: int
    size: int | None


#: A report lists at most this many groups of dead letters (the largest first) and counts the rest.
DEAD_LETTER_GROUPS = 10


@dataclass(frozen=True, slots=True)
class DeadLetterGroup(FieldsJson):
    """The dead letters whose last error has one type (None: dead without a recorded error)."""

    type: str | None
    count: int
    #: The message of the group's first dead letter by task id (None for the group without an error).
    example: str | None
    #: That dead letter's traceback, when its last error kept one (a format extension); None otherwise.
    traceback: str | None = None


@dataclass(frozen=True, slots=True)
class DeadLetters(FieldsJson):
    """Why the dead letters died, grouped by their last error's type: bounded, whatever the store holds."""

    groups: tuple[DeadLetterGroup, ...]
    #: The groups past `DEAD_LETTER_GROUPS`, and how many dead letters they hold.
    more_groups: int = 0
    more_tasks: int = 0


def group_dead_letters(errors: Iterable[tuple[str, ...] | None], limit: int = DEAD_LETTER_GROUPS) -> DeadLetters:
    """Group dead letters' last errors (in task id order) by type: the `limit` largest groups, then the rest counted.

    Largest first, ties by type name, the group without an error last among
    its equals; each keeps its first message (and traceback, the error's
    third item when there is one) as its example. Why by type:
    a message carries ids and times, so grouping by it would list every
    task; the type is what an operator acts on (a bug, a timeout, a cancel).
    """
    counts: dict[str | None, int] = {}
    examples: dict[str | None, str | None] = {}
    tracebacks: dict[str | None, str | None] = {}
    for error in errors:
        kind, message = (None, None) if error is None else error[:2]
        counts[kind] = counts.get(kind, 0) + 1
        examples.setdefault(kind, message)
        tracebacks.setdefault(kind, None if error is None or len(error) < 3 else error[2])
    ordered = sorted(counts, key=lambda kind: (-counts[kind], kind is None, kind or ""))
    shown, rest = ordered[:limit], ordered[limit:]
    return DeadLetters(
        tuple(DeadLetterGroup(kind, counts[kind], examples[kind], tracebacks[kind]) for kind in shown),
        len(rest),
        sum(counts[kind] for kind in rest),
    )


@dataclass(frozen=True, slots=True)
class ReplaySummary(FieldsJson):
    """What applying the log with the engine's state machine gave.

    `complete` is false when damage stopped the replay: `applied`, `last_seq`
    and `counts` then describe the state just before the damage (`counts` is
    ``None`` when not even the snapshot could be loaded).
    """

    complete: bool
    applied: int
    last_seq: int | None
    counts: dict[str, int] | None
    #: The dead letters grouped by their last error (None: no state, or a state machine that cannot tell).
    dead_letters: DeadLetters | None = None


@dataclass(slots=True)
class Report:
    """Everything fsck learned about one directory; `status` and `exit_code` are its verdict."""

    directory: str
    findings: list[Finding] = field(default_factory=list)
    current: Current | None = None
    snapshot: SnapshotSummary | None = None
    segments: list[SegmentSummary] = field(default_factory=list)
    leftover_segments: list[LeftoverSummary] = field(default_factory=list)
    last_seq: int | None = None
    replay: ReplaySummary | None = None
    #: Only when damage was found: the likely causes, and what survives past the damage.
    causes: list[Cause] = field(default_factory=list)
    survey: Survey | None = None

    def add(self, severity: str, kind: str, file: str | None, offset: int | None, message: str) -> None:
        """Record a finding."""
        assert severity in SEVERITIES, severity
        self.findings.append(Finding(severity, kind, file, offset, message))

    def add_corrupt(self, kind: str, exc: CorruptStore) -> None:
        """Record `exc` as a corrupt finding of `kind`."""
        self.add("corrupt", kind, file_name(exc.path), exc.offset, exc.reason)

    def add_unreadable(self, path: str, exc: OSError) -> None:
        """Record that `path` could not be read: a permission or I/O error, never a verdict on its bytes."""
        self.add("error", "unreadable", file_name(path), None, f"cannot read: {exc.strerror or exc}")

    @property
    def sound(self) -> bool:
        """True while nothing found so far would make opening fail."""
        return not any(f.severity in ("error", "corrupt") for f in self.findings)

    @property
    def status(self) -> str:
        """`not-a-store`, `error`, `corrupt`, `torn` or `healthy`: the worst found (notes count as healthy)."""
        if any(f.kind == "not-a-store" for f in self.findings):
            return "not-a-store"
        severities = {f.severity for f in self.findings}
        for severity in ("error", "corrupt", "torn"):
            if severity in severities:
                return severity
        return "healthy"

    @property
    def exit_code(self) -> int:
        """The exit status of the verdict: 0 healthy, 1 torn, 2 corrupt or error, 3 not a store."""
        return _STATUS_EXIT[self.status]

    def to_json(self) -> dict[str, Any]:
        """The `--json` report (layout version `REPORT_VERSION`, documented in `main`'s help)."""
        return {
            "fsck": REPORT_VERSION,
            "directory": self.directory,
            "status": self.status,
            "exit_code": self.exit_code,
            **fields_json(self),
        }
