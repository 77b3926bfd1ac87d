"""The torture campaign ``chains`` (tools/torture/chains.py), bounded: workers and the server SIGKILLed through
chains of task functions, some between a handler's return and its ack; every follow-up exactly once, every
completed step with its result, no follow-up of a step that did not complete.
"""

from __future__ import annotations

import pytest
from torture.runner import run_campaign  # tools/ is on sys.path (tests/conftest.py)

#: Lower bounds a bounded run must reach: well under what a loaded two-core machine does in one unit.
MINIMUM_COUNTS = {"units": 1, "chains": 12, "completed steps": 20, "worker kills": 2}


@pytest.mark.timeout(300)
def test_the_chains_campaign_finds_no_divergence() -> None:
    report = run_campaign("chains", 1, 10.0, MINIMUM_COUNTS)
    print(report.line())
    assert report.divergence_count == 0, "\n".join([report.line(), *report.divergences])
    assert report.shortfalls() == [], report.line()
