"""What a queue counts about itself: counters, two histograms, and the read that joins them with gauges.

Why these shapes: a counter answers "how many failed in the last three
days" where a gauge cannot, and the calls that move one are on the hot
path, so a counter is a plain int attribute incremented where the call
already knows what happened (no lock of its own: every increment happens
under the queue's lock, or, for the fsync figures, under the group commit's
lock). Gauges are not stored at all: they are read from the state when
`Queue.metrics()` is called. Histograms have fixed buckets, so that a
reader can subtract two readings bucket by bucket (Prometheus's rule).

The engine never reads a clock for its decisions; the one clock here,
`time.perf_counter`, only measures how long an fsync took, and nothing
the queue decides depends on it.

The names of the counters are the keys of `Queue.metrics()["counters"]`
and, with ``walqueue_`` and ``_total`` around them, of the Prometheus
exposition (walqueue.dashboard.prometheus); docs/DECISIONS.md lists them.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, NotRequired, TypedDict

from walqueue.engine.records import queue_of
from walqueue.engine.rows import LANE
from walqueue.engine.state import OP_KINDS
from walqueue.engine.validate import DEFAULT_QUEUE, check_int

__all__ = [
    "COUNTERS",
    "FSYNC_SECONDS_BOUNDS",
    "GROUP_SIZE_BOUNDS",
    "REQUEST_SECONDS_BOUNDS",
    "Counters",
    "Histogram",
    "HistogramReading",
    "Metrics",
    "MetricsReading",
    "RequestSeconds",
    "read_metrics",
]

#: The counter each op kind adds one to as it is committed: its row's `counter` (`state.OP_KINDS`).
_OP_COUNTERS: Final = {kind.name: kind.counter for kind in OP_KINDS.values() if kind.counter is not None}
#: The counters that no op kind moves: counted by the calls, the guard, the fsyncs, the compactor, or derived.
_OTHER_COUNTERS: Final = ("duplicate_puts", "deaths", "stale_leases", "fsyncs", "compactions")
#: Every counter, in the order they are shown: the op kinds' in the table's order, then the others.
COUNTERS: Final = (*_OP_COUNTERS.values(), *_OTHER_COUNTERS)

#: Upper bounds of the fsync-latency buckets, in seconds (a disk's fsync: 50 us to a stalled second).
FSYNC_SECONDS_BOUNDS: Final = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
#: Upper bounds of the commit-group buckets: transactions made durable by one fsync.
GROUP_SIZE_BOUNDS: Final = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0)
#: Upper bounds of a server's request-latency buckets, in seconds.
REQUEST_SECONDS_BOUNDS: Final = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0, 5.0)


class Counters:
    """The counters of one queue since it was opened (a reopened queue starts again at zero).

    `deaths` is not incremented anywhere: a task dies in a release or an
    expiry, and counting that on the hot path would cost a status test per
    op. It is derived when read, from the dead count's change since the
    queue was opened: ``dead now - dead at open + redrives - cancels``
    (a redrive takes one task out of the dead letters, a cancel puts one in).
    """

    __slots__ = ("values", "dead_at_open")

    def __init__(self, dead_at_open: int = 0) -> None:
        #: Every counter of `COUNTERS` by name.
        self.values = dict.fromkeys(COUNTERS, 0)
        self.dead_at_open = dead_at_open

    def reading(self, dead_now: int) -> dict[str, int]:
        """Every counter by name, `deaths` derived from `dead_now`."""
        values = dict(self.values)
        values["deaths"] = dead_now - self.dead_at_open + values["redrives"] - values["cancels"]
        return values


class HistogramReading(TypedDict):
    """A histogram as plain JSON: `counts[i]` observations ``<= bounds[i]`` (not cumulative), the last one above all."""

    bounds: list[float]
    counts: list[int]
    sum: float
    count: int


class Histogram:
    """Observations in fixed buckets, with their sum; `observe` is a bisect and two additions."""

    __slots__ = ("bounds", "counts", "sum", "count")

    def __init__(self, bounds: Sequence[float]) -> None:
        if list(bounds) != sorted(set(bounds)) or not bounds:
            raise ValueError("histogram bounds must be increasing and not empty")
        self.bounds = tuple(float(bound) for bound in bounds)
        self.counts = [0] * (len(self.bounds) + 1)  # the last bucket: above every bound (+Inf)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        """Count `value` in the first bucket whose bound holds it (``value <= bound``)."""
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def reading(self) -> HistogramReading:
        """The buckets, sum and count as plain JSON values (a copy)."""
        return {"bounds": list(self.bounds), "counts": list(self.counts), "sum": self.sum, "count": self.count}


class RequestSeconds:
    """A server's request durations, one histogram per op: `observe` from the request path, `reading` for metrics().

    Only names from `ops` get a histogram of their own (any other, a client's
    typo say, counts as ``"other"``), so the label stays low-cardinality.
    Thread-safe without a lock of its own under CPython's GIL only for a
    single observer thread per op; a server with several threads observes
    under its own lock or accepts an occasional lost increment (it is a
    latency figure, not an account).
    """

    __slots__ = ("_histograms",)

    def __init__(self, ops: Sequence[str], bounds: Sequence[float] = REQUEST_SECONDS_BOUNDS) -> None:
        self._histograms = {op: Histogram(bounds) for op in (*ops, "other")}

    def observe(self, op: str, seconds: float) -> None:
        """Count one request of `op` that took `seconds`."""
        histogram = self._histograms.get(op)
        (histogram if histogram is not None else self._histograms["other"]).observe(seconds)

    def reading(self) -> dict[str, HistogramReading]:
        """The ops that were observed at least once."""
        return {op: histogram.reading() for op, histogram in self._histograms.items() if histogram.count}


class MetricsReading(TypedDict):
    """What `Queue.metrics()` returns (and `Client.metrics()`, over the wire, as the same JSON).

    - `counters`: every name of `COUNTERS`, since the queue was opened;
    - `gauges`: `tasks` (counts by status), `oldest_ready_age` (``now`` minus
      the earliest `available_at` of a dated ready task, at least 0; None
      without `now` or with no dated ready task), `undated_ready` (ready tasks
      with no start: `available_at` 0 and no put time, left out of the age;
      DECISIONS §46), `next_available_at`, `next_deadline`,
      `wal_bytes`, `segments`, `last_seq`, `snapshot_seq`;
    - `queue_counters`: the op kinds' counters by queue (each queue that moved one since opening);
    - `histograms`: `fsync_seconds` and `commit_group_size`;
    - `request_seconds`: only when a server serves the queue
      (`Queue.attach_request_seconds`): each request's seconds by op.
    - `replica` (only while a replicator runs beside the writer): its status (walqueue.backup).
    """

    counters: dict[str, int]
    queue_counters: dict[str, dict[str, int]]
    gauges: dict[str, Any]
    histograms: dict[str, HistogramReading]
    request_seconds: NotRequired[dict[str, HistogramReading]]
    replica: NotRequired[dict[str, Any]]


def read_metrics(
    counters: Counters,
    histograms: Mapping[str, Histogram],
    stats: Mapping[str, Any],
    now: int | None,
    dead_now: int,
    ages: tuple[int | None, int] = (None, 0),
    queue_counters: dict[str, dict[str, int]] | None = None,
) -> MetricsReading:
    """Join the counters and histograms with the gauges of a `stats()` reading.

    `dead_now` must be read under the same lock hold as the counters: `deaths`
    is derived from it, and a counter must never go down between two readings.
    `ages`: the oldest dated ready time and the undated ready count (ages.py).
    """
    counts: dict[str, int] = dict(stats["counts"])
    first_ready = stats["next_available_at"]
    oldest, undated = ages
    age = None if now is None or oldest is None else max(0, now - oldest)
    return {
        "counters": counters.reading(dead_now),
        "queue_counters": queue_counters or {},
        "gauges": {
            "tasks": counts,
            "oldest_ready_age": age,
            "undated_ready": undated,
            "next_available_at": first_ready,
            "next_deadline": stats["next_deadline"],
            "wal_bytes": stats["wal_bytes"],
            "segments": stats["segments"],
            "last_seq": stats["last_seq"],
            "snapshot_seq": stats["snapshot_seq"],
        },
        "histograms": {name: histogram.reading() for name, histogram in histograms.items()},
    }


def _created_queue(tx_ops: list[dict[str, Any]], task_id: str) -> str:
    """The queue of task `task_id`, created by this very transaction: its first op there is the one that creates it."""
    queue: str = next(op.get("queue", DEFAULT_QUEUE) for op in tx_ops if op.get("task") == task_id)
    return queue


class Metrics:
    """One queue's counters and histograms.

    Why by op kind: every change goes through `Queue._commit`, whose ops say
    what happened, so one loop there counts every kind alike (an int per op
    kind, in `ops`, written inline there: it is the hot path); the counter
    each kind feeds is its row's `counter`. The
    calls count only what commits nothing: `duplicate_puts`; the call guard
    counts `StaleLease` refusals; `Durability` reports each fsync
    (`synced`); the compactor counts its snapshots.
    """

    __slots__ = (
        "ops",
        "by_queue",
        "lanes",
        "duplicate_puts",
        "fsyncs",
        "dead_at_open",
        "fsync_seconds",
        "group_size",
        "request_seconds",
        "replica",
    )

    def __init__(self, dead_at_open: int, lanes: bool = False) -> None:
        self.ops = dict.fromkeys(OP_KINDS, 0)
        #: Whether the store knows a queue but the default one (opened so, or since): then ops count by queue.
        self.lanes = lanes
        #: The counted kinds' ops by queue, for every queue but the default one (derived when read: the rest).
        self.by_queue: dict[str, dict[str, int]] = {}
        self.duplicate_puts = 0
        self.fsyncs = 0
        self.dead_at_open = dead_at_open
        self.fsync_seconds = Histogram(FSYNC_SECONDS_BOUNDS)
        self.group_size = Histogram(GROUP_SIZE_BOUNDS)
        #: A server's request durations (`Queue.attach_request_seconds`): the front end observes, this reads.
        self.request_seconds: RequestSeconds | None = None
        #: A replicator's status (walqueue.backup), joined to every reading as ``replica`` while it runs.
        self.replica: Callable[[], dict[str, Any]] | None = None

    def counted(self, tx_ops: list[dict[str, Any]], state: Any) -> None:
        """Count a written transaction's ops by kind, and by queue off the default one (`Queue._commit`).

        Called before the transaction is applied: the queue is the task's own,
        read from its row as it was (a task never changes lane; an ack's
        tombstone would have to be decoded) or from its put. The default
        queue's figures are derived when read. Until the store knows a queue
        but the default one (an op naming another, or `state.has_lanes`),
        every task is in the default queue, so a store without lanes pays one
        key test per op and nothing else.
        """
        counts = self.ops
        if not self.lanes:
            lanes = False
            for op in tx_ops:
                counts[op["op"]] += 1
                if not lanes and "queue" in op:  # a put off the default queue, or a queue's settings
                    lanes = self.lanes = op["queue"] != DEFAULT_QUEUE or state.has_lanes()
            if not lanes:
                return
            counts = dict.fromkeys(OP_KINDS, 0)  # (counted above: the loop below counts by queue alone)
        tasks, by_queue = state.tasks, self.by_queue
        for op in tx_ops:  # (a store with lanes: one loop counts by kind and by queue)
            kind = op["op"]
            counts[kind] += 1
            if kind in _OP_COUNTERS:
                stored = tasks.get(op["task"])
                if type(stored) is tuple:  # a row (records.queue_of, inlined: every lane op's path)
                    if len(stored) == LANE:
                        continue  # (the default lane's rows have no lane item)
                    queue = stored[LANE][0]
                else:
                    queue = queue_of(stored) if stored is not None else _created_queue(tx_ops, op["task"])
                if queue != DEFAULT_QUEUE:
                    by_kind = by_queue.get(queue)
                    if by_kind is None:
                        by_kind = by_queue[queue] = dict.fromkeys(_OP_COUNTERS, 0)
                    by_kind[kind] += 1

    def _queue_counters(self) -> dict[str, dict[str, int]]:
        """Every queue's counters by counter name: the default queue's are the totals less the others'."""
        named = {q: {_OP_COUNTERS[k]: n for k, n in by_kind.items()} for q, by_kind in self.by_queue.items()}
        default = {name: self.ops[kind] - sum(c[name] for c in named.values()) for kind, name in _OP_COUNTERS.items()}
        return {DEFAULT_QUEUE: default, **named} if any(default.values()) or not named else named

    def synced(self, seconds: float, transactions: int) -> None:
        """One group-commit fsync ended (`Durability` calls this holding its lock)."""
        self.fsyncs += 1
        self.fsync_seconds.observe(seconds)
        self.group_size.observe(transactions)

    def reading(
        self, stats: Mapping[str, Any], now: int | None, state: Any, guard: Any, compactor: Any
    ) -> MetricsReading:
        """`Queue.metrics()`, called holding the queue's lock: the dead count is read with the counters.

        `deaths` derives from both, so they must come from one lock hold. The
        `StaleLease` refusals are the call guard's (`guard.stale_leases`), the
        snapshots the compactor's (`compactor.compactions`).
        """
        dead_now, stale_leases, compactions = state.counts()["dead"], guard.stale_leases, compactor.compactions
        if now is not None:
            check_int(now, "now")  # the rule of every `now`: an int in 0..2**63-1
        counters = Counters(self.dead_at_open)
        values = counters.values
        for kind, name in _OP_COUNTERS.items():
            values[name] = self.ops[kind]
        values["duplicate_puts"] = self.duplicate_puts
        values["stale_leases"] = stale_leases
        values["fsyncs"] = self.fsyncs
        values["compactions"] = compactions
        histograms = {"fsync_seconds": self.fsync_seconds, "commit_group_size": self.group_size}
        described = state.queues()  # the oldest dated ready time and the undated count, over every queue
        dated = [q["oldest_ready_at"] for q in described if q["oldest_ready_at"] is not None]
        ages = (min(dated, default=None), sum(q["undated_ready"] for q in described))
        reading = read_metrics(counters, histograms, stats, now, dead_now, ages, self._queue_counters())
        if self.request_seconds is not None:
            reading["request_seconds"] = self.request_seconds.reading()
        if self.replica is not None:
            reading["replica"] = self.replica()
        return reading
