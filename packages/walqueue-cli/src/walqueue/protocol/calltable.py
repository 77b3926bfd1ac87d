"""The one table of public calls: each declared once, everything else derived from it.

A row (`Call`) names a call of `Queue`, its arguments in the order of the
method's signature (each with its kind, whether it is keyword-only, and its
default when optional), its answer field and kind, whether it may commit a
transaction (`writes`), whether a client may send it again after a lost
connection (`retry`: only when a second run provably changes nothing), and
whether it blocks until another client commits (`blocks`: a front end
serves it with its own waiter, a server parks it).

Derived from it: the protocol's request table, its validation and its
answers (`walqueue.protocol.requests`); the consumer's ``--help`` list; the
clients' checks (a row's `check`: `Queue`'s order where it is not the
signature's), requests, answers and retry rule, and so every client's
generic ``call(name, ...)``; the lists the tests iterate over. `Queue`'s
methods stay hand-written (they are the API); a test checks that their
signatures agree with the rows. Adding a call is one row here (and its
check, if it needs one), the `Queue` method and its planner in `ops.py`
(docs/ARCHITECTURE.md, "Adding a call"). Each row is also a typed constant
(`PUT` is a `Call[str]`), which the clients' typed methods name.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Final

from walqueue.engine import complete, ops
from walqueue.engine.lanecalls import check_page, check_reserve, check_tasks
from walqueue.engine.laneplans import UNCHANGED, check_configure_args
from walqueue.engine.types import Lease, StaleLease, Task, plain_lease
from walqueue.engine.validate import MAX_INT, check_error, check_int, check_name
from walqueue.protocol.callkinds import ANSWER_KINDS, KINDS, MAX_WAIT_SECONDS, AnswerKind, BadArgument, Kind, describe

__all__ = [
    "ACK",
    "ACK_MANY",
    "CALLS",
    "CANCEL",
    "CLOCK",
    "COMPACT",
    "CONFIGURE_QUEUE",
    "EXTEND",
    "FAIL",
    "GET",
    "GIVE_BACK",
    "METRICS",
    "PAGE",
    "PUT",
    "PUT_MANY",
    "QUEUES",
    "RELEASE",
    "REQUIRED",
    "REDRIVE",
    "RESERVE",
    "STATS",
    "TASKS",
    "WAIT",
    "Answer",
    "Arg",
    "Call",
]


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


def _arg(name: str, kind: str, *, keyword: bool = False, default: Any = REQUIRED) -> Arg:
    return Arg(name, KINDS[kind], keyword, default)


def _answer(field: str | None, kind: str = "none") -> Answer:
    return Answer(field, ANSWER_KINDS[kind])


_PUT_ARGS: Final = (
    _arg("task_id", "name"),
    _arg("payload", "payload"),
    _arg("key", "key", keyword=True, default=None),
    _arg("available_at", "time", keyword=True, default=0),
    _arg("max_attempts", "count", keyword=True, default=3),
    _arg("queue", "queue", keyword=True, default="default"),
    _arg("priority", "priority", keyword=True, default=0),
)


def _put_item(source: Any, label: str) -> Any:
    """`put`'s arguments as one item of `put_many`'s list: a JSON object, checked as a `put` request."""
    if type(source) is not dict:
        raise BadArgument(f"{label} must be a put object, not {describe(source)}")
    return PUT.check_json(source, where=f"{label}: ")


def _put_items(value: Any, label: str) -> list[dict[str, Any]]:
    return [_put_item(item, f"{label}[{index}]") for index, item in enumerate(value)]


def _encode_put_items(value: Any, label: str) -> list[dict[str, Any]]:
    """A client's `put_many` argument: each item checked as `Queue.put_many` checks it, then its request.

    The check is `Queue`'s own (`ops.put_op_from_mapping`, in its order and
    with its messages), and it applies every rule of `put`'s kinds, so each
    item's values are then sent as they are (`checked`): walked once.
    """
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise TypeError(f"{label} must be an iterable of mappings, not {type(value).__name__}")
    items = []
    for item in value:
        ops.put_op_from_mapping(item, build=False)
        request = PUT.encode(PUT.bind((), item), checked=True)
        del request["op"]
        items.append(request)
    return items


_PUT_ITEMS: Final = Kind(
    "put_items", "an array of put objects", frozenset({list}), _put_items, _encode_put_items, many=True
)

_SETTINGS: Final = (("concurrency", "limit_or_null"), ("rate", "rate_or_null"), ("paused", "flag"))
_LEASE_SETTLES: Final = (_arg("lease", "lease"), _arg("now", "time", keyword=True))
#: The error a failure records, ``{"type": ..., "message": ...}`` (optional).
_ERROR: Final = _arg("error", "error", keyword=True, default=None)


# -- the checks of the calls whose order is not their signature's (clients run them) -------


def _lease_token(lease: object) -> Lease:
    """`lease` as the plain token `Queue` reads (`TypeError` for anything that is not a `Lease`)."""
    token = plain_lease(lease)  # type: ignore[arg-type]  # anything: refused just below
    if not isinstance(token, Lease):
        raise TypeError(f"lease must be a Lease, not {type(lease).__name__}")
    return token


def _owner(token: Lease, now: object) -> None:
    """The owner's fields of a lease, checked last, as `Queue` checks them (`now` first).

    A token whose fields could never match a stored lease is `StaleLease`
    here, exactly as `Queue` answers it (such fields would not survive the
    JSON request, and the server would call them a bad request).
    """
    check_int(now, "now")
    task_id, worker, generation = token.task_id, token.worker, token.generation
    if type(task_id) is not str or type(worker) is not str or type(generation) is not int:
        raise StaleLease("the lease token's task_id, worker or generation has the wrong type")


def _ack(lease: object, now: object) -> None:
    _owner(_lease_token(lease), now)


def _ack_many(leases: object, now: object) -> None:
    tokens = ops.lease_tokens(leases)  # Queue's rule and order: the items, `now`, then each owner
    check_int(now, "now")
    for index, token in enumerate(tokens):
        try:
            _owner(token, now)
        except StaleLease as error:
            raise StaleLease(f"leases[{index}]: {error}") from None


def _release(lease: object, now: object, delay: object, error: object) -> None:
    check_error(error)
    token = _lease_token(lease)
    check_int(now, "now")
    check_int(delay, "delay")
    if now + delay > MAX_INT:  # type: ignore[operator]  # both checked ints
        raise ValueError(f"now + delay exceeds {MAX_INT}")
    _owner(token, now)


def _fail(lease: object, now: object, error: object) -> None:
    check_error(error)
    _owner(_lease_token(lease), now)


def _extend(lease: object, now: object, lease_seconds: object) -> None:
    token = _lease_token(lease)
    check_int(now, "now")
    check_int(lease_seconds, "lease_seconds", 1)
    _owner(token, now)


def _redrive(task_id: object, available_at: object, extra_attempts: object) -> None:
    check_int(available_at, "available_at")
    check_int(extra_attempts, "extra_attempts", 1)
    check_name(task_id, "task_id")


def _cancel(task_id: object, error: object, now: object) -> None:
    check_error(error)
    if now is not None:
        check_int(now, "now")
    elif error is not None:
        raise TypeError("cancel with an error needs now, the time the error records")
    check_name(task_id, "task_id")


def _complete(lease: object, now: object, result: object, result_ttl: object, puts: object) -> None:
    complete.complete_args(lease, now, result, result_ttl, puts)  # Queue's own check, in its order


# -- the table -------------------------------------------------------------------------------

PUT: Final = Call[str](
    "put",
    _PUT_ARGS,
    _answer("task_id", "str"),
    writes=True,
    retry=True,  # every task has an idempotency key: an identical retry changes nothing
    check=functools.partial(ops.put_op, build=False),  # Queue's own check, in its order, and every argument's rule
    whole_check=True,
    summary="create a ready task (an identical retry writes nothing)",
)
PUT_MANY: Final = Call[list[str]](
    "put_many",
    (Arg("tasks", _PUT_ITEMS),),
    _answer("task_ids", "str_list"),
    writes=True,
    retry=True,
    summary='many puts in one transaction (a list of put objects without "op")',
)
RESERVE: Final = Call[list[Lease]](
    "reserve",
    (
        _arg("worker", "name"),
        _arg("now", "time", keyword=True),
        _arg("lease_seconds", "count", keyword=True),
        _arg("limit", "count", keyword=True, default=1),
        _arg("queues", "queues", keyword=True, default=None),
    ),
    _answer("leases", "leases"),
    writes=True,
    # not retried (the default for a write): a retried reserve would lease twice
    check=check_reserve,
    summary="expire overdue leases, then lease up to limit due tasks",
)
ACK: Final = Call[None](
    "ack",
    _LEASE_SETTLES,
    _answer(None),
    writes=True,
    check=_ack,
    summary="complete a leased task (lease: a lease object from reserve)",
)
ACK_MANY: Final = Call[None](
    "ack_many",
    (_arg("leases", "leases"), _arg("now", "time", keyword=True)),
    _answer(None),
    writes=True,
    # not retried (the default for a write): one that had happened would answer StaleLease
    check=_ack_many,
    summary="complete many leased tasks in one transaction, all or none (leases: an array of lease objects)",
)
RELEASE: Final = Call[None](
    "release",
    (*_LEASE_SETTLES, _arg("delay", "time", keyword=True, default=0), _ERROR),
    _answer(None),
    writes=True,
    check=_release,
    summary="give a leased task back, ready at now + delay (error: recorded as its last error)",
)
FAIL: Final = Call[None](
    "fail",
    (*_LEASE_SETTLES, _ERROR),
    _answer(None),
    writes=True,
    check=_fail,
    summary="a permanent failure: the leased task is dead at once (error: recorded as its last error)",
)
GIVE_BACK: Final = Call[None](
    "give_back",
    _LEASE_SETTLES,
    _answer(None),
    writes=True,
    # not retried (the default for a write): one that had happened would answer StaleLease
    check=_ack,
    summary="give back a leased task never started: ready at once, its attempt restored (fenced as release)",
)
EXTEND: Final = Call[Lease](
    "extend",
    (*_LEASE_SETTLES, _arg("lease_seconds", "count", keyword=True)),
    _answer("lease", "lease"),
    writes=True,
    check=_extend,
    summary="a heartbeat: the lease with its new deadline",
)
REDRIVE: Final = Call[None](
    "redrive",
    (
        _arg("task_id", "name"),
        _arg("available_at", "time", keyword=True),
        _arg("extra_attempts", "count", keyword=True, default=1),
    ),
    _answer(None),
    writes=True,
    # not retried (the default for a write): a redrive that happened would answer WrongStatus when retried
    check=_redrive,
    summary="make a dead task ready again",
)
CANCEL: Final = Call[None](
    "cancel",
    (_arg("task_id", "name"), _ERROR, _arg("now", "time_or_null", keyword=True, default=None)),
    _answer(None),
    writes=True,
    check=_cancel,
    summary="a ready or leased task becomes dead (error, with now: recorded as its last error)",
)
COMPLETE: Final = Call[None](
    "complete",
    (
        *_LEASE_SETTLES,
        _arg("result", "result", keyword=True, default=None),
        _arg("result_ttl", "count", keyword=True, default=complete.DEFAULT_RESULT_TTL),
        Arg("puts", _PUT_ITEMS, True, ()),
    ),
    _answer(None),
    writes=True,
    # not retried (the default for a write): one that had happened would answer StaleLease
    check=_complete,
    summary="ack, store the result and put the follow-ups in one transaction (a stale lease: nothing)",
)
RESULT: Final = Call[dict[str, Any] | None](
    "result",
    (_arg("task_id", "str"), _arg("now", "time_or_null", keyword=True, default=None)),
    _answer("result", "result_or_null"),
    writes=False,
    check=complete.check_result_args,
    summary='a completed task\'s stored result {"value", "expires"} (or null)',
)
GET: Final = Call[Task | None](
    "get", (_arg("task_id", "str"),), _answer("task", "task_or_null"), writes=False, summary="one task (or null)"
)
TASKS: Final = Call[list[Task]](
    "tasks",
    (_arg("status", "status", default=None), _arg("queue", "queue_or_null", keyword=True, default=None)),
    _answer("tasks", "tasks"),
    writes=False,
    check=check_tasks,  # Queue.tasks's own rules
    summary='every task, or those with status ("ready", "leased", "completed", "dead")',
)
STATS: Final = Call[dict[str, Any]](
    "stats", (), _answer("stats", "stats"), writes=False, summary="counts and the log's position"
)
COMPACT: Final = Call[None](
    "compact",
    (),
    _answer(None),
    writes=False,  # files change, the queue's answers do not
    summary="snapshot the state and delete the WAL it covers",
)
METRICS: Final = Call[dict[str, Any]](
    "metrics",
    (_arg("now", "time", keyword=True, default=None),),
    _answer("metrics", "stats"),  # a plain JSON object, as stats is
    writes=False,
    retry=True,
    summary="counters since opening, gauges (oldest_ready_age against now), histograms",
)
PAGE: Final = Call[list[Task]](
    "page",
    (
        _arg("status", "status"),
        _arg("after", "cursor", keyword=True, default=None),
        _arg("limit", "count", keyword=True, default=100),
        _arg("queue", "queue_or_null", keyword=True, default=None),
    ),
    _answer("tasks", "tasks"),
    writes=False,
    retry=True,
    check=check_page,  # Queue.page's own rules, in its order
    summary="up to limit (at most 10,000) tasks with status, by id, after the id after",
)
WAIT: Final = Call[bool](
    "wait",
    (_arg("timeout", "timeout"),),
    _answer("committed", "bool"),
    writes=False,
    blocks=True,
    summary=f"block until another client commits, or timeout seconds (at most {MAX_WAIT_SECONDS}) pass",
)
CONFIGURE_QUEUE: Final = Call[None](
    "configure_queue",
    (_arg("name", "queue"), *(_arg(n, k, keyword=True, default=UNCHANGED) for n, k in _SETTINGS)),
    _answer(None),
    writes=True,
    # not retried (the default for a write): a retry could undo another client's change made in between
    check=check_configure_args,
    summary="a queue's concurrency, rate [n, window] and paused (omitted: unchanged; null: no limit)",
)
QUEUES: Final = Call[list[dict[str, Any]]](
    "queues", (), _answer("queues", "objects"), writes=False, summary="every queue: settings, counts by status"
)

# -- calls added by format extensions (docs/FORMAT.md) --
CLOCK: Final = Call[None](
    "set_clock",
    (_arg("units_per_second", "count"),),
    _answer(None),
    writes=True,
    retry=True,  # the same unit again writes nothing
    summary="record the store's clock unit once (1: seconds, 1000: milliseconds); stats' clock reads it",
)

#: Every public call of `Queue`, in the order the documentation lists them.
CALLS: Final[Mapping[str, Call[Any]]] = {
    call.name: call
    for call in (
        PUT,
        PUT_MANY,
        RESERVE,
        ACK,
        ACK_MANY,
        COMPLETE,
        RESULT,
        RELEASE,
        FAIL,
        GIVE_BACK,
        EXTEND,
        REDRIVE,
        CANCEL,
        GET,
        TASKS,
        STATS,
        COMPACT,
        METRICS,
        PAGE,
        WAIT,
        CLOCK,
        CONFIGURE_QUEUE,
        QUEUES,
    )  # fmt: skip
}
