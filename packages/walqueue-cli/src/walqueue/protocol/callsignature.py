"""A method that makes a call takes its row's parameters: checked when the table loads and when a client class is made.

The row (calltable.py) is the one place a call's parameters are written.
`Queue`'s methods are the API and stay written out, and so are the
clients' typed methods; each is held to its row by construction: the table
refuses to load when a row and `Queue`'s method of that name differ
(`check_method`), and `ClientSettings.__init_subclass__` refuses a client
class whose method of a call's name differs (`check_class`). Either raises
`CallSignatureError` naming the call and the parameter.

A method agrees with its row when it takes the row's parameters in the
row's order, each positional or keyword-only as the row says, with the
row's default (or none where the row has none). A client may take the
row's trailing keyword-only parameters as ``**options: Unpack[Options]``,
where `Options` is a TypedDict whose keys are exactly those parameters
(each one required in it only if the row requires it).

Cheap, since it runs at every start: it reads a function's ``__code__``,
``__defaults__``, ``__kwdefaults__`` and one annotation, not
`inspect.signature` (which takes over three times as long only to build
the signatures). Every row against `Queue` takes about 45 µs, each client
class about as long, and this module's import about 60 µs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, Unpack, get_args, get_origin

from walqueue.engine.types import WalQueueError
from walqueue.protocol.callrow import REQUIRED, Call

__all__ = ["CallSignatureError", "check_class", "check_method"]

_VARARGS: Final = 0x04  # inspect.CO_VARARGS: the function takes *args
_VARKEYWORDS: Final = 0x08  # inspect.CO_VARKEYWORDS: the function takes **kwargs

#: (name, keyword-only, default or REQUIRED) of one parameter.
type _Parameter = tuple[str, bool, Any]


class CallSignatureError(WalQueueError, TypeError):
    """A method of a call's name does not take the parameters of the call's row (the message names both)."""


def check_method(call: Call[Any], method: object, owner: str) -> None:
    """Raise `CallSignatureError` unless `method` (a plain or async function, `self` first) agrees with `call`'s row.

    `owner` names the method's class in the message (``Queue.put``). A
    method decorated with `functools.wraps` is read through its wrapper.
    """
    where = f"{owner}.{call.name}"
    while hasattr(method, "__wrapped__"):  # a decorated method (functools.wraps): the function it wraps
        method = method.__wrapped__
    code = getattr(method, "__code__", None)
    if code is None:
        raise CallSignatureError(f"{where} is not a method, but {call!r} is a call of the table")
    if code.co_posonlyargcount > 1 or code.co_flags & _VARARGS:
        raise CallSignatureError(f"{where}: a call's parameters are passed by name too (no / and no *args)")
    explicit = _parameters(method, code)
    expected = [(arg.name, arg.keyword, arg.default) for arg in call.args]
    for position, (actual, wanted) in enumerate(zip(explicit, expected, strict=False)):
        if actual[0] != wanted[0]:
            raise CallSignatureError(
                f"{where}: parameter {position + 1} is {actual[0]!r}, the row {call.name!r} has {wanted[0]!r} there"
            )
        _same_kind_and_default(where, call.name, actual, wanted)
    if len(explicit) > len(expected):
        raise CallSignatureError(f"{where}: parameter {explicit[len(expected)][0]!r} is not in the row {call.name!r}")
    rest = expected[len(explicit) :]
    options = _options(method, code, where)
    if options is None:
        if rest:
            raise CallSignatureError(f"{where} lacks parameter {rest[0][0]!r} of the row {call.name!r}")
        return
    _check_options(where, call.name, options, rest)


def check_class(cls: type, calls: Mapping[str, Call[Any]]) -> None:
    """Check each method `cls` itself defines under a call's name (its bases' were checked when they were made)."""
    for name, member in vars(cls).items():
        call = calls.get(name)
        if call is not None:
            check_method(call, member, cls.__name__)


def _parameters(method: object, code: Any) -> list[_Parameter]:
    """The parameters after `self`, each with its kind and default, from the code object and the defaults."""
    positional = code.co_argcount
    names = code.co_varnames[: positional + code.co_kwonlyargcount]
    defaults: tuple[Any, ...] = getattr(method, "__defaults__", None) or ()
    keyword_defaults: dict[str, Any] = getattr(method, "__kwdefaults__", None) or {}
    first_default = positional - len(defaults)
    found: list[_Parameter] = []
    for index in range(1, len(names)):
        name = names[index]
        if index < positional:
            found.append((name, False, defaults[index - first_default] if index >= first_default else REQUIRED))
        else:
            found.append((name, True, keyword_defaults.get(name, REQUIRED)))
    return found


def _same_kind_and_default(where: str, row: str, actual: _Parameter, wanted: _Parameter) -> None:
    name, keyword, default = actual
    if keyword != wanted[1]:
        kinds = ("positional", "keyword-only")
        raise CallSignatureError(
            f"{where}: parameter {name!r} is {kinds[keyword]}, in the row {row!r} it is {kinds[wanted[1]]}"
        )
    if not _same_default(default, wanted[2]):
        raise CallSignatureError(
            f"{where}: parameter {name!r} defaults to {_shown(default)}, in the row {row!r} to {_shown(wanted[2])}"
        )


def _same_default(a: object, b: object) -> bool:
    return a is b or (type(a) is type(b) and a == b)


def _shown(default: object) -> str:
    return "nothing (required)" if default is REQUIRED else repr(default)


def _options(method: object, code: Any, where: str) -> Mapping[str, Any] | None:
    """The TypedDict of ``**options: Unpack[TypedDict]`` (None: no ``**``); a bare ``**kwargs`` is refused."""
    if not code.co_flags & _VARKEYWORDS:
        return None
    name = code.co_varnames[code.co_argcount + code.co_kwonlyargcount]
    annotation = getattr(method, "__annotations__", {}).get(name)
    options: Any = None
    if isinstance(annotation, str):  # postponed annotations: "Unpack[PutOptions]", looked up where it was written
        inner = annotation.removeprefix("Unpack[").removesuffix("]")
        if inner != annotation and inner.isidentifier():
            options = getattr(method, "__globals__", {}).get(inner)
    elif get_origin(annotation) is Unpack:
        options = get_args(annotation)[0]
    if not isinstance(getattr(options, "__optional_keys__", None), frozenset):
        raise CallSignatureError(f"{where}: **{name} must be declared as Unpack[<a TypedDict of the row's keywords>]")
    return {key: key in options.__required_keys__ for key in options.__annotations__}


def _check_options(where: str, row: str, options: Mapping[str, bool], rest: Iterable[_Parameter]) -> None:
    """The TypedDict's keys are the row's remaining parameters, all keyword-only, required where the row requires."""
    wanted = {name: (keyword, default) for name, keyword, default in rest}
    for name in options:
        if name not in wanted:
            raise CallSignatureError(f"{where}: option {name!r} is not a parameter of the row {row!r}")
    for name, (keyword, default) in wanted.items():
        if name not in options:
            raise CallSignatureError(f"{where} lacks parameter {name!r} of the row {row!r} (nor in its options)")
        if not keyword:
            raise CallSignatureError(f"{where}: parameter {name!r} is positional in the row {row!r}, not an option")
        if options[name] != (default is REQUIRED):
            required = ("optional", "required")
            raise CallSignatureError(
                f"{where}: option {name!r} is {required[options[name]]}, in the row {row!r} it is "
                f"{required[default is REQUIRED]}"
            )
