"""One connection's side of the protocol as bytes in and bytes out, with no I/O of its own (the h11 way).

The event loop (`walqueue.serve.eventloop`) owns the sockets; a `Conversation`
holds what a connection sent but was not yet executed and what it was
answered but did not yet read, and says what the loop may do next:

- `received(data)` splits the stream into request lines (`LineReader`:
  no line held beyond the line bound); ``b""`` is the end of the stream,
  whose unterminated last line still counts as a request.
- `next_line()` hands out the next request in arrival order, unless a
  parked ``wait`` holds the connection (answers stay in order) or the
  answers not yet read have reached `OUTPUT_LIMIT` (then nothing more runs
  for it: a client that pipelines without reading holds at most one
  answer beyond that bound).
- `wants_input()` is false while the requests not yet executed reach
  `INPUT_LIMIT` bytes, or once the stream ended: the loop stops reading,
  and the kernel's buffers push back on the client.
- `answer(line)`, `to_send()`, `sent(n)`: the output buffer.
- `finished()`: the stream ended and everything was executed and written.

`seen` is the last sequence a request of this connection looked at: a
``wait`` counts only commits after it, so a ``reserve`` that found nothing
followed by ``wait`` misses no commit made in between.
"""

from __future__ import annotations

from collections import deque
from dataclasses import KW_ONLY, InitVar, dataclass, field
from typing import Any, Final

from walqueue.protocol.lines import OVERLONG, LineReader, RequestLine

__all__ = ["INPUT_LIMIT", "OUTPUT_LIMIT", "Conversation", "Line"]

#: Bytes of complete requests not yet executed before the loop stops reading a connection.
INPUT_LIMIT: Final = 2**20
#: Bytes of answers not yet read before the loop stops executing a connection's requests.
OUTPUT_LIMIT: Final = 2**20

#: A request line (newline included), or `OVERLONG` for one that crossed the line bound.
Line = RequestLine


@dataclass(slots=True, eq=False, repr=False)
class Conversation:
    """The buffers and the position of one connection; see the module's docstring."""

    number: int
    seen: int
    _: KW_ONLY
    line_limit: InitVar[int]
    #: The deadline (monotonic seconds) of a parked ``wait``, or None when none is parked.
    parked_until: float | None = field(default=None, init=False)
    #: The id of the parked ``wait`` request (`protocol.NO_ID` when it had none).
    parked_id: Any = field(default=None, init=False)
    answered: int = field(default=0, init=False)
    _reader: LineReader = field(init=False)
    _pending: deque[Line] = field(default_factory=deque, init=False)
    _pending_bytes: int = field(default=0, init=False)
    _output: bytearray = field(default_factory=bytearray, init=False)
    _ended: bool = field(default=False, init=False)

    def __post_init__(self, line_limit: int) -> None:
        self._reader = LineReader(line_limit)

    # -- input ---------------------------------------------------------------------

    def received(self, data: bytes) -> None:
        """Bytes the peer sent; ``b""`` means it will send no more."""
        if self._ended:
            return
        if data:
            lines: list[Line] = self._reader.feed(data)
        else:
            self._ended = True
            last = self._reader.end()
            lines = [] if last is None else [last]
        for line in lines:
            self._pending.append(line)
            self._pending_bytes += 0 if line is OVERLONG else len(line)

    @property
    def ended(self) -> bool:
        return self._ended

    def wants_input(self) -> bool:
        return not self._ended and self._pending_bytes < INPUT_LIMIT

    def runnable(self) -> bool:
        """Whether `next_line` would hand out a request now."""
        return bool(self._pending) and self.parked_until is None and len(self._output) < OUTPUT_LIMIT

    def next_line(self) -> Line | None:
        # `runnable()`, spelled out: this runs once per request.
        if not self._pending or self.parked_until is not None or len(self._output) >= OUTPUT_LIMIT:
            return None
        line = self._pending.popleft()
        self._pending_bytes -= 0 if line is OVERLONG else len(line)
        return line

    def park(self, until: float, request_id: Any) -> None:
        """A ``wait`` holds this connection until `until` or a commit; later requests stay queued."""
        self.parked_until = until
        self.parked_id = request_id

    def unpark(self) -> Any:
        """The parked ``wait`` is answered now; returns its request id."""
        request_id, self.parked_id, self.parked_until = self.parked_id, None, None
        return request_id

    def drop_pending(self) -> int:
        """Forget the requests not started (the server stops); returns how many there were."""
        count = len(self._pending)
        self._pending.clear()
        self._pending_bytes = 0
        return count

    # -- output --------------------------------------------------------------------

    def answer(self, line: bytes) -> None:
        self._output += line
        self.answered += 1

    def to_send(self) -> bytearray:
        """The answers not yet sent, as they are (no copy): hand it to `send`, then call `sent`; never keep it."""
        return self._output

    def sent(self, count: int) -> None:
        del self._output[:count]

    @property
    def unsent(self) -> int:
        return len(self._output)

    def finished(self) -> bool:
        return self._ended and not self._pending and self.parked_until is None and not self._output
