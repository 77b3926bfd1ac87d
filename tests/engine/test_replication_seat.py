"""Queue.replication: the replicator's seat (durable sequence, segments, the retention hold, the sync wait)."""

from __future__ import annotations

from pathlib import Path

import pytest

from walqueue import Queue
from walqueue.format.names import list_directory


def test_the_hold_keeps_segments_from_compaction_until_released(tmp_path: Path) -> None:
    with Queue(tmp_path) as queue:
        seat = queue.replication
        seat.hold(1)
        queue.put("a", {})
        queue.compact()
        queue.put("b", {})
        queue.compact()
        assert {1, 2} <= set(list_directory(str(tmp_path)).segments)  # held: nothing below the hold went
        seat.hold(None)
        queue.put("c", {})
        queue.compact()
        assert min(list_directory(str(tmp_path)).segments) == seat.segments()[0]


def test_a_hold_above_the_first_live_segment_changes_nothing(tmp_path: Path) -> None:
    with Queue(tmp_path) as queue:
        queue.replication.hold(99)
        queue.put("a", {})
        queue.compact()
        assert 1 not in list_directory(str(tmp_path)).segments


def test_the_seat_reports_the_durable_sequence_and_refuses_a_bad_hold(tmp_path: Path) -> None:
    with Queue(tmp_path) as queue:
        seat = queue.replication
        queue.put("a", {})
        assert seat.durable_seq == queue.last_seq == 1
        assert seat.path == str(tmp_path.resolve()) or seat.path == str(tmp_path)
        for bad in (0, -1, 1.5, "1"):
            with pytest.raises(ValueError, match="a hold is a segment number"):
                seat.hold(bad)  # type: ignore[arg-type]
        assert seat.held is None


def test_every_answer_waits_for_the_replica_in_sync_mode(tmp_path: Path) -> None:
    waited: list[int] = []
    with Queue(tmp_path) as queue:
        queue.replication.wait_in_answers(waited.append)
        queue.put("a", {})
        with queue.batch():
            queue.put("b", {})
            queue.put("c", {})
        queue.replication.wait_in_answers(None)
        queue.put("d", {})
    assert waited == [1, 3]


def test_a_replicas_status_joins_the_metrics_while_reported(tmp_path: Path) -> None:
    with Queue(tmp_path) as queue:
        assert "replica" not in queue.metrics()
        queue.replication.report(lambda: {"state": "ok"})
        assert queue.metrics()["replica"] == {"state": "ok"}
        queue.replication.report(None)
        assert "replica" not in queue.metrics()
