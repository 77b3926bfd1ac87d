"""A bounded run of every campaign of tools/torture/: zero divergences, and real work done.

The harness is the proof under faults (docs/RELIABILITY.md); this file
makes a short run of it part of every test run, so that a change that
breaks crash safety, recovery, fsck's agreement or input validation fails
CI and not only the long runs. Each campaign runs in-process (the package
imported from tools/) with its own time budget, about 80 s in all on two cores; the
assertions on the counts make sure the time was spent on faults, not on
setup, so a campaign that silently stopped injecting anything fails too.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from torture.harness import Abort, Report
from torture.kill import ChildLife, check_life
from torture.runner import run_campaign

from model import Model
from walqueue import PHASES

if TYPE_CHECKING:
    from conftest import RunPython

TORTURE_DIR = Path(__file__).resolve().parents[2] / "tools" / "torture"

#: Seconds per campaign. The bytes campaign always finishes every truncation of its
#: first store (a few thousand variants), so it may take longer than its budget.
BUDGETS = {
    "crash-points": 14.0,
    "kill": 20.0,  # its lives now share the time with give_back, configure and the threaded lives
    "bytes": 10.0,
    "os-faults": 10.0,
    "bad-input": 10.0,
    "environment": 8.0,
}
BUDGETS.update({"server-kill": 4.0, "client-kill": 3.0, "hostile-clients": 3.0, "pipeline-disconnect": 3.0})

#: Lower bounds on what a bounded run must have done: about a third of what a
#: loaded two-core machine manages, so they catch a campaign gone idle, not a slow CI.
#: They are also passed as the campaign's targets: the kill campaign, whose
#: counts depend on where each kill lands, runs up to twice its budget while
#: short of them (`torture.harness.Report.targets`) instead of failing on a slow run.
#: The kinds a seeded workload reaches only by luck (a fail, an error recorded, a
#: configure) come first in unit 0 (the forced lifecycle, tools/torture/lifecycle.py):
#: how slow the machine is changes how much of the rest a run does, not whether they come.
MINIMUM_COUNTS = {
    "crash-points": {
        "steps": 60,
        "crash points": 250,
        "recovery crashes": 40,
        "continued from a crash": 5,
        "crash points in error": 10,
        "crash points in fail": 2,
    },
    "kill": {
        "kills": 40,
        "operations done": 100,
        "in flight": 20,
        "in-flight applied": 3,
        "in-flight not applied": 3,
        "acknowledged error": 3,
        "acknowledged fail": 1,
    },
    "bytes": {"stores": 1, "truncations": 2500, "bit flips": 300, "refused": 500, "recovered torn": 100},
    "os-faults": {"steps": 40, "faults": 150, "faults without a hook": 30, "open faults": 20, "faulted error": 2},
    "bad-input": {
        "API calls": 80,
        "CLI lines": 150,
        "refused": 150,
        "hostile error refused": 10,
        "hostile error recorded": 2,
    },
    "environment": {
        "lives": 12,
        "chdirs": 20,
        "repoints": 10,
        "forks": 15,
        "child calls refused": 150,
        "children stopped in a write": 3,
        "closed by a handler": 30,
        "obstacles refused": 5,
        "special files refused": 15,
        "second owners refused": 8,
    },
    "server-kill": {"server kills": 3, "steps hit by a kill": 2, "operations answered": 40, "concurrent reads": 100},
    "client-kill": {"client kills": 5, "in flight at the kill": 2, "requests completed": 20},
    "hostile-clients": {"socket lines": 140, "refused": 80, "junk connections": 3},
    "pipeline-disconnect": {"requests answered": 20},
}


def _exact_promises(campaign: str, counts: dict[str, int]) -> list[str]:
    """Coverage that must be total even in a bounded run; the names of the promises broken."""
    broken = []
    if campaign == "crash-points" and counts.get("phases crashed") != len(PHASES):
        broken.append("a crash at every phase of CONTRACT §5")
    if campaign == "bytes" and counts.get("fsck agreed") != counts.get("variants"):
        broken.append("fsck --replay agreeing with opening on every damaged store")
    if campaign == "bad-input" and counts.get("consumer lines agreed") != counts.get("CLI lines"):
        broken.append("the consumer process answering every line as the protocol does in-process")
    if campaign == "environment" and counts.get("canaries intact") != counts.get("lives"):
        broken.append("a canary tree checked untouched after every life")
    if campaign == "hostile-clients" and counts.get("socket lines agreed") != counts.get("socket lines"):
        broken.append("the server answering every hostile line as the protocol does in-process")
    return broken


@pytest.mark.parametrize("campaign", list(BUDGETS))
def test_campaign_finds_no_divergence(campaign: str) -> None:
    report = run_campaign(campaign, 1, BUDGETS[campaign], MINIMUM_COUNTS[campaign])
    print(report.line())
    assert report.divergence_count == 0, "\n".join([report.line(), *report.divergences])
    assert not report.gaps, report.line()
    assert report.shortfalls() == [], report.line()
    assert not _exact_promises(campaign, report.counts), report.line()


def test_command_line_reports_one_line_per_campaign_and_a_verdict(run_python: RunPython) -> None:
    completed = run_python([str(TORTURE_DIR), "--seed", "3", "--seconds", "2", "--campaign", "os-faults"])
    lines = completed.stdout.strip().splitlines()
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert lines[-1] == "1 passed, 0 failed"
    assert lines[-2].startswith("os-faults: ") and "0 divergences" in lines[-2]


def test_a_first_life_killed_before_it_created_the_directory_leaves_the_empty_model(
    tmp_path: Path,
) -> None:
    # A kill can land before `Queue` has created the directory at all; fsck,
    # which never creates anything, then finds no store, and the state to
    # expect is the empty one (seen once: torture --seed 13, kill unit 13).
    report = Report("kill")
    model = Model()
    got = check_life(tmp_path / "never-made", 13, 13, 0, ChildLife(), model, report, "unit test")
    assert got is model
    assert report.divergence_count == 0 and report.counts == {"killed before creating the directory": 1}


def test_a_missing_directory_after_a_life_that_opened_it_is_an_abort(tmp_path: Path) -> None:
    life = ChildLife(ready=True)
    with pytest.raises(Abort, match="no directory"):
        check_life(tmp_path / "gone", 13, 13, 1, life, Model(), Report("kill"), "unit test")


def test_a_campaign_short_of_its_targets_runs_past_its_budget_but_stops() -> None:
    report = run_campaign("kill", 2, 1.0, {"in flight": 10**6})
    assert report.passed, report.line()
    assert "ran past its budget to reach its targets" in report.notes
    assert report.short_of_targets()
    reached = run_campaign("kill", 2, 1.0, {"kills": 1})
    assert reached.passed and not reached.short_of_targets() and not reached.notes, reached.line()
