"""The JSON-lines protocol of the consumer (CONTRACT §6), with no I/O of its own.

Everything that decides what a line means and what its answer says lives
here, so that it can be tested without a process, a pipe or a directory; the
loop in `__main__` only moves bytes. The rules this module enforces:

- One line is one request: a JSON object with ``"op"``, the Python API's
  argument names, and an optional ``"id"`` that every answer echoes, whatever
  JSON value it is (also in a `BadRequest` answer, as long as the line was a
  JSON object and its id can be written back).
- The ops are the engine's table of calls (`walqueue.protocol.calltable.CALLS`):
  a request's fields are its call's arguments, each checked by its kind,
  first for its JSON shape, then by the engine's own value rule with the
  limits `Queue` applies (one acceptor per value, in every layer), and the
  answer's field is the call's. Nothing here names an op.
- A request is checked completely before the queue is called: a bad line
  never reaches the queue, so it can never change anything.
- The queue's own `TypeError`/`ValueError` means "bad argument, nothing
  written" (CONTRACT §2), so it is a `BadRequest` too. `KeyConflict`,
  `StaleLease` and `WrongStatus` keep their names (`NAMED_ERRORS`). Any
  other failure of an operation (an `OSError` poisons the queue) is
  `Fatal`: the caller must stop.

Stricter than `json.loads`, on purpose, because a durable queue should never
guess: duplicate field names, numbers outside the range of a double (which
`json.loads` turns into infinity), ``NaN``/``Infinity`` literals and
nesting deeper than `MAX_DEPTH` levels are all `BadRequest`, and so is a
line longer than `MAX_LINE_BYTES`, which no front end reads whole
(`walqueue.protocol.lines`, re-exported here, discards the rest of it).

The ``wait`` op is answered by the front end's `Waiter`: the server knows
when another connection commits; a consumer that owns its queue alone has
nobody else to wait for (`no_other_writer`).
"""

from __future__ import annotations

import enum
import json
import math
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO, Final

from walqueue import KeyConflict, StaleLease, WrongStatus
from walqueue.protocol.callkinds import MAX_WAIT_SECONDS, BadArgument, describe
from walqueue.protocol.calltable import CALLS, Call
from walqueue.protocol.lines import MAX_LINE_BYTES, OVERLONG, LineReader, discard_line, read_bounded_line

__all__ = [
    "MAX_DEPTH",
    "MAX_LINE_BYTES",
    "MAX_WAIT_SECONDS",
    "NAMED_ERRORS",
    "USABLE_AFTER",
    "NO_ID",
    "OPS",
    "BadRequest",
    "LineReader",
    "OVERLONG",
    "QueueLike",
    "Reply",
    "Request",
    "bad_request_answer",
    "encode_answer",
    "error_answer",
    "execute",
    "discard_line",
    "is_blank",
    "no_other_writer",
    "overlong_answer",
    "parse_request",
    "request_lines",
    "read_bounded_line",
    "respond",
    "success_answer",
    "Waiter",
]

#: Deepest nesting of arrays and objects accepted in one request line: a
#: bound on the decoder's work and on what an echoed id makes an answer
#: nest (the interpreter's JSON codec gives up somewhere near 1,500 levels).
#: Not a payload rule: a payload's depth is the engine's
#: (`walqueue.engine.validate.MAX_PAYLOAD_DEPTH`, far below this).
MAX_DEPTH: Final = 256

# Only these bytes are whitespace in JSON (RFC 8259); a line of nothing else
# is blank. Form feeds and the like are not, and make the line a BadRequest.
_JSON_WHITESPACE: Final = b" \t\r\n"

_JSON_WHITESPACE_TEXT: Final = _JSON_WHITESPACE.decode("ascii")
_NO_NAMES: Final[frozenset[str]] = frozenset()

_LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")


class _Absent(enum.Enum):
    ABSENT = "absent"


#: The id of a request that had none (distinct from ``"id": null``).
NO_ID: Final = _Absent.ABSENT


#: What the protocol needs from a queue: a method for every call of `CALLS`,
#: named and shaped as `Queue`'s (each request calls ``getattr(queue, op)``).
QueueLike = object


#: ``waiter(timeout) -> committed``: block until another request commits a
#: transaction (True) or `timeout` seconds pass (False).
Waiter = Callable[[float], bool]


def no_other_writer(timeout: float) -> bool:
    """The ``wait`` of a front end that is its queue's only client: nothing else can commit.

    It sleeps the timeout out and answers False, which is exactly what
    `Queue.wait` would do with no other writer.
    """
    time.sleep(timeout)
    return False


@dataclass(frozen=True, slots=True)
class Request:
    """A fully validated request: `arguments` can be handed to the queue as they are."""

    op: str
    arguments: Mapping[str, Any]
    request_id: Any = NO_ID


@dataclass(frozen=True, slots=True)
class BadRequest:
    """A line that must not reach the queue, and exactly why."""

    message: str
    request_id: Any = NO_ID


@dataclass(frozen=True, slots=True)
class Reply:
    """One answer, and whether the consumer must stop after writing it."""

    answer: dict[str, Any]
    fatal: bool = False


# ---------------------------------------------------------------------------
# Answers


def _with_id(request_id: Any, answer: dict[str, Any]) -> dict[str, Any]:
    if request_id is NO_ID:
        return answer
    return {"id": request_id, **answer}


def success_answer(fields: Mapping[str, Any], request_id: Any = NO_ID) -> dict[str, Any]:
    """``{"ok": true, ...fields}``, with the id when the request had one (built in place: one dict)."""
    answer: dict[str, Any] = {"ok": True} if request_id is NO_ID else {"id": request_id, "ok": True}
    answer.update(fields)
    return answer


def error_answer(name: str, message: str, request_id: Any = NO_ID) -> dict[str, Any]:
    """``{"ok": false, "error": NAME, "message": TEXT}``, with the id when there was one."""
    return _with_id(request_id, {"ok": False, "error": name, "message": message})


def bad_request_answer(bad: BadRequest) -> dict[str, Any]:
    return error_answer("BadRequest", bad.message, bad.request_id)


def overlong_answer(limit: int = MAX_LINE_BYTES) -> dict[str, Any]:
    """The answer to a line longer than `limit` bytes (it was not read whole, so it has no id)."""
    return error_answer("BadRequest", f"line longer than {limit} bytes (the rest of it is discarded unread)")


#: One encoder for every answer: `json.dumps` with these options builds a new one per call.
_ANSWER_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))

try:  # CPython's C encoder, built once: `JSONEncoder.encode` builds a new one (and its cycle markers) per answer.
    from _json import encode_basestring as _c_encode_str
    from _json import make_encoder as _c_make_encoder
except ImportError:  # pragma: no cover - other interpreters use the pure-Python encoder
    _C_ANSWER_ENCODE = None
else:
    # `_ANSWER_ENCODER`'s own arguments, without cycle tracking: an answer is built from decoded
    # JSON and the queue's results, which hold no cycle (one would end in RecursionError).
    _C_ANSWER_ENCODE = _c_make_encoder(
        None, _ANSWER_ENCODER.default, _c_encode_str, None, ":", ",", False, False, False
    )


def _escape_surrogate(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def encode_answer(answer: Mapping[str, Any]) -> bytes:
    """One answer as one line of UTF-8 JSON, newline included.

    Control characters inside strings are always escaped, so the line holds
    exactly one newline: its end. A lone surrogate (JSON may spell one as
    ``"\\ud800"``, and an echoed id must come back as it was sent) cannot be
    written in UTF-8, so it is written as that same escape; nothing else is.
    """
    if _C_ANSWER_ENCODE is None:  # pragma: no cover
        text = _ANSWER_ENCODER.encode(answer) + "\n"
    else:
        text = "".join(_C_ANSWER_ENCODE(answer, 0)) + "\n"
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # Only a lone surrogate cannot be written in UTF-8: the rare answer pays for the scan.
        return _LONE_SURROGATE.sub(_escape_surrogate, text).encode("utf-8")


def is_blank(line: bytes | bytearray) -> bool:
    """A line of JSON whitespace only is skipped without an answer."""
    return not line.strip(_JSON_WHITESPACE)


def request_lines(requests: BinaryIO, answers: BinaryIO, limit: int = MAX_LINE_BYTES) -> Iterator[bytearray]:
    """The non-blank request lines of a byte stream, until its end.

    One loop for the consumer and the shell's relay, so both refuse an
    overlong line the same way: answered `BadRequest` on `answers` as soon as
    `limit` bytes of it were read, and the rest of it discarded unread.
    """
    while (line := read_bounded_line(requests.readline, limit)) is not None:
        if line is OVERLONG:
            answers.write(encode_answer(overlong_answer(limit)))
            answers.flush()
            discard_line(requests.readline)
            continue
        if not is_blank(line):
            yield line


# ---------------------------------------------------------------------------
# Decoding a line


class _Invalid(Exception):
    """A request that is valid JSON but not a valid request; the text is the message."""


class _StrictDecoding:
    """Hooks for `json.loads` that note what plain `json.loads` would silently accept.

    Problems are collected rather than raised so that the id of an otherwise
    well-formed object can still be echoed with the `BadRequest`.
    """

    def __init__(self) -> None:
        self.problems: list[str] = []
        # The outermost object's hook runs last, so after decoding an object
        # this holds the duplicated names of the request object itself.
        self.outer_duplicates: frozenset[str] | set[str] = _NO_NAMES
        # Built once per thread and reused (`_strict_decoder`): `json.loads`
        # with hooks would build a new decoder for every line.
        self.decoder = json.JSONDecoder(
            object_pairs_hook=self.object_from_pairs, parse_float=self.number, parse_constant=self.constant
        )
        #: The decoder's scanner (`JSONDecoder.raw_decode`'s one step): ``scan(text, index) -> (value, end)``.
        self.scan: Callable[[str, int], tuple[Any, int]] = self.decoder.scan_once  # type: ignore[attr-defined]

    def decode(self, text: str) -> Any:
        """`json.loads(text)` with these hooks, the notes of the last line cleared first."""
        self.problems = []
        self.outer_duplicates = _NO_NAMES
        if text.startswith("{"):
            # The usual request: the decoder's scanner directly, without `JSONDecoder.decode`'s two
            # whitespace matches and calls. Anything it does not take whole (an error, trailing
            # text) goes the long way below, whose exception is the answer's message.
            try:
                value, end = self.scan(text, 0)
            except (StopIteration, ValueError):
                pass
            else:
                if not text[end:].strip(_JSON_WHITESPACE_TEXT):
                    return value
            self.problems = []
            self.outer_duplicates = _NO_NAMES
        if text.startswith("\ufeff"):
            # `json.loads` refuses a byte order mark by name (before any hook runs); its message is the answer's.
            return json.loads(text)
        return self.decoder.decode(text)

    def object_from_pairs(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        result = dict(pairs)  # the last value of a repeated name wins, as in `json.loads`
        if len(result) == len(pairs):  # no name repeated: the usual object, at C speed
            self.outer_duplicates = _NO_NAMES
            return result
        duplicates = {name for name, count in Counter(name for name, _ in pairs).items() if count > 1}
        self.problems.append(f"duplicate field {_quote(min(duplicates))}")
        self.outer_duplicates = duplicates
        return result

    def number(self, text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            self.problems.append(f"number {_shorten(text)} is out of range")
        return value

    @staticmethod
    def constant(name: str) -> Any:
        raise ValueError(f"{name} is not a JSON value")


_DECODERS: Final = threading.local()


def _strict_decoder() -> _StrictDecoding:
    """This thread's `_StrictDecoding` (a line is decoded start to end on one thread, never re-entered)."""
    try:
        hooks: _StrictDecoding = _DECODERS.hooks
    except AttributeError:
        hooks = _DECODERS.hooks = _StrictDecoding()
    return hooks


def _depth(value: Any) -> int:
    """Nesting depth of containers (a scalar is 0), without recursion."""
    deepest = 0
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth + 1)
        pending.extend((child, depth + 1) for child in children)
    return deepest


def _openings(text: str) -> int:
    """How many ``[`` and ``{`` characters `text` holds: a bound on its nesting depth (a C-speed count)."""
    return text.count("[") + text.count("{")


def _has_non_finite(value: Any) -> bool:
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return True
        if isinstance(item, dict):
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


def parse_request(line: bytes | bytearray | str) -> Request | BadRequest:
    """Turn one line into a validated `Request`, or say exactly what is wrong with it."""
    if isinstance(line, (bytes, bytearray)):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as error:
            return BadRequest(f"not UTF-8: byte 0x{line[error.start]:02x} at offset {error.start}")
    else:
        text = line
    hooks = _strict_decoder()
    try:
        value = hooks.decode(text)
    except RecursionError:
        return BadRequest(f"not JSON: nested too deeply (the limit is {MAX_DEPTH} levels)")
    except ValueError as error:
        return BadRequest(f"not JSON: {error}")
    if not isinstance(value, dict):
        return BadRequest(f"a request must be a JSON object, not {describe(value)}")

    request_id = value.get("id", NO_ID)
    if "id" in hooks.outer_duplicates:
        return BadRequest("duplicate field 'id'")
    # Every array or object of the value opened with one of these characters
    # (more of them may sit inside strings), so fewer than the limit bound
    # every depth below it: the walks are skipped for every ordinary line.
    shallow = _openings(text) < MAX_DEPTH
    if request_id is not NO_ID:
        # The number hook notes every non-finite number: without a problem there is none to find.
        if hooks.problems and _has_non_finite(request_id):
            return BadRequest("field 'id' holds a number that is out of range")
        if not shallow and _depth(request_id) >= MAX_DEPTH:
            return BadRequest(f"field 'id' is nested too deeply (the limit is {MAX_DEPTH} levels)")
    if hooks.problems:
        return BadRequest(hooks.problems[0], request_id)
    if not shallow and _depth(value) > MAX_DEPTH:
        return BadRequest(f"request is nested too deeply (the limit is {MAX_DEPTH} levels)", request_id)
    try:
        op, arguments = _validate(value)
    except _Invalid as error:
        return BadRequest(str(error), request_id)
    return Request(op, arguments, request_id)


# ---------------------------------------------------------------------------
# Describing values in messages


def _shorten(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _quote(name: str) -> str:
    return repr(_shorten(name))


# ---------------------------------------------------------------------------
# The operations: the engine's table of calls. A request's fields are its
# call's arguments, checked by their kinds (JSON shape, then the engine's own
# value rule, with `Queue`'s limits); the answer's field is the call's.

#: Every op of the protocol: `walqueue.protocol.calltable.CALLS`.
OPS: Final[Mapping[str, Call[Any]]] = CALLS

_ENVELOPE: Final = frozenset({"op", "id"})


def _validate(request: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    if "op" not in request:
        raise _Invalid("missing field 'op'")
    op = request["op"]
    if not isinstance(op, str):
        raise _Invalid(f"field 'op' must be a string, not {describe(op)}")
    if op not in OPS:
        raise _Invalid(f"unknown op {_quote(op)} (known: {', '.join(sorted(OPS))})")
    try:
        return op, OPS[op].check_json(request, _ENVELOPE)
    except BadArgument as error:
        raise _Invalid(str(error)) from None


# ---------------------------------------------------------------------------
# Running a request


def _message(error: BaseException) -> str:
    return str(error) or type(error).__name__


#: The queue's errors that are answered under their own name: outcomes a
#: client acts on, not bad input. Matched before `ValueError`, since
#: `WrongStatus` is one too (and the others might become one).
NAMED_ERRORS: Final[tuple[type[Exception], ...]] = (KeyConflict, StaleLease, WrongStatus)


#: The `OSError`s after which an op leaves the queue usable (it raised before writing anything):
#: answered under the class's name, not `Fatal`. A compaction that meets an obstacle (a directory
#: named like the file it must create) is one; any other `OSError` poisons the queue.
USABLE_AFTER: Final[Mapping[str, tuple[type[OSError], ...]]] = {"compact": (FileExistsError,)}


def execute(request: Request, queue: QueueLike, waiter: Waiter = no_other_writer) -> Reply:
    """Call the queue and shape its outcome; never raises an `Exception`."""
    request_id = request.request_id
    try:
        call = OPS[request.op]
        method = waiter if call.blocks else getattr(queue, call.name)
        fields = call.answer_fields(call.invoke(method, request.arguments))
    except USABLE_AFTER.get(request.op, ()) as error:
        return Reply(error_answer(type(error).__name__, _message(error), request_id))
    except NAMED_ERRORS as error:
        # The class's own name, also for a subclass of it (a client matches names, not subclasses).
        name = next(named.__name__ for named in NAMED_ERRORS if isinstance(error, named))
        return Reply(error_answer(name, _message(error), request_id))
    except (TypeError, ValueError) as error:
        # CONTRACT §2: a bad argument is refused before anything is written.
        return Reply(error_answer("BadRequest", _message(error), request_id))
    except Exception as error:
        # An OSError has poisoned the queue; anything else is unexpected
        # and leaves its state in doubt. Either way the consumer must stop.
        message = f"{type(error).__name__}: {_message(error)}"
        return Reply(error_answer("Fatal", message, request_id), fatal=True)
    return Reply(success_answer(fields, request_id))


def respond(line: bytes | bytearray | str, queue: QueueLike, waiter: Waiter = no_other_writer) -> Reply:
    """The whole protocol for one non-blank line: parse, then execute or refuse."""
    parsed = parse_request(line)
    if isinstance(parsed, BadRequest):
        return Reply(bad_request_answer(parsed))
    return execute(parsed, queue, waiter)
