"""What a call is: a row of the call table (`Call`, its `Arg`s and `Answer`), and all a row derives.

A row (`Call`) names a call of `Queue`, its arguments in the order of the
method's signature (each with its kind, whether it is keyword-only, and its
default when optional), its answer field and kind, whether it may commit a
transaction (`writes`), whether a client may send it again after a lost
connection (`retry`: only when a second run provably changes nothing), and
whether it blocks until another client commits (`blocks`: a front end
serves it with its own waiter, a server parks it).

From a row come both ends of a call: a front end's (a request's JSON
checked into `Queue`'s arguments, the method invoked, its answer's fields)
and a client's (arguments bound and checked as `Queue` checks them, the
request, the answer back to Python). The rows themselves are calltable.py.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Final

from walqueue.protocol.callkinds import AnswerKind, BadArgument, Kind

__all__ = ["REQUIRED", "Answer", "Arg", "Call"]


class _Required(enum.Enum):
    REQUIRED = "required"


#: The default of an argument that has none.
REQUIRED: Final = _Required.REQUIRED


@dataclass(frozen=True, slots=True)
class Arg:
    """One argument: its name, its kind, keyword-only or not, and its default (`REQUIRED`: none)."""

    name: str
    kind: Kind
    keyword: bool = False
    default: Any = REQUIRED

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


@dataclass(frozen=True, slots=True)
class Answer:
    """The field of a success answer that holds the result (None: the answer has no field), and its kind."""

    field: str | None
    kind: AnswerKind


@dataclass(slots=True, eq=False, repr=False)
class Call[T]:
    """One public call: its arguments, its answer, whether it writes, whether a client may retry it.

    `T` is the type of the call's result (what `Queue`'s method returns).

    `retry`: may a client send it again after a lost answer? A call that
    writes says so only where it is safe (the default is no); a call that
    writes nothing may always be retried, so for one it is true whatever is
    passed.

    `check`: for a call whose `Queue` method checks its arguments in an
    order other than the signature's, or by rules that span several of
    them, those checks (the ones that need no state), in `Queue`'s order:
    a client runs it before sending, so that a bad argument raises what
    `Queue` raises for it. It is called with every argument by name, the
    defaults filled in. Without one, each argument is checked by its kind,
    in the signature's order. `whole_check`: the check applies each
    argument's own rule as well (it is `Queue`'s whole check of the call),
    so the kinds, all `plain`, only pass the values on: a fast path for the
    hot `put`, whose payload would otherwise be walked twice.
    """

    name: str
    args: tuple[Arg, ...]
    answer: Answer
    _: KW_ONLY
    writes: bool
    summary: str
    retry: bool = False
    blocks: bool = False
    check: Callable[..., object] | None = None
    whole_check: bool = False
    _names: frozenset[str] = field(init=False)
    _required: frozenset[str] = field(init=False)
    #: The arguments passed by position, as a prefix of the signature.
    _positional: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        self.retry = self.retry or not self.writes
        self._names = frozenset(arg.name for arg in self.args)
        self._required = frozenset(arg.name for arg in self.args if arg.required)
        self._positional = tuple(arg.name for arg in self.args if not arg.keyword)
        if self.whole_check and (self.check is None or not all(arg.kind.plain for arg in self.args)):
            raise ValueError(f"{self.name}: whole_check needs a check and plain kinds only")

    def __repr__(self) -> str:
        return f"<Call {self.name}({', '.join(arg.name for arg in self.args)})>"

    # -- a front end: JSON in, Queue call, JSON out ---------------------------------

    def check_json(
        self, source: Mapping[str, Any], ignore: frozenset[str] = frozenset(), where: str = ""
    ) -> dict[str, Any]:
        """The arguments `Queue` takes, from a request's JSON fields: the unknown, the missing, then each value.

        Raises `BadArgument` naming the field (prefixed by `where`, for an
        item of a list); `ignore` are the envelope's fields.
        """
        # Set operations at C speed for the usual request; the lists only to name a flaw.
        if not self._names.issuperset(source.keys() - ignore):
            unknown = sorted(name for name in source if name not in self._names and name not in ignore)
            names = ", ".join(repr(_shorten(name)) for name in unknown)
            raise BadArgument(f"{where}unknown field{'s' if len(unknown) > 1 else ''} {names}")
        if not source.keys() >= self._required:
            missing = [arg.name for arg in self.args if arg.required and arg.name not in source]
            names = ", ".join(repr(name) for name in missing)
            raise BadArgument(f"{where}missing field{'s' if len(missing) > 1 else ''} {names}")
        prefix = where.removesuffix(": ")
        checked: dict[str, Any] = {}
        for arg in self.args:
            if arg.name in source:
                label = f"{prefix}.{arg.name}" if prefix else arg.name
                checked[arg.name] = arg.kind.check(source[arg.name], label)
        return checked

    def invoke(self, method: Callable[..., Any], arguments: Mapping[str, Any]) -> Any:
        """Call `method` (the `Queue` method, or a front end's waiter) with checked `arguments`.

        Only the arguments given are passed (the method's defaults apply to
        the others), each as the signature takes it.
        """
        positional: list[Any] = []
        for name in self._positional:
            if name not in arguments:
                break
            positional.append(arguments[name])
        if len(positional) == len(arguments):  # the usual request: nothing passed by keyword
            return method(*positional)
        passed = self._positional[: len(positional)]
        keywords = {name: value for name, value in arguments.items() if name not in passed}
        return method(*positional, **keywords)

    def answer_fields(self, result: Any) -> dict[str, Any]:
        """The fields of the success answer for `result` (``{}`` for a call that answers nothing)."""
        field = self.answer.field
        return {} if field is None else {field: self.answer.kind.to_json(result)}

    # -- a client: Python in, JSON request, answer to Python -------------------------

    def request(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The JSON request for a call made as ``queue.NAME(*args, **kwargs)``, checked by the engine's rules.

        Binding follows the method's signature (`TypeError` as Python raises
        it); then the row's `check`, if any; then each value is checked and
        encoded by its kind (a `Lease` as its owner's three fields). Only
        the arguments given are sent, and of those not one that is its
        default None (the server's default is the same).
        """
        given = self.bind(args, kwargs)
        if self.check is not None:
            self.check(**{arg.name: given.get(arg.name, arg.default) for arg in self.args})
        return self.encode(given, checked=self.whole_check)

    def bind(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments given, by name, as Python binds them to the method's signature (else `TypeError`).

        A one-shot iterator given for an argument of a kind that takes many
        values (`Kind.many`) is read into a list here, so that the check and
        the encoding see the same items.
        """
        if len(args) > len(self._positional):
            raise TypeError(
                f"{self.name}() takes {len(self._positional)} positional arguments but {len(args)} were given"
            )
        given = dict(zip(self._positional, args, strict=False))
        for name, value in kwargs.items():
            if name not in self._names:
                raise TypeError(f"{self.name}() got an unexpected keyword argument {name!r}")
            if name in given:
                raise TypeError(f"{self.name}() got multiple values for argument {name!r}")
            given[name] = value
        missing = [arg.name for arg in self.args if arg.required and arg.name not in given]
        if missing:
            raise TypeError(f"{self.name}() missing required arguments: {', '.join(map(repr, missing))}")
        for arg in self.args:
            if arg.kind.many and isinstance(given.get(arg.name), Iterator):
                given[arg.name] = list(given[arg.name])
        return given

    def encode(self, given: Mapping[str, Any], *, checked: bool = False) -> dict[str, Any]:
        """The request for arguments already bound (`bind`): each checked and encoded by its kind.

        `checked`: every value already passed its kind's rule and every
        kind is `plain` (`whole_check`), so each is sent as it is.
        """
        request: dict[str, Any] = {"op": self.name}
        for arg in self.args:
            value = given.get(arg.name, REQUIRED)
            if value is not REQUIRED and not (value is None and arg.default is None):
                request[arg.name] = value if checked else arg.kind.encode(value, arg.name)
        return request

    def result(self, answer: Mapping[str, Any]) -> T:
        """The Python result of a success answer (`KeyError` if its field is missing)."""
        field = self.answer.field
        result: T = None if field is None else self.answer.kind.from_json(answer[field])  # type: ignore[assignment]
        return result

    def blocks_for(self, arguments: Mapping[str, Any]) -> float:
        """How long a call may block before it answers (its `timeout` argument), for a client's own timeout.

        0.0 for every call that does not block.
        """
        if not self.blocks:
            return 0.0
        return float(next(arguments[arg.name] for arg in self.args if arg.kind.name == "timeout"))

    def usage(self) -> str:
        """The arguments as ``--help`` lists them: optional ones with a ``?``."""
        return ", ".join(arg.name + ("" if arg.required else "?") for arg in self.args) or "-"


def _shorten(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
