"""Shared by every campaign: reports, scratch directories and quiet logging."""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from walqueue import (
    KeyConflict,
    StaleLease,
)

RECOVERY_PHASES = ("recover.truncate.before", "recover.truncate.after")
#: The errors a call may raise without anything being wrong (CONTRACT §2).
DOCUMENTED_ERRORS: tuple[type[Exception], ...] = (KeyConflict, StaleLease, TypeError, ValueError)
#: How many divergence messages a campaign keeps (it counts them all).
MAX_MESSAGES = 12
#: How far past its budget, as a multiple of it, a campaign that honours
#: `Report.targets` may run to reach them (see `Report.short_of_targets`).
TARGET_OVERTIME = 1.0


# ---------------------------------------------------------------------------
# Reports


@dataclass
class Report:
    """What one campaign did (ordered counts) and what went wrong.

    `divergences` are disagreements with the model or the contract (docs/CONTRACT.md); `gaps` are
    coverage promises the run did not keep (a phase never crashed at). Either
    fails the campaign.
    """

    name: str
    counts: dict[str, int] = field(default_factory=dict)
    divergences: list[str] = field(default_factory=list)
    divergence_count: int = 0
    gaps: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: Counts the caller wants reached (a bounded test run's minimums). A
    #: campaign whose work comes in luck-dependent kinds (where a kill lands)
    #: keeps going past its budget, up to `TARGET_OVERTIME` of it, while
    #: short of them, so that a slow machine gets more time rather than a
    #: thinner run; it never stops early because of them.
    targets: dict[str, int] = field(default_factory=dict)

    def count(self, what: str, n: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + n

    def diverge(self, message: str) -> None:
        self.divergence_count += 1
        if len(self.divergences) < MAX_MESSAGES:
            self.divergences.append(message)

    @property
    def passed(self) -> bool:
        return self.divergence_count == 0 and not self.gaps

    def short_of_targets(self) -> bool:
        return any(self.counts.get(what, 0) < least for what, least in self.targets.items())

    def line(self) -> str:
        counts = ", ".join(f"{value} {what}" for what, value in self.counts.items())
        notes = "".join(f"; {note}" for note in self.notes)
        gaps = "".join(f"; GAP {gap}" for gap in self.gaps)
        verdict = "ok" if self.passed else "FAILED"
        return (
            f"{self.name}: {counts}{notes}; {self.divergence_count} divergences{gaps} ({self.seconds:.1f} s) {verdict}"
        )


class Budget:
    """A campaign's time: spent once its budget is, unless the report is still short of its targets.

    Then it runs on for up to `TARGET_OVERTIME` times the budget, and says
    so in the report's notes: on a loaded machine a campaign reaches the
    counts a caller requires a little later instead of failing for it.
    """

    def __init__(self, seconds: float, report: Report) -> None:
        self.deadline = time.monotonic() + seconds
        self._overtime = self.deadline + seconds * TARGET_OVERTIME
        self._report = report

    def over(self) -> bool:
        now = time.monotonic()
        if now < self.deadline:
            return False
        if now < self._overtime and self._report.short_of_targets():
            if "ran past its budget to reach its targets" not in self._report.notes:
                self._report.notes.append("ran past its budget to reach its targets")
            return False
        return True


class Abort(Exception):
    """Stop the current work unit after a divergence: its model no longer describes the store."""


@contextlib.contextmanager
def quiet_walqueue_logging() -> Iterator[None]:
    """Silence the engine's torn-tail warnings (thousands of expected ones), restoring the logger after."""
    logger = logging.getLogger("walqueue")
    saved = (logger.level, logger.propagate, list(logger.handlers))
    handler = logging.NullHandler()
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


def scratch_root() -> str | None:
    """Where in-process campaigns keep their copies: tmpfs when there is one.

    Those campaigns never cut power, so durability plays no part in them and
    a RAM-backed directory only makes each of their many thousand copies and
    opens cheaper. The kill campaign keeps the default (a real disk), where
    its fsyncs are real.
    """
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


class Dirs:
    """Fresh, never-reused directory names under one temporary root."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._counter = itertools.count()

    def new(self, copy_of: Path | None = None) -> Path:
        path = self.root / f"d{next(self._counter)}"
        if copy_of is None:
            path.mkdir()
        else:
            shutil.copytree(copy_of, path)
        return path


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def socket_units(
    name: str, seed: int, budget: float, report: Report, run: Callable[[Path, random.Random, str], None]
) -> None:
    """Run `run(directory, rng, where)` for unit 0, 1, ... until the budget is spent (at least one unit).

    The campaigns whose units start walqueue-serve on ``DIR/worker.sock``
    (workers, chains) share this loop; their root is under /tmp so that the
    socket path fits in sun_path. Each unit counts as ``units``.
    """
    time_left = Budget(budget, report)
    root = Path(tempfile.mkdtemp(prefix=f"wq-{name}-", dir="/tmp"))
    try:
        number = 0
        while number == 0 or not time_left.over():
            run(root / f"u{number}", random.Random(f"{seed}:{number}"), f"--seed {seed} unit {number}")
            report.count("units")
            number += 1
    finally:
        shutil.rmtree(root, ignore_errors=True)
