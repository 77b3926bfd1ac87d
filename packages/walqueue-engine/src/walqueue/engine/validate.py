"""Argument checks shared by every entry point: `Queue`, the planners and `apply`.

One module decides what a name, a counter and a payload may be, so that a
value accepted live is exactly a value recovery accepts again. Every check
raises `TypeError` for a value of the wrong type and `ValueError` for a value
of the right type outside its bounds, and never changes anything.

Exact types only: a `bool` is not an int, and subclasses of `str`, `int`,
`float`, `dict` or `list` are refused. A subclass may encode differently than
it compares (a str subclass with its own `__str__`, an int enum), and the
queue promises that what it stores is what it gives back, byte for byte.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from walqueue.format.canonical import canonical_json, encode_chunks, encode_chunks_in_order
from walqueue.format.frame import MAX_FRAME_BYTES

__all__ = [
    "MAX_FRAME_BYTES",
    "MAX_INT",
    "MAX_NAME_BYTES",
    "MAX_PAYLOAD_DEPTH",
    "MAX_PAYLOAD_INT_BITS",
    "MAX_RESULT_BYTES",
    "check_result",
    "NAME_JSON_MAX",
    "FITTING_PAYLOAD_BYTES",
    "ERROR_MESSAGE_BYTES",
    "ERROR_TYPE_BYTES",
    "LAST_ERROR_JSON_MAX",
    "LAST_ERROR_ROOM",
    "RECORD_WORST_CASE_EXTRA",
    "TIGHT_ERROR_MESSAGE_BYTES",
    "TRACEBACK_BYTES",
    "check_traceback",
    "cut_text_tail",
    "TIGHT_ERROR_TYPE_BYTES",
    "check_error",
    "check_error_message",
    "check_error_type",
    "check_int",
    "check_last_error_fits",
    "check_name",
    "check_payload",
    "check_queue_options",
    "check_record_fits",
    "check_timeout",
    "cut_text",
    "flat_encoder",
    "SHORT_PAYLOAD_BYTES",
]

#: Task ids, keys and worker names are at most this many UTF-8 bytes (CONTRACT §2).
MAX_NAME_BYTES = 1024

#: The team's bound for every time and counter: 0 <= x <= MAX_INT, so that
#: each one is at most 19 decimal digits in any record or op.
MAX_INT = 2**63 - 1

#: Payloads nest at most this many containers deep, the payload object itself
#: being level 1. A stored payload sits at most 3 levels down in a WAL or
#: snapshot frame ({"ops":[{"payload":...}]} / {"tasks":[{"payload":...}]}),
#: so every frame stays far below the recursion limits of `json.loads` and of
#: any reasonable JSON reader: a payload accepted today can always be decoded
#: again by recovery, whatever the interpreter's recursion limit.
MAX_PAYLOAD_DEPTH = 64

#: Payload ints hold at most this many bits (about 4,214 decimal digits).
#: CPython refuses to convert ints of more than 4,300 digits to or from text
#: by default (`sys.get_int_max_str_digits`), so a larger int written by a
#: process that lifted that limit could not be read back by a default one.
MAX_PAYLOAD_INT_BITS = 14_000
#: The longest stored result's canonical JSON (a task's return value, `Queue.complete`).
MAX_RESULT_BYTES = 64 * 1024

#: What a snapshot body frame ``{"tasks":[record]}`` holding one task may
#: contain besides the canonical JSON of its payload, task id and key, in the
#: worst case over every status. The record's keys, in their canonical
#: (sorted) order, each with the fixed text before its value and the value:
#:
#: ====================================  =====  ==============================  =====
#: fixed text                            bytes  variable part (worst case)      bytes
#: ====================================  =====  ==============================  =====
#: ``{"tasks":[``                           10
#: ``{"attempts":``                         12  19-digit int                       19
#: ``,"available_at":``                     16  19-digit int                       19
#: ``,"deadline":``                         12  19-digit int (or ``null``)         19
#: ``,"generation":``                       14  19-digit int                       19
#: ``,"identity":``                         12  ``"`` + 64 hex + ``"``             66
#: ``,"key":``                               7  canonical key (counted apart)
#: ``,"max_attempts":``                     16  19-digit int                       19
#: ``,"payload":``                          11  payload (counted apart), or
#:                                              ``null`` when completed: at most
#:                                              2 more than ``{}``                  2
#: ``,"status":``                           10  ``"completed"`` (the longest)      11
#: ``,"task":``                              8  canonical task id (counted apart)
#: ``,"worker":``                           10  1,024 one-byte chars, each a
#:                                              6-byte ``\\uXXXX`` escape, + 2
#:                                              quotes (``null`` is shorter)      6146
#: ``}`` ``]}``                              3
#: ====================================  =====  ==============================  =====
#:
#: Fixed text: 10+12+16+12+14+12+7+16+11+10+8+10+3 = 141 bytes. Variable
#: parts: 5 x 19 + 66 + 2 + 11 + 6146 = 6320 bytes. Total 6461 <= 8192, which
#: leaves 1731 bytes of slack. No character expands more than 6-fold under
#: canonical JSON (ensure_ascii=False writes every non-control character as
#: its own UTF-8 bytes; only `"`, `\\` and control characters are escaped, to
#: 2 or 6 bytes), so 6 x 1024 + 2 bounds any worker name. The WAL put op of
#: the same task (``{"ops":[{"available_at":A,"key":K,"max_attempts":M,
#: "op":"put","payload":P,"task":T}],"seq":S}``) has fewer extras (about 160
#: bytes), and every other op is smaller still.
RECORD_WORST_CASE_EXTRA = 8192

#: What a task's last error may add to its snapshot record, whatever its
#: payload: the 1,731 bytes of slack left in `RECORD_WORST_CASE_EXTRA` above
#: (8192 - 6461). The member is ``,"last_error":{"at":N,"attempt":N,
#: "message":M,"type":Y}``: 14 + 6 + 11 + 11 + 8 + 1 = 51 bytes of fixed
#: text, two 19-digit ints (38), and the canonical JSON of M and Y. A last
#: error whose member is longer must be checked against the task's payload
#: and names (`check_last_error_fits`).
LAST_ERROR_ROOM = RECORD_WORST_CASE_EXTRA - 6461

#: An error's message is at most this many UTF-8 bytes (a longer one is cut, with a marker).
ERROR_MESSAGE_BYTES = 2048
#: An error's type is at most this many UTF-8 bytes (a longer one is cut, with a marker).
ERROR_TYPE_BYTES = 256

#: The longest ``,"last_error":{...}`` member (see `LAST_ERROR_ROOM`): every byte of the
#: message and the type a 6-byte escape.
LAST_ERROR_JSON_MAX = 89 + 6 * ERROR_MESSAGE_BYTES + 2 + 6 * ERROR_TYPE_BYTES + 2

#: The bounds of a last error that fits in `LAST_ERROR_ROOM` beside any accepted task:
#: 89 + 6 x 200 + 2 + 6 x 32 + 2 = 1485 <= 1731. A planner cuts an error to these only
#: when the task's payload leaves no room for the usual bounds (a payload within a few
#: KiB of the frame bound).
TIGHT_ERROR_MESSAGE_BYTES = 200
TIGHT_ERROR_TYPE_BYTES = 32

#: A last error's traceback (the "traceback" op, a format extension) is at most this many UTF-8
#: bytes: a longer one keeps its end (where the exception is), cut with a marker. A traceback that
#: would not fit beside its task's payload is not written (the type and message still are).
TRACEBACK_BYTES = 8192

#: The longest canonical JSON of a checked name: every UTF-8 byte a 6-byte
#: ``\\uXXXX`` escape (only `"`, `\\` and control characters are escaped at
#: all, and none expands more), plus the two quotes.
NAME_JSON_MAX = 6 * MAX_NAME_BYTES + 2

#: A payload whose canonical JSON is at most this long passes `check_record_fits`
#: with any two checked names: only a longer one (close to the frame bound)
#: needs its names measured.
FITTING_PAYLOAD_BYTES = MAX_FRAME_BYTES - RECORD_WORST_CASE_EXTRA - 2 * NAME_JSON_MAX

_UNITS = frozenset({str, bool, type(None)})
_CONTAINERS = frozenset({dict, list})


def check_name(value: object, what: str) -> str:
    """Return `value` if it is a storable name (task id, key or worker).

    A name must be an exact, non-empty `str` of at most `MAX_NAME_BYTES`
    UTF-8 bytes that UTF-8 can encode (a lone surrogate cannot be written to
    disk, so it could never be stored and found again).
    """
    if type(value) is not str:
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if 0 < len(value) <= MAX_NAME_BYTES and value.isascii():
        return value  # the usual name: one byte per character, and always encodable
    return _check_text(value, what, MAX_NAME_BYTES, minimum=1)  # the rare one: the general rule for stored text


def check_int(value: object, what: str, minimum: int = 0) -> int:
    """Return `value` if it is an exact int with ``minimum <= value <= MAX_INT``.

    `bool` is refused: ``True`` would otherwise be stored as ``true`` in one
    place and compared as ``1`` in another.
    """
    if type(value) is not int:
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if value < minimum or value > MAX_INT:
        shown = str(value) if -(10**40) < value < 10**40 else f"an int of {value.bit_length()} bits"
        raise ValueError(f"{what} must be an int >= {minimum} and < 2**63, not {shown}")
    return value


# What `check_payload(decoded=True)` relies on. The JSON decoder builds only
# exact dicts (with str keys), lists, strs, ints, floats, bools and None, so
# the type walk cannot fail and is skipped when the canonical bytes settle
# the bounds. Fewer than `SHORT_PAYLOAD_BYTES` bytes hold no int of more
# than `MAX_PAYLOAD_INT_BITS` bits, and every level of nesting opens with
# ``{`` or ``[``, so no more of those bytes than `MAX_PAYLOAD_DEPTH` means no
# deeper nesting (brackets inside strings only make the count more
# cautious); below `_SHALLOW_PAYLOAD_BYTES` there is no room for deeper
# nesting at all. A non-finite float (JSON's 1e999) or a lone surrogate
# fails the encoding. Anything those bytes do not settle takes the walk,
# which also names the flaw, so the verdict and the bytes are the same
# either way.
#
# An int of more than MAX_PAYLOAD_INT_BITS bits is at least 2**14000 > 10**4214,
# so it has at least 4,215 decimal digits: a canonical payload shorter than
# that can hold no such int.
SHORT_PAYLOAD_BYTES = 4215
# Nesting one level deeper than MAX_PAYLOAD_DEPTH takes an opening and a
# closing bracket per level: a shorter payload cannot do it.
_SHALLOW_PAYLOAD_BYTES = 2 * (MAX_PAYLOAD_DEPTH + 1)
# A dict whose keys are all exact `str` and whose values are all of
# `_FLAT_TYPES` is what the decoder could have built (one level, exact types):
# its bytes settle the rest as they do for a decoded payload, but for its
# depth, which its types fix (no count of brackets). One loop over its items
# tests it: for a payload of a few fields, about half the instructions of two
# set tests over `map(type, ...)`. Anything else (nested containers,
# subclasses, other types) takes the walk.
_FLAT_TYPES = frozenset({str, int, float, bool, type(None)})


def flat_encoder(payload: object) -> Callable[[Any, int], Sequence[str]] | None:
    """How `check_payload` encodes a flat payload (an exact dict of `_FLAT_TYPES`, str keys); None: not flat.

    `encode_chunks_in_order` when its keys are ascending, so already in canonical order (a dict's keys are
    distinct): a payload built in key order, or decoded from canonical JSON, is then encoded without the sort.
    """
    if type(payload) is not dict:
        return None
    ordered, last = True, ""  # ("" is below every other key, and an empty key first is not below it)
    for item_key, item in payload.items():
        if type(item_key) is not str or type(item) not in _FLAT_TYPES:
            return None
        if item_key < last:  # out of canonical order: the encoder sorts
            ordered = False
        last = item_key
    return encode_chunks_in_order if ordered else encode_chunks


def check_payload(payload: object, decoded: bool = False) -> bytes:
    """Return the canonical JSON of `payload` if it survives a round trip unchanged.

    A payload is an exact `dict` with `str` keys whose values are, at any depth up to `MAX_PAYLOAD_DEPTH`, exact
    `dict`, `list`, `str`, `int` (at most `MAX_PAYLOAD_INT_BITS` bits), finite `float`, `bool` or ``None``.
    Anything else would come back changed from disk (a tuple as a list, a non-str key as a str, a subclass as its
    base) or not at all (NaN, a lone surrogate), and the queue promises that what it stores is what it gives back.
    The walk is iterative and also bounds a lower estimate of the encoded size, so a cyclic or hugely shared
    structure is refused quickly instead of being expanded.

    `decoded=True` says that `payload` came straight out of the JSON decoder (recovery, a front end's request),
    as h11's ``_parsed`` says a header came from its own parser: the type walk is then skipped when the canonical
    bytes settle the bounds (why that is sound: the comment above `SHORT_PAYLOAD_BYTES`). Never pass it for a
    value built in Python. A flat payload built in Python (most are) takes the same path once one pass over its
    items finds the decoder's types (`_FLAT_TYPES`).
    """
    encode = encode_chunks if decoded else flat_encoder(payload)
    if encode is not None and type(payload) is dict:
        try:
            encoded = "".join(encode(payload, 0)).encode()  # canonical_json's bytes, without its wrapper
        except (ValueError, RecursionError):
            pass
        else:
            size, depth = len(encoded), MAX_PAYLOAD_DEPTH if decoded else 1  # flat: one level, by its types
            if size < _SHALLOW_PAYLOAD_BYTES or (
                size < SHORT_PAYLOAD_BYTES and (depth == 1 or encoded.count(b"{") + encoded.count(b"[") <= depth)
            ):
                return encoded
    if type(payload) is not dict:
        raise TypeError(f"payload must be a dict (a JSON object), not {type(payload).__name__}")
    # A lower bound of the encoded size: every dict item costs at least its key, two quotes, a colon and a
    # one-byte value; every list item a one-byte value and a comma (the brackets pay for the missing last one).
    budget = MAX_FRAME_BYTES
    stack: list[tuple[dict[Any, Any] | list[Any], int]] = [(payload, 1)]
    while stack:
        container, depth = stack.pop()
        values: Any
        if type(container) is dict:
            for item_key in container:
                if type(item_key) is not str:
                    raise TypeError(f"payload keys must be str, not {type(item_key).__name__}")
                budget -= len(item_key) + 4
            values = container.values()
        else:
            budget -= 2 * len(container)
            values = container
        budget -= 2
        for item in values:
            item_type = type(item)
            if item_type in _UNITS:
                if item_type is str:
                    budget -= len(item)
            elif item_type is int:
                if item.bit_length() > MAX_PAYLOAD_INT_BITS:
                    raise ValueError(f"payload int of {item.bit_length()} bits exceeds {MAX_PAYLOAD_INT_BITS}")
            elif item_type is float:
                if not math.isfinite(item):
                    raise ValueError(f"payload float {item!r} is not finite")
            elif item_type in _CONTAINERS:
                if depth >= MAX_PAYLOAD_DEPTH:
                    raise ValueError(f"payload nests deeper than {MAX_PAYLOAD_DEPTH} levels")
                stack.append((item, depth + 1))
            else:
                raise TypeError(f"payload value of type {item_type.__name__} is not JSON (exact types only)")
        if budget < 0:
            raise ValueError(f"payload is larger than a frame ({MAX_FRAME_BYTES} bytes)")
    try:
        return canonical_json(payload)
    except ValueError as exc:  # UnicodeEncodeError: a lone surrogate in a key or a string
        raise ValueError(f"payload is not encodable as UTF-8 JSON: {exc}") from None


def check_record_fits(
    payload_json: bytes, task_json: bytes, key_json: bytes, *, max_frame_bytes: int = MAX_FRAME_BYTES
) -> None:
    """Refuse a task whose snapshot record might not fit in one frame, in any status.

    `task_json` and `key_json` are the canonical JSON of the task id and key
    (with their quotes and escapes). `RECORD_WORST_CASE_EXTRA` covers
    everything else a record can hold (see its derivation), so a task
    accepted here can always be snapshotted and its put op always framed.
    """
    size = len(payload_json) + len(task_json) + len(key_json) + RECORD_WORST_CASE_EXTRA
    if size > max_frame_bytes:
        raise ValueError(
            f"task too large: payload {len(payload_json)} bytes + names {len(task_json) + len(key_json)} bytes"
            f" + {RECORD_WORST_CASE_EXTRA} bytes of record margin exceed the frame bound of {max_frame_bytes}"
        )


def cut_text(text: str, limit: int) -> str:
    """`text` if it has at most `limit` UTF-8 bytes, else its longest prefix that fits with a visible marker.

    The marker names the original size, so an operator knows the message
    goes on; the prefix ends on a character boundary. Deterministic: the
    planner cuts before writing, and the same text always gives the same bytes.
    `text` must be encodable (`check_error` escapes lone surrogates first).
    """
    if len(text) * 4 <= limit:  # no character takes more than 4 bytes
        return text
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    marker = f"... [cut: {len(data)} bytes]"
    return data[: max(limit - len(marker), 0)].decode("utf-8", "ignore") + marker


def cut_text_tail(text: str, limit: int) -> str:
    """`text` if it has at most `limit` UTF-8 bytes, else its longest suffix that fits after a visible marker.

    For a traceback, whose end (the exception and the innermost frames) matters most.
    """
    if len(text) * 4 <= limit:
        return text
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    marker = f"[cut: {len(data)} bytes] ..."
    return marker + data[len(data) - max(limit - len(marker), 0) :].decode("utf-8", "ignore")


def _storable(text: str) -> str:
    """`text` with every lone surrogate written as its ``\\udXXX`` escape (UTF-8 cannot encode one)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


_ERROR_KEYS = frozenset({"type", "message"})
_ERROR_KEYS_WITH_TRACEBACK = _ERROR_KEYS | {"traceback"}


def check_error(error: object) -> tuple[str, ...] | None:
    """The (type, message) of an `error` argument, made storable; None for None.

    An error is None or a mapping with exactly the str keys ``"type"`` and
    ``"message"`` whose values are exact strs, the type non-empty
    (`TypeError`/`ValueError` otherwise). What a stored error cannot hold
    is made storable, not refused, since an error describes a failure that
    already happened: a lone surrogate is written as its escape here, and
    the planner cuts a long type or message to the stored bounds
    (`ERROR_TYPE_BYTES`, `ERROR_MESSAGE_BYTES`) with `cut_text`. Reading the
    mapping runs the caller's code, so `Queue` calls this before its lock.
    """
    if error is None:
        return None
    if not isinstance(error, Mapping):
        raise TypeError(f"error must be None or a mapping with keys type and message, not {type(error).__name__}")
    keys = set(error.keys())
    if keys != _ERROR_KEYS and keys != _ERROR_KEYS_WITH_TRACEBACK:
        raise ValueError(
            f"error must have exactly the keys message and type (and traceback), not {sorted(map(repr, keys))}"
        )
    error_type, message = error["type"], error["message"]
    if type(error_type) is not str or type(message) is not str:
        raise TypeError("error type and message must be str")
    if not error_type:
        raise ValueError("error type must not be empty")
    if "traceback" not in keys:
        return _storable(error_type), _storable(message)
    traceback = error["traceback"]
    if type(traceback) is not str:
        raise TypeError(f"error traceback must be a str, not {type(traceback).__name__}")
    return _storable(error_type), _storable(message), _storable(traceback)


def _check_text(value: object, what: str, limit: int, minimum: int) -> str:
    """Return `value` if it is a str of `minimum` to `limit` UTF-8 bytes that UTF-8 can encode (no lone surrogate).

    The one rule for stored text: names (`check_name`, after its ASCII fast path) and error fields.
    """
    if type(value) is not str:
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if len(value) < minimum:
        raise ValueError(f"{what} must not be empty")
    if len(value) > limit:
        raise ValueError(f"{what} is longer than {limit} UTF-8 bytes")
    if not value.isascii():
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            raise ValueError(f"{what} is not encodable as UTF-8 (lone surrogate?)") from None
        if size > limit:
            raise ValueError(f"{what} is {size} UTF-8 bytes, more than {limit}")
    return value


def check_error_type(value: object, what: str = "type") -> str:
    """Return `value` if it is a stored error type: a non-empty str of at most `ERROR_TYPE_BYTES` UTF-8 bytes."""
    return _check_text(value, what, ERROR_TYPE_BYTES, 1)


def check_error_message(value: object, what: str = "message") -> str:
    """Return `value` if it is a stored error message: a str of at most `ERROR_MESSAGE_BYTES` UTF-8 bytes."""
    return _check_text(value, what, ERROR_MESSAGE_BYTES, 0)


def check_traceback(value: object, what: str = "text") -> str:
    """Return `value` if it is a stored traceback: a str of at most `TRACEBACK_BYTES` UTF-8 bytes."""
    return _check_text(value, what, TRACEBACK_BYTES, 0)


def check_last_error_fits(payload_json: bytes, task_json: bytes, key_json: bytes, last_error_json: int) -> None:
    """Refuse a last error whose ``,"last_error":{...}`` member of `last_error_json` bytes might not fit its record.

    The record must still fit a frame in any status, as `check_record_fits`
    promises for the task without it: the member is counted beside the
    payload and names, against the record's worst case without the slack
    that `LAST_ERROR_ROOM` is.
    """
    size = len(payload_json) + len(task_json) + len(key_json) + RECORD_WORST_CASE_EXTRA - LAST_ERROR_ROOM
    if size + last_error_json > MAX_FRAME_BYTES:
        raise ValueError(
            f"a last error of {last_error_json} bytes does not fit beside the task's {len(payload_json)}-byte payload"
        )


def check_queue_options(directory: object, hook: object, sync: object, create: object, compact_bytes: object) -> str:
    """Check `Queue`'s constructor arguments before anything is opened; return the directory as a str path."""
    if not isinstance(directory, (str, os.PathLike)):
        raise TypeError(f"directory must be a str or path-like, not {type(directory).__name__}")
    path = os.fspath(directory)
    if not isinstance(path, str):
        raise TypeError("directory must be a text path")
    if hook is not None and not callable(hook):
        raise TypeError("hook must be callable or None")
    if type(sync) is not bool:
        raise TypeError("sync must be a bool")
    if type(create) is not bool:
        raise TypeError("create must be a bool")
    if compact_bytes is not None:
        if type(compact_bytes) is not int:
            raise TypeError(f"compact_bytes must be None or an int, not {type(compact_bytes).__name__}")
        if compact_bytes < 1:
            raise ValueError(f"compact_bytes must be >= 1, not {compact_bytes}")
    return path


def check_timeout(timeout: object) -> float:
    """Return `timeout` if it is a finite int or float >= 0 (seconds of real time); NaN is refused."""
    flaw = f"timeout must be a finite number of seconds >= 0, not {timeout!r:.80}"
    if type(timeout) is not int and type(timeout) is not float:
        raise TypeError(flaw)
    assert isinstance(timeout, (int, float))
    if not 0 <= timeout < math.inf:  # NaN fails both
        raise ValueError(flaw)
    return timeout


def check_result(value: object, decoded: bool = False) -> bytes:
    """The canonical JSON of a task's result (any JSON value the store gives back unchanged, by the payload rule).

    `ValueError` past `MAX_RESULT_BYTES`; `TypeError`/`ValueError` as `check_payload` for what is not JSON.
    """
    wrapped = check_payload({"v": value}, decoded)
    encoded = wrapped[5:-1]  # b'{"v":' ... b'}'
    if len(encoded) > MAX_RESULT_BYTES:
        raise ValueError(f"a result's JSON has at most {MAX_RESULT_BYTES} bytes, not {len(encoded)}")
    return encoded


# -- lanes: queue names, priorities and queue settings (docs/DECISIONS.md §32) --

#: The queue a task is in unless `put` names another; a task in it is written without a queue.
DEFAULT_QUEUE = "default"
#: A queue name: 1-64 ASCII letters, digits, ``_``, ``-``, ``.`` or ``:``, starting with a letter or digit
#: (no comma: ``--queues a,b`` splits on it; no space or quote: it is a metrics label and a URL part).
_QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
#: Priorities run from `MIN_PRIORITY` to `MAX_PRIORITY`; a higher one is leased first; 0 is the default.
MIN_PRIORITY = -100
MAX_PRIORITY = 100
#: The most leases a rate limit may allow per window (the limiter keeps that many lease times).
MAX_RATE = 10_000


def check_queue_name(value: object, what: str = "queue") -> str:
    """Return `value` if it is a queue name (`_QUEUE_NAME`); `TypeError`/`ValueError` naming `what` otherwise."""
    if type(value) is not str:
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if _QUEUE_NAME.fullmatch(value) is None:
        raise ValueError(
            f"{what} must be 1-64 characters of A-Z a-z 0-9 _ - . : starting with a letter or digit, not {value!r:.80}"
        )
    return value


def check_priority(value: object, what: str = "priority") -> int:
    """Return `value` if it is an int (not a bool) in `MIN_PRIORITY`..`MAX_PRIORITY`."""
    if type(value) is not int:
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if not MIN_PRIORITY <= value <= MAX_PRIORITY:
        shown = str(value) if -(10**40) < value < 10**40 else f"an int of {value.bit_length()} bits"
        raise ValueError(f"{what} must be an int from {MIN_PRIORITY} to {MAX_PRIORITY}, not {shown}")
    return value


def check_queues_filter(value: object) -> tuple[str, ...] | None:
    """`reserve`'s `queues`: None (every queue) or a non-empty list/tuple of distinct queue names."""
    if value is None:
        return None
    if type(value) not in (list, tuple):
        raise TypeError(f"queues must be a list of queue names or None, not {type(value).__name__}")
    names = tuple(check_queue_name(name, "queues item") for name in value)  # type: ignore[attr-defined]
    if not names or len(set(names)) != len(names):
        raise ValueError("queues must name at least one queue, each once")
    return names


def check_rate(value: object) -> tuple[int, int]:
    """A rate limit ``(n, window)``: at most n (1..`MAX_RATE`) leases per window of time units (>= 1)."""
    if type(value) not in (list, tuple) or len(value) != 2:  # type: ignore[arg-type]
        raise TypeError(f"rate must be a pair (n, window) or None, not {value!r:.80}")
    n = check_int(value[0], "rate n", 1)  # type: ignore[index]
    window = check_int(value[1], "rate window", 1)  # type: ignore[index]
    if n > MAX_RATE:
        raise ValueError(f"rate n must be at most {MAX_RATE}, not {n}")
    return n, window
