"""The preallocated newest segment: zeros after the last frame end the log; what comes before them is judged as ever.

A copy of the directory taken while a queue is open is what a crash at that
instant leaves on disk (the frames, then the preallocated zeros), so these
tests open such copies, damage them, and ask fsck the same question.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from model import directory_digest, read_frames
from walqueue import CorruptStore, Queue
from walqueue.format.frame import encode_frame
from walqueue.format.fsck import EXIT_CORRUPT, EXIT_HEALTHY, EXIT_TORN, check
from walqueue.format.names import wal_name
from walqueue.format.survey import read_survey

STORES = Path(__file__).parent / "stores_7ef88fe"


def _frames_end(segment: Path) -> int:
    frames = read_frames(segment)
    if not frames:
        return 0
    offset, value = frames[-1]
    return offset + len(encode_frame(value))


def _crash_copy(tmp_path: Path, puts: int = 3) -> tuple[Path, int]:
    """A copy of a store taken while its queue is open (what a crash leaves), and where its frames end."""
    source, crashed = tmp_path / "live", tmp_path / "crashed"
    queue = Queue(source, sync=False, compact_bytes=None)
    for n in range(puts):
        queue.put(f"t{n}", {"n": n})
    shutil.copytree(source, crashed)
    queue.close()
    segment = crashed / wal_name(1)
    end = _frames_end(segment)
    assert segment.stat().st_size > end, "the open segment is preallocated"
    assert segment.read_bytes()[end:].count(0) == segment.stat().st_size - end
    return crashed, end


def test_an_open_segment_is_preallocated_and_wal_bytes_counts_only_frames(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        queue.put("t", {})
        segment = tmp_path / "q" / wal_name(1)
        assert segment.stat().st_size > _frames_end(segment) == queue.stats()["wal_bytes"]


def test_a_clean_close_cuts_the_segment_to_exactly_its_frames(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        queue.put("t", {})
    segment = tmp_path / "q" / wal_name(1)
    assert segment.stat().st_size == _frames_end(segment)


def test_zeros_after_the_last_frame_are_the_end_of_the_log(tmp_path: Path) -> None:
    crashed, end = _crash_copy(tmp_path)
    assert check(crashed, replay=True).exit_code == EXIT_HEALTHY
    with Queue(crashed, sync=False) as queue:
        assert [queue.get(f"t{n}") is not None for n in range(3)] == [True] * 3
        queue.put("next", {})
        assert queue.stats()["wal_bytes"] == _frames_end(crashed / wal_name(1)) > end
    assert [value["ops"][0]["task"] for _, value in read_frames(crashed / wal_name(1))] == ["t0", "t1", "t2", "next"]


def test_a_damaged_frame_before_the_zeros_is_corrupt_at_its_offset(tmp_path: Path) -> None:
    crashed, end = _crash_copy(tmp_path)
    segment = crashed / wal_name(1)
    last = read_frames(segment)[-1][0]
    data = bytearray(segment.read_bytes())
    data[last + 10] ^= 0x01  # inside the last frame's body: its digest no longer matches
    segment.write_bytes(bytes(data))
    before = directory_digest(crashed)
    with pytest.raises(CorruptStore) as info:
        Queue(crashed, sync=False)
    assert info.value.offset == last and "digest" in str(info.value)
    assert directory_digest(crashed) == before
    report = check(crashed, replay=True)
    assert report.exit_code == EXIT_CORRUPT
    assert any(finding.offset == last for finding in report.findings)


def test_a_nonzero_byte_inside_the_zero_tail_is_corrupt_at_the_frames_end(tmp_path: Path) -> None:
    crashed, end = _crash_copy(tmp_path)
    segment = crashed / wal_name(1)
    data = bytearray(segment.read_bytes())
    data[end + 100] = 0x41
    segment.write_bytes(bytes(data))
    with pytest.raises(CorruptStore) as info:
        Queue(crashed, sync=False)
    assert info.value.offset == end and "frame length 0" in str(info.value)
    assert check(crashed, replay=True).exit_code == EXIT_CORRUPT


@pytest.mark.parametrize("keep", [1, 4, 20, -20, -1])
def test_a_frame_cut_short_by_the_zeros_is_a_torn_tail(tmp_path: Path, keep: int) -> None:
    """What a crash during a write into the preallocation leaves: a prefix of the frame, then zeros."""
    crashed, end = _crash_copy(tmp_path)
    segment = crashed / wal_name(1)
    frame = encode_frame({"seq": 4, "ops": [{"op": "put", "task": "lost", "key": "lost", "payload": {}}]})
    with segment.open("r+b") as file:
        file.seek(end)
        file.write(frame[:keep] if keep > 0 else frame[:keep] + b"\x00" * -keep)
    report = check(crashed, replay=True)
    assert report.exit_code == (EXIT_HEALTHY if keep == 1 else EXIT_TORN)  # one byte of a length is zero: the end
    with Queue(crashed, sync=False) as queue:
        assert queue.get("lost") is None and queue.get("t2") is not None
    assert segment.stat().st_size == end or keep == 1


def test_a_large_write_cut_with_a_hole_of_zeros_in_its_body_is_a_torn_tail(tmp_path: Path) -> None:
    """A power cut while one large frame's pages were written back can keep a later page and lose an earlier.

    The frame was never acknowledged: its written body holds zeros (the
    preallocated ones left in the hole) but no whole, valid frame, so it is
    a torn tail, cut, and the store opens with every frame before it.
    """
    crashed, end = _crash_copy(tmp_path)
    segment = crashed / wal_name(1)
    frame = bytearray(
        encode_frame({"seq": 4, "ops": [{"op": "put", "task": "lost", "key": "lost", "payload": {"pad": "x" * 20000}}]})
    )
    frame[4096:8192] = bytes(4096)  # the second page never reached the disk
    with segment.open("r+b") as file:
        file.seek(end)
        file.write(bytes(frame[:12288]))  # the third did; the rest of the frame is still the preallocated zeros
    assert check(crashed, replay=True).exit_code == EXIT_TORN
    with Queue(crashed, sync=False) as queue:
        assert queue.get("lost") is None and queue.get("t2") is not None


def test_a_written_digest_that_disagrees_with_its_body_before_the_zeros_is_corrupt(tmp_path: Path) -> None:
    crashed, end = _crash_copy(tmp_path)
    segment = crashed / wal_name(1)
    frame = bytearray(encode_frame({"seq": 4, "ops": [{"op": "put", "task": "x", "key": "x", "payload": {}}]}))
    frame[-20] ^= 0xFF  # a digest byte that was written, and is wrong
    with segment.open("r+b") as file:
        file.seek(end)
        file.write(bytes(frame[:-10]))  # the last ten digest bytes are still the preallocated zeros
    with pytest.raises(CorruptStore) as info:
        Queue(crashed, sync=False)
    assert info.value.offset == end
    assert check(crashed, replay=True).exit_code == EXIT_CORRUPT


def test_a_sealed_segment_holds_exactly_its_frames(tmp_path: Path) -> None:
    sizes: list[tuple[int, int]] = []

    def hook(phase: str) -> None:
        if phase == "wal.rotate.after":
            sealed = tmp_path / "q" / wal_name(1)
            sizes.append((sealed.stat().st_size, _frames_end(sealed)))

    with Queue(tmp_path / "q", sync=False, hook=hook, compact_bytes=None) as queue:
        queue.put("t", {})
        queue.compact()
    assert len(sizes) == 1 and sizes[0][0] == sizes[0][1] > 0


@pytest.mark.parametrize("preallocated", [True, False])
def test_sealing_a_segment_syncs_it_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, preallocated: bool) -> None:
    # Each sync of the put that triggers a compaction is one more wait on the disk (DECISIONS §60).
    from walqueue.engine import wal

    if not preallocated:
        monkeypatch.setattr(wal, "preallocate", lambda fd, offset, length: False)
    syncs: list[str] = []

    def hook(phase: str) -> None:
        if phase == "wal.rotate.before":
            monkeypatch.setattr(os, "fsync", lambda fd, real=os.fsync: (syncs.append("fsync"), real(fd))[1])
            monkeypatch.setattr(os, "fdatasync", lambda fd, real=os.fdatasync: (syncs.append("fdatasync"), real(fd))[1])
        elif phase == "wal.rotate.after":
            monkeypatch.undo()

    with Queue(tmp_path / "q", sync=True, hook=hook, compact_bytes=None) as queue:
        queue.put("t", {})
        queue.compact()
    assert len(syncs) == 2  # the sealed segment once (fsync with its cut, or fdatasync), the directory once


def test_a_file_system_that_refuses_preallocation_grows_the_segment_at_each_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.EOPNOTSUPP, "not supported")

    monkeypatch.setattr("os.posix_fallocate", refuse)
    with Queue(tmp_path / "q", sync=False) as queue:
        queue.put("a", {})
        queue.put("b", {})
        segment = tmp_path / "q" / wal_name(1)
        assert segment.stat().st_size == _frames_end(segment) == queue.stats()["wal_bytes"]
    with Queue(tmp_path / "q", sync=False) as queue:
        assert queue.get("b") is not None


@pytest.mark.parametrize("name", ["closed", "torn"])
def test_a_store_written_by_the_previous_version_opens_unchanged(tmp_path: Path, name: str) -> None:
    """Stores written at 7ef88fe (before preallocation): a compacted one closed cleanly, and one with a torn tail."""
    store = tmp_path / name
    shutil.copytree(STORES / name, store)
    assert check(store, replay=True).exit_code == (EXIT_HEALTHY if name == "closed" else EXIT_TORN)
    with Queue(store, sync=False, compact_bytes=None) as queue:
        if name == "closed":
            statuses = {task.task_id: task.status for task in queue.tasks()}
            assert statuses == {"t0": "completed", "t5": "dead", "after": "leased"} | {
                f"t{n}": "ready" for n in range(1, 5)
            }
            released = queue.get("t1")
            assert released is not None and released.last_error is not None
            assert (released.last_error.type, released.last_error.message) == ("ValueError", "boom")
            assert queue.get("after") is not None and queue.get("after").payload == {"x": [1, 2.5, None]}  # type: ignore[union-attr]
            assert queue.stats()["last_seq"] == 13
        else:
            assert queue.get("lost") is None and queue.stats()["last_seq"] == 3
        queue.put("new", {})
    assert check(store, replay=True).exit_code == EXIT_HEALTHY
    newest = sorted(store.glob("wal-*.log"))[-1]
    assert newest.stat().st_size == _frames_end(newest)


def test_the_zero_tail_example_of_format_md(tmp_path: Path) -> None:
    """docs/FORMAT.md §7, "A preallocated segment": the first put's 141-byte frame, then zeros to 64 KiB."""
    with Queue(tmp_path / "q", sync=False) as queue:
        queue.put("t1", {"n": 1})
        data = (tmp_path / "q" / wal_name(1)).read_bytes()
        assert len(data) == 0x10000 and data[:4] == b"\x00\x00\x00\x69"
        assert _frames_end(tmp_path / "q" / wal_name(1)) == 0x8D and data[0x8D:].count(0) == 0x10000 - 0x8D
        [lease] = queue.reserve("w1", now=100, lease_seconds=30)
        assert len(read_frames(tmp_path / "q" / wal_name(1))) == 2
        assert _frames_end(tmp_path / "q" / wal_name(1)) - 0x8D == 124


def test_a_length_flipped_to_run_over_later_frames_into_the_zeros_is_corrupt_and_salvageable(tmp_path: Path) -> None:
    """A flip that makes the first frame's body reach the zero tail is damage, never a torn write that cuts t1, t2.

    Opening, fsck and salvage's survey read it alike: corrupt at byte 0, the
    later frames intact (salvage keeps them).
    """
    crashed, end = _crash_copy(tmp_path)
    segment = crashed / wal_name(1)
    data = bytearray(segment.read_bytes())
    length = int.from_bytes(data[:4], "big")
    bit = next(b for b in range(8, 16) if not length >> b & 1 and 4 + (length | 1 << b) >= end)
    data[3 - bit // 8] ^= 1 << bit % 8  # the length's third byte: the body now ends inside the zeros
    segment.write_bytes(bytes(data))
    before = directory_digest(crashed)
    with pytest.raises(CorruptStore) as info:
        Queue(crashed, sync=False)
    assert info.value.offset == 0 and "digest" in str(info.value)
    assert directory_digest(crashed) == before
    report = check(crashed, replay=True)
    assert report.exit_code == EXIT_CORRUPT and any(finding.offset == 0 for finding in report.findings)
    [surveyed] = read_survey(crashed).segments
    assert surveyed.torn is None and [(run.first_seq, run.last_seq) for run in surveyed.runs] == [(2, 3)]


def test_the_flipped_length_example_of_format_md(tmp_path: Path) -> None:
    """docs/FORMAT.md §7, "A cut write holds no later frame": length 0x69 read as 0x169."""
    source, crashed = tmp_path / "q", tmp_path / "crashed"
    with Queue(source, sync=False) as queue:
        queue.put("t1", {"n": 1})
        queue.reserve("w1", now=100, lease_seconds=30)
        shutil.copytree(source, crashed)
    segment = crashed / wal_name(1)
    data = bytearray(segment.read_bytes())
    assert data[:4] == b"\x00\x00\x00\x69" and data[0x8D:0x91] == b"\x00\x00\x00\x58"
    assert _frames_end(segment) == 0x109 and data[0x109:].count(0) == len(data) - 0x109
    data[2] ^= 0x01
    segment.write_bytes(bytes(data))
    with pytest.raises(CorruptStore) as info:
        Queue(crashed, sync=False)
    assert info.value.offset == 0 and "frame digest mismatch" in str(info.value)
    assert check(crashed, replay=True).exit_code == EXIT_CORRUPT
