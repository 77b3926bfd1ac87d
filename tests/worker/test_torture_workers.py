"""The torture campaign ``workers`` (tools/torture/workers.py), bounded: worker processes and the server
SIGKILLed at random under load, then every task, handler run and periodic firing accounted for.
"""

from __future__ import annotations

import pytest
from torture.runner import run_campaign  # tools/ is on sys.path (tests/conftest.py)

#: Lower bounds a bounded run must reach: about a third of what a loaded two-core machine does.
MINIMUM_COUNTS = {"units": 1, "tasks": 40, "handler runs": 40, "periodic firings": 3, "worker kills": 2}
MINIMUM_COUNTS |= {"async handlers refused": 1, "unrecordable failures recorded": 1}


@pytest.mark.timeout(300)
def test_the_workers_campaign_finds_no_divergence() -> None:
    report = run_campaign("workers", 1, 12.0, MINIMUM_COUNTS)
    print(report.line())
    assert report.divergence_count == 0, "\n".join([report.line(), *report.divergences])
    assert report.shortfalls() == [], report.line()
