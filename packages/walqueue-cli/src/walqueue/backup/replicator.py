"""The replicator beside the writer: ships every durable transaction to a replica, and says how it goes.

One `Replicator` per open `Queue` (walqueue-serve's ``--replicate URL``, or
an application's own: ``Replicator(queue, "file:///backups/q").start()``).
Its thread wakes every `interval` seconds, when `trigger_bytes` more bytes
were written, or (``sync=True``) when an answer waits for the replica; each
wake is one `tick`, which tests call directly with a simulated clock.

A tick takes or renews the lease, resumes or begins a generation, ships
what the fsync covers as log objects (each cut at a transaction boundary,
at most `object_bytes`), moves the engine's hold past what was shipped, and
uploads the store's newer snapshot now and then. A store that fails is
retried with backoff while the hold keeps the unshipped segments; once they
pass `max_hold_bytes` the hold is released (the queue keeps working, its
disk bounded), the backup is marked broken (a loud log line, the
``replica_broken`` metric), and when the store answers again a new
generation begins from a fresh snapshot. A lease that is held by another or
lost stops the replicator for good (`fatal`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from walqueue.backup import layout
from walqueue.backup.layout import LogObject, SnapshotManifest
from walqueue.backup.lease import Lease, LeaseHeld, LeaseLost, store_identity
from walqueue.backup.localread import Base, Cursor, LocalLog, SegmentGone
from walqueue.backup.objectstore import Tally
from walqueue.backup.restore import prune
from walqueue.backup.settings import DEFAULT_MAX_HOLD_BYTES
from walqueue.backup.stores import ObjectStore, PreconditionFailed, StoreUnavailable, open_store
from walqueue.engine.replication import ReplicationSeat
from walqueue.format.current import read_current
from walqueue.format.errors import CorruptStore

__all__ = ["Replicator"]

log = logging.getLogger("walqueue.backup")


class Replicator:
    """Continuous backup of one open queue to one replica."""

    def __init__(
        self,
        queue: Any,
        replica: str | ObjectStore,
        *,
        interval: float = 1.0,
        trigger_bytes: int = 4 * 2**20,
        object_bytes: int = 16 * 2**20,
        sync: bool = False,
        max_hold_bytes: int = DEFAULT_MAX_HOLD_BYTES,
        lease_seconds: float = 30.0,
        snapshot_interval: float = 3600.0,
        sync_grace: float = 60.0,
        retain: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.seat: ReplicationSeat = queue.replication
        self.store = open_store(replica) if isinstance(replica, str) else replica
        self.interval, self.trigger_bytes, self.object_bytes = interval, trigger_bytes, object_bytes
        self.sync, self.max_hold_bytes, self.snapshot_interval = sync, max_hold_bytes, snapshot_interval
        self.clock = clock
        #: Synchronous mode: how long answers wait for a failing store before the backup is declared broken.
        self.sync_grace = sync_grace
        #: Seconds of snapshots to keep (None: keep everything); applied after each new snapshot (`_retain`).
        self.retain = retain
        self._retain_due = False
        self.objects_deleted = 0
        self._streak = 0
        self._failing_since: float | None = None
        self._lease_wait: float | None = None
        self.local = LocalLog(self.seat.path)
        self.lease = Lease(self.store, store_identity(self.seat.path), lease_seconds)
        self.generation: int | None = None
        self.cursor = Cursor(1, 0, 1)
        self.head = 0
        self.digest = ""
        self.boundaries: list[tuple[int, str]] = []
        self.snapshot_seq = 0
        self.snapshot_at = 0.0
        self.state = "starting"
        self.fatal: str | None = None
        self.last_error: str | None = None
        self.failures = 0
        self.bytes_shipped = 0
        self.objects_shipped = 0
        self.last_success: float | None = None
        self.caught_up_at: float | None = None
        self.retry_at = 0.0
        self._wal_bytes_seen = 0
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._wake = threading.Event()
        self._shipped = threading.Condition()

    # -- one pass (what the thread runs; tests call it with a simulated clock) ----------

    def tick(self) -> bool:
        """Ship what is durable; True if the replica is now current. Never raises but for a bug."""
        if self.fatal is not None:
            return False
        now = self.clock()
        try:
            if self.generation is None:
                self._begin(now)
            elif self.lease.due(now):
                self.lease.renew(now)
            self._ship(now)
            self._maybe_snapshot(now)
            if self._retain_due:
                self._retain(now)
        except LeaseHeld as exc:
            self._lease_held(now, str(exc))
            return False
        except LeaseLost as exc:
            self._stop_for_good(str(exc))
            return False
        except (StoreUnavailable, OSError) as exc:
            self._failed(now, exc)
            return False
        except (SegmentGone, CorruptStore) as exc:
            log.warning("replica %s: %s; a new generation begins from a fresh snapshot", self.store.url, exc)
            self.generation = None
            return False
        self._succeeded(now)
        return self.head >= self.seat.durable_seq

    def _begin(self, now: float) -> None:
        """Take the lease, then resume the newest generation if it matches this store, or begin a new one."""
        if self.lease.fence == 0:
            self.lease.acquire(now)
        elif self.lease.due(now):
            self.lease.renew(now)
        generations = layout.generations(self.store.list(layout.GENERATIONS))
        if generations:
            try:
                if self._resume(generations[-1]):
                    if self.state == "broken":
                        log.warning(
                            "replica %s: the store answers again; generation %d goes on",
                            self.store.url,
                            generations[-1],
                        )
                    return
            except layout.ChainError as exc:  # a damaged or gapped replica is never continued
                log.warning("replica %s: generation %d cannot be continued: %s", self.store.url, generations[-1], exc)
        self._new_generation((generations[-1] if generations else 0) + 1, now)

    def _resume(self, generation: int) -> bool:
        """Continue `generation` if its last object's frames are this store's, verified by digest."""
        keys = self.store.list(layout.generation_prefix(generation))
        manifests = sorted(m for key in keys if (m := layout.parse_manifest_key(key)) is not None)
        if not manifests:
            return False
        found = self.store.get(layout.manifest_key(*manifests[0]))
        if found is None:
            return False
        manifest = SnapshotManifest.from_bytes(layout.manifest_key(*manifests[0]), found[0])
        chain = layout.resolve_chain(manifest.boundary, manifest.link, _log_entries(keys), self._chained)
        if not chain:
            return len(manifests) == 1 and self._resume_at_snapshot(generation, manifest)
        got = self.store.get(chain[-1])
        if got is None:
            return False
        header, frames = layout.decode_log(chain[-1], got[0])
        self.seat.hold(min(self.local.segment_numbers(), default=1))  # nothing goes while it is compared
        cursor = self.local.find(header.first)
        if cursor is None:
            return False
        data, count, after = self.local.read(cursor, header.last, self.seat.segments()[1], 2**62)
        if count != header.last - header.first + 1 or layout.chain_digest(header.prev, data) != header.digest:
            log.warning(
                "replica %s: generation %d ends at transaction %d, which this store does not hold as shipped "
                "(restored elsewhere, or another store): a new generation begins",
                self.store.url,
                generation,
                header.last,
            )
            return False
        self.generation, self.cursor, self.head, self.digest = generation, after, header.last, header.digest
        self.boundaries = [(header.last, header.digest)]
        newest = layout.manifest_key(*manifests[-1])
        found = self.store.get(newest)
        if found is not None:  # the generation's newest snapshot is not uploaded again (nor taken for another's)
            latest = SnapshotManifest.from_bytes(newest, found[0])
            self.snapshot_seq, self.snapshot_at = latest.seq, latest.uploaded
        self.seat.hold(after.segment)
        log.info("replica %s: resumed generation %d after transaction %d", self.store.url, generation, header.last)
        return True

    def _resume_at_snapshot(self, generation: int, manifest: SnapshotManifest) -> bool:
        """Continue a generation that holds its snapshot alone if that is this store's published snapshot.

        Same sequence and SHA-256 as CURRENT (or both the empty store): the log goes on from there, and the
        snapshot, which may be large, is not uploaded again after every restart of an idle writer.
        """
        current = read_current(self.local.directory)
        mine = (0, None, 1) if current is None else (current.seq, current.sha256, current.wal)
        if (mine[0], mine[1]) != (manifest.seq, manifest.sha256) or manifest.boundary != manifest.seq:
            return False
        self.seat.hold(mine[2])
        if read_current(self.local.directory) != current:  # a compaction published meanwhile
            return False
        self.generation, self.cursor = generation, Cursor(mine[2], 0, manifest.seq + 1)
        self.head, self.digest, self.boundaries = manifest.seq, manifest.link, [(manifest.seq, manifest.link)]
        self.snapshot_seq, self.snapshot_at = manifest.seq, manifest.uploaded
        log.info("replica %s: resumed generation %d at its snapshot %d", self.store.url, generation, manifest.seq)
        return True

    def _chained(self, key: str, link: str) -> str | None:
        """The digest of log object `key` if it is intact and chains to `link` (resolving the chain to resume)."""
        found = self.store.get(key)
        if found is None or not _intact(key, found[0]):
            return None
        header, _ = layout.decode_log(key, found[0])
        return header.digest if header.prev == link else None

    def _new_generation(self, generation: int, now: float) -> None:
        """Begin `generation` at the published snapshot (or the empty store), under the hold."""
        with self.local.base(self.seat.hold) as base:
            if base.file is not None:
                self._put_snapshot(layout.snapshot_key(generation, base.seq), base)
        link = layout.root_digest(generation, base.sha256)
        manifest = SnapshotManifest(generation, base.seq, base.size, base.sha256, base.seq, link, now, self.lease.fence)
        self._put_new(layout.manifest_key(generation, base.seq), manifest.to_bytes())
        self.generation, self.cursor, self.head, self.digest = (
            generation,
            Cursor(base.wal, 0, base.seq + 1),
            base.seq,
            link,
        )
        self.boundaries = [(base.seq, link)]
        self.snapshot_seq, self.snapshot_at = base.seq, now
        self._retain_due = self.retain is not None
        if self.state == "broken":
            log.warning(
                "replica %s: the store answers again; generation %d restarts the backup", self.store.url, generation
            )
        log.info("replica %s: generation %d begins at snapshot %d", self.store.url, generation, base.seq)

    def _put_new(self, key: str, data: bytes) -> None:
        """Create `key`; the same bytes there already (an earlier attempt got through) count as done."""
        try:
            self.store.put(key, data, if_none_match=True)
        except PreconditionFailed:
            found = self.store.get(key)
            if found is not None and _same_content(key, found[0], data):
                return  # an earlier attempt got through (a timeout after the store had it)
            if found is not None and key.endswith(".wal") and not _intact(key, found[0]):
                # a partial upload some proxy let through: ours to replace (we hold the lease)
                log.warning("replica %s: %s is damaged (a partial upload); writing it again", self.store.url, key)
                self.store.delete(key)
                self.store.put(key, data, if_none_match=True)
                return
            raise LeaseLost(f"{self.store.url}: {key} was written by another replicator; this one stops") from None

    def _put_snapshot(self, key: str, base: Base) -> None:
        """Stream the snapshot up; the same snapshot there already (an earlier attempt got through) is done.

        Compared by digest, read back piece by piece: memory stays one piece, whatever the snapshot's size.
        """
        assert base.file is not None
        try:
            self.store.put_file(key, base.file, base.size, if_none_match=True)
        except PreconditionFailed:
            tally = Tally()
            if self.store.read_into(key, tally) and tally.matches(base.size, base.sha256):
                return
            raise LeaseLost(f"{self.store.url}: {key} was written by another replicator; this one stops") from None

    def _ship(self, now: float) -> None:
        """Upload what was durable when the tick began, as log objects of at most `object_bytes`.

        Not what becomes durable meanwhile: chasing a busy writer would cut many small objects, each an
        upload (and, on file://, two fsyncs) competing with the writer's own; the next tick takes the rest.
        """
        assert self.generation is not None
        durable = self.seat.durable_seq
        while True:
            newest = self.seat.segments()[1]
            first = self.cursor.next_seq
            data, count, after = self.local.read(self.cursor, durable, newest, self.object_bytes)
            if not count:
                if after.segment != self.cursor.segment:
                    self.cursor = after
                return
            digest = layout.chain_digest(self.digest, data)
            header = LogObject(
                self.generation, first, first + count - 1, self.lease.fence, self.digest, digest, now, len(data)
            )
            if self.lease.due(now):
                self.lease.renew(now)
            self._put_new(header.key, layout.encode_log(header, data))
            self.cursor, self.head, self.digest = after, header.last, digest
            self.boundaries = [*self.boundaries[-255:], (header.last, digest)]
            self.bytes_shipped += len(data)
            self.objects_shipped += 1
            self.seat.hold(after.segment)
            with self._shipped:
                self._shipped.notify_all()

    def _maybe_snapshot(self, now: float) -> None:
        """Upload the store's published snapshot when it is newer and `snapshot_interval` has passed."""
        if now - self.snapshot_at < self.snapshot_interval or self.generation is None:
            return
        current = read_current(self.local.directory)
        if current is None or current.seq <= self.snapshot_seq or current.seq > self.head:
            return
        boundary = max((b for b in self.boundaries if b[0] <= current.seq), default=None)
        if boundary is None:
            return
        with self.local.base(lambda segment: None) as base:
            if base.seq != current.seq or base.file is None:
                return
            self._put_snapshot(layout.snapshot_key(self.generation, base.seq), base)
        manifest = SnapshotManifest(
            self.generation, base.seq, base.size, base.sha256, boundary[0], boundary[1], now, self.lease.fence
        )
        self._put_new(layout.manifest_key(self.generation, base.seq), manifest.to_bytes())
        self.snapshot_seq, self.snapshot_at = base.seq, now
        self._retain_due = self.retain is not None

    def _retain(self, now: float) -> None:
        """Delete what no kept snapshot's chain needs (`prune`), as the lease holder and only as that.

        The lease is renewed first, and again before any deletion once half of it has run out: a
        replicator whose lease was taken over gets `LeaseLost` and stops before deleting anything, and
        every deletion happens while this one's lease has at least half its life left, so never while
        another replicator holds the replica. A failed pass (the store down) is tried again next tick.
        """
        assert self.retain is not None
        self.lease.renew(now)

        def still_ours() -> None:
            moment = self.clock()
            if self.lease.due(moment):
                self.lease.renew(moment)

        deleted = prune(self.store, self.retain, now, before_delete=still_ours)
        self.objects_deleted += len(deleted)
        self._retain_due = False
        if deleted:
            log.info(
                "replica %s: retention deleted %d objects older than every kept snapshot's chain",
                self.store.url,
                len(deleted),
            )

    # -- outcomes -------------------------------------------------------------------------

    def _succeeded(self, now: float) -> None:
        self.state, self.last_error, self.last_success = "ok", None, now
        self._streak, self._failing_since, self._lease_wait = 0, None, None
        if self.head >= self.seat.durable_seq:
            self.caught_up_at = now

    def _failed(self, now: float, exc: Exception) -> None:
        self.failures += 1
        self._streak += 1
        self._failing_since = now if self._failing_since is None else self._failing_since
        self.last_error = str(exc)
        self.retry_at = now + min(self.interval * 2 ** min(self._streak, 10), 30.0)
        if self.state == "broken":
            return
        self.state = "retrying"
        log.warning("replica %s: %s (failure %d; the unshipped log is held)", self.store.url, exc, self._streak)
        held = self.held_bytes()
        if held > self.max_hold_bytes:
            self._break(f"{held} unshipped bytes were held (limit {self.max_hold_bytes})")
        elif self.sync and now - self._failing_since > self.sync_grace:
            self._break(f"synchronous answers waited {now - self._failing_since:.0f} s (limit {self.sync_grace:.0f})")

    def _break(self, why: str) -> None:
        """Give the backup up until the store answers: release the hold and the waiting answers, say so loudly."""
        self.seat.hold(None)
        self.state, self.generation = "broken", None
        log.error(
            "BACKUP BROKEN: replica %s unreachable while %s: the hold is released and the queue goes on; "
            "a new generation from a fresh snapshot begins once the store answers",
            self.store.url,
            why,
        )
        self._wake_waiters()

    def _lease_held(self, now: float, why: str) -> None:
        """Another holder's lease: wait for it to expire (a crashed writer's, say after a move to another host);
        a lease still renewed after two of its lifetimes is another live replicator, and this one stops."""
        if self._lease_wait is None:
            self._lease_wait = now
            log.warning("replica %s: %s; waiting for it to expire", self.store.url, why)
        if now - self._lease_wait > 2 * self.lease.ttl:
            self._stop_for_good(why)
        else:
            self.state, self.last_error = "waiting", why

    def _stop_for_good(self, why: str) -> None:
        self.fatal, self.state, self.last_error = why, "stopped", why
        self.seat.hold(None)
        log.error("replica %s: replication stopped: %s", self.store.url, why)
        self._wake_waiters()

    def held_bytes(self) -> int:
        """Bytes on disk in the segments the hold keeps (an estimate of the disk an outage costs)."""
        held = self.seat.held
        if held is None:
            return 0
        total = 0
        for number in self.local.segment_numbers():
            if number >= held:
                entry = self.local.directory.lstat(_wal(number))
                total += 0 if entry is None else entry.st_size
        return total

    # -- the thread and synchronous answers ----------------------------------------------

    def start(self) -> Replicator:
        """Run the thread (and, with ``sync=True``, make every answer wait for the replica)."""
        if self.sync:
            self.seat.wait_in_answers(self.wait_shipped)
        self.seat.report(self.status)
        self._thread = threading.Thread(target=self._run, name="walqueue-replicator", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        next_due = 0.0
        poll = min(self.interval, 0.05)
        while not self._stopping:
            urgent = self._wake.wait(poll)
            self._wake.clear()
            now = self.clock()
            grown = abs(self.seat.wal_bytes - self._wal_bytes_seen) >= self.trigger_bytes
            if (urgent or now >= next_due or grown) and now >= self.retry_at:
                self._wal_bytes_seen = self.seat.wal_bytes
                try:
                    self.tick()
                except Exception as exc:  # noqa: BLE001 - a bug: stop loudly, never leave answers waiting
                    log.exception("replica %s: the replicator failed", self.store.url)
                    self._stop_for_good(f"the replicator failed: {exc!r}")
                next_due = now + self.interval
            if self.fatal is not None or self.seat.closed:
                break

    def wait_shipped(self, seq: int) -> None:
        """Return once transaction `seq` is in the replica (or the backup is broken or stopped: logged)."""
        if self.head >= seq:
            return
        with self._shipped:
            while self.head < seq and self.state not in ("broken", "stopped") and not self._stopping:
                self._wake.set()
                self._shipped.wait(0.5)

    def _wake_waiters(self) -> None:
        with self._shipped:
            self._shipped.notify_all()

    def stop(self) -> None:
        """Ship what is durable one last time, release the lease and the hold, stop the thread."""
        if self.sync:
            self.seat.wait_in_answers(None)
        self.seat.report(None)
        self._stopping = True
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        # The last transactions (a closed queue's log is all durable: close drains it), unless the store is
        # known to be failing: a stop must not hang on its timeouts (the next start resumes from the replica).
        reachable = self.fatal is None and self.state not in ("retrying", "broken", "waiting")
        if reachable:
            self.tick()
        if self.lease.fence and reachable and self.state == "ok":
            self.lease.release()
        try:
            self.seat.hold(None)
        except Exception:  # noqa: BLE001 - the queue may be closed already
            pass
        self._wake_waiters()
        self.local.close()

    def status(self) -> dict[str, Any]:
        """What operators see: /metrics, the dashboard, ``walqueue backup status``."""
        now = self.clock()
        durable = self.seat.durable_seq
        lag = max(0, durable - self.head)
        return {
            "url": self.store.url,
            "state": self.state,
            "generation": self.generation,
            "fence": self.lease.fence,
            "shipped_seq": self.head,
            "durable_seq": durable,
            "lag_transactions": lag,
            "lag_seconds": 0.0 if lag == 0 or self.caught_up_at is None else max(0.0, now - self.caught_up_at),
            "last_success": self.last_success,
            "bytes_shipped": self.bytes_shipped,
            "objects_shipped": self.objects_shipped,
            "failures": self.failures,
            "objects_deleted": self.objects_deleted,
            "broken": self.state == "broken",
            "sync": self.sync,
            "last_error": self.last_error,
        }


def _same_content(key: str, stored: bytes, mine: bytes) -> bool:
    """Whether `stored` is what `mine` says, but for its upload time (a retry is cut later than the first try)."""
    if stored == mine:
        return True
    try:
        if key.endswith(".wal"):
            logs = layout.decode_log(key, stored)[0], layout.decode_log(key, mine)[0]
            return dataclasses.replace(logs[0], uploaded=0.0) == dataclasses.replace(logs[1], uploaded=0.0)
        if key.endswith(".json"):
            manifests = SnapshotManifest.from_bytes(key, stored), SnapshotManifest.from_bytes(key, mine)
            # The same snapshot and link: also under another fence (a restarted writer's, which took its lease over).
            return dataclasses.replace(manifests[0], uploaded=0.0, fence=0) == dataclasses.replace(
                manifests[1], uploaded=0.0, fence=0
            )
    except layout.ChainError:
        return False
    return False


def _intact(key: str, data: bytes) -> bool:
    try:
        layout.decode_log(key, data)
    except layout.ChainError:
        return False
    return True


def _log_entries(keys: list[str]) -> list[tuple[int, int, int, str]]:
    entries = []
    for key in keys:
        parsed = layout.parse_log_key(key)
        if parsed is not None:
            entries.append((parsed[1], parsed[2], parsed[3], key))
    return entries


def _wal(number: int) -> str:
    from walqueue.format.names import wal_name

    return wal_name(number)
