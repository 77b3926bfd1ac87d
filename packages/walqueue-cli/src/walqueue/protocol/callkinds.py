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
from typing import Any, Final, NamedTuple

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


class Kind(NamedTuple):
    """One kind of argument: its JSON shape, its value rule, its encoding by a client.

    `accept(json_value, label)` turns a JSON value of the right shape into
    the argument `Queue` takes; `encode(python_value, name)` checks a
    client's argument by the same rule and returns its JSON. Both raise
    `TypeError`/`ValueError` with a message that names the field. `many`:
    the Python value is an iterable of items (a client reads a one-shot
    iterator once, before it is checked and encoded). `plain`: `encode`
    returns the value itself once the rule accepts it (so a value already
    checked by the same rule is sent as it is).

    A `NamedTuple`, as the other rows of the call table are: immutable, and
    made at import without the code a dataclass compiles for each class
    (DECISIONS §59).
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


def _or_null(rule: Rule) -> Rule:
    """`rule`, with null (None) let through as None: the argument's default, "not given"."""

    def accept(value: Any, what: str) -> Any:
        return None if value is None else rule(value, what)

    return accept


def _any_str(value: Any, what: str) -> str:
    if type(value) is not str:
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    return value


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


def _queues(value: Any, what: str) -> list[str] | None:
    try:
        names = check_queues_filter(value)
    except (TypeError, ValueError) as error:
        raise type(error)(f"{what}: {error}") from None
    return None if names is None else list(names)


def _rate(value: Any, what: str) -> list[int]:
    try:
        return list(check_rate(value))
    except (TypeError, ValueError) as error:
        raise type(error)(f"{what}: {error}") from None


def _flag(value: Any, what: str) -> bool:
    if type(value) is not bool:
        raise TypeError(f"{what} must be a bool, not {type(value).__name__}")
    return value


_JSON_INT: Final = frozenset({int})
_JSON_STR: Final = frozenset({str})
_JSON_OBJECT: Final = frozenset({dict})


def _kind(
    name: str,
    expected: str,
    json_types: frozenset[type],
    rule: Rule,
    encode: Rule | None = None,
    *,
    or_null: bool = False,
    many: bool = False,
    plain: bool = False,
) -> Kind:
    """A row of `KINDS`, stating only what differs from the other rows.

    A front end accepts a field by `rule` (its messages name the field); a
    client encodes by `encode`, by default the same rule. `or_null`: null
    is accepted as well, as None (the argument's default: not given).
    """
    if or_null:
        rule, encode = _or_null(rule), None if encode is None else _or_null(encode)
        expected, json_types = f"{expected} or null", json_types | {type(None)}
    return Kind(name, expected, json_types, _field(rule), rule if encode is None else encode, many, plain)


#: Every argument kind, by name. `put_items` is added by the call table (its items are `put`'s arguments).
KINDS: Final[dict[str, Kind]] = {
    kind.name: kind
    for kind in (
        _kind("name", "a string", _JSON_STR, check_name, plain=True),
        _kind("str", "a string", _JSON_STR, _any_str),
        _kind("key", "a string", _JSON_STR, check_name, or_null=True, plain=True),  # null: the task id is the key
        _kind("cursor", "a string", _JSON_STR, _any_str, or_null=True),  # a page's after: null for the first page
        _kind("time", "an integer >= 0", _JSON_INT, _time, plain=True),
        _kind("count", "an integer >= 1", _JSON_INT, _count, plain=True),
        _kind("time_or_null", "an integer >= 0", _JSON_INT, _time, or_null=True),
        _kind("error", 'null or an object {"type": string, "message": string}', frozenset({dict, type(None)}), _error),
        _kind("payload", "a JSON object", _JSON_OBJECT, _payload(True), _payload(False), plain=True),
        _kind("lease", "a lease object", _JSON_OBJECT, _lease, _encode_lease),
        _kind("leases", "an array of lease objects", frozenset({list}), _leases, _encode_leases, many=True),
        _kind("status", _STATUS_CHOICES, frozenset({str, type(None)}), _status),
        _kind("timeout", "a number of seconds", frozenset({int, float}), _timeout, _clamped_timeout),
        _kind("result", "any JSON value", _JSON_ANY, _result),
        _kind("queue", "a queue name", _JSON_STR, check_queue_name, plain=True),
        _kind("queue_or_null", "a queue name", _JSON_STR, check_queue_name, or_null=True),
        _kind("priority", "an integer from -100 to 100", _JSON_INT, check_priority, plain=True),
        _kind("queues", "an array of queue names or null", frozenset({list, type(None)}), _queues),
        _kind("limit_or_null", "an integer >= 1", _JSON_INT, _count, or_null=True),
        _kind("rate_or_null", "[n, window]", frozenset({list}), _rate, or_null=True),
        _kind("flag", "true or false", frozenset({bool}), _flag),
    )
}


class AnswerKind(NamedTuple):
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
