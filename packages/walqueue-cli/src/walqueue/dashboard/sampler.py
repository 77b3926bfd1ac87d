"""Throughput over the last hour: counter readings kept one per minute in a ring, and their differences.

Why sample counters rather than count events: the queue's counters are
cumulative and free to read, so the dashboard only has to remember the
first reading it saw in each minute; a minute's throughput is the next
minute's reading minus its own. A minute with no reading on either side has
no figure (the chart shows a gap, never a guess), and a counter that went
down (the queue was reopened, so its counters started again) gives no
figure for that minute either.

The sampler also notices when the snapshot sequence or the compaction
counter moves, on its own clock, since the engine keeps no clock: that is
"the last compaction" and "the snapshot's age" the page shows.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Final

__all__ = ["MINUTES", "SERIES", "Sampler"]

#: How many minutes of history are kept and shown.
MINUTES: Final = 60
#: The counters the chart shows, in its legend's order.
SERIES: Final = ("puts", "acks", "releases", "deaths")


class Sampler:
    """The ring of per-minute readings; thread-safe (the HTTP server answers on several threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._first: dict[int, dict[str, int]] = {}  # minute -> the first reading seen in it
        self._latest: tuple[int, dict[str, int]] | None = None
        self._snapshot_seq: int | None = None
        self._snapshot_seen_at: float | None = None
        self._compactions: int | None = None
        self._compaction_seen_at: float | None = None

    def observe(self, now: float, metrics: Mapping[str, Any]) -> None:
        """Record one `metrics()` reading taken at `now` (seconds since the epoch)."""
        counters = {name: int(metrics["counters"][name]) for name in SERIES if name in metrics.get("counters", {})}
        minute = int(now // 60)
        snapshot_seq = metrics["gauges"].get("snapshot_seq")
        compactions = metrics.get("counters", {}).get("compactions")
        with self._lock:
            if counters:
                self._first.setdefault(minute, counters)
                self._latest = (minute, counters)
                for old in [m for m in self._first if m <= minute - MINUTES - 1]:
                    del self._first[old]
            if snapshot_seq != self._snapshot_seq:
                self._snapshot_seen_at = None if self._snapshot_seq is None else now
                self._snapshot_seq = snapshot_seq
            if compactions != self._compactions:
                self._compaction_seen_at = None if self._compactions is None else now
                self._compactions = compactions

    def throughput(self, now: float) -> dict[str, Any]:
        """Per minute for the last `MINUTES` minutes (oldest first): each series' count, None where unknown."""
        current = int(now // 60)
        minutes = list(range(current - MINUTES + 1, current + 1))
        with self._lock:
            first = dict(self._first)
            latest = self._latest
        series: dict[str, list[int | None]] = {name: [] for name in SERIES}
        for minute in minutes:
            start = first.get(minute)
            end = first.get(minute + 1)
            if end is None and latest is not None and latest[0] == minute:
                end = latest[1]  # the minute under way: up to the latest reading
            for name in SERIES:
                if start is None or end is None or name not in start or name not in end:
                    series[name].append(None)
                    continue
                delta = end[name] - start[name]
                series[name].append(delta if delta >= 0 else None)
        return {"minutes": [minute * 60 for minute in minutes], "series": series}

    def moments(self) -> dict[str, float | None]:
        """When this dashboard saw the snapshot and the compaction counter last change (None: not since it started)."""
        with self._lock:
            return {"snapshot_changed_at": self._snapshot_seen_at, "compaction_seen_at": self._compaction_seen_at}
