"""The model's rules for arguments: the same checks, errors and bounds as `Queue`'s, written plainly.

Every call of the model checks its arguments here first (ints, names,
payloads, queue names and priorities, a recorded error, and the cutting of
an error's texts); the decisions they implement are the package's
docstring's.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Mapping
from typing import Any

#: The frame bound of CONTRACT §3 (bytes of one frame body).
MAX_FRAME_BYTES = 16 * 2**20
#: The statuses, in the order `stats()["counts"]` lists them.
STATUSES: tuple[str, ...] = ("ready", "leased", "completed", "dead")

INT_LIMIT = 2**63  # exclusive upper bound of every time and counter
_MAX_NAME_BYTES = 1024
_MAX_DEPTH = 64
_MAX_INT_BITS = 14_000  # payload ints: readable again under CPython's default int/str digit limit
TASK_MARGIN = 8192
RECORD_WITHOUT_ERROR = 6461  # the worst case of a record's other fields (validate.RECORD_WORST_CASE_EXTRA's table)
ERROR_BOUNDS = (256, 2048)  # UTF-8 bytes of an error's type and message
TIGHT_ERROR_BOUNDS = (32, 200)  # the same, beside a payload that leaves no room for them
PUT_FIELDS = frozenset({"task_id", "payload", "key", "available_at", "max_attempts", "queue", "priority", "put_at"})
# Lanes (docs/DECISIONS.md §32): queue names, priorities, a queue's settings.
_QUEUE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
UNCHANGED: Any = object()  # configure_queue's "leave it as it is"


def check_queue(value: object, what: str = "queue") -> str:
    if type(value) is not str:
        raise TypeError(f"{what} must be a str")
    if not _QUEUE_NAME.fullmatch(value):
        raise ValueError(f"bad {what} {value!r}")
    return value


def check_priority(value: object) -> int:
    if type(value) is not int:
        raise TypeError("priority must be an int")
    if not -100 <= value <= 100:
        raise ValueError("priority must be from -100 to 100")
    return value


# ---------------------------------------------------------------------------
# Argument checks (the same errors the Queue raises)


def check_int(value: object, what: str, minimum: int) -> int:
    if type(value) is not int:
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if value < minimum or value >= INT_LIMIT:
        raise ValueError(f"{what} must be in [{minimum}, 2**63), got {value}")
    return value


def check_name(value: object, what: str) -> str:
    if not isinstance(value, str) or type(value) is not str:
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if not value:
        raise ValueError(f"{what} must not be empty")
    if len(value.encode("utf-8")) > _MAX_NAME_BYTES:  # lone surrogates: UnicodeEncodeError
        raise ValueError(f"{what} is longer than {_MAX_NAME_BYTES} UTF-8 bytes")
    return value


def _check_json_value(value: object, depth: int) -> None:
    """Exact JSON types only (no subclasses but bool), finite floats, str keys, bounded depth."""
    kind = type(value)
    if value is None or kind is bool:
        return
    if isinstance(value, int) and kind is int:
        if value.bit_length() > _MAX_INT_BITS:
            raise ValueError(f"payload ints hold at most {_MAX_INT_BITS} bits")
        return
    if isinstance(value, str) and kind is str:
        value.encode("utf-8")  # lone surrogates: UnicodeEncodeError, a ValueError
        return
    if isinstance(value, float) and kind is float:
        if not math.isfinite(value):
            raise ValueError("payload numbers must be finite")
        return
    if isinstance(value, (dict, list)) and kind in (dict, list):
        if depth + 1 > _MAX_DEPTH:
            raise ValueError(f"payload nested deeper than {_MAX_DEPTH}")
        if isinstance(value, dict):
            for k, v in value.items():
                if not isinstance(k, str) or type(k) is not str:
                    raise TypeError("payload keys must be str")
                k.encode("utf-8")
                _check_json_value(v, depth + 1)
        else:
            for v in value:
                _check_json_value(v, depth + 1)
        return
    raise TypeError(f"payload cannot hold a {kind.__name__}")


def check_payload(payload: object) -> dict[str, Any]:
    if not isinstance(payload, dict) or type(payload) is not dict:
        raise TypeError(f"payload must be a dict, not {type(payload).__name__}")
    _check_json_value(payload, 0)
    return payload


def copy_json(payload: Any) -> Any:
    return copy.deepcopy(payload)


def check_error(error: object) -> tuple[str, ...] | None:
    if error is None:
        return None
    if not isinstance(error, Mapping):
        raise TypeError("error must be None or a mapping")
    if set(error) != {"type", "message"} and set(error) != {"type", "message", "traceback"}:
        raise ValueError("error has exactly the keys type and message (and traceback)")
    if type(error["type"]) is not str or type(error["message"]) is not str:
        raise TypeError("error type and message are str")
    if error["type"] == "":
        raise ValueError("error type is empty")
    if "traceback" not in error:
        return _escaped(error["type"]), _escaped(error["message"])
    if type(error["traceback"]) is not str:
        raise TypeError("error traceback is a str")
    return _escaped(error["type"]), _escaped(error["message"]), _escaped(error["traceback"])


def _escaped(text: str) -> str:
    return "".join(f"\\u{ord(c):04x}" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)


def cut(text: str, limit: int, *, tail: bool = False) -> str:
    """`text` in at most `limit` UTF-8 bytes: its head before a marker, or (`tail`) its tail after one.

    The tail is a traceback's (format extension "traceback"): its last lines say the most.
    """
    size = len(text.encode("utf-8"))
    if size <= limit:
        return text
    marker = f"[cut: {size} bytes] ..." if tail else f"... [cut: {size} bytes]"
    kept = ""
    for char in reversed(text) if tail else text:
        longer = char + kept if tail else kept + char
        if len(longer.encode("utf-8")) + len(marker) > limit:
            break
        kept = longer
    return marker + kept if tail else kept + marker
