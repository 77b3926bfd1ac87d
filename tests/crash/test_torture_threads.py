"""Bounded runs of the torture modes added for group commit and background compaction.

`tests/crash/test_torture.py` runs every campaign; this file holds the new
modes to their own promises: the background campaign died before every kind
of os call its snapshot thread makes and failed some of them, and the kill
campaign's threaded lives (4 and 16 threads sharing one queue) were killed,
replayed in log order and found complete. About 20 s.
"""

from __future__ import annotations

from torture.runner import run_campaign

#: What the background campaign must reach; on a loaded machine it runs past its budget for them.
BACKGROUND_TARGETS = {"crash copies": 150, "faults": 8, "faults writing the snapshot": 2, "orphans cleared": 20}


def test_background_campaign() -> None:
    """Every reopening the campaign makes was checked by fsck, and agreed.

    Each crash copy, each fault (the reopening after it, poisoned or not)
    and each unit's final reopening asks fsck once: so "fsck agreed" is
    exactly their sum. (An earlier bound, copies + 2 x faults, assumed at
    most one fault per unit; a slow run has fewer, longer units, and the
    injector is armed again after each fault, so a unit may see several.)
    """
    report = run_campaign("background", 1, 9.0, targets=BACKGROUND_TARGETS)
    assert report.passed, report.line() + "\n" + "\n".join(report.divergences)
    counts = report.counts
    for what, least in BACKGROUND_TARGETS.items():
        assert counts.get(what, 0) >= least, report.line()
    checked = counts["crash copies"] + counts["faults"] + counts["final reopens"]
    assert counts["final reopens"] >= 2 and counts["fsck agreed"] == checked, report.line()


#: What the threaded lives must reach; on a loaded machine the campaign runs past its budget for them.
THREADED_TARGETS = {
    "lives with 4 threads": 5,
    "lives with 16 threads": 5,
    "threaded operations done": 300,
    "threaded in flight applied": 10,
    "killed with a snapshot unpublished": 1,
}


def test_kill_campaign_threaded_lives() -> None:
    report = run_campaign("kill", 2, 9.0, targets=THREADED_TARGETS)
    assert report.passed, report.line() + "\n" + "\n".join(report.divergences)
    for what, least in THREADED_TARGETS.items():
        assert report.counts.get(what, 0) >= least, report.line()
