"""The JSON API's answers: overview, throughput, leases, dead letters and their error groups.

Why cursors and budgets: on a queue of a million tasks no answer may cost
the whole queue. Lists are paged by task id (``after=`` the last id of the
previous page, ``limit=`` at most `MAX_LIMIT`); a page number is accepted
too, but only as far as `MAX_OFFSET` tasks in (further is a 400 that says
to follow the cursor), and grouping the dead letters by error reads at
most `GROUP_BUDGET` of them, saying so when there were more.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from walqueue.dashboard.routes import route
from walqueue.dashboard.sampler import Sampler
from walqueue.dashboard.source import MAX_LIMIT, Source, task_view
from walqueue.dashboard.web import HttpError, parse_query, query_int, query_text

__all__ = [
    "GROUP_BUDGET",
    "MAX_OFFSET",
    "dead_groups",
    "dead_page",
    "leases_page",
    "overview",
    "task_lookup",
    "throughput",
]

#: How many tasks into a list a page number may reach (beyond: follow the `after` cursor).
MAX_OFFSET: Final = 10_000
#: How many dead letters are read to group them by error, and to look for one group's members.
GROUP_BUDGET: Final = 10_000
#: The longest task id accepted as a cursor or an argument, in characters.
MAX_ID_CHARS: Final = 1024


def overview(source: Source, sampler: Sampler, now: int, seen_at: float) -> dict[str, Any]:
    """Counts, ages, log and disk figures: everything above the lists."""
    metrics = source.metrics(now)
    sampler.observe(seen_at, metrics)
    gauges = metrics["gauges"]
    histograms = metrics.get("histograms", {})
    return {
        "now": now,
        "units_per_second": source.units(),  # of every time and age here (the store's clock unit)
        "counts": gauges["tasks"],
        "oldest_ready_age": gauges.get("oldest_ready_age"),  # of the oldest dated ready task (DECISIONS §46)
        "undated_ready": gauges.get("undated_ready", 0),  # ready tasks with no start, left out of that age
        "next_available_at": gauges.get("next_available_at"),
        "next_deadline": gauges.get("next_deadline"),
        "wal_bytes": gauges.get("wal_bytes"),
        "segments": gauges.get("segments"),
        "last_seq": gauges.get("last_seq"),
        "snapshot_seq": gauges.get("snapshot_seq"),
        "counters": metrics.get("counters", {}),
        "fsync_seconds": histograms.get("fsync_seconds"),
        "commit_group_size": histograms.get("commit_group_size"),
        "moments": sampler.moments(),
        "bounded_reads": True,  # every source declares the bounded page (the field stays for API readers)
        "replica": metrics.get("replica"),  # None unless a replicator runs beside the writer (walqueue.backup)
    }


def throughput(sampler: Sampler, seen_at: float) -> dict[str, Any]:
    """The chart's series: puts, acks, releases and deaths per minute over the last hour."""
    return sampler.throughput(seen_at)


def _cursor(fields: Mapping[str, str]) -> tuple[str | None, int]:
    """``(after, limit)`` from ``after``/``limit``/``page``; a page number becomes an offset within `MAX_OFFSET`."""
    limit = query_int(fields, "limit", 50, 1, MAX_LIMIT)
    after = query_text(fields, "after")
    if after is not None and len(after) > MAX_ID_CHARS:
        raise HttpError(400, f"after must be a task id of at most {MAX_ID_CHARS} characters")
    page = query_int(fields, "page", 1, 1, 10**18)
    if page > 1:
        if after is not None:
            raise HttpError(400, "give either page or after, not both")
        if (page - 1) * limit > MAX_OFFSET:
            raise HttpError(400, f"page {page} is more than {MAX_OFFSET} tasks in; follow the next_after cursor")
    return after, (page - 1) * limit


def _listing(source: Source, status: str, fields: Mapping[str, str], now: int) -> dict[str, Any]:
    after, offset = _cursor(fields)
    limit = query_int(fields, "limit", 50, 1, MAX_LIMIT)
    if offset:
        skipped, truncated = source.scan((status,), offset)
        if not truncated:
            return {"tasks": [], "next_after": None}
        after = skipped[-1].task_id
    page = source.page(status, after, limit)
    views = [task_view(task, now) for task in page.tasks]
    return {"tasks": views, "next_after": page.next_after, "units_per_second": source.units()}


def leases_page(source: Source, environ: Mapping[str, Any], now: int) -> dict[str, Any]:
    """The leased tasks, with worker, deadline and time left (against the dashboard's clock)."""
    return _listing(source, "leased", parse_query(environ, route("/api/leases").fields), now)


def dead_page(source: Source, environ: Mapping[str, Any], now: int) -> dict[str, Any]:
    """The dead letters, all or one error group's, with a payload excerpt and the last error."""
    fields = parse_query(environ, route("/api/dead").fields)
    group = query_text(fields, "group")
    if group is None:
        return _listing(source, "dead", fields, now)
    if len(group) > 64:
        raise HttpError(400, "group must be a group id from /api/dead/groups")
    limit = query_int(fields, "limit", 50, 1, MAX_LIMIT)
    after = query_text(fields, "after")
    found: list[dict[str, Any]] = []
    read = 0
    while read < GROUP_BUDGET:
        page = source.page("dead", after, min(MAX_LIMIT, GROUP_BUDGET - read))
        read += len(page.tasks)
        for task in page.tasks:
            view = task_view(task, now)
            if view["group"] == group:
                found.append(view)
                if len(found) == limit:
                    return {"tasks": found, "next_after": task.task_id}
        after = page.next_after
        if after is None:
            return {"tasks": found, "next_after": None}
    return {"tasks": found, "next_after": after, "budget_exhausted": True}


def dead_groups(source: Source, environ: Mapping[str, Any]) -> dict[str, Any]:
    """The dead letters grouped by last error (type and message), largest group first."""
    parse_query(environ, ())
    groups, scanned, truncated = source.groups(GROUP_BUDGET)
    return {
        "groups": [
            {"group": g.group, "type": g.type, "message": g.message, "count": g.count, "example": g.example}
            for g in groups
        ],
        "scanned": scanned,
        "truncated": truncated,
    }


def task_lookup(source: Source, environ: Mapping[str, Any], now: int) -> dict[str, Any]:
    """One task by id (``?id=``), as the lists show it; 404 when there is no such task."""
    fields = parse_query(environ, route("/api/task").fields)
    task_id = query_text(fields, "id")
    if task_id is None or len(task_id) > MAX_ID_CHARS:
        raise HttpError(400, f"id must be a task id of 1 to {MAX_ID_CHARS} characters")
    task = source.backend.get(task_id)
    if task is None:
        raise HttpError(404, "no such task")
    return {"task": task_view(task, now)}


#: The most queues the queues table lists (the rest are counted, not shown).
MAX_QUEUES_SHOWN = 1000


def queues(source: Source, now: int) -> dict[str, Any]:
    """Every queue (lanes): counts by status, oldest ready age against `now`, limits, paused; bounded."""
    found = list(source.backend.queues())
    shown = []
    for q in found[:MAX_QUEUES_SHOWN]:
        oldest = q.get("oldest_ready_at")
        shown.append({**q, "oldest_ready_age": None if oldest is None else max(0, now - oldest)})
    return {"now": now, "queues": shown, "total": len(found)}
