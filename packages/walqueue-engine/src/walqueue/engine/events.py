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
`JsonLinesFormatter` writes each record as one JSON object per line. The
queue checks ``EVENT_LOG.isEnabledFor(INFO)`` once per transaction, so an
application that does not listen pays one cached lookup per commit.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, Final

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
    "emit",
    "enabled",
]

#: The logger every lifecycle event is logged on.
EVENT_LOG: Final = logging.getLogger("walqueue.events")

PUT: Final = "task.put"  # a new task (fields: task_id, key, available_at, max_attempts)
LEASE: Final = "task.lease"  # leased by a reserve (task_id, worker, generation, attempt, deadline)
ACK: Final = "task.ack"  # completed (task_id, worker, generation)
RELEASE: Final = "task.release"  # given back (task_id, worker, generation, available_at, error?)
EXPIRY: Final = "task.expiry"  # a lease ran out (task_id, worker, generation, deadline)
DEATH: Final = "task.death"  # out of attempts after a release or an expiry (task_id, attempts, error?)
REDRIVE: Final = "task.redrive"  # a dead task made ready again (task_id, available_at, max_attempts)
CANCEL: Final = "task.cancel"  # a ready or leased task made dead (task_id, worker?)
EXTEND: Final = "task.extend"  # a heartbeat moved a lease's deadline (task_id, worker, deadline)

#: Every event name, in lifecycle order.
EVENTS: Final = (PUT, LEASE, ACK, RELEASE, EXPIRY, DEATH, REDRIVE, CANCEL, EXTEND)


def enabled() -> bool:
    """Whether anyone listens: one cached lookup, made once per transaction by the queue."""
    return EVENT_LOG.isEnabledFor(logging.INFO)


def emit(event: str, fields: Mapping[str, Any], *, logger: logging.Logger = EVENT_LOG) -> None:
    """Log one event: `event` must be a name of `EVENTS` (a typo is a bug, so it raises `ValueError`)."""
    if event not in EVENTS:
        raise ValueError(f"unknown event name {event!r}; the names are walqueue.engine.events.EVENTS")
    text = " ".join(f"{name}={value!r}" for name, value in fields.items())
    logger.info("%s %s", event, text, extra={"event": event, "fields": dict(fields)})


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
