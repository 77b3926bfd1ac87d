"""The lifecycle events of a task, by name, through `logging`, and a JSON-lines formatter for them.

Why a module of names: an operator greps logs and builds alerts on them,
so the names are a contract; the queue, the worker and the dashboard's
actions all log through `emit` with a name from `EVENTS`, and nothing else
spells one. docs/DECISIONS.md ("Metrics, events and the dashboard") lists
them with their fields.

Every event is one `logging` record on the logger ``walqueue.events`` at
INFO, with the structured fields in ``extra``: ``record.event`` (the name)
and ``record.fields`` (a dict of plain JSON values, always with
``task_id``). The message repeats them as text for a plain formatter.
`JsonLinesFormatter` writes each record as one JSON object per line.

The stream is opt-in, and off costs nothing: one record per task
transition is far more than an application that set ``walqueue`` to INFO
for its warnings expects, and a check of the logging configuration on
every commit would cost the hot path. `enable()` (or `log_events_to`,
which also adds a handler) turns it on for the process: `listening`
becomes true and ``walqueue.events`` is set to INFO; the queue reads
`listening`, a module attribute, once per transaction.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any, Final

from walqueue.engine.records import view
from walqueue.engine.state import OP_KINDS

__all__ = [
    "ACK",
    "CANCEL",
    "DEATH",
    "EVENTS",
    "EVENT_LOG",
    "EXPIRY",
    "EXTEND",
    "GIVE_BACK",
    "JsonLinesFormatter",
    "LEASE",
    "PUT",
    "REDRIVE",
    "RELEASE",
    "before",
    "emit",
    "emit_transaction",
    "enable",
    "listening",
    "log_events_to",
]

#: The logger every lifecycle event is logged on.
EVENT_LOG: Final = logging.getLogger("walqueue.events")

#: Whether the queues of this process log their events (`enable`); read once per transaction.
listening = False


def _event_of(kind: str) -> str:
    """The event op kind `kind` logs: its row's `event` in `state.OP_KINDS`, where each name is spelled once."""
    event = OP_KINDS[kind].event
    assert event is not None, kind
    return event


PUT: Final = _event_of("put")  # a new task (fields: task_id, key, available_at, max_attempts)
LEASE: Final = _event_of("lease")  # leased by a reserve (task_id, worker, generation, attempt, deadline)
ACK: Final = _event_of("ack")  # completed (task_id, worker, generation)
RELEASE: Final = _event_of("release")  # given back (task_id, worker, generation, available_at, error?)
EXPIRY: Final = _event_of("expire")  # a lease ran out (task_id, worker, generation, deadline)
#: A fail's event, and also logged after a release or an expiry out of attempts (task_id, attempts, after, error).
DEATH: Final = _event_of("fail")
REDRIVE: Final = _event_of("redrive")  # a dead task made ready again (task_id, available_at, max_attempts)
CANCEL: Final = _event_of("cancel")  # a ready or leased task made dead (task_id, worker?, error?)
EXTEND: Final = _event_of("extend")  # a heartbeat moved a lease's deadline (task_id, worker, deadline)
#: An unstarted lease given back, its attempt restored (task_id, worker, generation).
GIVE_BACK: Final = _event_of("give_back")

#: Every event name, in the op table's order: each op kind's row declares the event it logs.
EVENTS: Final = tuple(dict.fromkeys(kind.event for kind in OP_KINDS.values() if kind.event is not None))


def enable(on: bool = True) -> None:
    """Turn the event stream on (or off) for every queue of this process; on also sets the logger to INFO."""
    global listening
    listening = on
    if on and not EVENT_LOG.isEnabledFor(logging.INFO):
        EVENT_LOG.setLevel(logging.INFO)


def emit(event: str, fields: Mapping[str, Any], *, logger: logging.Logger = EVENT_LOG) -> None:
    """Log one event: `event` must be a name of `EVENTS` (a typo is a bug, so it raises `ValueError`)."""
    if event not in EVENTS:
        raise ValueError(f"unknown event name {event!r}; the names are walqueue.engine.events.EVENTS")
    text = " ".join(f"{name}={value!r}" for name, value in fields.items())
    logger.info("%s %s", event, text, extra={"event": event, "fields": dict(fields)})


def before(ops: Sequence[Mapping[str, Any]], tasks: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """What a transaction's ops will take away: each existing task's holder and deadline (read before `apply`)."""
    held: dict[str, tuple[Any, Any]] = {}
    for op in ops:
        record = tasks.get(op.get("task", ""))  # no task: a store-level op (clock, configure)
        if record is not None:
            shown = view(record)
            held[op["task"]] = (shown.worker, shown.deadline)
    return held


def _error(record: Any) -> dict[str, Any] | None:
    """The record's last error as plain JSON: a stored record holds it as ``(type, message, attempt, at)``."""
    error = getattr(record, "last_error", None)
    if error is None or isinstance(error, dict):
        return error
    if isinstance(error, tuple) and len(error) == 4:
        return dict(zip(("type", "message", "attempt", "at"), error, strict=True))
    to_dict = getattr(error, "to_dict", None)
    return dict(to_dict()) if callable(to_dict) else {"message": str(error)}


_Fields = Callable[[Mapping[str, Any], Any, Any, Any], dict[str, Any]]

#: Each event's fields, from the applied op, its task's record and the lease it held before (worker, deadline).
_FIELDS: Final[dict[str, _Fields]] = {
    PUT: lambda op, record, worker, deadline: {
        "task_id": op["task"],
        "key": record.key,
        "available_at": record.available_at,
        "max_attempts": record.max_attempts,
    },
    LEASE: lambda op, record, worker, deadline: {
        "task_id": op["task"],
        "worker": op["worker"],
        "generation": op["generation"],
        "attempt": record.attempts,
        "deadline": op["deadline"],
    },
    ACK: lambda op, record, worker, deadline: {"task_id": op["task"], "worker": worker, "generation": op["generation"]},
    GIVE_BACK: lambda op, record, worker, deadline: {
        "task_id": op["task"],
        "worker": worker,
        "generation": op["generation"],
    },
    RELEASE: lambda op, record, worker, deadline: {
        "task_id": op["task"],
        "worker": worker,
        "generation": op["generation"],
        "available_at": op["available_at"],
        "error": _error(record),
    },
    EXPIRY: lambda op, record, worker, deadline: {
        "task_id": op["task"],
        "worker": worker,
        "generation": op["generation"],
        "deadline": deadline,
    },
    EXTEND: lambda op, record, worker, deadline: {"task_id": op["task"], "worker": worker, "deadline": op["deadline"]},
    REDRIVE: lambda op, record, worker, deadline: {
        "task_id": op["task"],
        "available_at": op["available_at"],
        "max_attempts": op["max_attempts"],
    },
    CANCEL: lambda op, record, worker, deadline: {"task_id": op["task"], "worker": worker, "error": _error(record)},
    # A death: a fail's own event, or the one that follows a release or an expiry out of attempts.
    DEATH: lambda op, record, worker, deadline: {
        "task_id": op["task"],
        "attempts": record.attempts,
        "after": op["op"],
        "error": _error(record),
    },
}
#: The event of each op kind: its row's `event` (`state.OP_KINDS`); a kind without one logs nothing.
_KIND_EVENTS: Final = {kind.name: kind.event for kind in OP_KINDS.values() if kind.event is not None}


def _op_fields(op: Mapping[str, Any], record: Any, worker: Any, deadline: Any) -> dict[str, Any]:
    """The fields of an event declared without a builder in `_FIELDS`: the task and the op's own fields."""
    return {"task_id": op["task"], **{name: value for name, value in op.items() if name not in ("op", "task")}}


def emit_transaction(
    ops: Sequence[Mapping[str, Any]], held: Mapping[str, tuple[Any, Any]], tasks: Mapping[str, Any], seq: int
) -> None:
    """Log the events of one applied transaction, in op order (a release or expiry that killed: then `DEATH`).

    `tasks` holds the records after the whole transaction, so a death is
    logged after the task's last op in it, when that op left the task dead
    and is not itself a death or a cancel: no op kind is named here.
    """
    last = {op["task"]: index for index, op in enumerate(ops) if "task" in op}
    for index, op in enumerate(ops):
        task_id = op.get("task")
        if task_id is None:  # a store-level op (clock) or a queue's settings (configure): no task's event
            continue
        name = _KIND_EVENTS.get(op["op"])
        ends = last[task_id] == index
        if name is None and not ends:
            continue
        record = view(tasks[task_id])
        worker, deadline = held.get(task_id, (None, None))
        if name is not None:
            emit(name, {**_FIELDS.get(name, _op_fields)(op, record, worker, deadline), "seq": seq})
        if ends and record.status == "dead" and name not in (DEATH, CANCEL):
            emit(DEATH, {**_FIELDS[DEATH](op, record, worker, deadline), "seq": seq})


#: The attributes of every `logging.LogRecord`, which a formatter must not mistake for an extra field.
_RECORD_ATTRIBUTES: Final = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message"}


class JsonLinesFormatter(logging.Formatter):
    """One JSON object per record: ``time`` (seconds since the epoch), ``level``, ``logger``, ``message``,
    then ``event`` and its fields for a lifecycle event, or any other ``extra`` of the call.

    Non-JSON values are written as their ``repr``; the output is ASCII, so a
    payload's text can never break a line or a terminal.
    """

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": round(record.created, 6),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name, value in vars(record).items():
            if name not in _RECORD_ATTRIBUTES and not name.startswith("_"):
                line[name] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=repr, ensure_ascii=True, separators=(",", ":"))


def log_events_to(stream: IO[str], *, json_lines: bool = True) -> logging.Handler:
    """Turn the event stream on and write it to `stream`: one JSON object a line, or plain text.

    Returns the handler (remove it from `EVENT_LOG` to stop). Records do not
    propagate further, so an application's own ``walqueue`` handler does not
    print them twice.

    Example: ``log_events_to(sys.stderr)``
    """
    handler = logging.StreamHandler(stream)
    if json_lines:
        handler.setFormatter(JsonLinesFormatter())
    EVENT_LOG.addHandler(handler)
    EVENT_LOG.propagate = False
    enable()
    return handler
