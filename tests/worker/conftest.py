"""Fixtures of the worker's tests: a fake clock and a real (unsynced) queue to run against.

The engine never reads a clock, so a real `Queue` with made-up `now`
values is the most faithful fake source there is: the tests of heartbeats,
timeouts, retries and periodic firings drive the worker's pure parts
(`Monitor.tick`, `Settler`, `Scheduler.tick`) with a `FakeClock` and check
the queue's own records.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from worker_rig import FakeClock

from walqueue import Queue


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[Queue]:
    with Queue(tmp_path / "q", sync=False) as opened:
        yield opened
