"""The torture harness: WALQueue against its reference model, under every fault we can make.

    python tools/torture [--seed N] [--seconds S] [--campaign NAME ...]

(or ``python -m torture ...`` with tools/ on sys.path). Eleven campaigns, each
seeded and reproducible, each comparing the real `walqueue.Queue` (or
`walqueue-serve`) with the reference model of `tools/model.py`. Each campaign
is one module of this package, named after it; its docstring says what it
does and what it requires. `runner.CAMPAIGNS` lists them in order with their
share of the time: adding a campaign is a new module plus one row there.

Shared parts: `harness` (reports, scratch directories), `workload` (the
seeded operations and the model's expectations), `checks` (judging a
reopened store), `faults` (the OS-fault injector), `hostile` (hostile
values and calls), `served` (a real `walqueue-serve`), `kill_child` (the
kill campaign's victims).

One line per campaign gives its counts and divergences; the last line is
``N passed, M failed``. The exit status is 0 only when every campaign passed.
A divergence names the seed, campaign, work unit, step and fault, so the same
command reproduces it (the kill campaign's moments of death are seeded too,
but when a signal lands depends on the machine's speed). `--seconds` is shared
out among the campaigns; each does a fixed minimum of work however short its
share (every truncation of its first store, for the bytes campaign).
Faults are injected only from outside the engine: the hook of CONTRACT §5, the
``os`` module's functions, the bytes of files, and SIGKILL.

Importing this package makes `walqueue` and the model importable (see
`_setup_path`), so every module of it may import them at its top.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOLS_DIR = ROOT / "tools"
SRC_DIRS = [ROOT / "packages" / name / "src" for name in ("walqueue-format", "walqueue-engine", "walqueue-cli")]


def _setup_path() -> None:
    """Make `walqueue` and the model importable from a checkout as well as from an install.

    The model (tools/model.py) is never installed. The src directories are
    added only when `walqueue` is not importable already, so an installed
    distribution is what gets tested when there is one.
    """
    if str(TOOLS_DIR) not in sys.path:
        sys.path.insert(0, str(TOOLS_DIR))
    if importlib.util.find_spec("walqueue") is None:
        for directory in reversed(SRC_DIRS):
            if directory.is_dir():
                sys.path.insert(0, str(directory))


_setup_path()
