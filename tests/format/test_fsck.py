"""walqueue-fsck (CONTRACT §7): what it reports, how it exits, and that it never changes a byte.

Stores are built two ways: byte by byte with the format layer's primitives
(so that every kind of damage can be placed exactly), and by `Queue`
workloads with compactions (so that fsck is checked against what the
engine really writes). Agreement with opening over a sweep of damaged
copies is in tests/crash/test_fsck_agreement.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from walqueue import CorruptStore, Queue
from walqueue.format import (
    Current,
    SnapshotReader,
    canonical_json,
    encode_frame,
    publish_current,
    snapshot_name,
    wal_name,
    write_current_tmp,
    write_snapshot,
)
from walqueue.format.fsck import EXIT_CORRUPT, EXIT_HEALTHY, EXIT_TORN, Report, check, main

if TYPE_CHECKING:
    from conftest import RunPython

# -- building stores ------------------------------------------------------------------


def put(task: str, key: str | None = None) -> dict[str, Any]:
    return {"op": "put", "task": task, "key": task if key is None else key, "payload": {"n": task},
            "available_at": 0, "max_attempts": 3}  # fmt: skip


def tx(seq: int, *ops: dict[str, Any]) -> bytes:
    """One WAL frame: transaction `seq` holding `ops` (a put of a fresh task when none are given)."""
    return encode_frame({"seq": seq, "ops": list(ops) or [put(f"t{seq}")]})


def write_segment(directory: Path, number: int, *frames: bytes) -> Path:
    path = directory / wal_name(number)
    path.write_bytes(b"".join(frames))
    return path


def publish(directory: Path, snapshot: str, *, wal: int) -> None:
    """Point CURRENT at `snapshot` (whose real size and SHA-256 it records), first live segment `wal`."""
    data = (directory / snapshot).read_bytes()
    seq = int(snapshot[len("snapshot-") : -len(".snap")])
    current = Current(snapshot, seq, len(data), hashlib.sha256(data).hexdigest(), wal)
    write_current_tmp(directory, current, sync=False)
    publish_current(directory, sync=False)


def rewrite_snapshot(directory: Path, name: str, records: list[dict[str, Any]], *, seq: int | None = None) -> None:
    """Write snapshot `name` holding `records` exactly as given (header/footer sequence `seq`)."""
    if seq is None:
        seq = int(name[len("snapshot-") : -len(".snap")])
    write_snapshot(directory / name, seq, len(records), [canonical_json(r) for r in records])


def snapshot_records(path: Path) -> list[dict[str, Any]]:
    with SnapshotReader(path) as reader:
        return list(reader.records())


def queue_store(directory: Path) -> Path:
    """A store written by a real Queue: puts, leases, an ack, a release, a compaction, then more WAL."""
    with Queue(directory, sync=False, compact_bytes=None) as q:
        for i in range(6):
            q.put(f"task-{i}", {"i": i, "text": "x" * i}, key=f"key-{i}" if i % 2 else None)
        leases = q.reserve("w1", now=10, lease_seconds=30, limit=3)
        q.ack(leases[0], now=11)
        q.release(leases[1], now=12, delay=5)
        q.compact()
        q.put("late", {"late": True})
        q.reserve("w2", now=20, lease_seconds=30)
    return directory


def fsck(directory: Path, *args: str) -> tuple[int, dict[str, Any]]:
    """Run fsck's main in-process with --json; return its exit status and the parsed report."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main([str(directory), "--json", *args])
    return status, json.loads(out.getvalue())


def kinds(report: Report, severity: str | None = None) -> list[str]:
    return [f.kind for f in report.findings if severity is None or f.severity == severity]


def tree_state(directory: Path) -> dict[str, tuple[int, int, int, str]]:
    """Every entry under `directory`: mode, size, mtime and SHA-256 (to prove fsck changed nothing)."""
    state: dict[str, tuple[int, int, int, str]] = {}
    for path in sorted(directory.rglob("*")):
        st = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
        state[str(path.relative_to(directory))] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
    st = directory.stat()
    state["."] = (st.st_mode, 0, st.st_mtime_ns, "")
    return state


@contextlib.contextmanager
def unchanged(directory: Path) -> Iterator[None]:
    before = tree_state(directory)
    yield
    assert tree_state(directory) == before


# -- healthy stores -------------------------------------------------------------------


def test_an_empty_directory_is_a_healthy_new_store(tmp_path: Path) -> None:
    report = check(tmp_path)
    assert report.exit_code == EXIT_HEALTHY and report.status == "healthy"
    assert kinds(report) == ["new-store"]
    assert report.last_seq == 0 and report.segments == []


def test_a_queue_store_with_a_compaction_is_healthy_and_summarized(tmp_path: Path) -> None:
    queue_store(tmp_path)
    with Queue(tmp_path, sync=False) as q:
        stats = q.stats()
    report = check(tmp_path, replay=True)
    assert report.exit_code == EXIT_HEALTHY, report.findings
    assert report.findings == []
    assert report.current is not None and report.snapshot is not None
    assert report.snapshot.seq == stats["snapshot_seq"] == report.current.seq
    assert report.snapshot.tasks == 6
    assert [s.number for s in report.segments] == [report.current.wal]
    segment = report.segments[0]
    assert (segment.first_seq, segment.last_seq) == (stats["snapshot_seq"] + 1, stats["last_seq"])
    assert segment.size == stats["wal_bytes"] == (tmp_path / segment.file).stat().st_size
    assert report.last_seq == stats["last_seq"]
    assert report.replay is not None and report.replay.complete
    assert report.replay.counts == stats["counts"]
    assert report.replay.last_seq == stats["last_seq"]
    assert report.replay.applied == stats["last_seq"] - stats["snapshot_seq"]


def test_a_store_without_current_is_checked_from_segment_one(tmp_path: Path) -> None:
    write_segment(tmp_path, 1, tx(1), tx(2))
    write_segment(tmp_path, 2, tx(3))
    report = check(tmp_path, replay=True)
    assert report.exit_code == EXIT_HEALTHY and report.findings == []
    assert [(s.number, s.first_seq, s.last_seq, s.frames) for s in report.segments] == [(1, 1, 2, 2), (2, 3, 3, 1)]
    assert report.replay is not None and report.replay.counts == {"ready": 3, "leased": 0, "completed": 0, "dead": 0}


def test_notes_for_orphans_leftovers_temps_and_unknown_files_keep_exit_0(tmp_path: Path) -> None:
    queue_store(tmp_path)
    report = check(tmp_path)
    assert report.current is not None
    live = report.current.wal
    # A leftover below CURRENT.wal is never read, so even garbage there is only a note.
    (tmp_path / wal_name(live - 1)).write_bytes(b"\xff" * 10)
    (tmp_path / snapshot_name(1)).write_bytes(b"garbage")
    (tmp_path / "CURRENT.tmp").write_bytes(b"half")
    (tmp_path / "notes.txt").write_text("hello")
    with unchanged(tmp_path):
        report = check(tmp_path, replay=True)
    assert report.exit_code == EXIT_HEALTHY
    found = {(f.kind, f.file, f.offset) for f in report.findings}
    assert found == {
        ("leftover-segment", wal_name(live - 1), None),
        ("orphan-snapshot", snapshot_name(1), None),
        ("temp-file", "CURRENT.tmp", None),
        ("unknown-file", "notes.txt", None),
    }
    assert [(s.file, s.size) for s in report.leftover_segments] == [(wal_name(live - 1), 10)]
    with Queue(tmp_path, sync=False):
        pass  # opening agrees: nothing there is fatal


def test_frames_the_snapshot_covers_are_skipped_not_refused(tmp_path: Path) -> None:
    segments = [(1, tx(1), tx(2)), (2, tx(3), tx(4))]
    for number, *frames in segments:
        write_segment(tmp_path, number, *frames)
    with Queue(tmp_path, sync=False, compact_bytes=None) as q:
        q.compact()  # snapshot through 4, first live segment 3; segments 1 and 2 deleted
    # Restore them and point CURRENT back at segment 1: transactions 1..4 are then skipped.
    for number, *frames in segments:
        write_segment(tmp_path, number, *frames)
    publish(tmp_path, snapshot_name(4), wal=1)
    report = check(tmp_path, replay=True)
    assert report.exit_code == EXIT_HEALTHY, report.findings
    assert report.replay is not None and report.replay.applied == 0 and report.last_seq == 4


def test_a_live_wal_ending_before_the_snapshot_is_corrupt(tmp_path: Path) -> None:
    write_segment(tmp_path, 1, tx(1), tx(2), tx(3))
    with Queue(tmp_path, sync=False, compact_bytes=None) as q:
        q.compact()
    write_segment(tmp_path, 2, tx(1))  # the live WAL holds only seq 1; the snapshot is through 3
    report = check(tmp_path, replay=True)
    assert report.exit_code == EXIT_CORRUPT
    assert kinds(report) == ["sequence"]
    with pytest.raises(CorruptStore):
        Queue(tmp_path, sync=False)  # the next append would leave a gap: recovery refuses it too


# -- torn tails -----------------------------------------------------------------------


@pytest.mark.parametrize("cut", [1, 3, 4, 20])
def test_an_incomplete_final_frame_of_the_newest_segment_is_a_torn_tail(tmp_path: Path, cut: int) -> None:
    whole = tx(1) + tx(2)
    write_segment(tmp_path, 1, whole)
    write_segment(tmp_path, 2, tx(3), tx(4)[:cut])
    boundary = len(tx(3))
    with unchanged(tmp_path):
        status, data = fsck(tmp_path, "--replay")
    assert status == EXIT_TORN and data["status"] == "torn"
    [finding] = data["findings"]
    assert (finding["kind"], finding["file"], finding["offset"], finding["bytes"]) == (
        "torn-tail",
        wal_name(2),
        boundary,
        cut,
    )
    assert data["segments"][1]["torn_offset"] == boundary and data["segments"][1]["torn_bytes"] == cut
    assert data["last_seq"] == 3 and data["replay"]["last_seq"] == 3
    phases: list[str] = []
    with Queue(tmp_path, sync=False, hook=phases.append):
        pass
    assert phases == ["recover.truncate.before", "recover.truncate.after"]
    assert (tmp_path / wal_name(2)).stat().st_size == boundary  # exactly the bytes fsck said


def test_an_incomplete_frame_in_an_older_segment_is_corruption(tmp_path: Path) -> None:
    write_segment(tmp_path, 1, tx(1), tx(2)[:10])
    write_segment(tmp_path, 2, tx(3))
    report = check(tmp_path)
    assert report.exit_code == EXIT_CORRUPT
    [finding] = [f for f in report.findings if f.severity == "corrupt"]
    assert (finding.file, finding.offset) == (wal_name(1), len(tx(1)))


def test_a_damaged_length_followed_by_a_complete_frame_is_corruption_not_a_tear(tmp_path: Path) -> None:
    second = bytearray(tx(2))
    second[2] = 0x7F  # the length now runs past the end of the file
    write_segment(tmp_path, 1, tx(1), bytes(second), tx(3))
    report = check(tmp_path)
    assert report.exit_code == EXIT_CORRUPT
    assert [(f.kind, f.offset) for f in report.findings] == [("frame", len(tx(1)))]
    with pytest.raises(CorruptStore):
        Queue(tmp_path, sync=False)


# -- corruption -----------------------------------------------------------------------


def test_a_digest_mismatch_is_reported_with_file_and_offset(tmp_path: Path) -> None:
    bad = bytearray(tx(2))
    bad[10] ^= 0x01
    write_segment(tmp_path, 1, tx(1), bytes(bad), tx(3))
    with unchanged(tmp_path):
        report = check(tmp_path)
    assert report.exit_code == EXIT_CORRUPT and report.status == "corrupt"
    [finding] = report.findings
    assert (finding.kind, finding.file, finding.offset) == ("frame", wal_name(1), len(tx(1)))
    assert "digest" in finding.message


@pytest.mark.parametrize(
    ("frames", "offset_index", "words"),
    [
        ([tx(1), tx(3)], 1, "where 2 was expected"),
        ([tx(1), tx(1)], 1, "where 2 was expected"),
        ([tx(2)], 0, "a gap"),
    ],
    ids=["gap", "repeat", "gap-after-start"],
)
def test_sequence_gaps_and_repeats_are_corruption(
    tmp_path: Path, frames: list[bytes], offset_index: int, words: str
) -> None:
    write_segment(tmp_path, 1, *frames)
    report = check(tmp_path)
    assert report.exit_code == EXIT_CORRUPT
    [finding] = report.findings
    assert finding.kind == "sequence" and words in finding.message
    assert finding.offset == sum(len(f) for f in frames[:offset_index])


@pytest.mark.parametrize(
    "value",
    [{"seq": 1}, {"seq": 0, "ops": [put("a")]}, {"seq": 1, "ops": []}, {"seq": 1, "ops": [{"op": "nope"}]}, [1]],
    ids=["no-ops", "seq-0", "empty-ops", "unknown-op", "not-an-object"],
)
def test_a_frame_that_is_not_a_transaction_envelope_is_corruption(tmp_path: Path, value: Any) -> None:
    write_segment(tmp_path, 1, encode_frame(value))
    report = check(tmp_path)
    assert report.exit_code == EXIT_CORRUPT and kinds(report) == ["transaction"]


def test_a_missing_segment_is_corruption_and_later_segments_are_still_read(tmp_path: Path) -> None:
    write_segment(tmp_path, 1, tx(1))
    write_segment(tmp_path, 3, tx(3), tx(4)[:5])
    report = check(tmp_path)
    assert report.exit_code == EXIT_CORRUPT
    assert [(f.kind, f.file) for f in report.findings] == [
        ("segment-missing", wal_name(2)),
        ("torn-tail", wal_name(3)),  # reported, but corruption decides the verdict
    ]
    assert [s.last_seq for s in report.segments] == [1, 3]


def test_segments_must_start_at_one_without_current(tmp_path: Path) -> None:
    write_segment(tmp_path, 2, tx(1))
    report = check(tmp_path)
    assert report.exit_code == EXIT_CORRUPT and kinds(report) == ["segment-missing"]


def test_the_first_live_segment_must_exist(tmp_path: Path) -> None:
    queue_store(tmp_path)
    current = check(tmp_path).current
    assert current is not None
    (tmp_path / wal_name(current.wal)).unlink()
    report = check(tmp_path)
    assert report.exit_code == EXIT_CORRUPT
    assert [(f.kind, f.file) for f in report.findings] == [("segment-missing", wal_name(current.wal))]


@pytest.mark.parametrize(
    "damage",
    ["current-digest", "current-missing-snapshot", "snapshot-byte", "snapshot-size", "snapshot-header-seq"],
)
def test_current_and_snapshot_damage_is_corruption(tmp_path: Path, damage: str) -> None:
    queue_store(tmp_path)
    current_file = tmp_path / "CURRENT"
    before = check(tmp_path)
    assert before.current is not None
    snapshot = tmp_path / before.current.snapshot
    expected_kind = "snapshot"
    if damage == "current-digest":
        data = bytearray(current_file.read_bytes())
        data[-1] ^= 0x80
        current_file.write_bytes(bytes(data))
        expected_kind = "current"
    elif damage == "current-missing-snapshot":
        snapshot.unlink()
    elif damage == "snapshot-byte":
        data = bytearray(snapshot.read_bytes())
        data[len(data) // 2] ^= 0x04
        snapshot.write_bytes(bytes(data))
    elif damage == "snapshot-size":
        snapshot.write_bytes(snapshot.read_bytes() + b"\x00")
    else:
        # A snapshot whose own header says another sequence, with CURRENT's size and digest updated to match.
        rewrite_snapshot(tmp_path, snapshot.name, snapshot_records(snapshot), seq=before.current.seq + 1)
        publish(tmp_path, snapshot.name, wal=before.current.wal)
    report = check(tmp_path, replay=True)
    assert report.exit_code == EXIT_CORRUPT
    assert kinds(report, "corrupt") == [expected_kind]
    assert report.replay is not None and not report.replay.complete
    with pytest.raises(CorruptStore):
        Queue(tmp_path, sync=False)


def test_snapshot_records_out_of_order_are_corruption_even_without_replay(tmp_path: Path) -> None:
    queue_store(tmp_path)
    current = check(tmp_path).current
    assert current is not None
    records = snapshot_records(tmp_path / current.snapshot)
    records[0], records[1] = records[1], records[0]
    rewrite_snapshot(tmp_path, current.snapshot, records)
    publish(tmp_path, current.snapshot, wal=current.wal)
    report = check(tmp_path)
    assert report.exit_code == EXIT_CORRUPT and kinds(report) == ["snapshot"]
    assert "order" in report.findings[0].message


# -- replay: what only the state machine can see -----------------------------------------


def test_replay_finds_an_invalid_transaction_that_the_format_cannot(tmp_path: Path) -> None:
    bogus = tx(3, {"op": "ack", "task": "t1", "generation": 1})  # t1 was never leased
    write_segment(tmp_path, 1, tx(1), tx(2), bogus, tx(4))
    assert check(tmp_path).exit_code == EXIT_HEALTHY  # the envelope is fine
    report = check(tmp_path, replay=True)
    assert report.exit_code == EXIT_CORRUPT
    [finding] = report.findings
    assert (finding.kind, finding.file, finding.offset) == ("invalid-transaction", wal_name(1), 2 * len(tx(1)))
    assert report.replay is not None and not report.replay.complete
    assert report.replay.last_seq == 2 and report.replay.applied == 2
    assert report.replay.counts == {"ready": 2, "leased": 0, "completed": 0, "dead": 0}
    with pytest.raises(CorruptStore):
        Queue(tmp_path, sync=False)


def test_replay_finds_an_invalid_snapshot_record(tmp_path: Path) -> None:
    queue_store(tmp_path)
    current = check(tmp_path).current
    assert current is not None
    records = snapshot_records(tmp_path / current.snapshot)
    records[0]["generation"] += 1  # generation must equal attempts
    rewrite_snapshot(tmp_path, current.snapshot, records)
    publish(tmp_path, current.snapshot, wal=current.wal)
    assert check(tmp_path).exit_code == EXIT_HEALTHY
    report = check(tmp_path, replay=True)
    assert report.exit_code == EXIT_CORRUPT and kinds(report) == ["snapshot"]
    assert "invalid snapshot record" in report.findings[0].message
    assert report.replay is not None and report.replay.counts is None
    with pytest.raises(CorruptStore):
        Queue(tmp_path, sync=False)


# -- read-only ------------------------------------------------------------------------


def _damaged_stores(root: Path) -> Iterator[Path]:
    healthy = queue_store(root / "healthy")
    yield healthy
    torn = queue_store(root / "torn")
    newest = max(torn.glob("wal-*.log"))
    newest.write_bytes(newest.read_bytes() + tx(99)[:7])
    yield torn
    corrupt = queue_store(root / "corrupt")
    (corrupt / "CURRENT").write_bytes(b"\x00\x00\x00\x05hello")
    (corrupt / "CURRENT.tmp").write_bytes(b"x")
    yield corrupt


def test_fsck_changes_no_byte_and_creates_no_file(tmp_path: Path, run_python: RunPython) -> None:
    for store in _damaged_stores(tmp_path):
        (store / "LOCK").unlink()  # fsck must not re-create the lock file either
        with unchanged(store):
            for args in ([], ["--replay"], ["--json"], ["--json", "--replay"]):
                with contextlib.redirect_stdout(io.StringIO()):
                    main([str(store), *args])
            result = run_python(["-m", "walqueue.format.fsck", "--replay", str(store)])
        assert result.returncode in (EXIT_HEALTHY, EXIT_TORN, EXIT_CORRUPT)


def test_fsck_works_while_a_queue_owns_the_directory(tmp_path: Path, run_python: RunPython) -> None:
    with Queue(tmp_path, sync=False, compact_bytes=None) as q:
        q.put("a", {"x": 1})
        q.compact()
        q.put("b", {"x": 2})
        with unchanged(tmp_path):
            result = run_python(["-m", "walqueue.format.fsck", str(tmp_path), "--json", "--replay"])
        assert result.returncode == EXIT_HEALTHY, result.stderr
        data = json.loads(result.stdout)
        assert data["last_seq"] == q.last_seq == 2
        assert data["replay"]["counts"] == q.stats()["counts"]
        q.put("c", {"x": 3})  # the owner is undisturbed


# -- the command line -----------------------------------------------------------------

REPORT_KEYS = {
    "fsck",
    "directory",
    "status",
    "exit_code",
    "findings",
    "current",
    "snapshot",
    "segments",
    "leftover_segments",
    "last_seq",
    "replay",
    "causes",
    "survey",
}
FINDING_KEYS = {"severity", "kind", "file", "offset", "message", "bytes"}
SEGMENT_KEYS = {"file", "number", "size", "frames", "first_seq", "last_seq", "torn_offset", "torn_bytes"}


def test_json_report_has_the_documented_fields(tmp_path: Path, run_python: RunPython) -> None:
    queue_store(tmp_path)
    (tmp_path / "CURRENT.tmp").write_bytes(b"")
    result = run_python(["-m", "walqueue.format.fsck", "--json", "--replay", str(tmp_path)])
    assert result.returncode == EXIT_HEALTHY, result.stderr
    data = json.loads(result.stdout)
    assert set(data) == REPORT_KEYS
    assert data["fsck"] == 1 and data["status"] == "healthy" and data["exit_code"] == 0
    assert data["directory"] == str(tmp_path)
    assert all(set(f) == FINDING_KEYS for f in data["findings"]) and data["findings"]
    assert all(set(s) == SEGMENT_KEYS for s in data["segments"]) and data["segments"]
    assert set(data["current"]) == {"current", "snapshot", "seq", "size", "sha256", "wal"}
    assert set(data["snapshot"]) == {"file", "seq", "tasks", "size", "sha256"}
    assert set(data["replay"]) == {"complete", "applied", "last_seq", "counts", "dead_letters"}
    assert set(data["replay"]["dead_letters"]) == {"groups", "more_groups", "more_tasks"}
    assert set(data["replay"]["counts"]) == {"ready", "leased", "completed", "dead"}
    assert data["causes"] == [] and data["survey"] is None  # a healthy store needs no survey


def test_options_go_before_or_after_the_directory(tmp_path: Path, run_python: RunPython) -> None:
    write_segment(tmp_path, 1, tx(1), tx(2)[:9])
    before = run_python(["-m", "walqueue.format.fsck", "--json", str(tmp_path)])
    after = run_python(["-m", "walqueue.format.fsck", str(tmp_path), "--json"])
    assert before.returncode == after.returncode == EXIT_TORN
    assert json.loads(before.stdout) == json.loads(after.stdout)
    text = run_python(["-m", "walqueue.format.fsck", str(tmp_path)])
    assert text.returncode == EXIT_TORN
    assert f"{wal_name(1)} at byte {len(tx(1))}" in text.stdout and "would cut 9 bytes" in text.stdout


def test_help_exits_0(run_python: RunPython) -> None:
    result = run_python(["-m", "walqueue.format.fsck", "--help"])
    assert result.returncode == 0 and "--replay" in result.stdout and "exit status" in result.stdout


@pytest.mark.parametrize("what", ["missing", "file"])
def test_a_missing_directory_or_a_file_is_a_clear_error(tmp_path: Path, what: str) -> None:
    target = tmp_path / "nothing"
    if what == "file":
        target.write_text("x")
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        status = main([str(target)])
    assert status == EXIT_CORRUPT
    assert str(target) in err.getvalue()
    assert not target.exists() or target.is_file()  # nothing was created


def test_fsck_needs_no_engine_but_replay_does(tmp_path: Path) -> None:
    import subprocess
    import sys

    import walqueue.format

    format_root = Path(walqueue.format.__file__).resolve().parent.parent.parent
    if (format_root / "walqueue" / "engine").exists():
        pytest.skip("walqueue.format is installed next to the engine: cannot hide the engine")
    write_segment(tmp_path, 1, tx(1))
    env = {**os.environ, "PYTHONPATH": str(format_root)}
    command = [sys.executable, "-S", "-m", "walqueue.format.fsck", str(tmp_path)]
    plain = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    assert plain.returncode == EXIT_HEALTHY, plain.stderr
    replay = subprocess.run([*command, "--replay"], env=env, capture_output=True, text=True, check=False)
    assert replay.returncode == EXIT_CORRUPT
    assert "--replay needs walqueue-engine" in replay.stderr and replay.stdout == ""
