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
from collections.abc import Mapping, Sequence
from typing import IO, Any, Final

__all__ = [
    "ACK",
    "CANCEL",
    "DEATH",
    "EVENTS",
    "EVENT_LOG",
    "EXPIRY",
    "EXTEND",
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

PUT: Final = "task.put"  # a new task (fields: task_id, key, available_at, max_attempts)
LEASE: Final = "task.lease"  # leased by a reserve (task_id, worker, generation, attempt, deadline)
ACK: Final = "task.ack"  # completed (task_id, worker, generation)
RELEASE: Final = "task.release"  # given back (task_id, worker, generation, available_at, error?)
EXPIRY: Final = "task.expiry"  # a lease ran out (task_id, worker, generation, deadline)
DEATH: Final = (
    "task.death"  # dead after a release or an expiry out of attempts, or a fail (task_id, attempts, after, error)
)
REDRIVE: Final = "task.redrive"  # a dead task made ready again (task_id, available_at, max_attempts)
CANCEL: Final = "task.cancel"  # a ready or leased task made dead (task_id, worker?, error?)
EXTEND: Final = "task.extend"  # a heartbeat moved a lease's deadline (task_id, worker, deadline)

#: Every event name, in lifecycle order.
EVENTS: Final = (PUT, LEASE, ACK, RELEASE, EXPIRY, DEATH, REDRIVE, CANCEL, EXTEND)


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
        record = tasks.get(op.get("task"))  # type: ignore[arg-type]  # a configure op names no task: None
        if record is not None:
            held[op["task"]] = (record.worker, record.deadline)
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


def _fields(op: Mapping[str, Any], record: Any, held: tuple[Any, Any]) -> tuple[str, dict[str, Any]] | None:
    """The event of one applied op and its fields; None for an op kind that is no lifecycle event."""
    kind = op["op"]
    task_id = op["task"]
    worker, deadline = held
    if kind == "put":
        return PUT, {
            "task_id": task_id,
            "key": record.key,
            "available_at": record.available_at,
            "max_attempts": record.max_attempts,
        }
    if kind == "lease":
        return LEASE, {
            "task_id": task_id,
            "worker": op["worker"],
            "generation": op["generation"],
            "attempt": record.attempts,
            "deadline": op["deadline"],
        }
    if kind == "ack":
        return ACK, {"task_id": task_id, "worker": worker, "generation": op["generation"]}
    if kind == "release":
        fields = {
            "task_id": task_id,
            "worker": worker,
            "generation": op["generation"],
            "available_at": op["available_at"],
        }
        return RELEASE, {**fields, "error": _error(record)}
    if kind == "expire":
        return EXPIRY, {"task_id": task_id, "worker": worker, "generation": op["generation"], "deadline": deadline}
    if kind == "extend":
        return EXTEND, {"task_id": task_id, "worker": worker, "deadline": op["deadline"]}
    if kind == "redrive":
        return REDRIVE, {"task_id": task_id, "available_at": op["available_at"], "max_attempts": op["max_attempts"]}
    if kind == "cancel":
        return CANCEL, {"task_id": task_id, "worker": worker, "error": _error(record)}
    if kind == "fail":  # a permanent failure: the task dies at once
        return DEATH, {"task_id": task_id, "attempts": record.attempts, "after": "fail", "error": _error(record)}
    return None


def emit_transaction(
    ops: Sequence[Mapping[str, Any]], held: Mapping[str, tuple[Any, Any]], tasks: Mapping[str, Any], seq: int
) -> None:
    """Log the events of one applied transaction, in op order (a release or expiry that killed: then `DEATH`)."""
    for op in ops:
        if "task" not in op:  # a queue's settings (configure): no task's lifecycle event
            continue
        task_id = op["task"]
        record = tasks[task_id]
        event = _fields(op, record, held.get(task_id, (None, None)))
        if event is None:
            continue
        name, fields = event
        emit(name, {**fields, "seq": seq})
        if op["op"] in ("release", "expire") and record.status == "dead":
            emit(
                DEATH,
                {
                    "task_id": task_id,
                    "attempts": record.attempts,
                    "after": op["op"],
                    "error": _error(record),
                    "seq": seq,
                },
            )


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
