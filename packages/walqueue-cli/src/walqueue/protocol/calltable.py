"""The one table of public calls: each declared once, everything else derived from it.

Each row is a `Call` (callrow.py: what a row holds and what it derives)
naming a call of `Queue`: its arguments in the order of the method's
signature, each with its kind (callkinds.py), its answer, whether it may
commit a transaction (`writes`), whether a client may send it again after
a lost connection (`retry`) and whether it blocks until another client
commits (`blocks`). This module holds the rows and the state-free checks
beside them; `Call`, `Arg`, `Answer` and `REQUIRED` stay importable from
here.

Derived from it: the protocol's request table, its validation and its
answers (`walqueue.protocol.requests`); the consumer's ``--help`` list; the
clients' checks (a row's `check`: `Queue`'s order where it is not the
signature's), requests, answers and retry rule, and so every client's
generic ``call(name, ...)``; the lists the tests iterate over. `Queue`'s
methods stay hand-written (they are the API), held to their rows by
construction: this table refuses to load (`CallSignatureError`, naming the
call and the parameter) when a row and `Queue`'s method of its name differ
(callsignature.py), and so does a client class whose method of a call's
name differs from the row. Adding a call is one row here (and its
check, if it needs one), the `Queue` method and its planner in `ops.py`
(docs/ARCHITECTURE.md, "Adding a call"). Each row is also a typed constant
(`PUT` is a `Call[str]`), which the clients' typed methods name.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from walqueue.engine import complete, ops
from walqueue.engine.lanecalls import check_page, check_reserve, check_tasks
from walqueue.engine.laneplans import UNCHANGED, check_configure_args
from walqueue.engine.queue import Queue
from walqueue.engine.types import Lease, StaleLease, Task, plain_lease
from walqueue.engine.validate import MAX_INT, check_error, check_int, check_name
from walqueue.protocol.callkinds import ANSWER_KINDS, KINDS, MAX_WAIT_SECONDS, BadArgument, Kind, describe
from walqueue.protocol.callrow import REQUIRED, Answer, Arg, Call
from walqueue.protocol.callsignature import check_method

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
    _arg("put_at", "time", keyword=True, default=0),  # the producer's time, in the store's unit (0: none)
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

_NOTHING: Final = _answer(None)


def _write[T](
    name: str,
    args: tuple[Arg, ...],
    summary: str,
    *,
    answer: Answer = _NOTHING,
    check: Callable[..., object] | None = None,
    retry: bool = False,
    whole_check: bool = False,
) -> Call[T]:
    """A call that may commit: not sent again after a lost answer unless `retry` (a second run changes nothing)."""
    return Call(name, args, answer, writes=True, summary=summary, retry=retry, check=check, whole_check=whole_check)


def _read[T](
    name: str,
    args: tuple[Arg, ...],
    answer: Answer,
    summary: str,
    *,
    check: Callable[..., object] | None = None,
    blocks: bool = False,
) -> Call[T]:
    """A call that commits nothing, so a client may always send it again."""
    return Call(name, args, answer, writes=False, summary=summary, check=check, blocks=blocks)


# A write is not retried unless its row says so: a reserve sent again would lease twice, and an ack,
# a release, a redrive or a complete that had happened would answer StaleLease or WrongStatus.
PUT: Final[Call[str]] = _write(
    "put",
    _PUT_ARGS,
    "create a ready task (an identical retry writes nothing)",
    answer=_answer("task_id", "str"),
    retry=True,  # every task has an idempotency key: an identical retry changes nothing
    check=functools.partial(ops.put_op, build=False),  # Queue's own check, in its order, and every argument's rule
    whole_check=True,
)
PUT_MANY: Final[Call[list[str]]] = _write(
    "put_many",
    (Arg("tasks", _PUT_ITEMS),),
    'many puts in one transaction (a list of put objects without "op")',
    answer=_answer("task_ids", "str_list"),
    retry=True,
)
RESERVE: Final[Call[list[Lease]]] = _write(
    "reserve",
    (
        _arg("worker", "name"),
        _arg("now", "time", keyword=True),
        _arg("lease_seconds", "count", keyword=True),
        _arg("limit", "count", keyword=True, default=1),
        _arg("queues", "queues", keyword=True, default=None),
    ),
    "expire overdue leases, then lease up to limit due tasks",
    answer=_answer("leases", "leases"),
    check=check_reserve,
)
ACK: Final[Call[None]] = _write(
    "ack", _LEASE_SETTLES, "complete a leased task (lease: a lease object from reserve)", check=_ack
)
ACK_MANY: Final[Call[None]] = _write(
    "ack_many",
    (_arg("leases", "leases"), _arg("now", "time", keyword=True)),
    "complete many leased tasks in one transaction, all or none (leases: an array of lease objects)",
    check=_ack_many,
)
RELEASE: Final[Call[None]] = _write(
    "release",
    (*_LEASE_SETTLES, _arg("delay", "time", keyword=True, default=0), _ERROR),
    "give a leased task back, ready at now + delay (error: recorded as its last error)",
    check=_release,
)
FAIL: Final[Call[None]] = _write(
    "fail",
    (*_LEASE_SETTLES, _ERROR),
    "a permanent failure: the leased task is dead at once (error: recorded as its last error)",
    check=_fail,
)
GIVE_BACK: Final[Call[None]] = _write(
    "give_back",
    _LEASE_SETTLES,
    "give back a leased task never started: ready at once, its attempt restored (fenced as release)",
    check=_ack,
)
EXTEND: Final[Call[Lease]] = _write(
    "extend",
    (*_LEASE_SETTLES, _arg("lease_seconds", "count", keyword=True)),
    "a heartbeat: the lease with its new deadline",
    answer=_answer("lease", "lease"),
    check=_extend,
)
REDRIVE: Final[Call[None]] = _write(
    "redrive",
    (
        _arg("task_id", "name"),
        _arg("available_at", "time", keyword=True),
        _arg("extra_attempts", "count", keyword=True, default=1),
    ),
    "make a dead task ready again",
    check=_redrive,
)
CANCEL: Final[Call[None]] = _write(
    "cancel",
    (_arg("task_id", "name"), _ERROR, _arg("now", "time_or_null", keyword=True, default=None)),
    "a ready or leased task becomes dead (error, with now: recorded as its last error)",
    check=_cancel,
)
COMPLETE: Final[Call[None]] = _write(
    "complete",
    (
        *_LEASE_SETTLES,
        _arg("result", "result", keyword=True, default=None),
        _arg("result_ttl", "count", keyword=True, default=complete.DEFAULT_RESULT_TTL),
        Arg("puts", _PUT_ITEMS, True, ()),
    ),
    "ack, store the result and put the follow-ups in one transaction (a stale lease: nothing)",
    check=_complete,
)
RESULT: Final[Call[dict[str, Any] | None]] = _read(
    "result",
    (_arg("task_id", "str"), _arg("now", "time_or_null", keyword=True, default=None)),
    _answer("result", "result_or_null"),
    'a completed task\'s stored result {"value", "expires"} (or null)',
    check=complete.check_result_args,
)
GET: Final[Call[Task | None]] = _read(
    "get", (_arg("task_id", "str"),), _answer("task", "task_or_null"), "one task (or null)"
)
TASKS: Final[Call[list[Task]]] = _read(
    "tasks",
    (_arg("status", "status", default=None), _arg("queue", "queue_or_null", keyword=True, default=None)),
    _answer("tasks", "tasks"),
    'every task, or those with status ("ready", "leased", "completed", "dead")',
    check=check_tasks,  # Queue.tasks's own rules
)
STATS: Final[Call[dict[str, Any]]] = _read("stats", (), _answer("stats", "stats"), "counts and the log's position")
# Files change, the queue's answers do not: not a write.
COMPACT: Final[Call[None]] = _read("compact", (), _NOTHING, "snapshot the state and delete the WAL it covers")
METRICS: Final[Call[dict[str, Any]]] = _read(
    "metrics",
    (_arg("now", "time", keyword=True, default=None),),
    _answer("metrics", "stats"),  # a plain JSON object, as stats is
    "counters since opening, gauges (oldest_ready_age against now), histograms",
)
PAGE: Final[Call[list[Task]]] = _read(
    "page",
    (
        _arg("status", "status"),
        _arg("after", "cursor", keyword=True, default=None),
        _arg("limit", "count", keyword=True, default=100),
        _arg("queue", "queue_or_null", keyword=True, default=None),
    ),
    _answer("tasks", "tasks"),
    "up to limit (at most 10,000) tasks with status, by id, after the id after",
    check=check_page,  # Queue.page's own rules, in its order
)
WAIT: Final[Call[bool]] = _read(
    "wait",
    (_arg("timeout", "timeout"),),
    _answer("committed", "bool"),
    f"block until another client commits, or timeout seconds (at most {MAX_WAIT_SECONDS}) pass",
    blocks=True,
)
CONFIGURE_QUEUE: Final[Call[None]] = _write(
    "configure_queue",
    (_arg("name", "queue"), *(_arg(n, k, keyword=True, default=UNCHANGED) for n, k in _SETTINGS)),
    "a queue's concurrency, rate [n, window] and paused (omitted: unchanged; null: no limit)",
    check=check_configure_args,  # not retried: it could undo another client's change made in between
)
QUEUES: Final[Call[list[dict[str, Any]]]] = _read(
    "queues", (), _answer("queues", "objects"), "every queue: settings, counts by status"
)

# -- calls added by format extensions (docs/FORMAT.md) --
CLOCK: Final[Call[None]] = _write(
    "set_clock",
    (_arg("units_per_second", "count"),),
    "record the store's clock unit once (1: seconds, 1000: milliseconds); stats' clock reads it",
    retry=True,  # the same unit again writes nothing
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

for _call in CALLS.values():  # the rows and Queue's methods agree, or the table does not load
    check_method(_call, getattr(Queue, _call.name, None), "Queue")
