"""`python -m walqueue`: the version, and where WALQueue's commands are.

The library has no command of its own; this prints the version of the
installed (or source-tree) WALQueue and which of its commands are available:
`walqueue` (walqueue-cli, the JSON-lines consumer: `python -m walqueue.cli
DIRECTORY`), `walqueue-serve` (walqueue-cli, the server for several
processes: `python -m walqueue.serve DIRECTORY --socket PATH`),
`walqueue-worker` (walqueue-cli, runs a function for each task:
`python -m walqueue.worker DIRECTORY MODULE:CALLABLE`) and
`walqueue-fsck` (walqueue-format, the offline inspector: `python -m
walqueue.format.fsck DIRECTORY`). It takes no directory on
purpose: an accidental `python -m walqueue DIR` must not open (and create) a
queue. Exit status 0; a usage error exits 64 (EX_USAGE).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

from walqueue import __version__
from walqueue.format.cmdline import EX_USAGE, UsageParser, version_line

__all__ = ["main"]

_EPILOG = f"""\
exit status:
  0   the information was printed
  {EX_USAGE}  usage error (an unknown option or argument)
"""


def _available(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def main(argv: Sequence[str] | None = None) -> int:
    """Print the version and the commands; return the exit status."""
    parser = UsageParser(
        prog="python -m walqueue",
        description="Print WALQueue's version and where its commands are.",
        epilog=_EPILOG,
    )
    parser.add_argument("--version", action="version", version=version_line("walqueue"))
    parser.parse_args(argv)
    cli = "available" if _available("walqueue.cli") else "not installed (walqueue-cli)"
    print(f"walqueue {__version__}: a durable single-writer task queue (from walqueue import Queue)")
    print(f"  walqueue DIRECTORY       JSON-lines consumer, also python -m walqueue.cli DIRECTORY: {cli}")
    print(
        f"  walqueue-serve DIRECTORY --socket PATH  server for several processes, also python -m walqueue.serve: {cli}"
    )
    print(
        "  walqueue-worker DIRECTORY MODULE:CALLABLE  runs your function for each task, "
        f"also python -m walqueue.worker: {cli}"
    )
    print("  walqueue-fsck DIRECTORY  offline inspector, also python -m walqueue.format.fsck DIRECTORY: available")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
