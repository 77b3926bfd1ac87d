"""What an op kind is, and everything derived from declaring one.

An op kind is declared once, as an `OpKind` in `opkinds.OP_KINDS`: its name,
its fields and their kinds, the status its task must have, and its
transition. From that declaration this module derives what used to be
written out by hand for every kind: the exact key set, the canonical-JSON
splice template (canonical JSON sorts keys, so the template is fixed at
import), the encoder that fills it, and the worst-case size of an encoded
op. A kind that is declared therefore has all of them; none can be
forgotten and silently fall back to a slow path.

This module knows no state: the transition is stored, not called, here.
"""

from __future__ import annotations

import enum
import keyword
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from walqueue.engine.rows import DIGEST_BYTES
from walqueue.engine.validate import (
    ERROR_MESSAGE_BYTES,
    ERROR_TYPE_BYTES,
    MAX_INT,
    MAX_RESULT_BYTES,
    NAME_JSON_MAX,
    TRACEBACK_BYTES,
    check_error_message,
    check_error_type,
    check_int,
    check_name,
    check_priority,
    check_queue_name,
    check_traceback,
)
from walqueue.format.canonical import canonical_str

__all__ = ["INT_JSON_MAX", "Field", "Op", "OpKind"]

Op = dict[str, Any]

#: The longest decimal form of a checked int (0..MAX_INT).
INT_JSON_MAX = len(str(MAX_INT))


class Field(enum.Enum):
    """The kind of one op field: what it may hold, and how it is spliced into the op's JSON."""

    #: A storable name (`check_name`): a key, a worker (and every op's task).
    NAME = "name"
    #: An int in 0..MAX_INT (`check_int`): a time.
    INT = "int"
    #: An int in 1..MAX_INT: a lease generation (the first lease has 1), max_attempts.
    POSITIVE_INT = "positive int"
    #: A put's payload: checked by its transition together with the task's names
    #: (the record-fits bound needs all three); planned ops carry it encoded.
    PAYLOAD = "payload"
    #: An error's type (`check_error_type`): a non-empty str of at most 256 UTF-8 bytes.
    ERROR_TYPE = "error type"
    #: An error's message (`check_error_message`): a str of at most 2,048 UTF-8 bytes.
    ERROR_MESSAGE = "error message"
    #: A last error's traceback (`check_traceback`): a str of at most 8,192 UTF-8 bytes.
    TRACEBACK = "traceback"
    #: A task's result (any JSON value): checked by its transition; planned ops carry it encoded.
    RESULT = "result"
    #: A queue name (`check_queue_name`): a put's queue, a configure op's subject.
    QUEUE = "queue"
    #: A priority (`check_priority`): an int in MIN_PRIORITY..MAX_PRIORITY, possibly negative.
    PRIORITY = "priority"
    #: A flag that is only ever written as ``true`` (it is omitted when false).
    TRUE = "true"


#: The least value of each int kind (`check_int`'s `minimum`).
_MINIMUM: dict[Field, int] = {Field.INT: 0, Field.POSITIVE_INT: 1}

#: The placeholder of each kind in a splice template, and its worst-case JSON size (None: unbounded).
_PLACEHOLDER: dict[Field, tuple[bytes, int | None]] = {
    Field.NAME: (b"%b", NAME_JSON_MAX),
    Field.INT: (b"%d", INT_JSON_MAX),
    Field.POSITIVE_INT: (b"%d", INT_JSON_MAX),
    Field.PAYLOAD: (b"%b", None),
    Field.ERROR_TYPE: (b"%b", 6 * ERROR_TYPE_BYTES + 2),
    Field.ERROR_MESSAGE: (b"%b", 6 * ERROR_MESSAGE_BYTES + 2),
    Field.TRACEBACK: (b"%b", 6 * TRACEBACK_BYTES + 2),
    Field.RESULT: (b"%b", MAX_RESULT_BYTES),
    Field.QUEUE: (b"%b", 66),
    Field.PRIORITY: (b"%d", 4),
    Field.TRUE: (b"true", 4),
}

#: The check of each str kind besides a name, by the name the generated `check_fields` calls it.
_TEXT_CHECKS: dict[Field, str] = {
    Field.ERROR_TYPE: "check_error_type",
    Field.ERROR_MESSAGE: "check_error_message",
    Field.TRACEBACK: "check_traceback",
    Field.QUEUE: "check_queue_name",
    Field.PRIORITY: "check_priority",
    Field.TRUE: "check_true",
}


def check_true(value: object, what: str) -> None:
    """A flag field holds exactly ``true`` (a false flag is omitted, never written)."""
    if value is not True:
        raise ValueError(f"{what} must be true when present (false is written by omitting it), not {value!r:.80}")


#: In a planned put's carrier (putops.py), the byte between the op's JSON and the row's data: UTF-8 never holds it.
CARRIER_SEPARATOR = b"\xff"

#: How each kind's value is spliced by `encode` (``{!r}`` is the field's name).
_SPLICED = {
    Field.NAME: "canonical_str(op[{!r}])",
    Field.INT: "op[{!r}]",
    Field.POSITIVE_INT: "op[{!r}]",
    Field.PAYLOAD: "op[{!r}].partition(CARRIER_SEPARATOR)[2][DIGEST_BYTES:]",  # (a planned put's carrier: putops.py)
    Field.ERROR_TYPE: "canonical_str(op[{!r}])",
    Field.ERROR_MESSAGE: "canonical_str(op[{!r}])",
    Field.TRACEBACK: "canonical_str(op[{!r}])",
    Field.RESULT: "op[{!r}].canonical",
    Field.QUEUE: "canonical_str(op[{!r}])",
    Field.PRIORITY: "op[{!r}]",
    Field.TRUE: "op[{!r}]",
}

#: The names the `_SPLICED` expressions use.
_SPLICED_NAMES = {"canonical_str": canonical_str, "DIGEST_BYTES": DIGEST_BYTES, "CARRIER_SEPARATOR": CARRIER_SEPARATOR}


def _compile(name: str, parameters: str, source_lines: list[str], namespace: dict[str, Any]) -> Callable[..., Any]:
    """A function `name(op)` with the given body, compiled once at import.

    Why generated code: encoding and checking an op are on the path of
    every write and every replayed frame, and a loop over the declared
    fields costs about as much again as the work itself. The source is
    built from the declaration alone (field names go in through `repr`), as
    `dataclasses` builds `__init__`, so the result is what a hand-written
    function per kind would be, without a hand-written copy to keep in step.
    """
    source = f"def {name}({parameters}):\n" + "".join(f"    {line}\n" for line in source_lines)
    exec(compile(source, f"<op kind {name}>", "exec"), namespace)  # noqa: S102 - source built from the table
    function: Callable[..., Any] = namespace[name]
    return function


@dataclass(frozen=True, eq=False, slots=True)
class OpKind:
    """One op kind: the declaration (the first four fields, `counter` and `event`) and what is derived from it.

    `fields` lists every field but ``op`` and ``task``: every op names its
    task, and `from_status` says which status that task must have, or a
    tuple of the statuses it may have (a cancel takes a ready or a leased
    task); None: the op creates it, so it must not exist yet. `transition`
    is the state machine's function for this kind (see `state`). `counter`
    and `event` name what the kind is counted as and logged as: the metrics'
    counter names and the events' dispatch are read from the rows, so a
    kind declared without them counts and logs nothing, and a new kind needs
    no edit in `metrics` or `events`.
    """

    name: str
    fields: tuple[tuple[str, Field], ...]
    from_status: str | tuple[str, ...] | None
    transition: Callable[..., Any] = field(repr=False)
    #: A store-level kind: its ops name no task and change a setting of the store, not a record
    #: (`from_status` is then None and unused; the transition returns the setting's new value).
    store: bool = field(default=False, kw_only=True)
    #: Fields written only when they differ from their default, as (name, kind, default): an op that does
    #: not use them is byte for byte what a version without them writes (docs/FORMAT.md, lanes).
    optional: tuple[tuple[str, Field, object], ...] = ()
    #: The field that names what the op changes, and its kind: a task for every kind but a queue's settings.
    subject: tuple[str, Field] = ("task", Field.NAME)
    #: Every key an op of this kind may have (`keys` plus the optional fields).
    all_keys: frozenset[str] = field(init=False, repr=False)
    #: The statuses `from_status` allows, as a set (None: the op creates its task).
    statuses: frozenset[str] | None = field(init=False, repr=False)
    #: The exact key set of an op of this kind.
    keys: frozenset[str] = field(init=False, repr=False)
    #: The counter of `Queue.metrics()` that each committed op of this kind adds one to (None: counts nothing).
    counter: str | None = field(default=None, kw_only=True)
    #: The lifecycle event an applied op of this kind logs (`walqueue.engine.events`; None: no event).
    event: str | None = field(default=None, kw_only=True)
    #: The op's canonical JSON with a placeholder for each value, keys sorted.
    template: bytes = field(init=False, repr=False)
    #: The longest canonical JSON an op of this kind can have (None: a payload has no fixed bound).
    max_json: int | None = field(init=False, repr=False)
    #: ``encode(op)``: the canonical JSON of `op`, an op of this kind whose values a planner
    #: checked. Ints are spliced with ``%d``, names through `canonical_str`, a payload as the
    #: canonical bytes its carrier holds (putops.py), so nothing is encoded twice.
    #: Byte-equal to `canonical_json` of the op with its payload decoded
    #: (tests/engine/test_optable.py checks every declared kind).
    encode: Callable[[Op], bytes] = field(init=False, repr=False)
    #: ``splice(**values)``: the same bytes from the values themselves, passed by field name
    #: (``task`` included), names and a payload as their canonical JSON already: for a planner
    #: that has those bytes at hand (`ops.put_op`), so that nothing is encoded twice.
    splice: Callable[..., bytes] = field(init=False, repr=False)
    #: ``check_fields(op)``: `check_name` or `check_int` of every field but the task and a
    #: payload (which the put's transition checks with its names), for an op that did not come
    #: from a planner; `TypeError`/`ValueError` names the first flaw.
    check_fields: Callable[[Op], None] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        subject, subject_kind = self.subject
        kinds = dict(self.fields)
        optional = {name: (kind, default) for name, kind, default in self.optional}
        _check_declaration(self.name, subject, kinds, optional, len(self.fields))
        if not self.store:  # a store-level kind's ops name nothing but their setting (clock)
            kinds[subject] = subject_kind
        parts: list[bytes] = [b"{"]
        size: int | None = 1
        order = sorted([*kinds, *optional, "op"])
        encode_values: list[str] = []
        splice_values: list[str] = []
        started = False  # whether a required member (always one: op) is already in the template
        for name in order:
            value_max: int | None
            if name in optional:  # one %b: the member's whole text, or nothing at its default (omitted)
                encoded, spliced, member_max = _optional_member(name, optional[name][0], started)
                parts.append(b"%b")
                encode_values.append(encoded)
                splice_values.append(spliced)
                size = None if size is None or member_max is None else size + member_max
                continue
            prefix = b"%s%s:" % (b"," if started else b"", canonical_str(name))
            started = True
            parts.append(prefix)
            if name == "op":
                text_bytes = canonical_str(self.name)
                parts.append(text_bytes.replace(b"%", b"%%"))
                value_max = len(text_bytes)
            else:
                placeholder, value_max = _PLACEHOLDER[kinds[name]]
                parts.append(placeholder)
                if kinds[name] is not Field.TRUE:
                    encode_values.append(_SPLICED[kinds[name]].format(name))
                    splice_values.append(name)
            size = None if size is None or value_max is None else size + len(prefix) + value_max
        parts.append(b"}")
        values = [name for name in order if name != "op"]
        encode_line = "return template % ({},)".format(", ".join(encode_values))
        splice_line = "return template % ({},)".format(", ".join(splice_values))
        parameters = [name for name in values if name not in optional] + [
            f"{name}=None" for name in values if name in optional
        ]
        check_lines = _check_source(self.fields, optional)
        template = b"".join(parts)
        setter = object.__setattr__
        allowed = self.from_status
        setter(
            self, "statuses", None if allowed is None else frozenset((allowed,) if type(allowed) is str else allowed)
        )
        setter(self, "keys", frozenset(order) - optional.keys())
        setter(self, "all_keys", frozenset(order))
        setter(self, "template", template)
        setter(self, "max_json", None if size is None else size + 1)
        namespace = {"template": template, **_SPLICED_NAMES}
        setter(self, "encode", _compile("encode", "op", [encode_line], namespace))
        setter(self, "splice", _compile("splice", "*, " + ", ".join(parameters), [splice_line], namespace))
        setter(
            self,
            "check_fields",
            _compile(
                "check_fields",
                "op",
                [*check_lines, "return None"],
                {
                    "check_name": check_name,
                    "check_int": check_int,
                    "check_error_type": check_error_type,
                    "check_error_message": check_error_message,
                    "check_traceback": check_traceback,
                    "check_queue_name": check_queue_name,
                    "check_priority": check_priority,
                    "check_true": check_true,
                    "MAX_INT": MAX_INT,
                },
            ),
        )


def _optional_member(name: str, kind: Field, started: bool) -> tuple[str, str, int | None]:
    """An optional field's member: its `encode` and `splice` expressions and its worst-case size.

    The member carries its own comma: before it once a required member is
    in the template, after it (the next member then starts without one) if
    it comes first.
    """
    key = canonical_str(name)
    pre, post = (b"," + key + b":", b"") if started else (key + b":", b",")
    value_max = _PLACEHOLDER[kind][1]
    text = "b'true'" if kind is Field.TRUE else "b'%d' % {}" if kind in _NUMBERS else "canonical_str({})"
    encoded = f"({pre!r} + {text.format(f'op[{name!r}]')} + {post!r}) if {name!r} in op else b''"
    spliced_text = text.replace("canonical_str({})", "{}").format(name)
    spliced = f"({pre!r} + {spliced_text} + {post!r}) if {name} is not None else b''"
    return encoded, spliced, None if value_max is None else len(key) + 2 + value_max


_NUMBERS = frozenset({Field.INT, Field.POSITIVE_INT, Field.PRIORITY})


def _check_source(fields: tuple[tuple[str, Field], ...], optional: dict[str, tuple[Field, object]]) -> list[str]:
    """The lines of a kind's generated `check_fields` (see `OpKind.check_fields`)."""
    check_lines = [f"check_name(op[{n!r}], {n!r})" for n, kind in fields if kind is Field.NAME]
    check_lines += [f"{_TEXT_CHECKS[kind]}(op[{n!r}], {n!r})" for n, kind in fields if kind in _TEXT_CHECKS]
    for n, (kind, default) in optional.items():  # present only when it differs from its default
        check = (
            f"check_int(op[{n!r}], {n!r}, {_MINIMUM[kind]})"
            if kind in _MINIMUM
            else f"{_TEXT_CHECKS[kind]}(op[{n!r}], {n!r})"
        )
        message = f"{n} is omitted at its default {default!r}, never written"
        check_lines += [
            f"if {n!r} in op:",
            f"    {check}",
            f"    if op[{n!r}] == {default!r}:",
            f"        raise ValueError({message!r})",
        ]
    ints = [(n, _MINIMUM[kind]) for n, kind in fields if kind in _MINIMUM]
    if ints:  # one test for all of them, each value fetched once; `check_int` names the flaw once it failed
        check_lines += [f"value{i} = op[{n!r}]" for i, (n, _) in enumerate(ints)]
        test = " and ".join(
            f"type(value{i}) is int and {low} <= value{i} <= MAX_INT" for i, (_, low) in enumerate(ints)
        )
        check_lines += [
            f"if not ({test}):",
            *(f"    check_int(value{i}, {n!r}, {low})" for i, (n, low) in enumerate(ints)),
        ]
    return check_lines


def _check_declaration(
    name: str, subject: str, kinds: dict[str, Field], optional: dict[str, tuple[Field, object]], count: int
) -> None:
    """`ValueError` unless a kind's field names are unique, exclude op and its subject, and are identifiers."""
    if len(kinds) != count or {"op", subject} & (kinds.keys() | optional.keys()) or kinds.keys() & optional.keys():
        raise ValueError(f"op kind {name}: fields must be unique and exclude op and {subject}")
    if not all(field.isidentifier() and not keyword.iskeyword(field) for field in [*kinds, *optional]):
        raise ValueError(f"op kind {name}: field names must be Python identifiers (splice takes them)")
