"""The `walqueue-fsck` command line: arguments, output and exit statuses (README "Exit codes").

The work is elsewhere: `check` (the verdict), `walqueue.format.salvage`
(`--salvage`, `--export-suffix`), `render` (the words). This module maps
them to stdout, stderr and an exit status, and prints the repair guide
shipped inside the package (`--help-repair`; docs/ is not in the wheels).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from walqueue.format.cmdline import EX_USAGE, EXIT_INTERRUPTED, UsageParser, interrupted, version_line
from walqueue.format.errors import CorruptStore
from walqueue.format.fsck.check import check
from walqueue.format.fsck.render import render_export, render_salvage, render_text, show
from walqueue.format.fsck.report import EXIT_CORRUPT, EXIT_HEALTHY, EXIT_NOT_A_STORE
from walqueue.format.fsck.salvage import SalvageError, export_suffix, salvage
from walqueue.format.progress import Progress
from walqueue.format.replay import ReplayUnavailable

__all__ = ["main", "repair_guide"]

_EPILOG = f"""\
exit status:
  0    healthy (notes allowed); with --salvage: the new store was written;
       with --export-suffix: the file was written
  1    a torn tail that opening would truncate
  2    corrupt (opening would raise CorruptStore) or unreadable; with
       --salvage or --export-suffix: nothing was written (OUT not empty, a
       file unreadable, nothing to salvage or export)
  {EXIT_NOT_A_STORE}    not a WALQueue store: DIRECTORY holds no store file (CURRENT, LOCK,
       wal-*.log, snapshot-*.snap), only other files (a mistyped path?)
  {EX_USAGE}   usage error: an unknown option (a typo such as --jsn), a missing
       or extra argument; never a verdict on the store
  {EXIT_INTERRUPTED}  interrupted by Ctrl-C

--json prints one JSON object: fsck (report version), directory, status
(healthy|torn|corrupt|error|not-a-store), exit_code, findings (each:
severity error|corrupt|torn|note, kind, file, offset, message, bytes),
current, snapshot, segments (file, number, size, frames, first_seq,
last_seq, torn_offset, torn_bytes), leftover_segments, last_seq, replay
(null, or complete, applied, last_seq, counts and dead_letters: groups,
the dead letters by last error type, largest first, at most 10, each
type, count and example message; more_groups and more_tasks, the rest),
causes (each: kind, message; only when damaged) and survey (null when
healthy or torn; else snapshots, segments with their intact runs and
damaged ranges, intact sequences, unreadable files, and plan: what a
salvage keeps and drops).

--salvage OUT DIRECTORY writes the longest valid history of DIRECTORY to
the new store OUT (which must not exist or be empty) and never changes
DIRECTORY; it prints what it kept and exactly what it dropped, and refuses
while a file cannot be read. --export-suffix OUT DIRECTORY writes the
intact transactions that a salvage drops (those after a damaged snapshot
or segment) to the new file OUT, one JSON line each, to replay by hand.
--help-repair prints the repair procedure per kind of damage (the text of
docs/REPAIR.md, shipped inside this package).
"""


class _HelpRepair(argparse.Action):
    """`--help-repair`: print the repair guide and exit 0, like --help (no DIRECTORY needed)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        sys.stdout.write(repair_guide())
        parser.exit(0)


def repair_guide() -> str:
    """The repair procedure (docs/REPAIR.md), as shipped inside the installed package."""
    from importlib import resources  # here: pathlib, tempfile and shutil, for --help-repair alone

    return resources.files("walqueue.format.fsck").joinpath("REPAIR.md").read_text(encoding="utf-8")


def _parser() -> argparse.ArgumentParser:
    parser = UsageParser(
        prog="walqueue-fsck",
        description="Check a WALQueue directory without changing it.",
        epilog=_EPILOG,
    )
    parser.add_argument("directory", metavar="DIRECTORY", help="the queue directory to inspect")
    parser.add_argument("--json", action="store_true", help="print one machine-readable JSON report")
    parser.add_argument(
        "--replay",
        action="store_true",
        help="also apply every transaction with walqueue-engine's state machine (needs walqueue-engine)",
    )
    writes = parser.add_mutually_exclusive_group()
    writes.add_argument(
        "--salvage",
        metavar="OUT",
        help="write the longest valid history of DIRECTORY to the new store OUT (DIRECTORY is never changed)",
    )
    writes.add_argument(
        "--export-suffix",
        metavar="OUT",
        help="write the intact transactions a salvage drops to the new file OUT as JSON lines (to replay by hand)",
    )
    parser.add_argument("--version", action="version", version=version_line("walqueue-fsck"))
    parser.add_argument(
        "--help-repair", action=_HelpRepair, nargs=0, help="print the repair guide (docs/REPAIR.md) and exit"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run `walqueue-fsck [--json] [--replay] [--salvage OUT | --export-suffix OUT] DIRECTORY`; the exit status."""
    args = _parser().parse_args(argv)
    try:
        if args.salvage is not None:
            return _write_main("salvage", args.directory, args.salvage, args.json, args.replay)
        if args.export_suffix is not None:
            return _write_main("export", args.directory, args.export_suffix, args.json, args.replay)
        return _check_main(args.directory, args.json, args.replay)
    except KeyboardInterrupt:
        return interrupted("walqueue-fsck")


def _write_main(action: str, directory: str, out: str, as_json: bool, replay: bool) -> int:
    """`--salvage` or `--export-suffix`: write from DIRECTORY to OUT, report, and pick the exit status."""
    # Looked up at each call (not kept in a table), so that a test can replace either one.
    write: Callable[..., Any] = salvage if action == "salvage" else export_suffix
    render: Callable[[Any], str] = render_salvage if action == "salvage" else render_export
    progress = Progress.to_terminal(f"{action} {show(directory)}", 0)
    try:
        result = write(directory, out, engine=True if replay else None, progress=progress)
    except (SalvageError, CorruptStore, OSError, RuntimeError) as exc:
        progress.finish()
        print(f"walqueue-fsck: {action}: {exc}", file=sys.stderr)
        return EXIT_CORRUPT
    print(json.dumps(result.to_json(), sort_keys=True) if as_json else render(result))
    return EXIT_HEALTHY if result.succeeded else EXIT_CORRUPT


def _check_main(directory: str, as_json: bool, replay: bool) -> int:
    progress = Progress.to_terminal(f"checking {show(directory)}", 0)
    try:
        report = check(directory, replay=replay, progress=progress)
    except ReplayUnavailable as exc:
        print(f"walqueue-fsck: {exc}", file=sys.stderr)
        return EXIT_CORRUPT
    for finding in report.findings:
        if finding.severity == "error":
            print(f"walqueue-fsck: {finding.message}", file=sys.stderr)
    print(json.dumps(report.to_json(), sort_keys=True) if as_json else render_text(report))
    return report.exit_code
