"""Logging: recovery reports what it did through the `walqueue` logger, and the library prints nothing.

What opening a directory logs (engine/recovery.py):
- WARNING: a torn tail is truncated, with its byte count, offset and file;
- INFO: leftover segments below CURRENT's first live one are skipped;
- INFO: each orphan snapshot and each temporary file is ignored.
A compaction logs one INFO line naming its snapshot (engine/compaction.py).
Opening a healthy directory logs nothing at all.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from walqueue import InjectedCrash, Queue, QueueClosed

LOGGER = "walqueue"


def wal(number: int) -> str:
    return f"wal-{number:020d}.log"


def snap(seq: int) -> str:
    return f"snapshot-{seq:020d}.snap"


class CrashAt:
    """A hook that raises InjectedCrash at the first call of `phase`."""

    def __init__(self, phase: str) -> None:
        self.phase = phase

    def __call__(self, phase: str) -> None:
        if phase == self.phase:
            raise InjectedCrash(phase)


def fill(directory: Path, count: int = 3) -> None:
    with Queue(directory, sync=False) as queue:
        for index in range(count):
            queue.put(f"t{index}", {"n": index})


def crash_in_compaction(directory: Path, phase: str) -> None:
    queue = Queue(directory, sync=False, hook=CrashAt(phase))
    with pytest.raises(InjectedCrash):
        queue.compact()
    with pytest.raises(QueueClosed):
        queue.stats()


def crash_in_put(directory: Path, phase: str) -> None:
    queue = Queue(directory, sync=False, hook=CrashAt(phase))
    with pytest.raises(InjectedCrash):
        queue.put("torn", {"text": "x" * 200})


def walqueue_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == LOGGER or record.name.startswith(LOGGER + ".")]


@pytest.fixture
def caplog_info(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    caplog.clear()
    yield caplog


def reopen(directory: Path, caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    caplog.clear()
    with Queue(directory, sync=False):
        pass
    return walqueue_records(caplog)


def test_a_torn_tail_is_logged_as_a_warning_with_its_byte_count(
    tmp_path: Path, caplog_info: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "q"
    fill(directory)
    segment = directory / wal(1)
    clean_size = segment.stat().st_size
    crash_in_put(directory, "wal.append.partial")
    torn = segment.stat().st_size - clean_size
    assert torn > 0

    records = reopen(directory, caplog_info)

    assert [record.levelno for record in records] == [logging.WARNING]
    message = records[0].getMessage()
    assert f"{torn} bytes" in message
    assert f"byte {clean_size}" in message
    assert wal(1) in message
    assert segment.stat().st_size == clean_size
    assert reopen(directory, caplog_info) == []  # cut once: the next opening finds nothing to say


def test_a_cut_length_field_is_logged_with_its_byte_count(
    tmp_path: Path, caplog_info: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "q"
    fill(directory)
    segment = directory / wal(1)
    with segment.open("ab") as file:
        file.write(b"\x00\x00")  # 2 of a length's 4 bytes

    [record] = reopen(directory, caplog_info)

    assert record.levelno == logging.WARNING
    assert "2 bytes" in record.getMessage()


def test_leftover_segments_are_logged_as_skipped_at_info(tmp_path: Path, caplog_info: pytest.LogCaptureFixture) -> None:
    directory = tmp_path / "q"
    fill(directory)
    crash_in_compaction(directory, "current.published")  # CURRENT names wal 2; wal 1 is left over
    assert (directory / wal(1)).exists()

    records = reopen(directory, caplog_info)

    assert [record.levelno for record in records] == [logging.INFO]
    message = records[0].getMessage()
    assert "leftover" in message
    assert "1 " in message  # how many
    assert wal(2) in message  # below which segment


def test_orphan_snapshots_are_logged_as_ignored_at_info(tmp_path: Path, caplog_info: pytest.LogCaptureFixture) -> None:
    directory = tmp_path / "q"
    fill(directory)
    crash_in_compaction(directory, "snapshot.synced")  # a complete snapshot that CURRENT never named
    orphan = snap(3)
    assert (directory / orphan).exists()
    assert not (directory / "CURRENT").exists()

    records = reopen(directory, caplog_info)

    assert [record.levelno for record in records] == [logging.INFO]
    assert "orphan" in records[0].getMessage()
    assert orphan in records[0].getMessage()


def test_temporary_files_are_logged_as_ignored_at_info(tmp_path: Path, caplog_info: pytest.LogCaptureFixture) -> None:
    directory = tmp_path / "q"
    fill(directory)
    crash_in_compaction(directory, "current.written")  # CURRENT.tmp written, never renamed
    assert (directory / "CURRENT.tmp").exists()
    (directory / "other.tmp").write_bytes(b"junk")

    records = reopen(directory, caplog_info)

    assert {record.levelno for record in records} == {logging.INFO}
    messages = [record.getMessage() for record in records]
    assert any("CURRENT.tmp" in message for message in messages)
    assert any("other.tmp" in message for message in messages)
    assert any(snap(3) in message and "orphan" in message for message in messages)


def test_an_orphan_snapshot_beside_a_published_one_is_logged(
    tmp_path: Path, caplog_info: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "q"
    fill(directory)
    with Queue(directory, sync=False) as queue:
        queue.compact()
    (directory / snap(99)).write_bytes(b"not even a frame")

    messages = [record.getMessage() for record in reopen(directory, caplog_info)]

    assert len(messages) == 1
    assert "orphan" in messages[0] and snap(99) in messages[0]
    assert snap(3) not in messages[0]  # the one CURRENT names is not an orphan


def test_opening_a_healthy_directory_logs_nothing(tmp_path: Path, caplog_info: pytest.LogCaptureFixture) -> None:
    directory = tmp_path / "q"
    assert reopen(directory, caplog_info) == []  # a new directory
    fill(directory)
    assert reopen(directory, caplog_info) == []
    with Queue(directory, sync=False) as queue:
        queue.compact()
    assert reopen(directory, caplog_info) == []


def test_a_compaction_is_logged_at_info_with_its_snapshot(
    tmp_path: Path, caplog_info: pytest.LogCaptureFixture
) -> None:
    directory = tmp_path / "q"
    fill(directory)
    with Queue(directory, sync=False) as queue:
        caplog_info.clear()
        queue.compact()
        records = walqueue_records(caplog_info)
        assert [record.levelno for record in records] == [logging.INFO]
        assert snap(3) in records[0].getMessage()
        caplog_info.clear()
        queue.compact()  # nothing appended since: no snapshot, no line
        assert walqueue_records(caplog_info) == []


def test_a_workload_logs_nothing_at_warning_or_above(tmp_path: Path, caplog_info: pytest.LogCaptureFixture) -> None:
    with Queue(tmp_path / "q", sync=False, compact_bytes=2_000) as queue:
        for index in range(40):
            queue.put(f"t{index:03d}", {"n": index})
        now = 0
        while leases := queue.reserve("w", now=now, lease_seconds=5, limit=3):
            for number, lease in enumerate(leases):
                if number == 0:
                    queue.ack(lease, now=now)
                elif number == 1:
                    queue.release(lease, now=now, delay=1)
                # the third lease is left to expire
            now += 2
        deadline = time.monotonic() + 30  # compaction runs on its own, in the background
        while queue.stats()["snapshot_seq"] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert queue.stats()["snapshot_seq"] > 0
    assert [record for record in walqueue_records(caplog_info) if record.levelno >= logging.WARNING] == []


def recovering_workload(directory: Path) -> None:
    """Opens that cut a torn tail, skip a leftover segment and ignore orphans and temp files; a workload."""
    fill(directory)
    crash_in_compaction(directory, "current.published")  # leaves a leftover segment
    with Queue(directory, sync=False) as queue:
        queue.put("more", {"n": 0})
    crash_in_compaction(directory, "current.written")  # leaves an orphan snapshot and CURRENT.tmp
    crash_in_put(directory, "wal.append.partial")  # leaves a torn tail
    with Queue(directory, sync=False, compact_bytes=1_000) as queue:
        queue.put("after", {"n": 1})
        [lease] = queue.reserve("w", now=1, lease_seconds=5)
        queue.release(lease, now=2, delay=3)
        queue.reserve("w", now=5, lease_seconds=5)
        queue.reserve("w", now=100, lease_seconds=5)
        queue.compact()
    with Queue(directory, sync=False) as queue:
        assert queue.tasks("ready")


def test_the_library_prints_nothing_during_a_workload_with_recovery(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recovering_workload(tmp_path / "q")
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", "")


def test_the_library_prints_nothing_when_the_application_configured_no_logging(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # pytest's own handlers sit on the root logger; without them, this is a
    # program that never called logging.basicConfig or added a handler.
    monkeypatch.setattr(logging.root, "handlers", [])
    recovering_workload(tmp_path / "q")
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", "")
