"""The torture harness: WALQueue against its reference model, under every fault we can make.

    python tools/torture [--seed N] [--seconds S] [--campaign NAME ...]

(or ``python -m torture ...`` with tools/ on sys.path). Eleven campaigns, each
seeded and reproducible, each comparing the real `walqueue.Queue` (or
`walqueue-serve`) with the reference model of `tools/model/`. Each campaign
is one module of this package, named after it; its docstring says what it
does and what it requires. `runner.CAMPAIGNS` lists them in order with their
share of the time: adding a campaign is a new module plus one row there.

Shared parts: tools/harness.py (with bench: imports, the entry point, scratch
directories, seeds, the unit loop), `harness` (reports, budgets, divergences), `workload` (the
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
`harness.setup_path`, tools/harness.py), so every module of it may import them at its top.
"""

from __future__ import annotations

from harness import TOOLS_DIR, setup_path

__all__ = ["TOOLS_DIR"]

setup_path()
