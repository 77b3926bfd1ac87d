"""The clients' sans-I/O core (the h11 way): calls out as bytes, bytes in as outcomes, and the reconnect rule.

`Exchange` knows nothing of sockets or event loops: `send(call)` gives the
line to write and remembers the call; `receive(data)` takes whatever bytes
arrived and gives back, in order, each answered call with its `Outcome`.
Any number of calls may be in flight (the server answers in order, so the
first answer is always the oldest call's). `Client` drives it with a
blocking socket, `AsyncClient` with asyncio's; neither restates a rule.

A call counts as *sent* once its whole line was handed to the kernel: the
server executes only complete lines, so a call whose line was cut is known
not to have happened, and may be sent again whatever it is.
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from walqueue import KeyConflict, QueueClosed, StaleLease, WalQueueError, WrongStatus
from walqueue.protocol.callsignature import check_class
from walqueue.protocol.calltable import CALLS
from walqueue.protocol.shaping import OutgoingCall

__all__ = ["ClientSettings", "Exchange", "Outcome", "RetryRule", "ServerError", "encode_request", "socket_address"]

DEFAULT_RECONNECT_SECONDS = 10.0


class ServerError(WalQueueError):
    """An answer this client does not understand (a server of another version?)."""


#: The protocol's error names raised as the exception `Queue` raises for the same failure.
_ERRORS: dict[str, type[Exception]] = {
    "KeyConflict": KeyConflict,
    "StaleLease": StaleLease,
    "WrongStatus": WrongStatus,
    "BadRequest": ValueError,
    "FileExistsError": FileExistsError,
}


# Built once: `json.dumps` with options builds a new encoder for every call.
_UTF8_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_ASCII_ENCODER: Final = json.JSONEncoder(allow_nan=False, separators=(",", ":"))


def encode_request(request: Mapping[str, Any]) -> bytes:
    try:
        return (_UTF8_ENCODER.encode(request) + "\n").encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate: sent as its escape, and the server refuses it as Queue does.
        return (_ASCII_ENCODER.encode(request) + "\n").encode("ascii")


@dataclass(slots=True)
class Outcome[T]:
    """What one call came to: its result, or the exception to raise in the caller (never changed once made).

    Not `frozen`, for the reason `OutgoingCall` gives: one is made for every answer.
    """

    value: T | None = None
    error: BaseException | None = None

    def unwrap(self) -> T:
        if self.error is not None:
            raise self.error
        return self.value  # type: ignore[return-value]  # None is a result of its own for the None calls


def _error(answer: Mapping[str, Any]) -> BaseException:
    name, message = answer.get("error"), answer.get("message", "")
    if isinstance(name, str) and name in _ERRORS:
        return _ERRORS[name](message)
    if name == "Fatal":
        return QueueClosed(f"the server's queue is closed: {message}")
    if name == "TooManyClients":
        return ConnectionRefusedError(f"walqueue-serve refused the connection: {message}")
    return ServerError(f"{name}: {message}")


def outcome_of[T](call: OutgoingCall[T], line: bytes | bytearray) -> Outcome[T]:
    """The outcome of `call` from its answer line."""
    try:
        answer = json.loads(line.decode("utf-8", "surrogatepass"))  # as json.loads decodes bytes, minus the sniffing
    except ValueError:
        return Outcome(error=ServerError(f"not JSON: {bytes(line)!r:.200}"))
    if not isinstance(answer, dict) or "ok" not in answer:
        return Outcome(error=ServerError(f"not an answer: {answer!r:.200}"))
    if answer["ok"] is not True:
        return Outcome(error=_error(answer))
    try:
        return Outcome(call.convert(answer))
    except (KeyError, TypeError, ValueError) as error:
        return Outcome(error=ServerError(f"an answer of an unexpected shape: {error!r} in {answer!r:.200}"))


class Exchange:
    """Calls in flight on one connection, oldest first, and the answer bytes not yet split into lines."""

    __slots__ = ("_waiting", "_buffer", "_scanned")

    def __init__(self) -> None:
        self._waiting: deque[OutgoingCall[Any]] = deque()
        self._buffer = bytearray()
        self._scanned = 0  # bytes of the buffer known to hold no newline

    def send(self, call: OutgoingCall[Any]) -> bytes:
        """The line to write for `call`; it is now awaited (in flight once written whole)."""
        self._waiting.append(call)
        return encode_request(call.request)

    def receive(self, data: bytes) -> list[tuple[OutgoingCall[Any], Outcome[Any]]]:
        """Outcomes of the calls `data` completes, oldest first (``b""``: see `lost`)."""
        buffer = self._buffer
        buffer += data
        done: list[tuple[OutgoingCall[Any], Outcome[Any]]] = []
        waiting = self._waiting
        start = 0
        newline = buffer.find(b"\n", self._scanned)  # the bytes before `_scanned` hold no newline
        while newline >= 0:
            line = buffer[start : newline + 1]
            start = newline + 1
            if not waiting:
                raise ServerError(f"an answer no call was waiting for: {bytes(line)!r:.200}")
            call = waiting.popleft()
            done.append((call, outcome_of(call, line)))
            newline = buffer.find(b"\n", start)
        if start:
            del buffer[:start]
        self._scanned = len(buffer)
        return done

    @property
    def in_flight(self) -> int:
        return len(self._waiting)

    def lost(self) -> list[OutgoingCall[Any]]:
        """The connection ended: every call still awaited, oldest first (none is awaited any more)."""
        calls = list(self._waiting)
        self._waiting.clear()
        self._buffer.clear()
        self._scanned = 0
        return calls


#: The longest path a Unix socket address holds on Linux (108 bytes with the final NUL).
MAX_SOCKET_PATH_BYTES = 107


def socket_address(path: str | os.PathLike[str]) -> str:
    """`path` made absolute now, so that a later ``os.chdir`` (a handler's) cannot move it.

    Resolved once, when the client is made, as the engine resolves its
    directory. A relative path whose absolute form is longer than a Unix
    socket address holds stays as given (it works as long as the working
    directory stays; docs/DECISIONS.md says so).
    """
    given = os.fspath(path)
    absolute = os.path.abspath(given)
    return absolute if len(os.fsencode(absolute)) <= MAX_SOCKET_PATH_BYTES else given


class ClientSettings:
    """What both clients are made of: the socket, the timeout of a call, how long to reconnect, closed or not.

    `timeout`: seconds a call may go without progress once sent (None: no
    limit; a `wait` gets its own timeout on top). `reconnect_seconds`: how
    long a call keeps reconnecting after losing its connection.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A client class is made only if each method named for a call takes that call's row's parameters.

        `CallSignatureError` names the method and the parameter otherwise
        (walqueue.protocol.callsignature), so `Client`, `AsyncClient` and any
        subclass agree with the table by construction.
        """
        super().__init_subclass__(**kwargs)
        check_class(cls, CALLS)

    def __init__(
        self,
        socket_path: str | os.PathLike[str],
        *,
        timeout: float | None = 60.0,
        reconnect_seconds: float = DEFAULT_RECONNECT_SECONDS,
    ) -> None:
        self.socket_path = socket_address(socket_path)
        self.timeout = timeout
        self.reconnect_seconds = reconnect_seconds
        self._closed = False
        self._setup()

    def _setup(self) -> None:
        """A client's own state (its connections), made at construction."""

    @property
    def closed(self) -> bool:
        return self._closed

    def _retry_rule(self) -> RetryRule:
        return RetryRule(self.socket_path, self.reconnect_seconds)

    def _call_timeout(self, extra_seconds: float) -> float | None:
        return None if self.timeout is None else self.timeout + extra_seconds


class RetryRule:
    """The reconnect rule of both clients for one call: after a failed try, may it try again, and when?

    A call that was sent is tried again only if it is retry-safe
    (`OutgoingCall.retry`); one that was not sent always may. The pauses
    double from 20 ms up to 0.5 s, until `seconds` have passed since the
    first failure; then `ConnectionError`.
    """

    def __init__(self, socket_path: str, seconds: float) -> None:
        self._socket_path = socket_path
        self._seconds = seconds
        self._give_up_at: float | None = None
        self._pause = 0.02

    def lost(self, call: OutgoingCall[Any], error: BaseException) -> ConnectionError | None:
        """The error for a sent `call` whose connection was lost, or None if it may be sent again."""
        if call.retry:
            return None
        return ConnectionError(
            f"the connection to {self._socket_path} was lost during {call.op!r}: "
            f"it may or may not have happened ({type(error).__name__}: {error})"
        )

    def pause(self, error: BaseException) -> float:
        """Seconds to sleep before the next try; raises `ConnectionError` once the time is up."""
        now = time.monotonic()
        if self._give_up_at is None:
            self._give_up_at = now + self._seconds
        if now >= self._give_up_at:
            raise ConnectionError(
                f"cannot reach walqueue-serve at {self._socket_path} "
                f"for {self._seconds:g} s ({type(error).__name__}: {error})"
            ) from error
        pause = min(self._pause, self._give_up_at - now)
        self._pause = min(self._pause * 2, 0.5)
        return pause
