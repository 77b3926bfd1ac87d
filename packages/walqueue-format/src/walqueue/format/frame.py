"""Frames: the one record layout of every WALQueue file.

A frame is ``len`` (4 bytes, unsigned big-endian) + ``body`` (``len`` bytes of
canonical JSON) + ``digest`` (32 bytes, SHA-256 of ``body``). This module
encodes frames and reads them back from a file, classifying a file's end as
clean, torn (an incomplete final frame that opening may cut) or corrupt.

The reader never trusts a length before checking it against
`MAX_FRAME_BYTES`, so a damaged length can never make it allocate or read
gigabytes.
"""

from __future__ import annotations

import hashlib
import heapq
import os
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, TypedDict, Unpack

from walqueue.format.canonical import canonical_json, parse_json
from walqueue.format.errors import CorruptStore

__all__ = [
    "DIGEST_BYTES",
    "FRAME_OVERHEAD",
    "LENGTH_BYTES",
    "MAX_FRAME_BYTES",
    "Frame",
    "SegmentEnd",
    "decode_frame",
    "encode_body",
    "encode_frame",
    "find_complete_frame",
    "read_frames",
    "scan_frames",
    "zeros_from",
]

#: The largest body a frame may carry (16 MiB). Larger transactions are refused before writing.
MAX_FRAME_BYTES = 16 * 2**20
LENGTH_BYTES = 4
DIGEST_BYTES = 32
FRAME_OVERHEAD = LENGTH_BYTES + DIGEST_BYTES

_READ_CHUNK = 1 << 20

# Reads a length in place, without slicing 4 bytes out of the buffer first.
_UNPACK_LENGTH = struct.Struct(">I").unpack_from


def encode_body(body: bytes) -> bytes:
    """Frame an already-encoded canonical JSON body.

    Raises `ValueError` for an empty body or one above `MAX_FRAME_BYTES`, so a
    transaction that could never be read back is refused before any byte of
    it reaches a file.
    """
    size = len(body)
    if size < 1 or size > MAX_FRAME_BYTES:
        raise ValueError(f"frame body of {size} bytes is outside 1..{MAX_FRAME_BYTES}")
    return b"".join((size.to_bytes(LENGTH_BYTES, "big"), body, hashlib.sha256(body).digest()))  # one copy of body


def encode_frame(value: Any) -> bytes:
    """Encode `value` as canonical JSON and frame it."""
    return encode_body(canonical_json(value))


def _not_json(path: str | None, offset: int, exc: ValueError) -> CorruptStore:
    """The error for a frame whose body `parse_json` refused."""
    return CorruptStore(path, offset, f"frame body is not UTF-8 JSON: {exc}")


def decode_frame(data: bytes, path: str | None = None) -> Any:
    """Decode `data` that must hold exactly one complete, valid frame.

    Used for CURRENT, which is one frame and nothing else.
    """
    if len(data) < LENGTH_BYTES:
        raise CorruptStore(path, 0, f"{len(data)} bytes cannot hold a frame")
    length = int.from_bytes(data[:LENGTH_BYTES], "big")
    if length < 1 or length > MAX_FRAME_BYTES:
        raise CorruptStore(path, 0, f"frame length {length} is outside 1..{MAX_FRAME_BYTES}")
    end = FRAME_OVERHEAD + length
    if len(data) < end:
        raise CorruptStore(path, 0, f"incomplete frame: {len(data)} of {end} bytes")
    if len(data) > end:
        raise CorruptStore(path, end, f"{len(data) - end} bytes follow the frame")
    body = data[LENGTH_BYTES : LENGTH_BYTES + length]
    if hashlib.sha256(body).digest() != data[LENGTH_BYTES + length :]:
        raise CorruptStore(path, 0, "frame digest mismatch")
    try:
        return parse_json(body)
    except ValueError as exc:
        raise _not_json(path, 0, exc) from None


@dataclass(frozen=True, slots=True)
class Frame:
    """One complete, verified frame: where it starts, how long it is, what it says."""

    offset: int
    size: int
    value: Any


@dataclass(slots=True)
class SegmentEnd:
    """How a file read by `read_frames` ended.

    `torn_offset` is ``None`` when the file ends exactly after a frame or
    in a zero tail; otherwise it is where an incomplete (or, in a
    preallocated tail, half-written) final frame starts, and `size` minus
    it is the number of bytes opening would cut. `zero_offset` is where a
    zero tail starts: the bytes a preallocated segment holds after its last
    frame (docs/FORMAT.md §7), the end of the log and never damage.
    """

    size: int = 0
    torn_offset: int | None = None
    frames: int = 0
    zero_offset: int | None = None

    @property
    def frames_end(self) -> int:
        """Where the segment's last complete frame ends: what opening keeps, and where the next frame goes."""
        if self.torn_offset is not None:
            return self.torn_offset
        return self.size if self.zero_offset is None else self.zero_offset

    @property
    def torn_bytes(self) -> int:
        """How many bytes a torn tail holds: what opening cuts (0 without one)."""
        return 0 if self.torn_offset is None else self.size - self.torn_offset


def _pread_exact(fd: int, size: int, offset: int) -> bytes:
    chunks = []
    while size > 0:
        chunk = os.pread(fd, min(size, _READ_CHUNK * 16), offset)
        if not chunk:
            break
        chunks.append(chunk)
        size -= len(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def find_complete_frame(fd: int, start: int, end: int) -> int | None:
    """Return the offset of the first complete frame with a valid digest in (start, end).

    This is what tells a torn write from a damaged length (docs/FORMAT.md §7): an
    apparently incomplete frame is the real end of the log only if nothing
    that parses as a whole frame begins anywhere after its first byte. A torn
    write leaves at most one frame's worth of bytes, so the scan is short for
    real crashes; damaged data may cost more.
    """
    window_start = start + 1
    if end - window_start < FRAME_OVERHEAD + 1:
        return None
    data = _pread_exact(fd, end - window_start, window_start)
    for rel in _length_candidates(data):
        length = int.from_bytes(data[rel : rel + LENGTH_BYTES], "big")
        if length < 1 or rel + FRAME_OVERHEAD + length > len(data):
            continue
        body = data[rel + LENGTH_BYTES : rel + LENGTH_BYTES + length]
        digest = data[rel + LENGTH_BYTES + length : rel + FRAME_OVERHEAD + length]
        if hashlib.sha256(body).digest() == digest:
            return window_start + rel
    return None


_ZERO_RUN = re.compile(rb"\x00+")
_TOP_LENGTH = MAX_FRAME_BYTES.to_bytes(LENGTH_BYTES, "big")


def _length_candidates(data: bytes) -> Iterator[int]:
    """Offsets in `data` where a length field within the bound could start, in increasing order.

    A length in 1..MAX_FRAME_BYTES (0x01000000) is a zero byte followed by
    three bytes that are not all zero, or exactly 0x01000000. So inside a
    run of zero bytes only its last three positions can start one, and only
    if a non-zero byte follows the run. Runs are found with `bytes.find`
    and measured by an anchored regular expression, both in C: megabytes
    of zeros (a zero-filled tail) or of payload text (JSON holds no NUL
    byte) cost one pass, and Python sees only real candidates.
    """
    last = len(data) - FRAME_OVERHEAD - 1
    if last < 0:
        return iter(())
    return heapq.merge(_zero_run_candidates(data, last), _top_length_candidates(data, last))


def _zero_run_candidates(data: bytes, last: int) -> Iterator[int]:
    size = len(data)
    match_run = _ZERO_RUN.match
    start = data.find(b"\x00", 0, last + 1)
    while start != -1:
        run = match_run(data, start)
        assert run is not None
        end = run.end()
        if end == size:
            return  # no non-zero byte follows: nothing here is a length in 1..MAX_FRAME_BYTES
        yield from range(max(start, end - (LENGTH_BYTES - 1)), min(end, last + 1))
        start = data.find(b"\x00", end, last + 1)


def _top_length_candidates(data: bytes, last: int) -> Iterator[int]:
    found = data.find(_TOP_LENGTH, 0, last + LENGTH_BYTES)
    while found != -1:
        yield found
        found = data.find(_TOP_LENGTH, found + 1, last + LENGTH_BYTES)


def scan_frames(
    file: BinaryIO,
    path: str | None = None,
    *,
    allow_torn_tail: bool = True,
    end: SegmentEnd | None = None,
    start: int = 0,
    allow_zero_tail: bool = False,
) -> Iterator[tuple[int, int, Any]]:
    """Yield ``(offset, size, value)`` for every complete frame of `file` from `start`.

    The same reader as `read_frames`, with the same checks, errors and `end`
    bookkeeping, minus one `Frame` object per frame: replay reads every frame
    of the WAL on each open, and that object (with the frame loop around it)
    was a measurable share of the time.

    The file is read in chunks of `_READ_CHUNK` bytes, and frames are walked
    by offsets inside the chunk; a frame that straddles two chunks is carried
    into the next one. Memory is bounded by one chunk plus one frame, however
    long the file, and a length is checked against `MAX_FRAME_BYTES` before
    anything beyond one chunk is read for its body. `allow_zero_tail` (a
    WAL segment's preallocation): see `_bad_frame`.
    """
    end = SegmentEnd() if end is None else end
    tails = (allow_torn_tail, allow_zero_tail)
    fd = file.fileno()
    size = os.fstat(fd).st_size
    end.size = size
    file.seek(start)
    sha256 = hashlib.sha256
    read = file.read
    unpack_length = _UNPACK_LENGTH
    data = b""
    base = start  # file offset of data[0]
    pos = 0  # index in data of the next frame
    while True:
        limit = min(len(data), size - base)
        need = LENGTH_BYTES  # bytes from pos that must be in data before the next frame can be judged
        while pos + LENGTH_BYTES <= limit:
            (length,) = unpack_length(data, pos)
            if length < 1 or length > MAX_FRAME_BYTES:
                reason = f"frame length {length} is outside 1..{MAX_FRAME_BYTES}"
                _bad_frame(_At(fd, path, data, pos, base, size), end, tails, reason, whole=False)
                return
            body_end = pos + LENGTH_BYTES + length
            frame_end = body_end + DIGEST_BYTES
            if frame_end > limit:
                need = frame_end - pos
                break
            body = data[pos + LENGTH_BYTES : body_end]
            if sha256(body).digest() != data[body_end:frame_end]:
                _bad_frame(_At(fd, path, data, pos, base, size), end, tails, "frame digest mismatch", whole=True)
                return
            try:
                value = parse_json(body)
            except ValueError as exc:
                raise _not_json(path, base + pos, exc) from None
            end.frames += 1
            yield base + pos, frame_end - pos, value
            pos = frame_end
        offset = base + pos
        remaining = size - offset
        if remaining <= 0:
            break
        if remaining < need:
            if need == LENGTH_BYTES:
                what = "incomplete length field"
            else:
                what = f"incomplete frame: {remaining} of {need} bytes"
            _torn_or_corrupt(fd, path, offset, size, allow_torn_tail, end, what)
            return
        tail = data[pos:]
        more = read(max(_READ_CHUNK, need - len(tail)))
        if not more:
            # The file shrank under the reader: judge what is there as its end.
            size = end.size = offset + len(tail)
        data = tail + more if tail else more
        base = offset
        pos = 0
    end.torn_offset = None


def zeros_from(fd: int, start: int, size: int) -> int:
    """The offset in ``[start, size]`` where the run of zero bytes that ends the file begins.

    Read backwards in chunks, stopping at the first non-zero byte: a
    preallocated tail of megabytes costs one pass of `bytes.rstrip` in C.
    """
    stop = size
    while stop > start:
        offset = max(start, stop - _READ_CHUNK)
        chunk = _pread_exact(fd, stop - offset, offset)
        kept = len(chunk.rstrip(b"\x00"))
        if kept:
            return offset + kept
        if len(chunk) < stop - offset:
            return offset  # the file shrank under the reader: what is there is zeros
        stop = offset
    return start


@dataclass(frozen=True, slots=True)
class _At:
    """Where a reader stands at a frame that failed its checks: what judging the file's end needs."""

    fd: int
    path: str | None
    data: bytes
    pos: int
    base: int
    size: int


def _bad_frame(at: _At, end: SegmentEnd, tails: tuple[bool, bool], reason: str, *, whole: bool) -> None:
    """Record a zero tail or a half-written last frame in `end`, or raise `CorruptStore` with `reason`.

    `tails` is (torn tail allowed, zero tail allowed); `whole` says that
    `at.data` holds the frame's every byte (its digest failed). With a
    zero tail allowed (a WAL segment), zeros from a frame boundary to the
    end of the file are the end of the log (`end.zero_offset`), and where
    a torn tail is allowed too (the newest segment), a frame cut short by
    them is one; a snapshot has no such tail.
    """
    torn_ok, zeros_ok = tails
    offset = at.base + at.pos
    if zeros_ok:
        (length,) = _UNPACK_LENGTH(at.data, at.pos)
        if length == 0 and zeros_from(at.fd, offset, at.size) == offset:
            end.zero_offset = offset  # a preallocated tail: the end of the log
            return
        if whole and torn_ok and _half_written(at, at.pos + LENGTH_BYTES + length):
            end.torn_offset = offset
            return
    raise CorruptStore(at.path, offset, reason)


def _half_written(at: _At, body_end: int) -> bool:
    """Whether the frame at `pos` (whose digest failed) is a prefix of a frame followed by zeros to the end.

    That is what a crash during a write into a preallocated tail leaves
    (docs/FORMAT.md §7): the frame's first bytes, then the zeros that were
    there, running past the frame's end (the writer always keeps room
    after a frame). A frame whose every byte is present, one with no zero
    after its end, one whose written body holds a whole, valid later frame
    (a damaged length running over acknowledged frames into the zeros), or
    one whose written digest bytes disagree with its body, is damage, not
    a torn write. A hole of zeros inside the written body (pages of one
    large write persisted out of order before a power cut) is still a
    torn write: that frame was never acknowledged.
    """
    data, base = at.data, at.base
    frame_end = body_end + DIGEST_BYTES
    if base + frame_end >= at.size:
        return False  # no zero tail after the frame: it is not inside a preallocation
    zeros = zeros_from(at.fd, base + at.pos, at.size) - base
    if zeros >= frame_end:
        return False  # the whole frame is there (and wrong): damage
    if _holds_a_frame(data, at.pos + LENGTH_BYTES, min(zeros, body_end)):
        return False  # a damaged length whose body would run over later (acknowledged) frames: damage
    if zeros <= body_end:
        return True  # cut inside the body
    written = zeros - body_end
    return hashlib.sha256(data[at.pos + LENGTH_BYTES : body_end]).digest()[:written] == data[body_end:zeros]


#: A run of zero bytes: a frame's length field holds one (docs/FORMAT.md §7), a canonical JSON body none.
_ZERO_RUNS = re.compile(rb"\x00+")
#: The one length field with no leading zero byte: MAX_FRAME_BYTES itself.
_LARGEST_LENGTH = MAX_FRAME_BYTES.to_bytes(LENGTH_BYTES, "big")


def _holds_a_frame(data: bytes, start: int, stop: int) -> bool:
    """Whether a whole, valid frame starts in ``data[start:stop]`` (its digest checked).

    A frame's length (1..MAX_FRAME_BYTES, big-endian) starts with a zero
    byte, but for MAX_FRAME_BYTES itself, and is not four zeros: so in a
    run of zeros only its last three offsets can start one. The scan is
    run only at a frame that failed its digest; a digest match by chance
    is SHA-256's 2**-256.
    """
    starts = [
        p for run in _ZERO_RUNS.finditer(data, start, stop) for p in range(max(run.start(), run.end() - 3), run.end())
    ]
    p = data.find(_LARGEST_LENGTH, start, stop)
    while p != -1:
        starts.append(p)
        p = data.find(_LARGEST_LENGTH, p + 1, stop)
    for p in starts:
        if p + FRAME_OVERHEAD > len(data):
            continue
        (length,) = _UNPACK_LENGTH(data, p)
        end = p + LENGTH_BYTES + length
        if 0 < length <= MAX_FRAME_BYTES and end + DIGEST_BYTES <= len(data):
            if hashlib.sha256(data[p + LENGTH_BYTES : end]).digest() == data[end : end + DIGEST_BYTES]:
                return True
    return False


class ScanOptions(TypedDict, total=False):
    """The keywords of `scan_frames`, which `read_frames` passes on to it as they are."""

    allow_torn_tail: bool
    end: SegmentEnd | None
    start: int
    allow_zero_tail: bool


def read_frames(file: BinaryIO, path: str | None = None, **options: Unpack[ScanOptions]) -> Iterator[Frame]:
    """Yield every complete frame of `file` from `start`, verifying each (`options` are `scan_frames`').

    Raises `CorruptStore` (with path and offset) for a length outside
    1..MAX_FRAME_BYTES, a digest mismatch or a body that is not UTF-8 JSON.
    An incomplete final frame is a torn tail when `allow_torn_tail` (the
    newest segment) and no complete frame starts after it; it is recorded in
    `end` (if given) and iteration stops. Otherwise it is `CorruptStore`.

    Frames are parsed one at a time: a body is read only after its length has
    been checked, and memory holds one frame plus one read chunk, never the
    whole file. `scan_frames` is the same reader without the `Frame` objects.
    """
    for offset, size, value in scan_frames(file, path, **options):
        yield Frame(offset, size, value)


def _torn_or_corrupt(
    fd: int, path: str | None, offset: int, size: int, allow_torn_tail: bool, end: SegmentEnd, what: str
) -> None:
    if not allow_torn_tail:
        raise CorruptStore(path, offset, f"{what} in a segment that is not the newest")
    later = find_complete_frame(fd, offset, size)
    if later is not None:
        raise CorruptStore(path, offset, f"{what}, but a complete frame starts at byte {later}: the length was damaged")
    end.torn_offset = offset
