"""Single-bit damage in a preallocated WAL segment (docs/FORMAT.md §7, "A preallocated segment").

The danger a zero tail adds is silent loss: damage that makes a frame
*before* other acknowledged frames read as a write cut short by the
zeros, so that opening cuts it and everything after it as a torn tail.
A real cut write leaves (part of) one frame and zeros, never a whole,
valid later frame inside it: so a frame that would swallow a later frame
is damage.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walqueue.format import CorruptStore, SegmentEnd, encode_frame
from walqueue.format.frame import scan_frames


def _frames(count: int, pad: int = 0) -> list[bytes]:
    return [
        encode_frame({"seq": n + 1, "ops": [{"op": "put", "task": f"t{n}", "payload": {"p": "x" * (pad + 7 * n)}}]})
        for n in range(count)
    ]


def _last_nonzero(frames: list[bytes]) -> int:
    return frames[-1].rstrip(b"\x00")[-1]


def _one_bit(byte: int) -> bool:
    return byte != 0 and not byte & (byte - 1)


def _scan(path: Path) -> tuple[list[Any], SegmentEnd]:
    end = SegmentEnd()
    with path.open("rb") as file:
        values = [value for _, _, value in scan_frames(file, str(path), end=end, allow_zero_tail=True)]
    return values, end


def _longer_length(data: bytes, offset: int, reach: int) -> tuple[int, int]:
    """The (byte, bit) whose flip makes the length at `offset` reach at least byte `reach` with its body."""
    length = int.from_bytes(data[offset : offset + 4], "big")
    for bit in range(32):
        if not length >> bit & 1 and offset + 4 + (length | 1 << bit) >= reach:
            return offset + 3 - bit // 8, bit % 8
    raise AssertionError("no such bit")


def test_a_length_flipped_to_swallow_later_frames_into_the_zeros_is_corrupt(tmp_path: Path) -> None:
    """The body a flipped length claims runs over later frames (length fields hold zeros) into the tail."""
    frames = _frames(4)
    frames_end = sum(map(len, frames))
    data = b"".join(frames) + bytes(4096)
    where, bit = _longer_length(data, 0, frames_end)
    damaged = bytearray(data)
    damaged[where] ^= 1 << bit
    path = tmp_path / "wal.log"
    path.write_bytes(bytes(damaged))
    with pytest.raises(CorruptStore) as info:
        _scan(path)
    assert info.value.offset == 0


def test_a_flip_that_clears_the_last_digest_bytes_reads_as_the_torn_write_it_equals(tmp_path: Path) -> None:
    """The documented limit: the last frame, its final non-zero digest byte cleared, is byte for byte a cut write."""
    # A last frame whose final non-zero byte has one bit set (SHA-256 decides it: pad the body until so).
    *kept, last = next(f for p in range(4096) if _one_bit(_last_nonzero(f := _frames(3, p))))
    digest_end = len(last.rstrip(b"\x00"))
    damaged = bytearray(b"".join(kept) + last + bytes(512))
    damaged[sum(map(len, kept)) + digest_end - 1] = 0
    path = tmp_path / "wal.log"
    path.write_bytes(bytes(damaged))
    values, end = _scan(path)
    assert len(values) == len(kept) and end.torn_offset == sum(map(len, kept))


@settings(max_examples=300, deadline=None)
@given(
    count=st.integers(1, 5),
    tail=st.integers(1, 300),
    data=st.data(),
)
def test_any_single_bit_flip_is_refused_or_keeps_every_frame_but_a_damaged_last_one(
    tmp_path_factory: pytest.TempPathFactory, count: int, tail: int, data: st.DataObject
) -> None:
    """Every frame before the last is kept or the segment refused; only the last frame may be cut as torn."""
    frames = _frames(count)
    original = b"".join(frames) + bytes(tail)
    where = data.draw(st.integers(0, len(original) - 1), label="byte")
    bit = data.draw(st.integers(0, 7), label="bit")
    damaged = bytearray(original)
    damaged[where] ^= 1 << bit
    path = tmp_path_factory.mktemp("flip") / "wal.log"
    path.write_bytes(bytes(damaged))
    try:
        values, end = _scan(path)
    except CorruptStore:
        return
    expected = [{"seq": n + 1} for n in range(count)]
    assert [{"seq": value["seq"]} for value in values] in (expected, expected[:-1])
    if len(values) < count:
        last_start = len(original) - tail - len(frames[-1])
        assert end.torn_offset == last_start <= where
