"""The kinds of a call's arguments and answers: their JSON shape, the engine's rule, their encoding.

A kind says three things about a value that crosses a wire:

- its JSON shape (`json_types`, and `expected`, the words for a message):
  what a front end checks before anything else, so that a refusal says
  "must be a string, not integer 1";
- its value rule (`accept`): always one of the engine's own acceptors
  (`walqueue.engine.validate`, `Lease.from_dict`), with the limits `Queue`
  applies, so that no layer accepts a value another refuses;
- how a client sends a Python value of this kind (`encode`: the same rule,
  then the JSON; a `Lease` travels as its owner's three fields).

An answer kind says how a `Queue` method's result becomes the JSON of its
answer field (`to_json`, the protocol) and back (`from_json`, the clients).

Every rule raises `TypeError` or `ValueError`, as `Queue` does.
`BadArgument` (a `ValueError`) carries the whole message, the field's
label included.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from walqueue.engine.records import STATUSES
from walqueue.engine.types import Lease, Task, WalQueueError, plain_lease
from walqueue.engine.validate import (
    check_error,
    check_int,
    check_name,
    check_payload,
    check_priority,
    check_queue_name,
    check_queues_filter,
    check_rate,
    check_result,
    check_timeout,
)

__all__ = [
    "ANSWER_KINDS",
    "KINDS",
    "MAX_WAIT_SECONDS",
    "AnswerKind",
    "BadArgument",
    "Kind",
    "describe",
]

#: The longest ``wait`` a request may ask for (one day), in seconds.
MAX_WAIT_SECONDS: Final = 86_400


class BadArgument(WalQueueError, ValueError):
    """An argument of a request that its call refuses; the message names the field and the rule."""


def _shorten(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe(value: Any) -> str:
    """The JSON kind of a value, with the value itself when it is short (for messages)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {'true' if value else 'false'}"
    if isinstance(value, int):
        return f"integer {_shorten(str(value))}"
    if isinstance(value, float):
        return f"number {_shorten(repr(value))}"
    if isinstance(value, str):
        return f"string {_shorten(value)!r}"
    if isinstance(value, list):
        return "an array"
    return "an object"


@dataclass(frozen=True, slots=True)
class Kind:
    """One kind of argument: its JSON shape, its value rule, its encoding by a client.

    `accept(json_value, label)` turns a JSON value of the right shape into
    the argument `Queue` takes; `encode(python_value, name)` checks a
    client's argument by the same rule and returns its JSON. Both raise
    `TypeError`/`ValueError` with a message that names the field. `many`:
    the Python value is an iterable of items (a client reads a one-shot
    iterator once, before it is checked and encoded). `plain`: `encode`
    returns the value itself once the rule accepts it (so a value already
    checked by the same rule is sent as it is).
    """

    name: str
    expected: str
    json_types: frozenset[type]
    accept: Callable[[Any, str], Any]
    encode: Callable[[Any, str], Any]
    many: bool = False
    plain: bool = False

    def check(self, value: Any, label: str) -> Any:
        """The argument `Queue` takes for the JSON `value` of field `label`, or `BadArgument`."""
        if type(value) not in self.json_types:
            raise BadArgument(f"field {label!r} must be {self.expected}, not {describe(value)}")
        try:
            return self.accept(value, label)
        except BadArgument:
            raise
        except (TypeError, ValueError) as error:
            raise BadArgument(str(error)) from None


Rule = Callable[[Any, str], Any]


def _field(rule: Rule) -> Rule:
    """`rule(value, what)` applied to a request's field: its messages name ``field 'label'``."""

    def accept(value: Any, label: str) -> Any:
        return rule(value, f"field {label!r}")

    return accept


def _any_str(value: Any, what: str) -> str:
    if type(value) is not str:
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    return value


def _cursor(value: Any, what: str) -> str | None:
    # A page's `after`: any task id, or null for the first page (`paging.check_page_args`).
    return None if value is None else _any_str(value, what)


def _key(value: Any, what: str) -> str | None:
    # None means "no key given": the Python API's default, the task id.
    return None if value is None else check_name(value, what)


def _time(value: Any, what: str) -> int:
    return check_int(value, what, 0)


def _count(value: Any, what: str) -> int:
    return check_int(value, what, 1)


def _payload(decoded: bool) -> Rule:
    """The engine's payload rule; `decoded`: the value came from a JSON decoder (a front end's request)."""

    def rule(value: Any, what: str) -> dict[str, Any]:
        try:
            check_payload(value, decoded=decoded)
        except (TypeError, ValueError) as error:
            raise type(error)(f"{what}: {error}") from None
        result: dict[str, Any] = value
        return result

    return rule


def _lease(value: Any, what: str) -> Lease:
    try:
        return Lease.from_dict(value)
    except ValueError as error:
        raise ValueError(f"{what} is not a lease object: {error}") from None


def _encode_lease(value: Any, what: str) -> dict[str, Any]:
    """What the server reads of a lease: its owner's three fields (a large payload need not travel back)."""
    if not isinstance(value, Lease):
        raise TypeError(f"{what} must be a Lease, not {type(value).__name__}")
    lease = plain_lease(value)
    return {"task_id": lease.task_id, "worker": lease.worker, "generation": lease.generation}


def _leases(value: Any, what: str) -> list[Lease]:
    return [_lease(item, f"{what}[{index}]") for index, item in enumerate(value)]


def _encode_leases(value: Any, what: str) -> list[dict[str, Any]]:
    """A client's `ack_many` argument: an iterable of `Lease`, each sent as its owner's three fields."""
    if isinstance(value, (str, bytes, Mapping, Lease)) or not isinstance(value, Iterable):
        raise TypeError(f"{what} must be an iterable of Lease, not {type(value).__name__}")
    return [_encode_lease(item, f"{what}[{index}]") for index, item in enumerate(value)]


def _time_or_null(value: Any, what: str) -> int | None:
    return None if value is None else check_int(value, what, 0)


def _error(value: Any, what: str) -> dict[str, str] | None:
    """An error to record (`validate.check_error`'s rule), as the mapping `Queue` takes; None: no error."""
    try:
        checked = check_error(value)
    except (TypeError, ValueError) as error:
        raise type(error)(f"{what}: {error}") from None
    # The storable strings (a lone surrogate as its escape): what the engine records, and what JSON can carry.
    if checked is None:
        return None
    mapping = {"type": checked[0], "message": checked[1]}
    return mapping if len(checked) < 3 else {**mapping, "traceback": checked[2]}


_STATUS_CHOICES: Final = f"null or one of {', '.join(map(repr, STATUSES))}"


def _status(value: Any, what: str) -> str | None:
    if value is None or (type(value) is str and value in STATUSES):
        return value
    if type(value) is not str:
        raise TypeError(f"{what} must be a str or None, not {type(value).__name__}")
    raise ValueError(f"{what} must be {_STATUS_CHOICES}, not {describe(value)}")


def _timeout(value: Any, what: str) -> float:
    try:
        seconds = check_timeout(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= MAX_WAIT_SECONDS:
        raise ValueError(f"{what} must be in [0, {MAX_WAIT_SECONDS}] seconds, got {_shorten(repr(value))}")
    return float(seconds)


def _clamped_timeout(value: Any, what: str) -> float:
    """A client's `wait`: `Queue.wait`'s rule; a timeout past the protocol's bound (one day) waits that day."""
    return float(min(check_timeout(value), MAX_WAIT_SECONDS))


def _result(value: Any, what: str) -> Any:
    """A task's result (`Queue.complete`): any JSON value the store keeps, by `check_result`."""
    try:
        check_result(value)
    except (TypeError, ValueError) as error:
        raise type(error)(f"{what}: {error}") from None
    return value


_JSON_ANY: Final[frozenset[type]] = frozenset({dict, list, str, int, float, bool, type(None)})


# -- lanes: a queue, a priority, reserve's queues, a queue's settings ------------------------------


def _queue_or_null(value: Any, what: str) -> str | None:
    return None if value is None else check_queue_name(value, what)


def _queues(value: Any, what: str) -> list[str] | None:
    try:
        names = check_queues_filter(value)
    except (TypeError, ValueError) as error:
        raise type(error)(f"{what}: {error}") from None
    return None if names is None else list(names)


def _limit_or_null(value: Any, what: str) -> int | None:
    return None if value is None else check_int(value, what, 1)


def _rate_or_null(value: Any, what: str) -> list[int] | None:
    try:
        return None if value is None else list(check_rate(value))
    except (TypeError, ValueError) as error:
        raise type(error)(f"{what}: {error}") from None


def _flag(value: Any, what: str) -> bool:
    if type(value) is not bool:
        raise TypeError(f"{what} must be a bool, not {type(value).__name__}")
    return value


_JSON_INT: Final = frozenset({int})
_JSON_STR: Final = frozenset({str})
_JSON_OBJECT: Final = frozenset({dict})

#: Every argument kind, by name. `put_items` is added by the call table (its items are `put`'s arguments).
KINDS: Final[dict[str, Kind]] = {
    kind.name: kind
    for kind in (
        Kind("name", "a string", _JSON_STR, _field(check_name), check_name, plain=True),
        Kind("str", "a string", _JSON_STR, _field(_any_str), _any_str),
        Kind("key", "a string or null", frozenset({str, type(None)}), _field(_key), _key, plain=True),
        Kind("cursor", "a string or null", frozenset({str, type(None)}), _field(_cursor), _cursor),
        Kind("time", "an integer >= 0", _JSON_INT, _field(_time), _time, plain=True),
        Kind("count", "an integer >= 1", _JSON_INT, _field(_count), _count, plain=True),
        Kind(
            "time_or_null",
            "an integer >= 0 or null",
            frozenset({int, type(None)}),
            _field(_time_or_null),
            _time_or_null,
        ),
        Kind(
            "error",
            'null or an object {"type": string, "message": string}',
            frozenset({dict, type(None)}),
            _field(_error),
            _error,
        ),
        Kind("payload", "a JSON object", _JSON_OBJECT, _field(_payload(True)), _payload(False), plain=True),
        Kind("lease", "a lease object", _JSON_OBJECT, _field(_lease), _encode_lease),
        Kind("leases", "an array of lease objects", frozenset({list}), _field(_leases), _encode_leases, many=True),
        Kind("status", _STATUS_CHOICES, frozenset({str, type(None)}), _field(_status), _status),
        Kind("timeout", "a number of seconds", frozenset({int, float}), _field(_timeout), _clamped_timeout),
        Kind("result", "any JSON value", _JSON_ANY, _field(_result), _result),
        Kind("queue", "a queue name", _JSON_STR, _field(check_queue_name), check_queue_name, plain=True),
        Kind(
            "queue_or_null",
            "a queue name or null",
            frozenset({str, type(None)}),
            _field(_queue_or_null),
            _queue_or_null,
        ),
        Kind("priority", "an integer from -100 to 100", _JSON_INT, _field(check_priority), check_priority, plain=True),
        Kind("queues", "an array of queue names or null", frozenset({list, type(None)}), _field(_queues), _queues),
        Kind(
            "limit_or_null",
            "an integer >= 1 or null",
            frozenset({int, type(None)}),
            _field(_limit_or_null),
            _limit_or_null,
        ),
        Kind(
            "rate_or_null", "[n, window] or null", frozenset({list, type(None)}), _field(_rate_or_null), _rate_or_null
        ),
        Kind("flag", "true or false", frozenset({bool}), _field(_flag), _flag),
    )
}


@dataclass(frozen=True, slots=True)
class AnswerKind:
    """How a result becomes its answer field's JSON (`to_json`) and back (`from_json`)."""

    name: str
    to_json: Callable[[Any], Any]
    from_json: Callable[[Any], Any]


def _list(convert: Callable[[Any], Any]) -> Callable[[Any], list[Any]]:
    def each(values: Iterable[Any]) -> list[Any]:
        return [convert(value) for value in values]

    return each


# An answer field is encoded at once and dropped (`protocol.encode_answer`): no copy of the payload.
def _lease_json(lease: Lease) -> dict[str, Any]:
    return lease.to_dict(copy_payload=False)


def _task_json(task: Task) -> dict[str, Any]:
    return task.to_dict(copy_payload=False)


def _task_from_json(value: Mapping[str, Any]) -> Task:
    return Task(**value)


def _optional(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def maybe(value: Any) -> Any:
        return None if value is None else convert(value)

    return maybe


def _nothing(value: Any) -> None:
    return None


def _bool(value: Any) -> bool:
    return bool(value)


#: Every answer kind, by name.
ANSWER_KINDS: Final[dict[str, AnswerKind]] = {
    kind.name: kind
    for kind in (
        AnswerKind("none", _nothing, _nothing),
        AnswerKind("str", str, str),
        AnswerKind("str_list", _list(str), _list(str)),
        AnswerKind("lease", _lease_json, Lease.from_dict),
        AnswerKind("leases", _list(_lease_json), _list(Lease.from_dict)),
        AnswerKind("task_or_null", _optional(_task_json), _optional(_task_from_json)),
        AnswerKind("tasks", _list(_task_json), _list(_task_from_json)),
        AnswerKind("stats", dict, dict),
        AnswerKind("bool", _bool, _bool),
        AnswerKind("result_or_null", _optional(dict), _optional(dict)),
        AnswerKind("objects", _list(dict), _list(dict)),
    )
}
