"""`scan_frames`: the tuple-yielding reader under `read_frames` and replay (CONTRACT §3 frames, §4.5 torn tails).

It reads a file in chunks and walks frames by offsets inside a chunk, so the
risky places are the chunk boundaries: a length, a body or a digest cut by
the end of a chunk. Each test here runs with chunks down to one byte and
compares the reader with `reference_read`, a whole-file reading of the rules
written out plainly, and with `read_frames`, the public reader built on it.
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

import walqueue.format.frame as frame_module
from walqueue.format import MAX_FRAME_BYTES, CorruptStore, SegmentEnd, encode_frame, parse_json
from walqueue.format.frame import find_complete_frame, read_frames, scan_frames

CHUNKS = [1, 3, 4, 5, 36, 37, 64, 1 << 20]

VALUES: list[Any] = [
    {
        "seq": 1,
        "ops": [{"op": "put", "task": "t1", "key": "t1", "payload": {"n": 1}, "available_at": 0, "max_attempts": 3}],
    },
    1,
    {"seq": 2, "ops": [{"op": "lease", "task": "t1", "worker": "w" * 300, "generation": 1, "deadline": 30}]},
    {"seq": 3, "ops": [{"op": "ack", "task": "t1", "generation": 1}]},
]

# One reading of a file: (offset, size, repr of the value: 1, 1.0 and True differ) per frame, torn offset, error.
Outcome = tuple[list[tuple[int, int, str]], int | None, tuple[int | None, str] | None]


def framed(body: bytes) -> bytes:
    """A frame around `body` with a correct digest, whatever the body holds."""
    return len(body).to_bytes(4, "big") + body + hashlib.sha256(body).digest()


def reference_read(path: Path, *, allow_torn_tail: bool = True, start: int = 0) -> Outcome:
    """The reading rules applied to the whole file at once: the oracle for the chunked reader."""
    data = path.read_bytes()
    size = len(data)
    frames: list[tuple[int, int, str]] = []
    offset = start

    def torn_or_corrupt(what: str) -> Outcome:
        if not allow_torn_tail:
            return frames, None, (offset, f"{what} in a segment that is not the newest")
        fd = os.open(path, os.O_RDONLY)
        try:
            later = find_complete_frame(fd, offset, size)
        finally:
            os.close(fd)
        if later is not None:
            return (
                frames,
                None,
                (offset, f"{what}, but a complete frame starts at byte {later}: the length was damaged"),
            )
        return frames, offset, None

    while offset < size:
        if size - offset < 4:
            return torn_or_corrupt("incomplete length field")
        length = int.from_bytes(data[offset : offset + 4], "big")
        if not 1 <= length <= MAX_FRAME_BYTES:
            return frames, None, (offset, f"frame length {length} is outside 1..{MAX_FRAME_BYTES}")
        if size - offset < 36 + length:
            return torn_or_corrupt(f"incomplete frame: {size - offset} of {36 + length} bytes")
        body = data[offset + 4 : offset + 4 + length]
        if hashlib.sha256(body).digest() != data[offset + 4 + length : offset + 36 + length]:
            return frames, None, (offset, "frame digest mismatch")
        try:
            value = parse_json(body)
        except ValueError as exc:
            return frames, None, (offset, f"frame body is not UTF-8 JSON: {exc}")
        frames.append((offset, 36 + length, repr(value)))
        offset += 36 + length
    return frames, None, None


def scan(path: Path, *, allow_torn_tail: bool = True, start: int = 0) -> tuple[Outcome, SegmentEnd]:
    end = SegmentEnd()
    frames: list[tuple[int, int, str]] = []
    with open(path, "rb") as file:
        try:
            for offset, size, value in scan_frames(
                file, str(path), allow_torn_tail=allow_torn_tail, end=end, start=start
            ):
                frames.append((offset, size, repr(value)))
        except CorruptStore as error:
            assert error.path == str(path)
            return (frames, None, (error.offset, error.reason)), end
    return (frames, end.torn_offset, None), end


def read(path: Path, *, allow_torn_tail: bool = True, start: int = 0) -> tuple[Outcome, SegmentEnd]:
    """The same reading through the public `read_frames`."""
    end = SegmentEnd()
    frames: list[tuple[int, int, str]] = []
    with open(path, "rb") as file:
        try:
            for frame in read_frames(file, str(path), allow_torn_tail=allow_torn_tail, end=end, start=start):
                frames.append((frame.offset, frame.size, repr(frame.value)))
        except CorruptStore as error:
            return (frames, None, (error.offset, error.reason)), end
    return (frames, end.torn_offset, None), end


def check_agreement(path: Path, *, allow_torn_tail: bool = True, start: int = 0) -> Outcome:
    """scan_frames, read_frames and the oracle see the same frames, end and error; returns that outcome."""
    expected = reference_read(path, allow_torn_tail=allow_torn_tail, start=start)
    got, end = scan(path, allow_torn_tail=allow_torn_tail, start=start)
    assert got == expected
    via_frames, end_via_frames = read(path, allow_torn_tail=allow_torn_tail, start=start)
    assert via_frames == expected
    size = path.stat().st_size
    for seen in (end, end_via_frames):
        assert seen.size == size
        assert seen.frames == len(expected[0])
        assert seen.torn_offset == expected[1]
    return expected


@pytest.fixture(params=CHUNKS, ids=lambda chunk: f"chunk{chunk}")
def chunk(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    size = cast(int, request.param)
    monkeypatch.setattr(frame_module, "_READ_CHUNK", size)
    return size


@pytest.fixture
def stream(tmp_path: Path) -> tuple[Path, bytes, list[int]]:
    frames = [encode_frame(value) for value in VALUES]
    starts = [sum(len(frame) for frame in frames[:index]) for index in range(len(frames))]
    data = b"".join(frames)
    path = tmp_path / "wal-00000000000000000001.log"
    path.write_bytes(data)
    return path, data, starts


# -- agreement --------------------------------------------------------------------------


def test_every_truncation_point_reads_alike(chunk: int, stream: tuple[Path, bytes, list[int]]) -> None:
    path, data, starts = stream
    ends = [*starts[1:], len(data)]
    for cut in range(len(data), -1, -1):
        os.truncate(path, cut)
        frames, torn, error = check_agreement(path, allow_torn_tail=True)
        assert error is None, cut
        assert len(frames) == sum(1 for frame_end in ends if frame_end <= cut)
        assert (torn is None) == (cut == 0 or cut in ends), cut
        _, torn, error = check_agreement(path, allow_torn_tail=False)
        assert torn is None and (error is None) == (cut == 0 or cut in ends), cut


def test_every_single_byte_flip_reads_alike(chunk: int, stream: tuple[Path, bytes, list[int]]) -> None:
    path, data, _ = stream
    for offset in range(len(data)):
        damaged = bytearray(data)
        damaged[offset] ^= 1 << (offset % 8)
        path.write_bytes(bytes(damaged))
        for allow in (True, False):
            check_agreement(path, allow_torn_tail=allow)


def test_start_at_each_frame_boundary_reads_alike(chunk: int, stream: tuple[Path, bytes, list[int]]) -> None:
    path, data, starts = stream
    for start in [*starts, len(data), len(data) + 10]:
        frames, torn, error = check_agreement(path, start=start)
        assert [offset for offset, _, _ in frames] == [s for s in starts if s >= start]
        assert torn is None and error is None


json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(json_values, max_size=6),
    chunk_size=st.sampled_from(CHUNKS),
    cut=st.integers(min_value=0, max_value=1 << 16),
    flip=st.none() | st.integers(min_value=0, max_value=1 << 16),
    allow=st.booleans(),
)
def test_any_stream_cut_or_flipped_reads_alike(
    values: list[Any], chunk_size: int, cut: int, flip: int | None, allow: bool
) -> None:
    data = bytearray(b"".join(encode_frame(value) for value in values))
    if flip is not None and data:
        data[flip % len(data)] ^= 1 << (flip % 8)
    del data[cut % (len(data) + 1) :]
    with tempfile.TemporaryDirectory() as directory, pytest.MonkeyPatch.context() as patch:
        patch.setattr(frame_module, "_READ_CHUNK", chunk_size)
        path = Path(directory) / "segment"
        path.write_bytes(bytes(data))
        check_agreement(path, allow_torn_tail=allow)


# -- bodies that take the full decoder --------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b' {"a":1}',  # whitespace around a value is JSON: parse_json accepts it
        b'{"a":1}\n',
        b"\t[1,2]\r\n",
        b"7 ",
        b'{"a":1} {"b":2}',  # extra data
        b"\xef\xbb\xbf{}",  # a byte order mark
        b'{"a":',  # an incomplete value
        b"[1,2",
        b'"\\ud800"',  # an escaped lone surrogate is valid JSON
        b'{"a":NaN}',
        b"-Infinity",
        b"\xff",
        b"[" * 100_000 + b"]" * 100_000,  # deeper than the decoder can go
    ],
)
def test_a_body_the_fast_path_does_not_take_whole_is_judged_as_parse_json_judges_it(
    chunk: int, tmp_path: Path, body: bytes
) -> None:
    head = encode_frame({"first": True})
    path = tmp_path / "segment"
    path.write_bytes(head + framed(body) + encode_frame({"after": True}))
    try:
        expected: Any = ("value", repr(parse_json(body)))
    except ValueError as exc:
        expected = ("error", f"frame body is not UTF-8 JSON: {exc}")
    frames, torn, error = check_agreement(path)
    assert torn is None
    if expected[0] == "value":
        assert error is None
        assert frames[1][2] == expected[1]
    else:
        assert error == (len(head), expected[1])
        assert len(frames) == 1


# -- bounded reading ----------------------------------------------------------------------


class RecordingFile:
    """A read-only file that records every read request."""

    def __init__(self, file: BinaryIO) -> None:
        self._file = file
        self.requests: list[int] = []
        self.bytes_read = 0

    def fileno(self) -> int:
        return self._file.fileno()

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._file.seek(offset, whence)

    def read(self, size: int = -1) -> bytes:
        assert size >= 0
        self.requests.append(size)
        data = self._file.read(size)
        self.bytes_read += len(data)
        return data


@pytest.mark.parametrize("chunk", [4096, 1 << 20], indirect=True)
def test_each_byte_is_read_once_and_no_read_exceeds_a_chunk_or_a_frame(chunk: int, tmp_path: Path) -> None:
    big = {"blob": "x" * (3 << 20)}
    values: list[Any] = [{"n": index, "pad": "p" * index} for index in range(2000)]
    values.insert(700, big)
    data = b"".join(encode_frame(value) for value in values)
    path = tmp_path / "segment"
    path.write_bytes(data)
    with open(path, "rb") as raw:
        recording = RecordingFile(raw)
        count = sum(1 for _ in scan_frames(cast(BinaryIO, recording), str(path)))
    assert count == len(values)
    assert recording.bytes_read == len(data)
    assert max(recording.requests) <= max(chunk, len(encode_frame(big)))


def test_the_reader_yields_before_it_reads_the_rest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Frames come one at a time: damage in a later chunk is not seen before earlier frames are yielded."""
    monkeypatch.setattr(frame_module, "_READ_CHUNK", 64)
    frames = [encode_frame({"n": index}) for index in range(50)]
    data = bytearray(b"".join(frames))
    data[-1] ^= 0x01
    path = tmp_path / "segment"
    path.write_bytes(bytes(data))
    with open(path, "rb") as file:
        stream = scan_frames(file, str(path))
        assert isinstance(stream, Iterator)
        assert [next(stream)[2] for _ in range(49)] == [{"n": index} for index in range(49)]
        with pytest.raises(CorruptStore) as info:
            next(stream)
    assert info.value.offset == len(data) - len(frames[-1])


def test_a_file_that_shrinks_while_read_ends_where_its_bytes_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No endless loop on a read that returns nothing: what is there is judged as the file's end."""
    first = encode_frame({"a": 1})
    second = encode_frame({"b": "y" * 200})
    path = tmp_path / "segment"
    path.write_bytes(first + second + encode_frame({"c": 3}))
    monkeypatch.setattr(frame_module, "_READ_CHUNK", len(first) + 4)
    end = SegmentEnd()
    with open(path, "rb", buffering=0) as file:  # unbuffered: the cut must reach the reads
        stream = scan_frames(cast(BinaryIO, file), str(path), end=end)
        assert next(stream)[2] == {"a": 1}
        os.truncate(path, len(first) + 10)
        assert list(stream) == []
    assert end.size == len(first) + 10
    assert end.torn_offset == len(first)
    assert end.frames == 1


def test_frames_are_counted_in_the_end_as_they_are_yielded(stream: tuple[Path, bytes, list[int]]) -> None:
    path, _, _ = stream
    end = SegmentEnd()
    with open(path, "rb") as file:
        for index, _ in enumerate(scan_frames(file, str(path), end=end), start=1):
            assert end.frames == index
