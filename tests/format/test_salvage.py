"""Help for whoever repairs a store: fsck names the cause and what survives; salvage.

The damaged stores are the ones an operator meets: CURRENT deleted, CURRENT
truncated, a bit flip in an older segment, a lost segment. For each, fsck
must say what probably happened, check what it can read past the damage,
and report the sequences that are intact after it; `--salvage OUT` must
write a new store holding the longest valid history, never touching the
damaged one, and say exactly what it dropped.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from test_fsck import tree_state, tx, unchanged, write_segment

from walqueue import Queue
from walqueue.format import canonical_json, snapshot_name, wal_name, write_snapshot
from walqueue.format.fsck import EXIT_CORRUPT, EXIT_HEALTHY, check, main
from walqueue.format.fsck.salvage import SalvageError, salvage, seq_ranges, survey
from walqueue.format.progress import Progress

if TYPE_CHECKING:
    from conftest import RunPython


def cause_kinds(directory: Path) -> list[str]:
    return [cause.kind for cause in check(directory).causes]


def compacted_store(directory: Path) -> Path:
    """A real store: 5 puts, a compaction (snapshot at seq 5, live segment 2), then 12 more transactions."""
    with Queue(directory, sync=False, compact_bytes=None) as q:
        for i in range(5):
            q.put(f"a{i}", {"i": i})
        q.compact()
        for i in range(10):
            q.put(f"b{i}", {"i": i})
        leases = q.reserve("w", now=1, lease_seconds=10, limit=2)
        q.ack(leases[0], now=2)
        assert q.last_seq == 17
    return directory


def three_segments(directory: Path) -> Path:
    """No CURRENT, segments 1..3 holding transactions 1..2, 3..4 and 5..6 (each a put of a fresh task)."""
    directory.mkdir(exist_ok=True)
    write_segment(directory, 1, tx(1), tx(2))
    write_segment(directory, 2, tx(3), tx(4))
    write_segment(directory, 3, tx(5), tx(6))
    return directory


def flip_bit(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x10
    path.write_bytes(bytes(data))


def state_of(directory: Path) -> tuple[int, list[dict[str, object]]]:
    with Queue(directory, sync=False, compact_bytes=None) as q:
        return q.last_seq, [task.to_dict() for task in q.tasks()]


# -- fsck names the cause ------------------------------------------------------------------


def test_a_deleted_current_is_named_as_the_cause_not_just_a_missing_segment(tmp_path: Path) -> None:
    store = compacted_store(tmp_path / "q")
    (store / "CURRENT").unlink()
    report = check(store)
    assert report.exit_code == EXIT_CORRUPT
    assert [c.kind for c in report.causes] == ["current-missing"]
    message = report.causes[0].message
    assert "CURRENT is missing" in message and snapshot_name(5) in message and wal_name(2) in message
    assert report.survey is not None and report.survey.intact() == [[6, 17]]
    plan = report.survey.plan
    assert plan is not None and (plan.base, plan.last_seq, plan.dropped_transactions) == (snapshot_name(5), 17, 0)


def test_a_truncated_current_still_gets_every_segment_checked(tmp_path: Path) -> None:
    store = compacted_store(tmp_path / "q")
    data = (store / "CURRENT").read_bytes()
    (store / "CURRENT").write_bytes(data[:20])
    report = check(store)
    assert [c.kind for c in report.causes] == ["current-damaged"]
    assert "truncated" in report.causes[0].message
    assert report.survey is not None
    assert [s.file for s in report.survey.segments] == [wal_name(2)]
    assert report.survey.intact() == [[6, 17]]
    assert [(s.file, s.valid) for s in report.survey.snapshots] == [(snapshot_name(5), True)]


def test_a_bit_flip_in_an_older_segment_reports_what_survives_after_it(tmp_path: Path) -> None:
    store = three_segments(tmp_path / "q")
    flip_bit(store / wal_name(1), len(tx(1)) + 10)  # inside the body of transaction 2
    assert cause_kinds(store) == ["damaged-frame"]
    report = check(store)
    assert report.survey is not None
    assert report.survey.intact() == [[1, 1], [3, 6]]  # everything after the damaged frame is intact
    (damage,) = report.survey.segments[0].damage
    assert (damage.file, damage.offset, damage.bytes) == (wal_name(1), len(tx(1)), len(tx(2)))
    plan = report.survey.plan
    assert plan is not None
    assert (plan.last_seq, plan.dropped_transactions, plan.lost, plan.intact_dropped) == (1, 5, [[2, 2]], [[3, 6]])
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        assert main([str(store)]) == EXIT_CORRUPT
    assert "intact transactions: seq 1, 3..6" in text.getvalue()
    assert "drops 5 transactions" in text.getvalue()


def test_checking_goes_on_past_a_damaged_frame_in_the_same_segment(tmp_path: Path) -> None:
    store = tmp_path / "q"
    store.mkdir()
    frames = [tx(seq) for seq in range(1, 7)]
    write_segment(store, 1, *frames)
    flip_bit(store / wal_name(1), len(frames[0]) + 8)  # transaction 2
    flip_bit(store / wal_name(1), sum(map(len, frames[:4])) + 8)  # transaction 5
    found = survey(store)
    assert found.intact() == [[1, 1], [3, 4], [6, 6]]
    assert len(found.segments[0].damage) == 2


def test_a_lost_segment_is_named_with_the_transactions_it_held(tmp_path: Path) -> None:
    store = three_segments(tmp_path / "q")
    (store / wal_name(2)).unlink()
    report = check(store)
    assert "segment-lost" in [c.kind for c in report.causes]
    assert report.survey is not None and report.survey.intact() == [[1, 2], [5, 6]]
    plan = report.survey.plan
    assert plan is not None and (plan.last_seq, plan.lost, plan.intact_dropped) == (2, [[3, 4]], [[5, 6]])


def test_a_healthy_store_gets_no_survey_and_no_cause(tmp_path: Path) -> None:
    store = compacted_store(tmp_path / "q")
    report = check(store)
    assert report.exit_code == EXIT_HEALTHY and report.causes == [] and report.survey is None


def test_the_json_report_carries_causes_and_survey(tmp_path: Path) -> None:
    store = compacted_store(tmp_path / "q")
    (store / "CURRENT").unlink()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([str(store), "--json"]) == EXIT_CORRUPT
    data = json.loads(out.getvalue())
    assert [c["kind"] for c in data["causes"]] == ["current-missing"]
    assert data["survey"]["intact"] == [[6, 17]]
    assert data["survey"]["plan"]["last_seq"] == 17


# -- salvage ---------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["current-deleted", "current-truncated"])
def test_salvage_of_a_lost_current_keeps_the_whole_history(tmp_path: Path, damage: str) -> None:
    store = compacted_store(tmp_path / "q")
    expected = state_of(store)
    if damage == "current-deleted":
        (store / "CURRENT").unlink()
    else:
        (store / "CURRENT").write_bytes((store / "CURRENT").read_bytes()[:20])
    out = tmp_path / "salvaged"
    with unchanged(store):
        result = salvage(store, out)
    assert result.plan.dropped_transactions == 0 and result.check_status == "healthy"
    assert check(out, replay=True).exit_code == EXIT_HEALTHY
    assert state_of(out) == expected


def test_salvage_after_a_bit_flip_keeps_the_prefix_and_says_what_it_dropped(
    tmp_path: Path, run_python: RunPython
) -> None:
    store = three_segments(tmp_path / "q")
    flip_bit(store / wal_name(2), len(tx(3)) + 10)  # transaction 4
    out = tmp_path / "salvaged"
    before = tree_state(store)
    result = run_python(["-m", "walqueue.format.fsck", "--salvage", str(out), str(store)])
    assert tree_state(store) == before
    assert result.returncode == EXIT_HEALTHY, result.stderr
    assert "keeps the history through seq 3" in result.stdout
    assert "drops 3 transactions: seq 4 in no intact frame; seq 5..6 intact but after the gap" in result.stdout
    last_seq, tasks = state_of(out)
    assert last_seq == 3 and [t["task_id"] for t in tasks] == ["t1", "t2", "t3"]


def test_salvage_json_reports_the_plan(tmp_path: Path, run_python: RunPython) -> None:
    store = three_segments(tmp_path / "q")
    (store / wal_name(3)).unlink()
    (store / wal_name(1)).unlink()
    out = tmp_path / "salvaged"
    result = run_python(["-m", "walqueue.format.fsck", "--json", "--salvage", str(out), str(store)])
    # Transaction 1 is gone and there is no snapshot: nothing can be salvaged.
    assert result.returncode == EXIT_CORRUPT and "nothing to salvage" in result.stderr
    assert not out.exists()
    shutil.rmtree(store)
    three_segments(store)
    (store / wal_name(3)).unlink()
    result = run_python(["-m", "walqueue.format.fsck", "--json", "--salvage", str(out), str(store)])
    assert result.returncode == EXIT_HEALTHY, result.stderr
    data = json.loads(result.stdout)
    assert data["plan"]["last_seq"] == 4 and data["plan"]["dropped_transactions"] == 0
    assert data["files"] == [wal_name(1)] and data["check"] == "healthy"


def test_salvage_prefers_the_base_that_reaches_furthest(tmp_path: Path) -> None:
    store = tmp_path / "q"
    store.mkdir()
    write_snapshot(store / snapshot_name(5), 5, 0, [])  # an empty state at seq 5, which verifies
    write_snapshot(store / snapshot_name(20), 20, 0, [])
    flip_bit(store / snapshot_name(20), 6)  # the newest snapshot is damaged
    write_segment(store, 2, *(tx(seq) for seq in range(6, 16)))
    result = salvage(store, tmp_path / "out")
    assert (result.plan.base, result.plan.last_seq) == (snapshot_name(5), 15)
    assert result.plan.engine_checked and result.check_status == "healthy"
    assert state_of(tmp_path / "out")[0] == 15


def test_salvage_refuses_an_out_directory_that_is_not_empty_or_is_inside_the_store(tmp_path: Path) -> None:
    store = three_segments(tmp_path / "q")
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "x").write_text("x")
    with unchanged(store):
        with pytest.raises(SalvageError, match="not empty"):
            salvage(store, busy)
        with pytest.raises(SalvageError, match="inside"):
            salvage(store, store / "out")
        with pytest.raises(SalvageError, match="inside"):
            salvage(store, store)
    assert (busy / "x").read_text() == "x"


def test_salvage_writes_records_exactly_as_the_snapshot_held_them(tmp_path: Path) -> None:
    store = compacted_store(tmp_path / "q")
    (store / "CURRENT").unlink()
    salvage(store, tmp_path / "out")
    from walqueue.format import SnapshotReader

    with SnapshotReader(store / snapshot_name(5)) as a, SnapshotReader(tmp_path / "out" / snapshot_name(5)) as b:
        assert [canonical_json(r) for r in a.records()] == [canonical_json(r) for r in b.records()]


def test_seq_ranges() -> None:
    assert seq_ranges({1, 2, 3, 7, 9, 10}) == [[1, 3], [7, 7], [9, 10]]
    assert seq_ranges([]) == []


# -- progress ---------------------------------------------------------------------------------


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.6
        return self.now


def test_progress_is_shown_on_a_terminal_and_cleared_at_the_end() -> None:
    stream = FakeTerminal()
    progress = Progress.to_terminal("checking /q", 8 * 2**20, stream, delay=0.5, interval=0.5, clock=FakeClock())
    for done in range(1, 9):
        progress.update(done * 2**20)
    progress.finish()
    shown = stream.getvalue()
    assert "checking /q: " in shown and "% (" in shown and "of 8 MiB" in shown
    assert shown.endswith("\r\x1b[K")


def test_progress_is_silent_when_stderr_is_not_a_terminal() -> None:
    stream = io.StringIO()
    progress = Progress.to_terminal("checking /q", 8 * 2**20, stream, delay=0, interval=0, clock=FakeClock())
    for done in range(1, 9):
        progress.update(done * 2**20)
    progress.finish()
    assert stream.getvalue() == ""


def test_progress_logs_at_info_for_the_library(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("walqueue.test-progress")
    with caplog.at_level(logging.INFO, logger="walqueue.test-progress"):
        progress = Progress.to_log(logger, "opening /q", 4 * 2**20, delay=0.5, interval=0.5, clock=FakeClock())
        for done in range(1, 5):
            progress.update(done * 2**20)
        progress.finish()
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert messages and all(m.startswith("opening /q: ") for m in messages)
    assert messages[-1].startswith("opening /q: 100%")


def test_fsck_advances_progress_over_every_byte_it_reads(tmp_path: Path) -> None:
    store = compacted_store(tmp_path / "q")
    progress = Progress.to_terminal("checking", 0, FakeTerminal(), delay=0, interval=0, clock=FakeClock())
    check(store, progress=progress)
    sizes = sum(p.stat().st_size for p in store.iterdir() if p.name.startswith(("wal-", "snapshot-")))
    assert progress.total == sizes and progress.done == sizes
