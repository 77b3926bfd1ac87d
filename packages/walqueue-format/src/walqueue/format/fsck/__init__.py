"""walqueue-fsck: the offline inspector of a WALQueue directory (README "Inspecting a directory", docs/REPAIR.md).

It checks what opening a directory checks (docs/FORMAT.md §1-§7), in the same
order and with the same readers as the engine's recovery, but it only
reads: it never writes, creates, truncates or locks anything, so it can look
at a directory that another process owns, or at a copy of a damaged one.
Without `--replay` it needs nothing but this package and does not apply
transactions (their meaning is the engine's business); with `--replay` it
also applies them with the state machine the engine registers
(`walqueue.format.replay`), and then its verdict is exactly opening's:

- exit 0, `healthy`: opening would succeed and change nothing (notes — orphan
  snapshots, leftover segments, temp files, unknown files — are allowed);
- exit 1, `torn`: opening would succeed after cutting a torn tail (the
  incomplete final frame of the newest live segment);
- exit 2, `corrupt`: opening would raise `CorruptStore`; also `error`, when
  the directory or one of its files cannot be read at all;
- exit 3, `not-a-store`: the directory holds no store file, only files
  WALQueue never writes (a mistyped path is not a healthy empty queue).

Every finding names its file and byte offset (``None`` when it concerns a
whole file) and has a `kind`:

- error: `not-a-directory`, `unreadable` (a permission or I/O error, never
  a verdict on the bytes), `not-a-store`;
- corrupt: `lock` (LOCK is not a regular file), `current`, `current-missing`
  (no CURRENT in a compacted store), `snapshot` (size, digest, header,
  records, footer; with replay also an invalid record), `segment-missing`,
  `frame` (length, digest, JSON, an incomplete frame before the newest
  segment's end), `transaction` (the {seq, ops} envelope), `sequence` (a
  gap or a repeat), `invalid-transaction` (replay only);
- torn: `torn-tail` (with `bytes`, what opening would cut);
- note: `new-store`, `orphan-snapshot`, `unchecked-snapshot`,
  `leftover-segment`, `temp-file`, `unknown-file`, `not-checked`.

When it finds damage (status `corrupt` or `error`), fsck also surveys the
directory past it (`walqueue.format.salvage.survey`), says what survives and
what a salvage would drop, and names the likely cause (`causes`:
`current-missing`, `current-damaged`, `snapshot-damaged`, `segment-lost`,
`damaged-frame`, `sequence-gap`, `unreadable`).

The parts: `check` (the checks), `causes` (cause analysis), `render` (the
words), `report` (the data and the verdict), `cli` (the command line:
`--salvage OUT`, `--export-suffix OUT`, `--help-repair`). `check()` returns
the report as an object for programs; `main()` is the command line. A
directory that a live writer is appending to may show its in-flight frame
as a torn tail: that is what a crash at this instant would leave.
"""

from walqueue.format.cmdline import EX_USAGE, EXIT_INTERRUPTED
from walqueue.format.fsck import report as _report
from walqueue.format.fsck.check import check
from walqueue.format.fsck.cli import main, repair_guide
from walqueue.format.fsck.render import render_text
from walqueue.format.fsck.report import *  # noqa: F403  (the report's data and exit statuses: `report.__all__` lists them once)
from walqueue.format.replay import ReplayUnavailable

__all__ = [
    "EXIT_INTERRUPTED",
    "EX_USAGE",
    "ReplayUnavailable",
    "check",
    "main",
    "render_text",
    "repair_guide",
]
__all__ += _report.__all__
