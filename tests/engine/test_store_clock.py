"""The store's clock unit: recorded once by a "clock" op, kept by snapshots, read by `stats()["clock"]`."""

from __future__ import annotations

from pathlib import Path

import pytest

from model import directory_digest, read_frames
from walqueue import Queue
from walqueue.engine.clockunit import DEFAULT_UNITS_PER_SECOND, ClockMismatch, store_unit
from walqueue.engine.state import InvalidTransaction, State, apply
from walqueue.format import SnapshotReader
from walqueue.format.frame import encode_body


def test_a_store_records_its_clock_unit_once_and_keeps_it_through_compaction_and_reopening(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        assert queue.stats()["clock"] is None  # never recorded: tools read the documented default
        queue.set_clock(1000)
        seq = queue.last_seq
        queue.set_clock(1000)  # the same unit again: an identical retry, nothing written
        assert queue.last_seq == seq and queue.stats()["clock"] == 1000
        queue.put("t", {})
        queue.compact()
        [snapshot] = [name for name in (tmp_path / "q").iterdir() if name.name.startswith("snapshot-")]
        with SnapshotReader(snapshot) as reader:
            assert reader.clock == 1000
    with Queue(tmp_path / "q", sync=False) as reopened:
        assert reopened.stats()["clock"] == 1000
        with pytest.raises(ClockMismatch, match=r"milliseconds \(1000 per second\), not seconds \(1 per second\)"):
            reopened.set_clock(1)


def test_another_unit_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        queue.set_clock(1)
        before = directory_digest(tmp_path / "q")
        with pytest.raises(ValueError, match="already|not milliseconds"):
            queue.set_clock(1000)
        for bad in (0, -1, True, 1.5):
            with pytest.raises((TypeError, ValueError)):
                queue.set_clock(bad)  # type: ignore[arg-type]
        assert directory_digest(tmp_path / "q") == before and queue.stats()["clock"] == 1


def test_a_store_without_a_clock_writes_todays_bytes(tmp_path: Path) -> None:
    """No "clock" op and no "clock" header field unless one is recorded: older readers open it as before."""
    with Queue(tmp_path / "q", sync=False) as queue:
        queue.put("t", {})
        queue.compact()
        [snapshot] = [name for name in (tmp_path / "q").iterdir() if name.name.startswith("snapshot-")]
        with SnapshotReader(snapshot) as reader:
            assert reader.clock is None
        assert b'"clock"' not in snapshot.read_bytes()
    assert store_unit(None) == DEFAULT_UNITS_PER_SECOND == 1000


def test_the_clock_op_is_one_frame_with_the_documented_bytes(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        queue.set_clock(1000)
    body = b'{"ops":[{"op":"clock","units_per_second":1000}],"seq":1}'
    [segment] = [name for name in (tmp_path / "q").iterdir() if name.name.startswith("wal-")]
    assert read_frames(segment) == [(0, {"ops": [{"op": "clock", "units_per_second": 1000}], "seq": 1})]
    assert segment.read_bytes().startswith(encode_body(body))


def test_the_state_machine_refuses_a_second_clock_op_even_in_one_transaction() -> None:
    state = State()
    clock = {"op": "clock", "units_per_second": 1}
    with pytest.raises(InvalidTransaction, match="already recorded"):
        apply(state, {"seq": 1, "ops": [clock, clock]})
    assert state.clock is None and state.last_seq == 0
    apply(
        state,
        {
            "seq": 1,
            "ops": [clock, {"op": "put", "task": "t", "key": "t", "payload": {}, "available_at": 0, "max_attempts": 1}],
        },
    )
    assert state.clock == 1 and len(state) == 1
    with pytest.raises(InvalidTransaction, match=r"\(clock\).*already recorded \(1 units per second\)"):
        apply(state, {"seq": 2, "ops": [clock]})


def test_the_clock_op_is_no_lifecycle_event_and_a_running_snapshot_keeps_no_preimage_for_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A store-level op names no task: the event stream and the background snapshot skip it."""
    from walqueue.engine import events

    events.enable()
    try:
        with caplog.at_level("INFO", logger="walqueue.events"), Queue(tmp_path / "q", sync=False) as queue:
            queue.put("a", {})
            queue.set_clock(1000)
            queue.put("b", {})
    finally:
        events.enable(False)
    assert [record.getMessage().split()[0] for record in caplog.records] == ["task.put", "task.put"]
