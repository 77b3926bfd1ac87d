"""Shared by every campaign: reports, budgets, divergences and quiet logging.

What bench needs too (scratch directories, seeds, the unit loop) is in tools/harness.py.
"""

from __future__ import annotations

import contextlib
import logging
import random
import shutil
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from harness import scratch, seeded, units

from walqueue import KeyConflict, StaleLease

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

    def shortfalls(self) -> list[str]:
        """The targets not reached yet: ``"what: count < least"`` for each."""
        return [
            f"{what}: {self.counts.get(what, 0)} < {least}"
            for what, least in self.targets.items()
            if self.counts.get(what, 0) < least
        ]

    def short_of_targets(self) -> bool:
        return bool(self.shortfalls())

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


def remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def guarded(report: Report, label: str, *, scratch: Path | None = None, name_aborts: bool = False) -> Iterator[None]:
    """One work unit: its `Abort` or unexpected exception becomes a divergence, and `scratch` is removed after.

    An `Abort` says what went wrong itself (after `label` if `name_aborts`);
    any other exception is named with `label` (which unit) and its
    traceback. Either way the campaign goes on with its next unit.
    """
    try:
        yield
    except Abort as exc:
        report.diverge(f"{label}: {exc}" if name_aborts else str(exc))
    except Exception:
        report.diverge(f"{label}: unexpected exception\n{traceback.format_exc(limit=6)}")
    finally:
        if scratch is not None:
            remove(scratch)


def socket_units(
    name: str, seed: int, budget: float, report: Report, run: Callable[[Path, random.Random, str], None]
) -> None:
    """Run `run(directory, rng, where)` for unit 0, 1, ... until the budget is spent (at least one unit).

    The campaigns whose units start walqueue-serve on ``DIR/worker.sock``
    (workers, chains) share this loop; their root is under /tmp so that the
    socket path fits in sun_path. Each unit counts as ``units``.
    """
    time_left = Budget(budget, report)
    with scratch(f"wq-{name}-", "/tmp") as root:
        for number in units(time_left.over):
            run(root / f"u{number}", seeded(seed, number), f"--seed {seed} unit {number}")
            report.count("units")
