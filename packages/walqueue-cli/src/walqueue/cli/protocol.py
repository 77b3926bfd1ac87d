"""The JSON-lines protocol of the consumer (SPEC §6), with no I/O of its own.

Everything that decides what a line means and what its answer says lives
here, so that it can be tested without a process, a pipe or a directory; the
loop in `__main__` only moves bytes. The rules this module enforces:

- One line is one request: a JSON object with ``"op"``, the Python API's
  argument names, and an optional ``"id"`` that every answer echoes, whatever
  JSON value it is (also in a `BadRequest` answer, as long as the line was a
  JSON object and its id can be written back).
- A request is checked completely before the queue is called: a bad line
  never reaches the queue, so it can never change anything.
- The queue's own `TypeError`/`ValueError` means "bad argument, nothing
  written" (SPEC §2), so it is a `BadRequest` too. `KeyConflict`,
  `StaleLease` and `WrongStatus` keep their names (`NAMED_ERRORS`). Any
  other failure of an operation (an `OSError` poisons the queue) is
  `Fatal`: the caller must stop.

Stricter than `json.loads`, on purpose, because a durable queue should never
guess: duplicate field names, numbers outside the range of a double (which
`json.loads` turns into infinity), ``NaN``/``Infinity`` literals and
nesting deeper than `MAX_DEPTH` levels are all `BadRequest`, and so is a
line longer than `MAX_LINE_BYTES`, which no front end reads whole
(`walqueue.cli.lines`, re-exported here, discards the rest of it).

The ``wait`` op is answered by the front end's `Waiter`: the server knows
when another connection commits; a consumer that owns its queue alone has
nobody else to wait for (`no_other_writer`).
"""

from __future__ import annotations

import enum
import json
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from walqueue import KeyConflict, Lease, StaleLease, Status, Task, WrongStatus
from walqueue.cli.lines import MAX_LINE_BYTES, OVERLONG, LineReader, discard_line, read_bounded_line

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
    "read_bounded_line",
    "respond",
    "success_answer",
    "Waiter",
]

#: Deepest nesting of arrays and objects accepted in one request line. The
#: interpreter's JSON codec gives up somewhere near 1,500 levels, and an
#: answer nests a returned payload a few levels deeper than the request that
#: stored it; this bound keeps every accepted payload writable in any answer.
MAX_DEPTH: Final = 256

#: The longest ``wait`` a request may ask for (one day), in seconds.
MAX_WAIT_SECONDS: Final = 86_400

#: Times and counters are ints in ``[0, 2**63)`` (the team's documented bound).
_INT_BOUND: Final = 2**63

_STATUSES: Final = ("ready", "leased", "completed", "dead")

# Only these bytes are whitespace in JSON (RFC 8259); a line of nothing else
# is blank. Form feeds and the like are not, and make the line a BadRequest.
_JSON_WHITESPACE: Final = b" \t\r\n"

_LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")


class _Absent(enum.Enum):
    ABSENT = "absent"


#: The id of a request that had none (distinct from ``"id": null``).
NO_ID: Final = _Absent.ABSENT


class QueueLike(Protocol):
    """What the protocol needs from a queue: the Python API of SPEC §2."""

    def put(
        self,
        task_id: str,
        payload: Any,
        *,
        key: str | None = ...,
        available_at: int = ...,
        max_attempts: int = ...,
    ) -> str: ...

    def put_many(self, tasks: Any) -> Sequence[str]: ...

    def reserve(self, worker: str, *, now: int, lease_seconds: int, limit: int = ...) -> Sequence[Lease]: ...

    def ack(self, lease: Lease, *, now: int) -> None: ...

    def release(self, lease: Lease, *, now: int, delay: int = ...) -> None: ...

    def extend(self, lease: Lease, *, now: int, lease_seconds: int) -> Lease: ...

    def redrive(self, task_id: str, *, available_at: int, extra_attempts: int = ...) -> None: ...

    def cancel(self, task_id: str) -> None: ...

    def get(self, task_id: str) -> Task | None: ...

    def tasks(self, status: Status | None = ...) -> Sequence[Task]: ...

    def stats(self) -> Mapping[str, Any]: ...

    def compact(self) -> None: ...


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
    """``{"ok": true, ...fields}``, with the id when the request had one."""
    return _with_id(request_id, {"ok": True, **fields})


def error_answer(name: str, message: str, request_id: Any = NO_ID) -> dict[str, Any]:
    """``{"ok": false, "error": NAME, "message": TEXT}``, with the id when there was one."""
    return _with_id(request_id, {"ok": False, "error": name, "message": message})


def bad_request_answer(bad: BadRequest) -> dict[str, Any]:
    return error_answer("BadRequest", bad.message, bad.request_id)


def overlong_answer(limit: int = MAX_LINE_BYTES) -> dict[str, Any]:
    """The answer to a line longer than `limit` bytes (it was not read whole, so it has no id)."""
    return error_answer("BadRequest", f"line longer than {limit} bytes (the rest of it is discarded unread)")


def _escape_surrogate(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def encode_answer(answer: Mapping[str, Any]) -> bytes:
    """One answer as one line of UTF-8 JSON, newline included.

    Control characters inside strings are always escaped, so the line holds
    exactly one newline: its end. A lone surrogate (JSON may spell one as
    ``"\\ud800"``, and an echoed id must come back as it was sent) cannot be
    written in UTF-8, so it is written as that same escape; nothing else is.
    """
    text = json.dumps(answer, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return (_LONE_SURROGATE.sub(_escape_surrogate, text) + "\n").encode("utf-8")


def is_blank(line: bytes | bytearray) -> bool:
    """A line of JSON whitespace only is skipped without an answer."""
    return not line.strip(_JSON_WHITESPACE)


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
        self.outer_duplicates: set[str] = set()

    def object_from_pairs(self, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        duplicates: set[str] = set()
        for name, value in pairs:
            if name in result:
                duplicates.add(name)
            result[name] = value
        if duplicates:
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
    hooks = _StrictDecoding()
    try:
        value = json.loads(
            text,
            object_pairs_hook=hooks.object_from_pairs,
            parse_float=hooks.number,
            parse_constant=hooks.constant,
        )
    except RecursionError:
        return BadRequest(f"not JSON: nested too deeply (the limit is {MAX_DEPTH} levels)")
    except ValueError as error:
        return BadRequest(f"not JSON: {error}")
    if not isinstance(value, dict):
        return BadRequest(f"a request must be a JSON object, not {_describe(value)}")

    request_id = value.get("id", NO_ID)
    if "id" in hooks.outer_duplicates:
        return BadRequest("duplicate field 'id'")
    if request_id is not NO_ID:
        if _has_non_finite(request_id):
            return BadRequest("field 'id' holds a number that is out of range")
        if _depth(request_id) >= MAX_DEPTH:
            return BadRequest(f"field 'id' is nested too deeply (the limit is {MAX_DEPTH} levels)")
    if hooks.problems:
        return BadRequest(hooks.problems[0], request_id)
    if _depth(value) > MAX_DEPTH:
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


def _describe(value: Any) -> str:
    """The JSON kind of a value, with the value itself when it is short."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {'true' if value else 'false'}"
    if isinstance(value, int):
        return f"integer {_shorten(str(value))}"
    if isinstance(value, float):
        return f"number {_shorten(repr(value))}"
    if isinstance(value, str):
        return f"string {_quote(value)}"
    if isinstance(value, list):
        return "an array"
    return "an object"


# ---------------------------------------------------------------------------
# Argument checks: each takes the field's label and its JSON value, returns
# the value to hand to the queue, or raises _Invalid with the whole message.

_Check = Callable[[str, Any], Any]


def _check_name(label: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _Invalid(f"field {label!r} must be a string, not {_describe(value)}")
    if not value:
        raise _Invalid(f"field {label!r} must not be empty")
    return value


def _check_str(label: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _Invalid(f"field {label!r} must be a string, not {_describe(value)}")
    return value


def _check_key(label: str, value: Any) -> str | None:
    # null means "no key given": the Python API's default, the task id.
    return None if value is None else _check_name(label, value)


def _bounded_int(label: str, value: Any, minimum: int) -> int:
    if type(value) is not int:
        raise _Invalid(f"field {label!r} must be an integer >= {minimum}, not {_describe(value)}")
    if value < minimum:
        raise _Invalid(f"field {label!r} must be >= {minimum}, got {value}")
    if value >= _INT_BOUND:
        raise _Invalid(f"field {label!r} must be < 2**63, got {_shorten(str(value))}")
    return value


def _check_time(label: str, value: Any) -> int:
    return _bounded_int(label, value, 0)


def _check_count(label: str, value: Any) -> int:
    return _bounded_int(label, value, 1)


def _check_payload(label: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Invalid(f"field {label!r} must be a JSON object, not {_describe(value)}")
    return value


def _check_lease(label: str, value: Any) -> Lease:
    if not isinstance(value, dict):
        raise _Invalid(f"field {label!r} must be a lease object, not {_describe(value)}")
    try:
        return Lease.from_dict(value)
    except (TypeError, ValueError) as error:
        raise _Invalid(f"field {label!r} is not a lease object: {error}") from None


def _check_status(label: str, value: Any) -> str | None:
    if value is None or (isinstance(value, str) and value in _STATUSES):
        return value
    choices = ", ".join(repr(status) for status in _STATUSES)
    raise _Invalid(f"field {label!r} must be null or one of {choices}, not {_describe(value)}")


def _check_timeout(label: str, value: Any) -> float:
    if type(value) not in (int, float):
        raise _Invalid(f"field {label!r} must be a number of seconds, not {_describe(value)}")
    if not 0 <= value <= MAX_WAIT_SECONDS:
        raise _Invalid(f"field {label!r} must be in [0, {MAX_WAIT_SECONDS}] seconds, got {_shorten(repr(value))}")
    return float(value)


@dataclass(frozen=True, slots=True)
class _Fields:
    """The argument names of one call, each with its check."""

    required: Mapping[str, _Check]
    optional: Mapping[str, _Check] = field(default_factory=dict)

    def check(self, source: Mapping[str, Any], ignore: frozenset[str], where: str) -> dict[str, Any]:
        """Checked arguments: the unknown, the missing, then each value in table order."""
        known = self.required.keys() | self.optional.keys() | ignore
        unknown = sorted(name for name in source if name not in known)
        if unknown:
            names = ", ".join(_quote(name) for name in unknown)
            raise _Invalid(f"{where}unknown field{'s' if len(unknown) > 1 else ''} {names}")
        missing = [name for name in self.required if name not in source]
        if missing:
            names = ", ".join(repr(name) for name in missing)
            raise _Invalid(f"{where}missing field{'s' if len(missing) > 1 else ''} {names}")
        checked: dict[str, Any] = {}
        for name, check in (*self.required.items(), *self.optional.items()):
            if name in source:
                checked[name] = check(f"{where.removesuffix(': ')}.{name}" if where else name, source[name])
        return checked


_PUT_FIELDS: Final = _Fields(
    required={"task_id": _check_name, "payload": _check_payload},
    optional={"key": _check_key, "available_at": _check_time, "max_attempts": _check_count},
)


def _check_put_items(label: str, value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise _Invalid(f"field {label!r} must be an array of put objects, not {_describe(value)}")
    items: list[dict[str, Any]] = []
    for index, item in enumerate(value):
        where = f"{label}[{index}]"
        if not isinstance(item, dict):
            raise _Invalid(f"{where} must be a put object, not {_describe(item)}")
        items.append(_PUT_FIELDS.check(item, frozenset(), f"{where}: "))
    return items


# ---------------------------------------------------------------------------
# The operations: their arguments, the call, the answer's fields.


def _put(queue: QueueLike, arguments: Mapping[str, Any], waiter: Waiter) -> dict[str, Any]:
    options = {name: value for name, value in arguments.items() if name not in ("task_id", "payload")}
    return {"task_id": queue.put(arguments["task_id"], arguments["payload"], **options)}


def _put_many(queue: QueueLike, arguments: Mapping[str, Any], waiter: Waiter) -> dict[str, Any]:
    return {"task_ids": list(queue.put_many(arguments["tasks"]))}


def _reserve(queue: QueueLike, arguments: Mapping[str, Any], waiter: Waiter) -> dict[str, Any]:
    options = {name: value for name, value in arguments.items() if name != "worker"}
    leases = queue.reserve(arguments["worker"], **options)
    return {"leases": [lease.to_dict() for lease in leases]}


def _ack(queue: QueueLike, arguments: Mapping[str, Any], waiter: Waiter) -> dict[str, Any]:
    queue.ack(arguments["lease"], now=arguments["now"])
    return {}


def _release(queue: QueueLike, arguments: Mapping[str, Any], waiter: Waiter) -> dict[str, Any]:
    options = {name: value for name, value in arguments.items() if name != "lease"}
    queue.release(arguments["lease"], **options)
    return {}


def _extend(queue: QueueLike, arguments: Mapping[str, Any], waiter: Waiter) -> dict[str, Any]:
    lease = queue.extend(arguments["lease"], now=arguments["now"], lease_seconds=arguments["lease_seconds"])
    return {"lease": lease.to_dict()}


def _redrive(queue: QueueLike, arguments: Mapping[str, Any], waiter: Waiter) -> dict[str, Any]:
    options = {name: value for name, value in arguments.items() if name != "task_id"}
    queue.redrive(arguments["task_id"], **options)
    return {}


def _cancel(queue: QueueLike, arguments: Mapping[str, Any], waiter: Waiter) -> dict[str, Any]:
    queue.cancel(arguments["task_id"])
    return {}


def _get(queue: QueueLike, arguments: Mapping[str, Any], waiter: Waiter) -> dict[str, Any]:
    task = queue.get(arguments["task_id"])
    return {"task": None if task is None else task.to_dict()}


def _tasks(queue: QueueLike, arguments: Mapping[str, Any], waiter: Waiter) -> dict[str, Any]:
    found = queue.tasks(arguments["status"]) if "status" in arguments else queue.tasks()
    return {"tasks": [task.to_dict() for task in found]}


def _stats(queue: QueueLike, arguments: Mapping[str, Any], waiter: Waiter) -> dict[str, Any]:
    return {"stats": dict(queue.stats())}


def _compact(queue: QueueLike, arguments: Mapping[str, Any], waiter: Waiter) -> dict[str, Any]:
    queue.compact()
    return {}


def _wait(queue: QueueLike, arguments: Mapping[str, Any], waiter: Waiter) -> dict[str, Any]:
    return {"committed": bool(waiter(arguments["timeout"]))}


@dataclass(frozen=True, slots=True)
class _Op:
    fields: _Fields
    invoke: Callable[[QueueLike, Mapping[str, Any], Waiter], dict[str, Any]]


#: Every op of SPEC §6, ``wait`` (the server's issue, #17) and ``extend``, ``redrive``, ``cancel``
#: (#16), with its arguments and its call. A lease object needs only task_id, worker and generation.
OPS: Final[Mapping[str, _Op]] = {
    "put": _Op(_PUT_FIELDS, _put),
    "put_many": _Op(_Fields({"tasks": _check_put_items}), _put_many),
    "reserve": _Op(
        _Fields(
            {"worker": _check_name, "now": _check_time, "lease_seconds": _check_count},
            {"limit": _check_count},
        ),
        _reserve,
    ),
    "ack": _Op(_Fields({"lease": _check_lease, "now": _check_time}), _ack),
    "release": _Op(_Fields({"lease": _check_lease, "now": _check_time}, {"delay": _check_time}), _release),
    "extend": _Op(_Fields({"lease": _check_lease, "now": _check_time, "lease_seconds": _check_count}), _extend),
    "redrive": _Op(
        _Fields({"task_id": _check_name, "available_at": _check_time}, {"extra_attempts": _check_count}),
        _redrive,
    ),
    "cancel": _Op(_Fields({"task_id": _check_name}), _cancel),
    "get": _Op(_Fields({"task_id": _check_str}), _get),
    "tasks": _Op(_Fields({}, {"status": _check_status}), _tasks),
    "stats": _Op(_Fields({}), _stats),
    "compact": _Op(_Fields({}), _compact),
    "wait": _Op(_Fields({"timeout": _check_timeout}), _wait),
}

_ENVELOPE: Final = frozenset({"op", "id"})


def _validate(request: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    if "op" not in request:
        raise _Invalid("missing field 'op'")
    op = request["op"]
    if not isinstance(op, str):
        raise _Invalid(f"field 'op' must be a string, not {_describe(op)}")
    if op not in OPS:
        raise _Invalid(f"unknown op {_quote(op)} (known: {', '.join(sorted(OPS))})")
    return op, OPS[op].fields.check(request, _ENVELOPE, "")


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
        fields = OPS[request.op].invoke(queue, request.arguments, waiter)
    except USABLE_AFTER.get(request.op, ()) as error:
        return Reply(error_answer(type(error).__name__, _message(error), request_id))
    except NAMED_ERRORS as error:
        # The class's own name, also for a subclass of it (a client matches names, not subclasses).
        name = next(named.__name__ for named in NAMED_ERRORS if isinstance(error, named))
        return Reply(error_answer(name, _message(error), request_id))
    except (TypeError, ValueError) as error:
        # SPEC §2: a bad argument is refused before anything is written.
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
