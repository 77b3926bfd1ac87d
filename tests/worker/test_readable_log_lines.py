"""The worker's lines read as a person expects: delays with their unit, a task's time its handler's own."""

from __future__ import annotations

import logging

import pytest
from worker_rig import FakeClock, Rig

from walqueue import Queue
from walqueue.worker import Retry


def worker_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == "walqueue.worker" and hasattr(record, "task")]


@pytest.mark.parametrize(
    ("delay", "words"), [(747, "747 ms"), (12_500, "12.5 s"), (600_000, "10 min"), (7_200_000, "2 h")]
)
def test_a_retry_line_gives_the_delay_with_its_unit(
    queue: Queue, clock: FakeClock, caplog: pytest.LogCaptureFixture, delay: int, words: str
) -> None:
    queue.put("t", {})
    rig = Rig(queue, clock)
    [run] = rig.start()
    with caplog.at_level(logging.INFO, logger="walqueue.worker"):
        rig.settler.fail(run, Retry("busy", delay=delay))
    [line] = worker_lines(caplog)
    assert line.getMessage().endswith(f"Retry: busy; next attempt in {words}") and line.delay == delay  # type: ignore[attr-defined]


def test_a_tasks_logged_time_is_its_handlers_not_the_wait_for_its_batched_ack(
    queue: Queue, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    queue.put("t", {})
    rig = Rig(queue, clock)
    [run] = rig.start()
    run.begin(clock.now, None)
    clock.advance(2)  # the handler runs 2 ms
    run.end(clock.now)
    assert rig.settler.claim(run)
    clock.advance(28)  # then its ack waits 28 ms for the batch
    with caplog.at_level(logging.INFO, logger="walqueue.worker"):
        rig.settler.acked(run, None)
    [line] = worker_lines(caplog)
    assert line.ms == 2 and "(attempt 1, 2 ms)" in line.getMessage()  # type: ignore[attr-defined]
