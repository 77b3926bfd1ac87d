"""`/metrics`: a `metrics()` reading in the Prometheus text exposition format, version 0.0.4.

Why by hand: the format is a few lines of text, and WALQueue takes no
runtime dependency; the tests parse this output with `prometheus_client`'s
own parser. Naming follows Prometheus's conventions: every name starts with
``walqueue_``, counters end in ``_total``, durations are ``_seconds`` and
sizes ``_bytes``; the only labels are a task's status, a server's op and
a queue's name (never a task id or a worker name). The queue label's
cardinality is bounded: the first `MAX_QUEUE_LABELS` queues by name get
their own series; any others are summed under ``queue="_other"`` (not a
valid queue name, so it cannot collide with one). The same bound holds for
the per-status gauges and the lifecycle counters by queue.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any, Final

__all__ = ["CONTENT_TYPE", "COUNTER_HELP", "MAX_QUEUE_LABELS", "exposition_name", "render"]

#: At most this many queue names appear as a `queue` label; the rest are summed as ``_other``.
MAX_QUEUE_LABELS: Final = 100

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"

#: Each counter of `Queue.metrics()` and its HELP text; its exposition name is `exposition_name(key)` + ``_total``.
COUNTER_HELP: Final[Mapping[str, str]] = {
    "puts": "Tasks created by put or put_many.",
    "duplicate_puts": "Puts answered as identical retries, writing nothing.",
    "reserves": "Tasks leased by reserve.",
    "acks": "Leased tasks completed by ack.",
    "releases": "Leased tasks given back by release.",
    "expiries": "Leases that ran out before an ack or release.",
    "deaths": "Tasks that died out of attempts (after a release or an expiry).",
    "redrives": "Dead tasks made ready again.",
    "cancels": "Ready or leased tasks cancelled (made dead).",
    "extends": "Lease deadlines moved by extend.",
    "stale_leases": "ack, release or extend refused with StaleLease.",
    "fsyncs": "fsync calls of the write-ahead log's group commit.",
    "compactions": "Snapshots published (compactions).",
}

_GAUGES: Final[Mapping[str, str]] = {
    "wal_bytes": "Bytes of live write-ahead log after the snapshot.",
    "segments": "Live write-ahead log segments.",
    "last_seq": "Sequence number of the last committed transaction.",
    "snapshot_seq": "Sequence number the published snapshot covers.",
}

_HISTOGRAMS: Final[Mapping[str, str]] = {
    "fsync_seconds": "Duration of each fsync of the write-ahead log.",
    "commit_group_size": "Transactions made durable by one fsync.",
}

#: The keys whose exposition name is not simply ``walqueue_`` + key (a name that says more than the key).
_RENAMED: Final[Mapping[str, str]] = {"stale_leases": "stale_lease_refusals", "segments": "wal_segments"}


def exposition_name(key: str) -> str:
    """The Prometheus name of a `metrics()` key: one ``walqueue_`` prefix rule, the few exceptions in `_RENAMED`."""
    return "walqueue_" + _RENAMED.get(key, key)


def _number(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(float(value))


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _header(name: str, kind: str, help_text: str) -> Iterator[str]:
    yield f"# HELP {name} {help_text}"
    yield f"# TYPE {name} {kind}"


def _histogram(name: str, reading: Mapping[str, Any], labels: str = "") -> Iterator[str]:
    cumulative = 0
    bounds = [*reading["bounds"], math.inf]
    for bound, count in zip(bounds, reading["counts"], strict=True):
        cumulative += int(count)
        yield f'{name}_bucket{{{labels}le="{_number(float(bound))}"}} {cumulative}'
    braces = f"{{{labels.rstrip(',')}}}" if labels else ""
    yield f"{name}_sum{braces} {_number(float(reading['sum']))}"
    yield f"{name}_count{braces} {int(reading['count'])}"


def _counters(counters: Mapping[str, int]) -> Iterator[str]:
    for key, help_text in COUNTER_HELP.items():
        if key in counters:
            name = exposition_name(key) + "_total"
            yield from _header(name, "counter", help_text)
            yield f"{name} {int(counters[key])}"


def _gauges(gauges: Mapping[str, Any], units_per_second: int) -> Iterator[str]:
    yield from _header("walqueue_tasks", "gauge", "Tasks by status.")
    for status, count in sorted(gauges["tasks"].items()):
        yield f'walqueue_tasks{{status="{_label(status)}"}} {int(count)}'
    age = gauges.get("oldest_ready_age")
    if age is not None:
        help_text = (
            "Seconds the oldest ready task has waited since it came due (now - available_at, the put's time"
            " for a stamped put), converted from the store's clock unit; undated tasks are left out."
        )
        yield from _header("walqueue_oldest_ready_age_seconds", "gauge", help_text)
        seconds = age // units_per_second if age % units_per_second == 0 else age / units_per_second
        yield f"walqueue_oldest_ready_age_seconds {_number(seconds)}"
    if gauges.get("undated_ready") is not None:
        help_text = "Ready tasks with no start (available_at 0 and no put time): left out of the oldest ready age."
        yield from _header("walqueue_undated_ready_tasks", "gauge", help_text)
        yield f"walqueue_undated_ready_tasks {int(gauges['undated_ready'])}"
    for key, help_text in _GAUGES.items():
        if gauges.get(key) is not None:
            name = exposition_name(key)
            yield from _header(name, "gauge", help_text)
            yield f"{name} {int(gauges[key])}"


def _queue_gauges(queues: list[Mapping[str, Any]]) -> Iterator[str]:
    """Per queue (lanes): its tasks by status, whether it is paused, its limits; bounded by `MAX_QUEUE_LABELS`."""
    if not queues:
        return
    shown = sorted(queues, key=lambda q: q["name"])
    rest, shown = shown[MAX_QUEUE_LABELS:], shown[:MAX_QUEUE_LABELS]
    yield from _header("walqueue_queue_tasks", "gauge", "Tasks by queue and status (queue _other: the rest).")
    for q in shown:
        for status, count in sorted(q["counts"].items()):
            yield f'walqueue_queue_tasks{{queue="{_label(q["name"])}",status="{_label(status)}"}} {int(count)}'
    if rest:
        for status in sorted(rest[0]["counts"]):
            total = sum(int(q["counts"][status]) for q in rest)
            yield f'walqueue_queue_tasks{{queue="_other",status="{_label(status)}"}} {total}'
    yield from _header("walqueue_queue_paused", "gauge", "1 while a queue is paused.")
    for q in shown:
        yield f'walqueue_queue_paused{{queue="{_label(q["name"])}"}} {int(bool(q["paused"]))}'
    yield from _header("walqueue_queue_concurrency_limit", "gauge", "A queue's concurrency limit (if it has one).")
    for q in shown:
        if q.get("concurrency") is not None:
            yield f'walqueue_queue_concurrency_limit{{queue="{_label(q["name"])}"}} {int(q["concurrency"])}'


def _queue_counters(by_queue: Mapping[str, Mapping[str, int]]) -> Iterator[str]:
    """The lifecycle counters by queue, as ``walqueue_queue_<counter>_total``; bounded as the queue gauges are."""
    if not by_queue:
        return
    names = sorted(by_queue)
    shown, rest = names[:MAX_QUEUE_LABELS], names[MAX_QUEUE_LABELS:]
    for key in next(iter(by_queue.values())):
        name = "walqueue_queue_" + _RENAMED.get(key, key) + "_total"
        yield from _header(name, "counter", COUNTER_HELP.get(key, key).rstrip(".") + ", by queue (_other: the rest).")
        for queue in shown:
            yield f'{name}{{queue="{_label(queue)}"}} {int(by_queue[queue][key])}'
        if rest:
            yield f'{name}{{queue="_other"}} {sum(int(by_queue[queue][key]) for queue in rest)}'


def _histograms(histograms: Mapping[str, Any], requests: Mapping[str, Any]) -> Iterator[str]:
    for key, help_text in _HISTOGRAMS.items():
        if key in histograms:
            name = exposition_name(key)
            yield from _header(name, "histogram", help_text)
            yield from _histogram(name, histograms[key])
    if requests:
        yield from _header("walqueue_request_seconds", "histogram", "Server request duration by op.")
        for op, reading in sorted(requests.items()):
            yield from _histogram("walqueue_request_seconds", reading, f'op="{_label(op)}",')


#: The replicator's figures (walqueue.backup), when one runs beside the writer: status key -> (name, kind, help).
_REPLICA: dict[str, tuple[str, str, str]] = {
    "lag_seconds": (
        "walqueue_replica_lag_seconds",
        "gauge",
        "Seconds since the replica last had every durable transaction.",
    ),
    "lag_transactions": ("walqueue_replica_lag_transactions", "gauge", "Durable transactions not yet in the replica."),
    "last_success": ("walqueue_replica_last_success_timestamp_seconds", "gauge", "When the replica last answered."),
    "bytes_shipped": ("walqueue_replica_shipped_bytes_total", "counter", "Log bytes uploaded to the replica."),
    "failures": ("walqueue_replica_failures_total", "counter", "Failed attempts to reach the replica."),
    "objects_deleted": (
        "walqueue_replica_retention_deleted_objects_total",
        "counter",
        "Replica objects retention deleted (--replicate-retain).",
    ),
    "broken": ("walqueue_replica_broken", "gauge", "1 while the backup is broken (the hold was released)."),
}


def _replica(status: Mapping[str, Any]) -> Iterator[str]:
    for key, (name, kind, help_text) in _REPLICA.items():
        value = status.get(key)
        if value is not None:
            yield from _header(name, kind, help_text)
            yield f"{name} {_number(float(value))}"


def render(
    metrics: Mapping[str, Any],
    extra: Mapping[str, tuple[str, str, float]] | None = None,
    *,
    units_per_second: int = 1,
) -> str:
    """The exposition text of one reading; `extra` adds gauges ``name -> (name, help, value)`` (the dashboard's own).

    `units_per_second`: the store's clock unit, which the reading's ages are in (shown in seconds).
    """
    lines = [
        *_counters(metrics.get("counters", {})),
        *_gauges(metrics["gauges"], units_per_second),
        *_queue_gauges(metrics.get("queues") or []),
        *_queue_counters(metrics.get("queue_counters") or {}),
        *_histograms(metrics.get("histograms", {}), metrics.get("request_seconds", {})),
        *_replica(metrics.get("replica") or {}),
    ]
    for name, help_text, value in (extra or {}).values():
        lines.extend(_header(name, "gauge", help_text))
        lines.append(f"{name} {_number(value)}")
    return "\n".join(lines) + "\n"
