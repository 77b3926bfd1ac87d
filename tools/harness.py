"""The harness bench and torture share: imports, the entry point, scratch directories, seeds and budgets.

Both tools are packages of tools/ (``python tools/bench``, ``python tools/torture``,
or ``python -m bench`` / ``-m torture`` with tools/ on sys.path). What they have
in common lives here, once:

- `setup_path`: `walqueue` importable from an install if there is one, else
  from this checkout's src directories; the reference model (tools/model/)
  importable as `model`;
- `run_main`: what a package's ``__main__`` does once tools/ heads sys.path;
- `command_line`: the argument parser both start from (``--help``, ``--version``);
- `scratch`, `tmpfs`, `Dirs`: temporary roots removed afterwards, fresh
  directory names under them;
- `seeded`, `units`: a seeded random stream per work unit, and the loop over
  units until a budget is spent.

Child processes (the environment that imports the same code, the server's
command line, sockets' directories) are `processes`' job; what only one tool
needs stays in its own ``harness`` (bench's timing and figures, torture's
reports and divergences).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import itertools
import os
import random
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = [
    "ROOT",
    "SRC_DIRS",
    "TOOLS_DIR",
    "Dirs",
    "command_line",
    "run_main",
    "scratch",
    "seeded",
    "setup_path",
    "tmpfs",
    "units",
]

TOOLS_DIR = Path(__file__).resolve().parent
ROOT = TOOLS_DIR.parent
SRC_DIRS = [ROOT / "packages" / name / "src" for name in ("walqueue-format", "walqueue-engine", "walqueue-cli")]


def setup_path() -> None:
    """Make `walqueue` and the model importable from a checkout as well as from an install.

    The model (tools/model/) is never installed. The src directories are
    added only when `walqueue` is not importable already, so an installed
    distribution is what runs when there is one.
    """
    if str(TOOLS_DIR) not in sys.path:
        sys.path.insert(0, str(TOOLS_DIR))
    if importlib.util.find_spec("walqueue") is None:
        for directory in reversed(SRC_DIRS):
            if directory.is_dir():
                sys.path.insert(0, str(directory))


def run_main(module: str) -> int:
    """Import `module` (``bench.cli``, ``torture.runner``) and return its ``main()``'s exit status.

    A package's ``__main__`` calls this once tools/ heads sys.path: run as a
    directory, that directory is first on sys.path, where tools/ must be so
    that the package imports by its name (its modules use relative imports).
    """
    main: Callable[[], int] = importlib.import_module(module).main
    return main()


def command_line(prog: str, description: str) -> argparse.ArgumentParser:
    """The parser every tool starts from: ``--help`` and ``--version`` (the walqueue it imports)."""
    import walqueue

    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--version", action="version", version=f"{prog} (walqueue {walqueue.__version__})")
    return parser


@contextlib.contextmanager
def scratch(prefix: str, where: str | os.PathLike[str] | None = None, *, keep: bool = False) -> Iterator[Path]:
    """A new directory under `where` (default: the system's temp dir), removed afterwards unless `keep`."""
    root = Path(tempfile.mkdtemp(prefix=prefix, dir=where))
    try:
        yield root
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


def tmpfs() -> str | None:
    """/dev/shm when it is there and writable: for scratch whose durability plays no part (else None).

    Work that never cuts power (in-process campaigns, copies made to be
    damaged) only gets cheaper on a RAM-backed directory; anything that
    measures or relies on fsync keeps a real disk.
    """
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


class Dirs:
    """Fresh, never-reused directory names under one root: ``{prefix}{n}``, or ``{n:02d}-{label}`` if labelled."""

    def __init__(self, root: Path, prefix: str = "d") -> None:
        self.root = root
        self._prefix = prefix
        self._counter = itertools.count()

    def new(self, copy_of: Path | None = None, *, label: str | None = None) -> Path:
        """A new directory: empty, or a copy of `copy_of`."""
        number = next(self._counter)
        path = self.root / (f"{self._prefix}{number}" if label is None else f"{number + 1:02d}-{label}")
        if copy_of is None:
            path.mkdir(parents=True)
        else:
            shutil.copytree(copy_of, path)
        return path


def seeded(*parts: object) -> random.Random:
    """The random stream of one piece of work, named by its parts (``seeded(name, seed, unit)``): reproducible."""
    return random.Random(":".join(str(part) for part in parts))


def units(over: Callable[[], bool], least: int = 1) -> Iterator[int]:
    """Unit numbers 0, 1, ... until `over()` says the budget is spent, checked before each unit after `least`."""
    for unit in itertools.count():
        if unit >= least and over():
            return
        yield unit
