"""The torture campaign ``replica`` (tools/torture/replica.py), bounded: writers with their replicators
SIGKILLed under store faults, and every restore equal to the model at a position no older than the last
confirmed upload (the newest acknowledged one in synchronous mode).
"""

from __future__ import annotations

import pytest
from torture.runner import run_campaign  # tools/ is on sys.path (tests/conftest.py)

#: Lower bounds a bounded run must reach: about a third of what a loaded two-core machine does.
MINIMUM_COUNTS = {"units": 1, "kills": 4, "restores": 6, "point restores": 2}


@pytest.mark.timeout(300)
def test_the_replica_campaign_finds_no_divergence() -> None:
    report = run_campaign("replica", 1, 12.0, MINIMUM_COUNTS)
    print(report.line())
    assert report.divergence_count == 0, "\n".join([report.line(), *report.divergences])
    assert report.shortfalls() == [], report.line()
