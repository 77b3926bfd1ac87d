"""The seat of a replicator beside the writer: what it may read of one open `Queue`, and its hold.

A replicator (walqueue.backup) ships the log to an object store from its
own thread, reading the segments through the format layer's segment
reader. It needs three things from the engine, and only these:

- the durable sequence: it ships nothing the fsync has not covered;
- the segment numbers: the first live one and the newest;
- a retention hold: compaction deletes no segment at or above the hold, so a
  segment is never gone before it was shipped (`WalWriter.deletable_below`).

And, in synchronous mode, a wait that every answer makes after its fsync
(`Durability.replica_wait`). The engine reads no clock here: the
replicator's interval timer, its bound on the hold and its retries live
outside, in walqueue.backup.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from walqueue.engine.callguard import CallGuard
from walqueue.engine.durability import Durability
from walqueue.engine.wal import WalWriter

__all__ = ["ReplicationSeat"]


class ReplicationSeat:
    """`Queue.replication`: the durable sequence, the segments, the hold and the synchronous wait."""

    __slots__ = ("path", "_guard", "_wal", "_durability")

    def __init__(self, path: str, guard: CallGuard, wal: WalWriter, durability: Durability) -> None:
        #: The store directory's absolute path (the replicator opens its files read-only).
        self.path = path
        self._guard = guard
        self._wal = wal
        self._durability = durability

    @property
    def durable_seq(self) -> int:
        """The last transaction an fsync covers: the most a replicator may ship."""
        return self._durability.durable

    @property
    def wal_bytes(self) -> int:
        """Bytes in the live segments (falls at each compaction): the replicator's every-N-bytes trigger."""
        return self._wal.wal_bytes

    @property
    def closed(self) -> bool:
        """The queue is closed (or poisoned): nothing more will be written."""
        return self._guard.closed

    def segments(self) -> tuple[int, int]:
        """The first live segment and the newest one (the one being written)."""
        with self._guard.mutex:
            return self._wal.first_live, self._wal.newest

    def hold(self, segment: int | None) -> None:
        """Keep every segment numbered `segment` or higher from compaction's deletions (None: release)."""
        if segment is not None and (type(segment) is not int or segment < 1):
            raise ValueError(f"a hold is a segment number >= 1 or None, not {segment!r}")
        with self._guard.mutex:
            self._wal.hold = segment

    @property
    def held(self) -> int | None:
        """The segment the hold starts at, or None."""
        return self._wal.hold

    def report(self, status: Callable[[], dict[str, Any]] | None) -> None:
        """Join `status()` to every `Queue.metrics()` reading as ``replica`` (None: stop)."""
        metrics = self._durability.metrics
        if metrics is not None:
            metrics.replica = status

    def wait_in_answers(self, wait: Callable[[int], None] | None) -> None:
        """Synchronous replication: every answer calls `wait(seq)` after its fsync (None: stop)."""
        self._durability.replica_wait = wait
