"""A call's parameters are written once, in its row: a method that disagrees is refused when it is made.

The table refuses to load when a row and `Queue`'s method of its name take
different parameters, and a client class is not made when one of its
methods named for a call does; the error names the call and the parameter.
Each test builds the disagreeing row or class in this process.
"""

from __future__ import annotations

import dataclasses
import functools
import runpy
from typing import Any, TypedDict, Unpack

import pytest

from model import Model
from walqueue import Lease, Queue
from walqueue.client import AsyncClient, Client, Pipeline
from walqueue.engine.laneplans import UNCHANGED
from walqueue.protocol import calltable
from walqueue.protocol.callrow import REQUIRED, Arg, Call
from walqueue.protocol.callsignature import CallSignatureError, check_class, check_method
from walqueue.protocol.calltable import CALLS
from walqueue.protocol.shaping import PutOptions


def _put_with(*args: Arg) -> Call[Any]:
    return dataclasses.replace(CALLS["put"], args=args)


PUT_ARGS = CALLS["put"].args


def test_every_row_agrees_with_queue_and_with_both_clients() -> None:
    for call in CALLS.values():
        check_method(call, getattr(Queue, call.name), "Queue")
    for client in (Client, AsyncClient, Pipeline):
        check_class(client, CALLS)


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ((PUT_ARGS[1], PUT_ARGS[0], *PUT_ARGS[2:]), "'payload'"),  # two parameters swapped
        ((Arg("id", PUT_ARGS[0].kind), *PUT_ARGS[1:]), "'task_id'"),  # a parameter renamed
        ((*PUT_ARGS[:2], dataclasses.replace(PUT_ARGS[2], keyword=False), *PUT_ARGS[3:]), "'key' is keyword-only"),
        ((*PUT_ARGS[:3], dataclasses.replace(PUT_ARGS[3], default=1), *PUT_ARGS[4:]), "'available_at' defaults to 0"),
        ((*PUT_ARGS[:4], dataclasses.replace(PUT_ARGS[4], default=REQUIRED), *PUT_ARGS[5:]), "'max_attempts'"),
        ((*PUT_ARGS[:4], dataclasses.replace(PUT_ARGS[4], default=3.0), *PUT_ARGS[5:]), "'max_attempts'"),
        (PUT_ARGS[:-1], "'put_at' is not in the row"),  # the method has one more
        (
            (*PUT_ARGS, dataclasses.replace(PUT_ARGS[2], name="colour")),
            "lacks parameter 'colour'",
        ),  # the row has one more
    ],
)
def test_a_row_that_disagrees_with_queues_method_is_refused_naming_the_call_and_the_parameter(
    args: tuple[Arg, ...], named: str
) -> None:
    with pytest.raises(CallSignatureError, match=f"Queue.put.*{named}") as refused:
        check_method(_put_with(*args), Queue.put, "Queue")
    assert "'put'" in str(refused.value)


def test_the_table_does_not_load_when_queue_disagrees_with_a_row(monkeypatch: pytest.MonkeyPatch) -> None:
    def redrive(self: Queue, task_id: str, *, available_at: int, extra_attempts: int = 2) -> None:
        """A method whose default is not the row's."""

    monkeypatch.setattr(Queue, "redrive", redrive)
    with pytest.raises(CallSignatureError, match=r"Queue\.redrive: parameter 'extra_attempts' defaults to 2.*to 1"):
        runpy.run_path(calltable.__file__)  # the module run afresh: the loaded table is not touched
    monkeypatch.delattr(Queue, "redrive")
    with pytest.raises(CallSignatureError, match=r"Queue\.redrive is not a method"):
        runpy.run_path(calltable.__file__)


def test_a_client_method_that_disagrees_with_its_row_is_refused_when_the_class_is_made() -> None:
    with pytest.raises(CallSignatureError, match=r"Quick\.ack: parameter 'now' defaults to 0"):

        class Quick(Client):
            def ack(self, lease: Lease, *, now: int = 0) -> None:
                """A default the row does not have."""

    with pytest.raises(CallSignatureError, match=r"Short\.put lacks parameter 'key'"):

        class Short(Client):
            def put(self, task_id: str, payload: dict[str, Any]) -> str:  # type: ignore[override]
                """Without the row's keywords."""
                return task_id

    with pytest.raises(CallSignatureError, match=r"Positional\.extend: parameter 'now' is positional"):

        class Positional(AsyncClient):
            async def extend(self, lease: Lease, now: int, *, lease_seconds: int) -> Lease:
                """`now` positional, keyword-only in the row."""
                return lease


_PUT_KEYWORDS: dict[str, Any] = dict(PutOptions.__annotations__)
#: `PutOptions` without `put_at`; with all its keys required (`total=True`); with one key more.
PutOptionsWithoutPutAt = TypedDict(  # type: ignore[misc]  # built from PutOptions' keys, not restated
    "PutOptionsWithoutPutAt", {key: kind for key, kind in _PUT_KEYWORDS.items() if key != "put_at"}, total=False
)
PutOptionsAllRequired = TypedDict("PutOptionsAllRequired", _PUT_KEYWORDS)  # type: ignore[misc]


class PutOptionsWithColour(PutOptions, total=False):
    colour: str


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ("PutOptionsWithoutPutAt", "lacks parameter 'put_at'"),
        ("PutOptionsWithColour", "option 'colour' is not a parameter"),
        ("PutOptionsAllRequired", "option 'key' is required"),
        ("dict[str, Any]", r"\*\*options must be declared as Unpack"),
    ],
)
def test_a_client_options_typeddict_must_hold_exactly_the_rows_keywords(options: str, named: str) -> None:
    def put(self: Client, task_id: str, payload: dict[str, Any], **options: Any) -> str:
        return task_id

    put.__annotations__["options"] = options if options.startswith("dict") else f"Unpack[{options}]"
    with pytest.raises(CallSignatureError, match=f"Client.put.*{named}"):
        check_method(CALLS["put"], put, "Client")


def test_options_declared_with_unpack_itself_or_by_name_are_read_alike() -> None:
    def put(self: Client, task_id: str, payload: dict[str, Any], **options: Unpack[PutOptions]) -> str:
        return task_id

    check_method(CALLS["put"], put, "Client")  # the annotation a string, looked up in this module
    put.__annotations__["options"] = Unpack[PutOptions]
    check_method(CALLS["put"], put, "Client")
    put.__annotations__["options"] = Unpack[PutOptionsWithoutPutAt]
    with pytest.raises(CallSignatureError, match="put_at"):
        check_method(CALLS["put"], put, "Client")


def test_a_subclass_that_agrees_is_made_and_methods_of_other_names_are_free() -> None:
    class Logged(Client):
        def get(self, task_id: str) -> None:
            """The row's parameters, another body."""

        def helper(self, anything: int, *more: int) -> int:
            """Not a call: not checked."""
            return anything

    assert Logged.helper(Logged.__new__(Logged), 1) == 1


def test_a_decorated_method_is_read_through_its_wrapper() -> None:
    def logged(method: Any) -> Any:
        @functools.wraps(method)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return method(*args, **kwargs)

        return wrapper

    class Decorated(Client):
        @logged
        def get(self, task_id: str) -> None:
            """The row's parameters behind a wrapper that takes anything."""

    with pytest.raises(CallSignatureError, match=r"Wrong\.get: parameter 1 is 'task'"):

        class Wrong(Client):
            @logged
            def get(self, task: str) -> None:
                """Another name behind the same wrapper."""


def test_a_call_passed_by_position_only_or_with_star_args_is_refused() -> None:
    def get(self: Client, task_id: str, /) -> None:
        """`task_id` positional-only: a client binds it by name too."""

    def stats(self: Client, *args: Any) -> None:
        """*args takes what the row does not declare."""

    with pytest.raises(CallSignatureError, match=r"Client\.get: .*no / and no \*args"):
        check_method(CALLS["get"], get, "Client")
    with pytest.raises(CallSignatureError, match=r"Client\.stats: .*no / and no \*args"):
        check_method(CALLS["stats"], stats, "Client")


def test_the_reference_model_takes_each_of_its_calls_as_the_row_declares_it() -> None:
    """The model (tools/model/) has every call but the server's reads and wait, each with the row's parameters.

    Its one difference: configure_queue's "unchanged" is the model's own
    sentinel (it imports nothing of the engine's but the public API).
    """
    unchanged = (Model.configure_queue.__kwdefaults__ or {})["concurrency"]
    absent = []
    for call in CALLS.values():
        method = getattr(Model, call.name, None)
        if method is None:
            absent.append(call.name)
            continue
        args = tuple(dataclasses.replace(a, default=unchanged) if a.default is UNCHANGED else a for a in call.args)
        check_method(dataclasses.replace(call, args=args), method, "Model")
    assert absent == ["stats", "metrics", "page", "wait"]  # the model answers them through view() and counts()
