"""Lines of bounded length: splitting a byte stream into request lines without ever holding an overlong one.

Apart from the protocol's meaning (`walqueue.protocol.requests`) because it is
the one part the front ends use differently: the consumer reads a pipe with
`read_bounded_line`/`discard_line`, the server feeds socket reads to a
`LineReader`. Neither ever holds more than `MAX_LINE_BYTES` (plus one read)
of a line, whatever a client sends. No I/O of its own.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Final

from walqueue.format import MAX_FRAME_BYTES

__all__ = ["MAX_LINE_BYTES", "OVERLONG", "LineReader", "RequestLine", "discard_line", "read_bounded_line"]

#: The longest request line (newline excluded) that is read and parsed. A
#: stored transaction's frame body is at most `MAX_FRAME_BYTES`, and a request
#: may spell each character of what it stores as a 6-byte ``\\uXXXX`` escape
#: (the worst ratio: one ASCII byte stored, six sent), so no request that could
#: be stored is longer than 6 x 16 MiB; 1 MiB more covers the envelope (op,
#: id, field names, whitespace between tokens). A longer line is refused with
#: `BadRequest` after reading at most this many bytes of it plus one read's
#: worth; the rest of it is discarded unread into memory.
MAX_LINE_BYTES: Final = 6 * MAX_FRAME_BYTES + 2**20


class _Overlong(enum.Enum):
    OVERLONG = "overlong"


#: What `LineReader` and `read_bounded_line` give for a line longer than their limit.
OVERLONG: Final = _Overlong.OVERLONG

#: One item of what `LineReader.feed` gives: a complete line, or `OVERLONG`.
RequestLine = bytearray | _Overlong


class LineReader:
    """Splits a byte stream into lines, holding at most `limit` bytes of any one of them.

    `feed` takes the bytes as they arrive and gives back, in order, each
    complete line (its newline included) and `OVERLONG` for a line that grew
    past `limit` bytes (newline excluded): that marker comes as soon as the
    bound is crossed, and the rest of that line, up to its newline, is
    dropped as it arrives. `end` gives the last, unterminated line at end of
    input. No I/O: the caller reads and answers (the h2 style).
    """

    def __init__(self, limit: int = MAX_LINE_BYTES) -> None:
        self._limit = limit
        self._buffer = bytearray()
        self._discarding = False

    @property
    def pending(self) -> int:
        """Bytes held of the current, unfinished line."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[bytearray | _Overlong]:
        newline = data.find(b"\n")
        if 0 <= newline == len(data) - 1 and newline <= self._limit and not self._buffer and not self._discarding:
            return [bytearray(data)]  # the usual read: exactly one whole line, nothing held before it
        lines: list[bytearray | _Overlong] = []
        start = 0
        while True:
            newline = data.find(b"\n", start)
            end = len(data) if newline < 0 else newline
            if self._discarding:
                pass
            elif len(self._buffer) + end - start > self._limit:
                self._buffer = bytearray()
                self._discarding = True
                lines.append(OVERLONG)
            else:
                self._buffer += data[start : end + 1]
            if newline < 0:
                return lines
            if not self._discarding:
                lines.append(self._buffer)
                self._buffer = bytearray()
            self._discarding = False
            start = newline + 1

    def end(self) -> bytearray | None:
        """The unterminated last line at end of input, if any (an overlong one was already reported)."""
        line, self._buffer = self._buffer, bytearray()
        return line if line and not self._discarding else None


def read_bounded_line(readline: Callable[[int], bytes], limit: int = MAX_LINE_BYTES) -> bytearray | _Overlong | None:
    """One line from `readline(size)` (a binary stream's), or `OVERLONG`, or None at end of input.

    Reads at most `limit` + 1 bytes before deciding that a line is too long;
    `discard_line` then drops the rest of it. The line is kept in one
    `bytearray` (no joined copy), since a legitimate line may be 97 MiB.
    """
    line = bytearray()
    while len(line) <= limit:
        chunk = readline(min(2**20, limit + 1 - len(line)))
        if not chunk:
            return line if line else None
        line += chunk
        if chunk.endswith(b"\n"):
            return line
    return OVERLONG


def discard_line(readline: Callable[[int], bytes]) -> None:
    """Drop the rest of a line, up to and including its newline, in bounded chunks."""
    while chunk := readline(2**20):
        if chunk.endswith(b"\n"):
            return
