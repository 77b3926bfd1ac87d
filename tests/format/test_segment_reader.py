"""Reading a segment (CONTRACT §3 frames, §4.5 torn tails): `read_frames` over a stream of frames.

The reader must give back exactly the complete frames of a file, classify an
incomplete final frame as a torn tail only where CONTRACT §4.5 allows it, and
turn everything else (a bad length, a digest mismatch, a body that is not
JSON, a damaged length hidden before a later complete frame) into
`CorruptStore` naming the file and the offset of the frame at fault.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walqueue.format import (
    MAX_FRAME_BYTES,
    CorruptStore,
    Frame,
    SegmentEnd,
    canonical_json,
    encode_frame,
    find_complete_frame,
    read_frames,
)

# Frames of different sizes: a one-byte body, lengths with a non-zero second-to-last byte (>= 256),
# and the shapes the WAL really holds.
STREAM_VALUES: list[Any] = [
    {
        "seq": 1,
        "ops": [{"op": "put", "task": "t1", "key": "t1", "payload": {"n": 1}, "available_at": 0, "max_attempts": 3}],
    },
    1,
    {"seq": 2, "ops": [{"op": "lease", "task": "t1", "worker": "w" * 200, "generation": 1, "deadline": 30}]},
    {"seq": 3, "ops": [{"op": "ack", "task": "t1", "generation": 1}]},
]


def stream_of(values: list[Any]) -> tuple[bytes, list[int]]:
    """The bytes of `values` framed back to back, and the offset where each frame starts."""
    frames = [encode_frame(value) for value in values]
    starts = []
    offset = 0
    for frame in frames:
        starts.append(offset)
        offset += len(frame)
    return b"".join(frames), starts


def read_until_error(
    path: Path, *, allow_torn_tail: bool = True, start: int = 0
) -> tuple[list[Frame], SegmentEnd, CorruptStore | None]:
    """Every frame `read_frames` yields before it stops, how the file ended, and the error if any."""
    end = SegmentEnd()
    frames: list[Frame] = []
    with open(path, "rb") as file:
        try:
            for frame in read_frames(file, str(path), allow_torn_tail=allow_torn_tail, end=end, start=start):
                frames.append(frame)
        except CorruptStore as error:
            return frames, end, error
    return frames, end, None


def read_clean(path: Path, *, allow_torn_tail: bool = True) -> tuple[list[Frame], SegmentEnd]:
    frames, end, error = read_until_error(path, allow_torn_tail=allow_torn_tail)
    assert error is None, error
    return frames, end


def read_corrupt(path: Path, *, allow_torn_tail: bool = True) -> tuple[list[Frame], CorruptStore]:
    frames, _, error = read_until_error(path, allow_torn_tail=allow_torn_tail)
    assert error is not None, "expected CorruptStore"
    assert error.path == str(path)
    return frames, error


def expected_frames(values: list[Any], starts: list[int], count: int) -> list[Frame]:
    return [Frame(starts[index], len(encode_frame(values[index])), values[index]) for index in range(count)]


@pytest.fixture
def stream_file(tmp_path: Path) -> tuple[Path, bytes, list[int]]:
    data, starts = stream_of(STREAM_VALUES)
    path = tmp_path / "wal-00000000000000000001.log"
    path.write_bytes(data)
    return path, data, starts


# -- round trips ------------------------------------------------------------------

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=15,
)


@settings(max_examples=40, deadline=None)
@given(st.lists(json_values, max_size=8))
def test_read_frames_gives_back_every_frame_written(values: list[Any]) -> None:
    data, starts = stream_of(values)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "segment"
        path.write_bytes(data)
        frames, end = read_clean(path)
    assert [frame.offset for frame in frames] == starts
    assert [frame.size for frame in frames] == [len(encode_frame(value)) for value in values]
    assert [canonical_json(frame.value) for frame in frames] == [canonical_json(value) for value in values]
    assert (end.size, end.torn_offset, end.torn_bytes, end.frames) == (len(data), None, 0, len(values))


def test_an_empty_segment_holds_no_frame_and_no_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "segment"
    path.write_bytes(b"")
    for allow in (True, False):
        frames, end = read_clean(path, allow_torn_tail=allow)
        assert frames == [] and end.torn_offset is None and end.size == 0


def test_read_frames_can_start_at_a_frame_boundary(stream_file: tuple[Path, bytes, list[int]]) -> None:
    path, _, starts = stream_file
    frames, _, error = read_until_error(path, start=starts[2])
    assert error is None
    assert frames == expected_frames(STREAM_VALUES, starts, len(STREAM_VALUES))[2:]


def test_frames_are_yielded_one_at_a_time_before_later_damage_is_seen(
    stream_file: tuple[Path, bytes, list[int]],
) -> None:
    path, data, starts = stream_file
    damaged = bytearray(data)
    damaged[starts[3] + 10] ^= 0x01
    path.write_bytes(bytes(damaged))
    with open(path, "rb") as file:
        frames = read_frames(file, str(path))
        assert isinstance(frames, Iterator)
        assert next(frames).value == STREAM_VALUES[0]
        assert next(frames).value == STREAM_VALUES[1]
        assert next(frames).value == STREAM_VALUES[2]
        with pytest.raises(CorruptStore):
            next(frames)


# -- truncation at every byte --------------------------------------------------------


def test_truncation_at_every_offset_keeps_complete_frames_and_tears_at_the_cut_frame(
    stream_file: tuple[Path, bytes, list[int]],
) -> None:
    path, data, starts = stream_file
    ends = starts[1:] + [len(data)]
    for cut in range(len(data), -1, -1):  # shrink the one file a byte at a time
        os.truncate(path, cut)
        complete = sum(1 for frame_end in ends if frame_end <= cut)
        frames, end = read_clean(path, allow_torn_tail=True)
        assert frames == expected_frames(STREAM_VALUES, starts, complete), cut
        assert end.size == cut
        if cut == 0 or cut in ends:
            assert end.torn_offset is None, cut
        else:
            assert end.torn_offset == starts[complete], cut
            assert end.torn_bytes == cut - starts[complete]


def test_truncation_inside_a_frame_is_corrupt_where_no_torn_tail_is_allowed(
    stream_file: tuple[Path, bytes, list[int]],
) -> None:
    path, data, starts = stream_file
    ends = starts[1:] + [len(data)]
    for cut in range(len(data), -1, -1):
        os.truncate(path, cut)
        complete = sum(1 for frame_end in ends if frame_end <= cut)
        if cut == 0 or cut in ends:
            frames, end = read_clean(path, allow_torn_tail=False)
            assert len(frames) == complete and end.torn_offset is None
        else:
            frames, error = read_corrupt(path, allow_torn_tail=False)
            assert frames == expected_frames(STREAM_VALUES, starts, complete), cut
            assert error.offset == starts[complete], cut


def test_a_large_frame_torn_in_the_middle_is_a_torn_tail(tmp_path: Path) -> None:
    values = [{"seq": 1, "ops": []}, {"blob": "y" * (2 << 20)}]
    data, starts = stream_of(values)
    path = tmp_path / "segment"
    path.write_bytes(data[: starts[1] + (len(data) - starts[1]) // 2])
    frames, end = read_clean(path)
    assert [frame.value for frame in frames] == values[:1]
    assert end.torn_offset == starts[1]


# -- single bit flips ------------------------------------------------------------


def flip_bit(path: Path, offset: int, bit: int) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        byte = os.pread(fd, 1, offset)[0]
        os.pwrite(fd, bytes([byte ^ (1 << bit)]), offset)
    finally:
        os.close(fd)


def test_any_single_bit_flip_is_corrupt_except_a_longer_last_length(
    stream_file: tuple[Path, bytes, list[int]],
) -> None:
    """Every flip is CorruptStore at the damaged frame's offset, with exactly the frames before it read.

    The one exception is CONTRACT §4.5's documented limit: a flip in the LAST
    frame's length that makes it longer looks exactly like a torn write of a
    longer frame, so it reads as a torn tail at that frame's start (and the
    frames before it are intact). Nothing else may be taken for a torn tail.
    """
    path, data, starts = stream_file
    last = len(starts) - 1
    torn_cases = 0
    for offset in range(len(data)):
        index = max(i for i, start in enumerate(starts) if start <= offset)
        for bit in range(8):
            flip_bit(path, offset, bit)
            try:
                before = expected_frames(STREAM_VALUES, starts, index)
                in_length = offset - starts[index] < 4
                made_longer = not data[offset] & (1 << bit)
                frames, end, error = read_until_error(path, allow_torn_tail=True)
                assert frames == before, (offset, bit)
                if index == last and in_length and made_longer and offset != starts[index]:
                    # The first length byte of a frame under 16 MiB is 0: setting any of its bits
                    # makes the length exceed MAX_FRAME_BYTES, which is corruption, never a tear.
                    assert error is None, (offset, bit, error)
                    assert end.torn_offset == starts[last], (offset, bit)
                    torn_cases += 1
                else:
                    assert error is not None, (offset, bit)
                    assert error.offset == starts[index], (offset, bit, error)
                if bit == offset % 8:
                    # Where no torn tail is allowed, every flip is corruption (one bit per byte suffices
                    # here: the reads differ only in how an incomplete final frame is classified).
                    frames, error = read_corrupt(path, allow_torn_tail=False)
                    assert frames == before, (offset, bit)
                    assert error.offset == starts[index], (offset, bit)
            finally:
                flip_bit(path, offset, bit)
    last_length = len(data) - starts[last] - 36
    assert torn_cases == sum(8 - bin(b).count("1") for b in last_length.to_bytes(4, "big")[1:])


# -- lengths ------------------------------------------------------------------------


@pytest.mark.parametrize("length", [0, MAX_FRAME_BYTES + 1, 0xFFFFFFFF])
@pytest.mark.parametrize("where", ["first", "middle", "end"])
def test_a_complete_length_outside_the_bound_is_corrupt_anywhere(tmp_path: Path, length: int, where: str) -> None:
    """Also at the very end of the newest segment: four complete bytes are a length, not a tear."""
    head, starts = stream_of(STREAM_VALUES[:2])
    tail, _ = stream_of(STREAM_VALUES[2:])
    bad = length.to_bytes(4, "big")
    data, bad_offset = {
        "first": (bad + head + tail, 0),
        "middle": (head + bad + b"{}" + bytes(32) + tail, len(head)),
        "end": (head + tail + bad, len(head) + len(tail)),
    }[where]
    path = tmp_path / "segment"
    path.write_bytes(data)
    for allow in (True, False):
        frames, error = read_corrupt(path, allow_torn_tail=allow)
        assert error.offset == bad_offset
        assert "length" in error.reason
        assert len(frames) == {"first": 0, "middle": 2, "end": len(STREAM_VALUES)}[where]


@pytest.mark.parametrize("trailing", [b"\x00", b"\x00\x00", b"\x00\x00\x00", b"\xff\xff\xff", b"\x01"])
def test_one_to_three_trailing_bytes_are_a_torn_length(tmp_path: Path, trailing: bytes) -> None:
    data, _ = stream_of(STREAM_VALUES)
    path = tmp_path / "segment"
    path.write_bytes(data + trailing)
    frames, end = read_clean(path)
    assert len(frames) == len(STREAM_VALUES)
    assert end.torn_offset == len(data) and end.torn_bytes == len(trailing)
    _, error = read_corrupt(path, allow_torn_tail=False)
    assert error.offset == len(data)


class CountingFile:
    """A read-only file that refuses to hand out more than `limit` bytes in total."""

    def __init__(self, file: BinaryIO, limit: int) -> None:
        self._file = file
        self._limit = limit
        self.bytes_read = 0

    def fileno(self) -> int:
        return self._file.fileno()

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._file.seek(offset, whence)

    def read(self, size: int = -1) -> bytes:
        assert 0 <= size <= self._limit - self.bytes_read, f"asked for {size} more bytes"
        data = self._file.read(size)
        self.bytes_read += len(data)
        return data


@pytest.mark.parametrize("length", [MAX_FRAME_BYTES + 1, 0xFFFFFFFF])
def test_the_length_is_checked_before_the_body_is_read(tmp_path: Path, length: int) -> None:
    """A huge length at the start of a (sparse) file is refused at offset 0 without reading its body."""
    path = tmp_path / "segment"
    with open(path, "wb") as file:
        file.write(length.to_bytes(4, "big"))
        file.truncate(4 + length + 32)  # sparse: the body the length announces is all there
    with open(path, "rb") as raw:
        counting = CountingFile(raw, limit=MAX_FRAME_BYTES)
        with pytest.raises(CorruptStore) as info:
            list(read_frames(cast(BinaryIO, counting), str(path)))
    assert info.value.offset == 0
    assert "length" in info.value.reason
    assert counting.bytes_read < MAX_FRAME_BYTES


def test_a_length_at_the_bound_in_a_short_file_is_a_torn_tail(tmp_path: Path) -> None:
    path = tmp_path / "segment"
    path.write_bytes(MAX_FRAME_BYTES.to_bytes(4, "big") + b'{"seq":1' + bytes(100))
    frames, end = read_clean(path)
    assert frames == [] and end.torn_offset == 0
    _, error = read_corrupt(path, allow_torn_tail=False)
    assert error.offset == 0


# -- torn versus damaged ------------------------------------------------------------------


def test_an_incomplete_frame_followed_by_a_complete_frame_is_a_damaged_length(
    stream_file: tuple[Path, bytes, list[int]],
) -> None:
    """A frame whose length runs past the end while a valid frame starts after it was damaged, not torn."""
    path, data, starts = stream_file
    damaged = bytearray(data)
    damaged[starts[1] : starts[1] + 4] = (len(data) + 1000).to_bytes(4, "big")
    path.write_bytes(bytes(damaged))
    frames, error = read_corrupt(path, allow_torn_tail=True)
    assert frames == expected_frames(STREAM_VALUES, starts, 1)
    assert error.offset == starts[1]
    assert "damaged" in error.reason


def test_a_complete_frame_after_garbage_at_the_end_still_reveals_a_damaged_length(tmp_path: Path) -> None:
    good = encode_frame({"seq": 9, "ops": [{"op": "ack", "task": "z", "generation": 1}]})
    damaged_head = (10_000).to_bytes(4, "big") + b'{"seq":1,"ops":[' + b"garbage\x00\x01" * 7
    path = tmp_path / "segment"
    path.write_bytes(damaged_head + good)
    frames, error = read_corrupt(path, allow_torn_tail=True)
    assert frames == [] and error.offset == 0


def test_find_complete_frame_finds_the_first_valid_frame_after_start(tmp_path: Path) -> None:
    good = encode_frame({"a": 1})
    data = b"\x00\x00\x01\x00" + b"junk" + good + good
    path = tmp_path / "segment"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert find_complete_frame(fd, 0, len(data)) == 8
        assert find_complete_frame(fd, 8, len(data)) == 8 + len(good)
        assert find_complete_frame(fd, 8 + len(good), len(data)) is None
        assert find_complete_frame(fd, 0, len(data) - 1) == 8  # the second copy is cut: only the first counts
    finally:
        os.close(fd)


# -- bodies -------------------------------------------------------------------------------


def framed(body: bytes) -> bytes:
    """A frame around `body` with a correct digest: only the content is wrong."""
    return len(body).to_bytes(4, "big") + body + hashlib.sha256(body).digest()


@pytest.mark.parametrize(
    "body",
    [
        b'{"seq":1,"ops":["\xff"]}',  # not UTF-8
        b'{"seq":1,"ops":["\xed\xa0\x80"]}',  # an encoded surrogate is not UTF-8
        b'{"seq":1,"ops":[',  # not JSON
        b'{"seq":1,"ops":[]}{}',  # two values
        b'{"seq":NaN,"ops":[]}',  # a NaN literal
        b'{"seq":Infinity,"ops":[]}',
        b'{"seq":-Infinity,"ops":[]}',
    ],
)
def test_a_body_with_a_valid_digest_but_not_strict_json_is_corrupt(tmp_path: Path, body: bytes) -> None:
    head, _ = stream_of(STREAM_VALUES[:1])
    path = tmp_path / "segment"
    path.write_bytes(head + framed(body) + encode_frame({"after": True}))
    for allow in (True, False):
        frames, error = read_corrupt(path, allow_torn_tail=allow)
        assert len(frames) == 1
        assert error.offset == len(head)
        assert "JSON" in error.reason


def test_a_digest_mismatch_is_corrupt_at_the_frame(stream_file: tuple[Path, bytes, list[int]]) -> None:
    path, data, starts = stream_file
    damaged = bytearray(data)
    damaged[starts[2] - 1] ^= 0x80  # the last digest byte of frame 1
    path.write_bytes(bytes(damaged))
    frames, error = read_corrupt(path)
    assert len(frames) == 1
    assert error.offset == starts[1]
    assert "digest" in error.reason
