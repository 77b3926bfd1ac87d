"""The dashboard's JSON API, declared once: each route's method, query or form fields and answer fields.

Why a table: the API's index (``GET /api/``), the query fields each view
accepts (`api` reads them from here) and the tests that hold the app's
routes, docs/guide/dashboard-api.md and this table together all come from
one declaration, so a script never has to read app.js to find a field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["ACTION_FIELDS", "ROUTES", "TASK_FIELDS", "Route", "api_index", "route"]


@dataclass(frozen=True, slots=True)
class Route:
    """One route of the JSON API."""

    method: str
    path: str
    summary: str
    #: The query fields (GET) or form/JSON fields (POST) it accepts; any other is a 400.
    fields: tuple[str, ...]
    #: The top-level fields of its answer.
    answer: tuple[str, ...]


#: A queue action's form fields (lanes: pause and resume).
_QUEUE_FIELDS: Final = ("token", "queue")
_LIST_ANSWER: Final = ("tasks", "next_after", "units_per_second")
_ACTION_ANSWER: Final = ("ok", "action", "done", "skipped", "more", "after")

#: The fields of an action's request (form or JSON object of strings).
ACTION_FIELDS: Final[Mapping[str, str]] = {
    "task_id": "one task's id (give task_id or group, not both)",
    "group": 'an error group\'s id, from /api/dead/groups ("none": dead letters without a last error)',
    "after": "a group action's cursor: the previous answer's after, to resume where it stopped",
    "extra_attempts": "redrive only: attempts added (1 to 1000, default 1)",
    "token": "the action token (or the X-WALQueue-Token header); the page carries it",
}

#: The fields of a task as every list and /api/task show it.
TASK_FIELDS: Final = (
    *"task_id key status payload_excerpt available_at max_attempts attempts".split(),
    *"generation worker deadline time_left last_error group".split(),
)

ROUTES: Final = (
    Route(
        "GET",
        "/api/",
        "this index: the routes, their fields, a task's fields",
        (),
        ("routes", "action_fields", "actions_enabled", "task_fields", "also"),
    ),
    Route(
        "GET",
        "/api/overview",
        "counts, ages, WAL and snapshot figures, fsync and group-size histograms, counters",
        (),
        (
            "now",
            "counts",
            "oldest_ready_age",
            "undated_ready",
            "next_available_at",
            "next_deadline",
            "wal_bytes",
            "segments",
            "last_seq",
            "snapshot_seq",
            "counters",
            "fsync_seconds",
            "commit_group_size",
            "moments",
            "bounded_reads",
            "replica",
            "units_per_second",
        ),
    ),
    Route("GET", "/api/throughput", "puts, acks, releases and deaths per minute over the last hour", (), ()),
    Route(
        "GET",
        "/api/leases",
        "leased tasks in id order (cursor: after; or page)",
        ("after", "limit", "page"),
        _LIST_ANSWER,
    ),
    Route(
        "GET",
        "/api/dead",
        "dead letters in id order, all or one error group's",
        ("after", "limit", "page", "group"),
        (*_LIST_ANSWER, "budget_exhausted"),
    ),
    Route(
        "GET",
        "/api/dead/groups",
        "dead letters grouped by last error (type and message), largest first",
        (),
        ("groups", "scanned", "truncated"),
    ),
    Route("GET", "/api/task", "one task by id; 404 when there is none", ("id",), ("task",)),
    Route(
        "GET",
        "/api/queues",
        "every queue (lanes): settings, counts by status, oldest ready age; at most MAX_QUEUES_SHOWN",
        (),
        ("now", "queues", "total"),
    ),
    Route(
        "POST",
        "/api/actions/redrive",
        "make dead tasks ready again (actions enabled)",
        tuple(ACTION_FIELDS),
        _ACTION_ANSWER,
    ),
    Route(
        "POST",
        "/api/actions/cancel",
        "make ready or leased tasks dead; by group, only tasks whose last error is the group's (actions enabled)",
        tuple(ACTION_FIELDS),
        _ACTION_ANSWER,
    ),
    Route(
        "POST",
        "/api/actions/pause",
        "stop a queue's leases; it still takes puts (actions enabled)",
        _QUEUE_FIELDS,
        _ACTION_ANSWER,
    ),
    Route(
        "POST",
        "/api/actions/resume",
        "lease from a paused queue again (actions enabled)",
        _QUEUE_FIELDS,
        _ACTION_ANSWER,
    ),
)

_BY_PATH: Final = {entry.path: entry for entry in ROUTES}


def route(path: str) -> Route:
    """The declared route at `path` (a KeyError is a programming error)."""
    return _BY_PATH[path]


def api_index(actions: bool) -> dict[str, Any]:
    """The answer of ``GET /api/``."""
    return {
        "routes": [
            {
                "method": r.method,
                "path": r.path,
                "summary": r.summary,
                "fields": list(r.fields),
                "answer": list(r.answer),
            }
            for r in ROUTES
        ],
        "action_fields": dict(ACTION_FIELDS),
        "actions_enabled": actions,
        "task_fields": list(TASK_FIELDS),
        "also": {"/metrics": "Prometheus text exposition 0.0.4", "/": "the page"},
    }
