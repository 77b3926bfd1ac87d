"""One clock unit per store: the worker records its unit in a store that has none and refuses another."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from walqueue import Queue
from walqueue.format.cmdline import EXIT_CANNOT_OPEN
from walqueue.worker import Worker
from walqueue.worker.clock import ClockMismatch, agree_on_unit, now_in, store_units

if TYPE_CHECKING:
    from conftest import RunPython


def _handle(payload: dict[str, object]) -> None:
    return None


def test_a_worker_records_its_unit_in_a_store_that_has_none(queue: Queue) -> None:
    assert queue.stats()["clock"] is None
    worker = Worker(queue, _handle)
    worker.start()
    worker.stop(now=True)
    worker.wait(10)
    assert queue.stats()["clock"] == 1000 and store_units(queue) == 1000


def test_a_worker_whose_clock_counts_another_unit_than_its_stores_is_refused_before_it_starts(queue: Queue) -> None:
    queue.set_clock(1000)
    seq = queue.last_seq
    worker = Worker(queue, _handle, clock=lambda: int(time.time()), units_per_second=1, lease=30, grace=5)
    with pytest.raises(ClockMismatch, match=r"records milliseconds \(1000 per second\).*counts seconds"):
        worker.start()
    assert queue.last_seq == seq and not worker._threads


def test_a_tool_that_only_reads_checks_the_default_of_a_store_without_a_unit(queue: Queue) -> None:
    agree_on_unit(queue, 1000, record=False)  # the documented default: milliseconds
    with pytest.raises(ClockMismatch, match="has recorded none, so it is read in milliseconds"):
        agree_on_unit(queue, 1, record=False)
    assert queue.stats()["clock"] is None  # a reader records nothing


def test_now_in_a_unit_is_the_wall_clock_in_it() -> None:
    before = time.time()
    seconds, milliseconds = now_in(1), now_in(1000)
    assert abs(seconds - before) <= 2 and abs(milliseconds / 1000 - before) <= 2


def test_walqueue_worker_on_a_store_in_seconds_says_so_and_cannot_open_it(
    tmp_path: Path, run_python: RunPython
) -> None:
    (tmp_path / "app.py").write_text("def handle(payload):\n    return None\n")
    with Queue(tmp_path / "q") as queue:
        queue.set_clock(1)
    result = run_python(["-m", "walqueue.worker", "q", "app:handle"], cwd=tmp_path, timeout=30)
    assert result.returncode == EXIT_CANNOT_OPEN, result.stderr
    assert "records seconds (1 per second), but this clock counts milliseconds" in result.stderr
    assert "Traceback" not in result.stderr
