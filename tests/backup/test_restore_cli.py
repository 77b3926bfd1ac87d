"""walqueue-restore: the plan, --dry-run, targets, --to-seq/--to-time, --verify, --retain, the statuses."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from backup_helpers import Clock, file_store, snapshot_of

from walqueue import Queue
from walqueue.backup import Replicator
from walqueue.backup.cli import EXIT_CHAIN, EXIT_TARGET_EXISTS, main
from walqueue.backup.restore import make_plan, prune
from walqueue.format.fsck import check


@pytest.fixture
def replica(tmp_path: Path) -> str:
    """A replica of 3 snapshots (uploaded at 1,000,000 + 0 / 100 / 200) and 30 transactions, 5 per object."""
    store, clock = file_store(tmp_path), Clock()
    with Queue(tmp_path / "q") as queue:
        replicator = Replicator(queue, store, clock=clock, snapshot_interval=50)
        for round_number in range(3):
            for number in range(10):
                queue.put(f"t{round_number}-{number}", {"n": number})
                if number % 5 == 4:
                    replicator.tick()
            queue.compact()
            clock.now += 100
        replicator.tick()
        replicator.stop()
    return store.url


def test_a_restore_opens_with_queue_and_passes_fsck(replica: str, tmp_path: Path) -> None:
    assert main([replica, str(tmp_path / "new")]) == 0
    assert check(tmp_path / "new").status == "healthy"
    with Queue(tmp_path / "new", create=False) as queue:
        assert queue.last_seq == 30 and len(queue.tasks()) == 30


def test_dry_run_prints_the_plan_and_writes_nothing(
    replica: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([replica, str(tmp_path / "new"), "--dry-run", "--to-seq", "12"]) == 0
    out = capsys.readouterr().out
    assert "snapshot at transaction 10" in out and "restores through transaction 12" in out
    assert not (tmp_path / "new").exists()


def test_to_seq_restores_exactly_that_far(replica: str, tmp_path: Path) -> None:
    assert main([replica, str(tmp_path / "new"), "--to-seq", "13"]) == 0
    with Queue(tmp_path / "new", create=False) as queue:
        assert queue.last_seq == 13


def test_to_time_uses_the_upload_times(replica: str, tmp_path: Path) -> None:
    assert main([replica, str(tmp_path / "new"), "--to-time", "1000150"]) == 0
    with Queue(tmp_path / "new", create=False) as queue:
        assert queue.last_seq == 20  # what was uploaded by the replicator's clock at 1,000,150


def test_an_existing_store_is_never_overwritten(replica: str, tmp_path: Path) -> None:
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep").write_text("mine")
    assert main([replica, str(tmp_path / "busy")]) == EXIT_TARGET_EXISTS
    assert os.listdir(tmp_path / "busy") == ["keep"]


def test_a_gap_exits_65_naming_it(replica: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = file_store(tmp_path)
    store.delete(next(key for key in store.list("generations/") if "-00000000000000000025-" in key))
    assert main([replica, str(tmp_path / "new"), "--to-seq", "27"]) == EXIT_CHAIN
    assert "transactions 21..25 are in no log object" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def test_verify_restores_checks_and_compares_the_head(replica: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--verify", replica]) == 0
    assert "verified" in capsys.readouterr().out


def test_retention_keeps_what_a_kept_snapshots_chain_needs(replica: str, tmp_path: Path) -> None:
    store = file_store(tmp_path)
    before = make_plan(store)
    deleted = prune(store, keep_seconds=150, now=1_000_300)  # keeps the snapshots of 1,000,200 and 1,000,100
    assert deleted and not any(key.endswith("snapshots/00000000000000000010.json") for key in deleted)
    plan = make_plan(store, to_seq=11)
    assert plan.snapshot.seq == 10 and plan.target == 11
    assert make_plan(store).target == before.target
    with pytest.raises(Exception, match="no snapshot at or before"):
        make_plan(store, to_seq=5)


@pytest.mark.parametrize(
    "args", [[], ["--bogus", "file:///x", "d"], ["file:///x"], ["--to-seq", "x", "file:///x", "d"], ["ftp://x", "d"]]
)
def test_usage_errors_exit_64(args: list[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(args)
    assert stopped.value.code == 64


def test_help_documents_the_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["--help"])
    assert stopped.value.code == 0
    out = capsys.readouterr().out
    for status in ("65", "69", "73", "74", "64"):
        assert f"  {status}" in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.startswith("walqueue-restore ")


def test_restore_equals_the_store_it_came_from(tmp_path: Path) -> None:
    store = file_store(tmp_path)
    with Queue(tmp_path / "q") as queue:
        replicator = Replicator(queue, store)
        queue.put("a", {"x": 1})
        replicator.tick()
        expected = snapshot_of(queue)
        replicator.stop()
    assert main([store.url, str(tmp_path / "new")]) == 0
    with Queue(tmp_path / "new", create=False) as queue:
        assert snapshot_of(queue) == expected


def test_a_target_that_cannot_be_written_exits_74(replica: str, tmp_path: Path) -> None:
    assert main([replica, str(tmp_path / "missing-parent" / "new")]) == 74
    assert not (tmp_path / "missing-parent").exists()


def test_retention_leaves_objects_it_did_not_write_alone(replica: str, tmp_path: Path) -> None:
    store = file_store(tmp_path)
    store.put("generations/notes.txt", b"an operator's")
    prune(store, keep_seconds=1, now=2_000_000)
    assert store.get("generations/notes.txt") is not None
    assert make_plan(store).target == 30  # the newest snapshot and its chain are always kept


def test_a_mistyped_replica_path_is_refused_and_not_created(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([f"file://{tmp_path}/no-such-replica", str(tmp_path / "new")]) == EXIT_CHAIN
    assert "holds no generation" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == []
