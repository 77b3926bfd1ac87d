"""What an op kind is, and everything derived from declaring one.

An op kind is declared once, as an `OpKind` in `state.OP_KINDS`: its name,
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
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

from walqueue.engine.validate import MAX_INT, NAME_JSON_MAX
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


#: The least value of each int kind (`check_int`'s `minimum`).
_MINIMUM: dict[Field, int] = {Field.INT: 0, Field.POSITIVE_INT: 1}

#: The placeholder of each kind in a splice template, and its worst-case JSON size (None: unbounded).
_PLACEHOLDER: dict[Field, tuple[bytes, int | None]] = {
    Field.NAME: (b"%b", NAME_JSON_MAX),
    Field.INT: (b"%d", INT_JSON_MAX),
    Field.POSITIVE_INT: (b"%d", INT_JSON_MAX),
    Field.PAYLOAD: (b"%b", None),
}


@dataclass(frozen=True, eq=False, slots=True)
class OpKind:
    """One op kind: the declaration (first four fields) and what is derived from it.

    `fields` lists every field but ``op`` and ``task``: every op names its
    task, and `from_status` says which status that task must have (None: the
    op creates it, so it must not exist yet). `transition` is the state
    machine's function for this kind (see `state`).
    """

    name: str
    fields: tuple[tuple[str, Field], ...]
    from_status: str | None
    transition: Callable[..., Any] = field(repr=False)
    #: The exact key set of an op of this kind.
    keys: frozenset[str] = field(init=False, repr=False)
    #: The fields `check_name` checks, and (field, minimum) of those `check_int` checks, when an op
    #: did not come from a planner; a payload is checked by the put's transition, with its names.
    name_fields: tuple[str, ...] = field(init=False, repr=False)
    int_fields: tuple[tuple[str, int], ...] = field(init=False, repr=False)
    #: The op's canonical JSON with a placeholder for each value, keys sorted.
    template: bytes = field(init=False, repr=False)
    #: The longest canonical JSON an op of this kind can have (None: a payload has no fixed bound).
    max_json: int | None = field(init=False, repr=False)
    _values: Callable[[Op], Any] = field(init=False, repr=False)
    _names: tuple[int, ...] = field(init=False, repr=False)
    _payloads: tuple[int, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        kinds = dict(self.fields)
        if len(kinds) != len(self.fields) or {"op", "task"} & kinds.keys():
            raise ValueError(f"op kind {self.name}: fields must be unique and exclude op and task")
        kinds["task"] = Field.NAME
        parts: list[bytes] = []
        size: int | None = 0
        order = sorted([*kinds, "op"])
        for index, name in enumerate(order):
            prefix = b"%s%s:" % (b"," if index else b"{", canonical_str(name))
            parts.append(prefix)
            value_max: int | None
            if name == "op":
                text = canonical_str(self.name)
                parts.append(text.replace(b"%", b"%%"))
                value_max = len(text)
            else:
                placeholder, value_max = _PLACEHOLDER[kinds[name]]
                parts.append(placeholder)
            size = None if size is None or value_max is None else size + len(prefix) + value_max
        parts.append(b"}")
        values = [name for name in order if name != "op"]
        setter = object.__setattr__
        setter(self, "keys", frozenset(order))
        setter(self, "name_fields", tuple(name for name, kind in self.fields if kind is Field.NAME))
        setter(self, "int_fields", tuple((name, _MINIMUM[kind]) for name, kind in self.fields if kind in _MINIMUM))
        setter(self, "template", b"".join(parts))
        setter(self, "max_json", None if size is None else size + 1)
        setter(self, "_values", itemgetter(*values))
        setter(self, "_names", tuple(i for i, name in enumerate(values) if kinds[name] is Field.NAME))
        setter(self, "_payloads", tuple(i for i, name in enumerate(values) if kinds[name] is Field.PAYLOAD))

    def encode(self, op: Op) -> bytes:
        """The canonical JSON of `op`, an op of this kind with checked values (a planner's).

        Ints are spliced with ``%d``, names through `canonical_str`, and a
        payload as the canonical bytes its carrier holds (``.canonical``), so
        nothing is encoded twice. Byte-equal to `canonical_json` of the op
        with its payload decoded (tests/engine/test_optable.py checks every
        declared kind); an op whose values were not checked is not this
        method's business.
        """
        values = list(self._values(op))
        for index in self._names:
            values[index] = canonical_str(values[index])
        for index in self._payloads:
            values[index] = values[index].canonical
        return self.template % tuple(values)
