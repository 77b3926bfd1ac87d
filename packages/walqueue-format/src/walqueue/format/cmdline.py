"""What WALQueue's commands share: exit statuses for misuse and Ctrl-C, and their argument parser.

The commands that open a queue (`walqueue DIRECTORY`, `walqueue-serve`,
`walqueue-worker`) also share their first three statuses: `EXIT_OK`,
`EXIT_FATAL` (an I/O error poisoned the queue) and `EXIT_CANNOT_OPEN`.
`walqueue-fsck` (1 is "torn" there) and the shell of ``walqueue --socket``
(which opens no queue: 2 and 3 are about its connection) have tables of
their own.

`walqueue-fsck`, `walqueue` (walqueue-cli) and `python -m walqueue` give a
usage error (an unknown option, a missing argument, a typo such as `--jsn`)
the exit status `EX_USAGE` (64, from BSD's sysexits.h), so that no usage
error is ever mistaken for an answer: `walqueue-fsck` uses 2 for "corrupt",
and a monitoring script must not report a typo as corruption. A command
stopped by Ctrl-C (SIGINT) exits with `EXIT_INTERRUPTED` (130, the shell's
128 + SIGINT) after a one-line message, never with a traceback.

Example::

    parser = UsageParser(prog="walqueue-fsck")
    parser.add_argument("directory")
    parser.parse_args(["--jsn", "/tmp/q"])   # prints usage and exits 64
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, NoReturn

from walqueue.format._version import __version__

__all__ = [
    "EXIT_CANNOT_OPEN",
    "EXIT_FATAL",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EX_USAGE",
    "UsageParser",
    "interrupted",
    "silence_stdout",
    "version_line",
]

#: Done: the end of the input, or a clean stop.
EXIT_OK = 0
#: An I/O error poisoned the queue (every later call would fail), or its server's.
EXIT_FATAL = 1
#: The queue's directory could not be opened: corrupt, owned by another process, or missing.
EXIT_CANNOT_OPEN = 2

#: A command line that cannot be understood (sysexits.h EX_USAGE).
EX_USAGE = 64
#: Stopped by Ctrl-C (SIGINT): 128 + 2, as a shell reports it.
EXIT_INTERRUPTED = 130


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """argparse's raw-description formatter, given the terminal's width as `shutil.get_terminal_size` finds it.

    argparse makes a formatter at every `add_argument` and asks `shutil` the
    width each time: importing `shutil` (and with it zlib, bz2 and lzma)
    was a tenth of a command's start beyond WALQueue's own modules.
    """

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None):
        super().__init__(prog, indent_increment, max_help_position, _columns() - 2 if width is None else width)


def _columns() -> int:
    """`shutil.get_terminal_size().columns`: ``$COLUMNS``, else stdout's terminal, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class UsageParser(argparse.ArgumentParser):
    """An `argparse.ArgumentParser` whose usage errors exit with `EX_USAGE` (64), not argparse's 2.

    Its description and epilog are printed as written (`RawDescriptionHelpFormatter`
    unless told otherwise): every command's epilog is a hand-laid table of exit
    statuses and examples that argparse's re-wrapping would scramble.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """Print the usage line and `message` on stderr, then exit with `EX_USAGE`."""
        self.print_usage(sys.stderr)
        self.exit(EX_USAGE, f"{self.prog}: error: {message}\n")


def version_line(prog: str) -> str:
    """What `PROG --version` prints, e.g. ``walqueue-fsck 0.1.0``."""
    return f"{prog} {__version__}"


def interrupted(prog: str) -> int:
    """Report a Ctrl-C on stderr in one line and return `EXIT_INTERRUPTED` (for `main` to return)."""
    try:
        print(f"{prog}: interrupted", file=sys.stderr)
    except (OSError, ValueError):
        pass
    return EXIT_INTERRUPTED


def silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush of a closed pipe prints no traceback.

    For a command whose reader went away (``walqueue ... | head -1``): it then
    ends quietly, as a Unix tool does.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
