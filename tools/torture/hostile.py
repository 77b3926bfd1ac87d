"""Hostile values and API calls, for the bad-input campaign and the server's hostile clients."""

from __future__ import annotations

import enum
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from model import Model, render
from walqueue import (
    KeyConflict,
    Lease,
    StaleLease,
    WrongStatus,
)

from .workload import token_for

BAD_CALLS_PER_UNIT = 400
BAD_CALLS_FIRST_UNIT = 150  # whatever the deadline (about 70% of calls are hostile, the rest move the state on)
CLI_LINES_PER_UNIT = 200
VIEW_EVERY = 25
INT_LIMIT = 2**63
MAX_PAYLOAD_INT_BITS = 14_000
FRAME_BOUND = 16 * 2**20
RECORD_MARGIN = 8192
ERROR_TYPE_BYTES = 256  # the stored bounds of an error (longer ones are cut, never refused)
ERROR_MESSAGE_BYTES = 2048


class _Str(str):
    """A str subclass: may encode differently than it compares, so the queue refuses it."""


class _Int(int):
    pass


class _Float(float):
    pass


class _Dict(dict):  # type: ignore[type-arg]
    pass


class _Color(enum.IntEnum):
    RED = 1


def nested(depth: int, container: str) -> dict[str, Any]:
    """A payload `depth` containers deep (the payload itself is level 1)."""
    inner: Any = {} if container == "dict" else []
    for _ in range(depth - 2):
        inner = {"d": inner} if container == "dict" else [inner]
    return {"d": inner} if depth > 1 else {}


def _cyclic() -> dict[str, Any]:
    payload: dict[str, Any] = {"a": 1}
    payload["self"] = payload
    return payload


HOSTILE_SCALARS: tuple[Any, ...] = (
    None, True, False, 0, 1, -1, 2**63 - 1, 2**63, 2**64, -(2**63), 10**40, 0.0, -0.0, 1.0, 1.5,
    float("nan"), float("inf"), float("-inf"), "", "0", "x", b"x", bytearray(b"x"), (), (1,), [], [1], {}, {"a": 1},
    set(), frozenset(), complex(1, 2), range(3), _Int(1), _Str("x"), _Float(1.0), _Color.RED,
)  # fmt: skip
HOSTILE_NAMES: tuple[Any, ...] = (
    "a", "é", "\x00", "\x01" * 1024, "x" * 1024, "x" * 1025, "é" * 512, "é" * 513, "日本" * 170, "日本" * 171,
    "\ud800", "a\udcff", " ", "\n", "\u2028", "x" * 100_000, "", _Str("t"), b"t", 1, None, True, 1.0, ["t"],
)  # fmt: skip
HOSTILE_INTS: tuple[Any, ...] = (
    0, 1, 2, 2**63 - 1, 2**63, 2**63 - 2, -1, -(2**63), 10**100, True, False, 1.0, 0.5, float("nan"), "1", None,
    _Int(1), _Color.RED, b"1", [1],
)  # fmt: skip
#: Error arguments (of release, fail and cancel): refused for their type or keys, or accepted, a long
#: type or message cut by the engine (never refused for its length), a lone surrogate escaped.
HOSTILE_ERRORS: tuple[Any, ...] = (
    None, {"type": "ValueError", "message": "bad input"}, {"type": "E", "message": ""},
    {"type": "T" * 257, "message": "m"}, {"type": "日本" * 200, "message": "é" * 1025},
    {"type": "E", "message": "m" * 2048}, {"type": "E", "message": "m" * 2049}, {"type": "E", "message": "x" * 100_000},
    {"type": "E\ud800", "message": "\udcff"}, {"type": "\x00", "message": "\n\u2028"},
    {"type": "", "message": "m"}, {"type": "E"}, {"message": "m"}, {}, {"type": "E", "message": "m", "attempt": 1},
    {"type": "E", "message": "m", "at": 0}, {"Type": "E", "message": "m"}, {1: "E", "message": "m"},
    {"type": 1, "message": "m"}, {"type": "E", "message": None}, {"type": b"E", "message": "m"},
    {"type": "E", "message": ["m"]}, {"type": _Str("E"), "message": "m"}, {"type": "E", "message": _Str("m")},
    _Dict(type="E", message="m"), "E: m", b"E", ("E", "m"), ["type", "message"], 1, True, 0.0, object(),
)  # fmt: skip
#: Hostile errors the engine records, cut to its bounds: the first unit records both, however slow (bad_input.py).
RECORDED_HOSTILE_ERRORS = ({"type": "T" * 257, "message": "m"}, {"type": "E", "message": "x" * 100_000})
HOSTILE_STATUSES: tuple[Any, ...] = (
    None, "ready", "dead", "READY", "", "leased ", 1, b"ready", _Str("ready"), ["ready"],
)  # fmt: skip


def hostile_payload(rng: random.Random) -> Any:
    """A payload that is wrong, or right only just (depth and size limits, exotic but valid values)."""
    makers: list[Callable[[], Any]] = [
        lambda: {"ok": 1},
        lambda: {"f": 1e308, "neg": -0.0, "u": "\u2028\x00é", "b": [True, None, 1, 1.0]},
        lambda: nested(64, "dict"),
        lambda: nested(64, "list"),
        lambda: nested(65, "dict"),
        lambda: nested(65, "list"),
        lambda: nested(3000, "dict"),
        lambda: _cyclic(),
        lambda: {"big": 2**MAX_PAYLOAD_INT_BITS - 1},
        lambda: {"big": 2**MAX_PAYLOAD_INT_BITS},
        lambda: {"neg": -(2**200)},
        lambda: {"nan": float("nan")},
        lambda: {"inf": float("inf")},
        lambda: {1: "int key"},
        lambda: {None: 1},
        lambda: {("t",): 1},
        lambda: {"t": (1, 2)},
        lambda: {"s": {1, 2}},
        lambda: {"b": b"bytes"},
        lambda: {"s": "\ud800"},
        lambda: {"\udfff": 1},
        lambda: {"sub": _Str("x")},
        lambda: {"sub": _Int(2)},
        lambda: {"sub": _Float(2.0)},
        lambda: {"enum": _Color.RED},
        lambda: _Dict(a=1),
        lambda: {"inner": _Dict(a=1)},
        lambda: {"o": object()},
        lambda: [1, 2],
        lambda: "payload",
        lambda: None,
        lambda: 1,
        lambda: {"wide": list(range(20_000))},
        lambda: {"long": "y" * 200_000},
    ]
    return rng.choice(makers)()


def is_plain(value: Any, depth: int = 0, seen: set[int] | None = None) -> bool:
    """True when `value` holds only exact JSON types (no subclass, tuple, cycle or monster int).

    For such values the engine may not be stricter than the model: refusing
    one that the model accepts is a divergence.
    """
    seen = set() if seen is None else seen
    kind = type(value)
    if value is None or kind in (bool, str, float):
        return True
    if kind is int:
        return int(value).bit_length() <= MAX_PAYLOAD_INT_BITS
    if kind in (list, dict):
        if id(value) in seen or depth > 100:
            return False
        seen.add(id(value))
        if kind is dict:
            return all(type(k) is str and is_plain(v, depth + 1, seen) for k, v in value.items())
        return all(is_plain(v, depth + 1, seen) for v in value)
    if kind is Lease:
        return all(is_plain(getattr(value, name), depth + 1, seen) for name in ("task_id", "worker", "generation"))
    return False


@dataclass
class Call:
    """One hostile API call: what it is, how to make it, and the arguments to judge its plainness by."""

    description: str
    invoke: Callable[[Any], Any]
    arguments: list[Any]
    #: The call's error argument, in a 1-tuple, for a call that takes one (release, fail, cancel).
    error: tuple[Any] | None = None


def attempt(call: Call, target: Any) -> tuple[str, Any]:
    """('ok', rendered result) or (error category, exception)."""
    try:
        value = call.invoke(target)
    except KeyConflict as exc:
        return "KeyConflict", exc
    except StaleLease as exc:
        return "StaleLease", exc
    except WrongStatus as exc:  # a ValueError, but about the state, not the arguments
        return "WrongStatus", exc
    except (TypeError, ValueError) as exc:
        return "argument", exc
    except Exception as exc:
        return "undocumented", exc
    return "ok", render(value)


class HostileCalls:
    """Seeded hostile calls against the queue's current state (read through the model)."""

    def __init__(self, rng: random.Random, foreign: list[Lease]) -> None:
        self.rng = rng
        self.foreign = foreign
        self.serial = 0
        self.specs: list[dict[str, Any]] = []

    def pick(self, pool: Sequence[Any], valid: Any) -> Any:
        return self.rng.choice(pool) if self.rng.random() < 0.5 else valid

    def token(self, model: Model) -> Any:
        rng = self.rng
        leased = model.tasks("leased")
        touched = [t for t in model.tasks() if t.generation > 0]
        makers: list[Callable[[], Any]] = [
            lambda: token_for(rng.choice(leased)) if leased else None,
            lambda: token_for(rng.choice(touched)) if touched else None,
            lambda: rng.choice(self.foreign),
            lambda: Lease(1, None, "1", 0, 0, {}),  # type: ignore[arg-type]
            lambda: Lease("b1", "w", True, 0, 0, {}),
            lambda: Lease("b1", "w", 2**70, 0, 0, {}),
            lambda: Lease("x" * 5000, "w" * 5000, 1, 0, 0, {}),
            lambda: Lease(_Str("b1"), "w", 1, 0, 0, {}),
            lambda: rng.choice(leased).to_dict() if leased else {},
            lambda: rng.choice(touched) if touched else None,
            lambda: rng.choice(HOSTILE_SCALARS),
        ]
        return rng.choice(makers)()

    def put_spec(self) -> dict[str, Any]:
        rng = self.rng
        if self.specs and rng.random() < 0.3:
            spec = dict(rng.choice(self.specs))  # a retry, or a conflict once something is changed
        else:
            self.serial += 1
            spec = {"task_id": f"b{self.serial}", "payload": {"n": self.serial}, "max_attempts": rng.choice([1, 2])}
            if rng.random() < 0.3:
                spec["key"] = f"kb{self.serial}"
            self.specs.append(dict(spec))
        for _ in range(rng.choice([1, 1, 2])):
            name = rng.choice(["task_id", "key", "payload", "available_at", "max_attempts", "extra"])
            if name in ("task_id", "key"):
                spec[name] = rng.choice(HOSTILE_NAMES)
            elif name == "payload":
                spec[name] = hostile_payload(rng)
            elif name == "extra":
                spec[rng.choice(["priority", "task", "Key"])] = 1
            else:
                spec[name] = rng.choice(HOSTILE_INTS)
        return spec

    def next_call(self, model: Model, now: int) -> Call:
        rng = self.rng
        kind = rng.choice(
            ["put", "put", "put_many", "reserve", "ack", "release", "get", "tasks", "extend", "redrive", "cancel"]
            + ["fail", "ack_many"]
        )
        if kind == "put":
            spec = self.put_spec()
            return Call(f"put {short(spec)}", lambda t: t.put(**spec), list(spec.values()))
        if kind == "put_many":
            return self._put_many_call()
        if kind == "reserve":
            worker = self.pick(HOSTILE_NAMES, "w1")
            when = self.pick(HOSTILE_INTS, now)
            lease_seconds = self.pick(HOSTILE_INTS, rng.choice([1, 5]))
            limit = self.pick(HOSTILE_INTS, rng.choice([1, 3]))
            return Call(
                f"reserve {short([worker, when, lease_seconds, limit])}",
                lambda t: t.reserve(worker, now=when, lease_seconds=lease_seconds, limit=limit),
                [worker, when, lease_seconds, limit],
            )
        if kind in ("ack", "release", "fail"):
            lease = self.token(model)
            when = self.pick(HOSTILE_INTS, now)
            if kind == "ack":
                return Call(f"ack {short([lease, when])}", lambda t: t.ack(lease, now=when), [lease, when])
            error = rng.choice(HOSTILE_ERRORS)
            if kind == "fail":
                return Call(
                    f"fail {short([lease, when, error])}",
                    lambda t: t.fail(lease, now=when, error=error),
                    [lease, when, error],
                    (error,),
                )
            delay = self.pick(HOSTILE_INTS, 0)
            return Call(
                f"release {short([lease, when, delay, error])}",
                lambda t: t.release(lease, now=when, delay=delay, error=error),
                [lease, when, delay, error],
                (error,),
            )
        if kind == "extend":
            lease = self.token(model)
            when = self.pick(HOSTILE_INTS, now)
            lease_seconds = self.pick(HOSTILE_INTS, rng.choice([1, 5]))
            return Call(
                f"extend {short([lease, when, lease_seconds])}",
                lambda t: t.extend(lease, now=when, lease_seconds=lease_seconds),
                [lease, when, lease_seconds],
            )
        if kind in ("redrive", "cancel"):
            return self._redrive_or_cancel_call(kind, model, now)
        if kind == "ack_many":
            return self._ack_many_call(model, now)
        if kind == "get":
            task_id = rng.choice(HOSTILE_NAMES + ("b1", "b2"))
            return Call(f"get {short(task_id)}", lambda t: t.get(task_id), [task_id])
        status = rng.choice(HOSTILE_STATUSES)
        return Call(f"tasks {short(status)}", lambda t: t.tasks(status), [status])

    def _put_many_call(self) -> Call:
        rng = self.rng
        items: Any = [self.put_spec() if rng.random() < 0.5 else self._valid_item() for _ in range(rng.randrange(4))]
        if rng.random() < 0.3:
            items.insert(rng.randrange(len(items) + 1), rng.choice(HOSTILE_SCALARS + ({"payload": {}},)))
        container = rng.random()
        if container < 0.1:
            items = rng.choice([None, "tasks", b"x", {"task_id": "b", "payload": {}}, 7])
        elif container < 0.2:
            items = tuple(items)
        elif container < 0.3:
            listed = list(items)  # a generator, made anew for each target (the first would drain it)
            return Call(
                f"put_many (generator of) {short(listed)}",
                lambda t: t.put_many(item for item in listed),
                listed,
            )
        arguments = list(items) if isinstance(items, (list, tuple)) else [items]
        return Call(f"put_many {short(items)}", lambda t: t.put_many(items), arguments)

    def _ack_many_call(self, model: Model, now: int) -> Call:
        """Tokens of every kind `token` makes (a repeated one too), in a list, a generator or no iterable at all."""
        rng = self.rng
        when = self.pick(HOSTILE_INTS, now)
        leases: Any = [self.token(model) for _ in range(rng.randrange(4))]
        if leases and rng.random() < 0.2:
            leases.append(leases[0])  # listed twice: the whole call is StaleLease
        container = rng.random()
        if container < 0.1:
            leases = rng.choice([None, "leases", b"x", {"task_id": "b1"}, 7, self.token(model)])
        elif container < 0.2:
            listed = list(leases)  # a generator, made anew for each target (the first would drain it)
            return Call(
                f"ack_many (generator of) {short([listed, when])}",
                lambda t: t.ack_many((lease for lease in listed), now=when),
                [*listed, when],
            )
        arguments = [*leases, when] if isinstance(leases, list) else [leases, when]
        return Call(f"ack_many {short([leases, when])}", lambda t: t.ack_many(leases, now=when), arguments)

    def _redrive_or_cancel_call(self, kind: str, model: Model, now: int) -> Call:
        rng = self.rng
        wanted = ("dead",) if kind == "redrive" else ("ready", "leased")
        fitting = [t.task_id for t in model.tasks() if t.status in wanted] or ["b1"]
        task_id = self.pick(HOSTILE_NAMES + ("b1", "b2", "nobody"), rng.choice(fitting))
        if kind == "cancel":
            return self._cancel_call(task_id, now)
        available_at = self.pick(HOSTILE_INTS, now)
        if rng.random() < 0.3:  # the default extra_attempts
            return Call(
                f"redrive {short([task_id, available_at])}",
                lambda t: t.redrive(task_id, available_at=available_at),
                [task_id, available_at],
            )
        extra = self.pick(HOSTILE_INTS, rng.choice([1, 2]))
        return Call(
            f"redrive {short([task_id, available_at, extra])}",
            lambda t: t.redrive(task_id, available_at=available_at, extra_attempts=extra),
            [task_id, available_at, extra],
        )

    def _cancel_call(self, task_id: Any, now: int) -> Call:
        """A cancel with no reason, with one (and maybe its `now`), or with `now` alone."""
        rng = self.rng
        shape = rng.random()
        if shape < 0.3:
            return Call(f"cancel {short(task_id)}", lambda t: t.cancel(task_id), [task_id])
        error = None if shape < 0.45 else rng.choice(HOSTILE_ERRORS)
        if shape > 0.85:  # an error without `now`: TypeError, whatever the error (None alone needs none)
            return Call(
                f"cancel {short([task_id, error])} (no now)",
                lambda t: t.cancel(task_id, error=error),
                [task_id, error],
                (error,),
            )
        when = self.pick(HOSTILE_INTS, now)
        return Call(
            f"cancel {short([task_id, error, when])}",
            lambda t: t.cancel(task_id, error=error, now=when),
            [task_id, error, when],
            (error,),
        )

    def _valid_item(self) -> dict[str, Any]:
        self.serial += 1
        item = {"task_id": f"b{self.serial}", "payload": {"m": self.serial}}
        self.specs.append(dict(item))
        return item


def short(value: Any) -> str:
    """A bounded description; a subclass of a builtin shows its class (its repr looks like the base's)."""
    try:
        text = repr(value)
    except Exception:  # a cyclic or monstrous value: its type is enough
        text = type(value).__name__
    kind = type(value)
    if kind.__module__ != "builtins" and not isinstance(value, Lease):
        text = f"{kind.__name__}({text})"
    return text if len(text) <= 80 else text[:77] + "..."
