"""Restore: a plan (snapshot + unbroken chain), its execution into a new directory, retention.

The plan is pure reading: the newest generation whose snapshot is at or
before the target (``to_seq``, or ``to_time``: upload times recorded in the
replica's objects, by the replicator's clock), then the log objects from
that snapshot's boundary on, resolved by name (`layout.resolve_chain`) and
checked by digest as they are read. A gap or a mismatch is `ChainError`,
named; nothing is written then.

The new store is written into a temporary sibling of the target and renamed
into place at the end: a restore that fails leaves nothing at the target,
and an existing store (any non-empty directory) is never overwritten.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field

from walqueue.backup import layout
from walqueue.backup.layout import ChainError, LogObject, SnapshotManifest
from walqueue.backup.objectstore import Tally
from walqueue.backup.stores import ObjectStore
from walqueue.format.current import Current, publish_current, write_current_tmp
from walqueue.format.directory import StoreDirectory
from walqueue.format.errors import WalQueueError
from walqueue.format.frame import DIGEST_BYTES, LENGTH_BYTES, decode_frame
from walqueue.format.names import snapshot_name, wal_name
from walqueue.format.transaction import transaction_seq

__all__ = ["Plan", "TargetExists", "execute", "make_plan", "prune"]


class TargetExists(WalQueueError):
    """The restore's target holds something already: a restore never overwrites."""


@dataclass(slots=True)
class Plan:
    """What a restore will do: one snapshot, then these log objects, up to `target`."""

    generation: int
    snapshot: SnapshotManifest
    objects: list[LogObject] = field(default_factory=list)
    target: int = 0
    head: int = 0

    def describe(self) -> list[str]:
        lines = [
            f"generation {self.generation}: the replica's head is transaction {self.head}",
            f"snapshot at transaction {self.snapshot.seq} ({self.snapshot.size} bytes, "
            f"uploaded {self.snapshot.uploaded:.3f})",
        ]
        for obj in self.objects:
            lines.append(
                f"log {obj.first}..{obj.last} ({obj.size} bytes, fence {obj.fence}, uploaded {obj.uploaded:.3f})"
            )
        lines.append(f"restores through transaction {self.target}")
        return lines


def _manifests(store: ObjectStore, keys: list[str]) -> list[SnapshotManifest]:
    found = []
    for key in keys:
        if layout.parse_manifest_key(key) is not None:
            got = store.get(key)
            if got is not None:
                found.append(SnapshotManifest.from_bytes(key, got[0]))
    return sorted(found, key=lambda m: m.seq)


def make_plan(store: ObjectStore, *, to_seq: int | None = None, to_time: float | None = None) -> Plan:
    """The restore's plan, or `ChainError` naming why none can be made (a gap, no snapshot early enough)."""
    keys = store.list(layout.GENERATIONS)
    reasons: list[str] = []
    for generation in reversed(layout.generations(keys)):
        prefix = layout.generation_prefix(generation)
        own = [key for key in keys if key.startswith(prefix)]
        manifests = [
            m
            for m in _manifests(store, own)
            if (to_seq is None or m.seq <= to_seq) and (to_time is None or m.uploaded <= to_time)
        ]
        if not manifests:
            reasons.append(f"generation {generation} has no snapshot at or before the target")
            continue
        snapshot = manifests[-1]
        entries = [(p[1], p[2], p[3], key) for key in own if (p := layout.parse_log_key(key)) is not None]
        headers: dict[str, LogObject] = {}
        chain = layout.resolve_chain(snapshot.boundary, snapshot.link, entries, _reader(store, headers))
        head = layout.head_of(snapshot.boundary, chain)
        if to_seq is not None and to_seq > head:
            reasons.append(f"generation {generation} ends at transaction {head}, before {to_seq}")
            continue
        plan = Plan(generation, snapshot, head=head)
        _fill(plan, [headers[key] for key in chain], to_seq, to_time)
        return plan
    raise ChainError("no restore is possible: " + ("; ".join(reasons) or "the replica holds no generation"))


def _reader(store: ObjectStore, headers: dict[str, LogObject]) -> Callable[[str, str], str | None]:
    """The chain's check of a candidate: its digest if it is intact and chained to `link`, else None.

    The headers of the objects it accepted are kept in `headers` (the plan's; the frames are read again,
    one object at a time, when the restore writes them).
    """

    def read(key: str, link: str) -> str | None:
        try:
            header, _ = _read_log(store, key, link)
        except ChainError:
            return None
        headers[key] = header
        return header.digest

    return read


def _fill(plan: Plan, chain: list[LogObject], to_seq: int | None, to_time: float | None) -> None:
    """Take the chain's objects (digests checked) up to the target; set the plan's objects and target."""
    target = plan.snapshot.seq
    for header in chain:
        if to_time is not None and header.uploaded > to_time:
            break
        plan.objects.append(header)
        target = header.last
        if to_seq is not None and header.last >= to_seq:
            target = to_seq
            break
    plan.target = max(target, plan.snapshot.seq)


def _read_log(store: ObjectStore, key: str, link: str) -> tuple[LogObject, bytes]:
    got = store.get(key)
    if got is None:
        raise ChainError(f"{key} vanished while the restore read it")
    header, frames = layout.decode_log(key, got[0])
    if header.prev != link:
        raise ChainError(f"{key} does not chain to the object before it (digest mismatch)")
    return header, frames


def execute(store: ObjectStore, plan: Plan, target: str) -> None:
    """Write the plan's store at `target` (which must not exist, or be empty), atomically."""
    target = os.path.abspath(target)
    if os.path.lexists(target) and (not os.path.isdir(target) or os.path.islink(target) or os.listdir(target)):
        raise TargetExists(f"{target} exists and is not an empty directory: a restore never overwrites a store")
    parent = os.path.dirname(target)
    temp = os.path.join(parent, f".{os.path.basename(target)}.restoring-{os.getpid()}")
    os.mkdir(temp, 0o700)
    try:
        _write_store(store, plan, temp)
        if os.path.isdir(target):
            os.rmdir(target)  # empty, checked above
        os.rename(temp, target)
        _fsync_dir(parent)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise


def _write_store(store: ObjectStore, plan: Plan, path: str) -> None:
    directory = StoreDirectory.open(path)
    try:
        snap = plan.snapshot
        if snap.sha256 is not None:
            _stream_snapshot(store, plan, directory)
        fd = directory.create(wal_name(1))
        try:
            link = snap.link
            for header in plan.objects:
                _, frames = _read_log(store, header.key, link)
                link = header.digest
                _write_all(fd, _cut(frames, plan.target) if header.last > plan.target else frames)
            os.fsync(fd)
        finally:
            os.close(fd)
        if snap.sha256 is not None:
            current = Current(snapshot_name(snap.seq), snap.seq, snap.size, snap.sha256, 1)
            write_current_tmp(directory, current)
            publish_current(directory)
        directory.fsync()
    finally:
        directory.close()


def _cut(frames: bytes, target: int) -> bytes:
    """The frames of transactions up to `target`, cut at a frame boundary (each frame decoded, checked)."""
    end = 0
    while end < len(frames):
        size = LENGTH_BYTES + int.from_bytes(frames[end : end + LENGTH_BYTES], "big") + DIGEST_BYTES
        value = decode_frame(frames[end : end + size], "log object")
        if transaction_seq(value, "log object", end) > target:
            break
        end += size
    return frames[:end]


def _stream_snapshot(store: ObjectStore, plan: Plan, directory: StoreDirectory) -> None:
    """Copy the plan's snapshot into the new store piece by piece, its size and digest checked as it goes.

    Memory stays one piece whatever the snapshot's size; a snapshot that is missing or does not match its
    manifest is `ChainError` (and the half-built store, a temporary directory, is removed by `execute`).
    """
    snap = plan.snapshot
    fd = directory.create(snapshot_name(snap.seq))
    try:
        tally = Tally(lambda piece: _write_all(fd, piece))
        found = store.read_into(layout.snapshot_key(plan.generation, snap.seq), tally)
        if not found or not tally.matches(snap.size, snap.sha256):
            raise ChainError(
                f"the snapshot at transaction {snap.seq} of generation {plan.generation} is missing or damaged"
            )
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def prune(
    store: ObjectStore,
    keep_seconds: float,
    now: float,
    *,
    dry_run: bool = False,
    before_delete: Callable[[], None] | None = None,
) -> list[str]:
    """Delete what no kept snapshot's chain needs; return the deleted (or, dry, deletable) keys.

    Kept: every snapshot uploaded within `keep_seconds`, and the newest one
    before that (a restore to the window's first moment starts there); the
    newest generation's newest snapshot always. A kept snapshot needs its
    own file and every log object after its boundary; everything older in
    its generation, and every older generation without a kept snapshot, goes.

    `before_delete` runs before each deletion: the replicator's check that
    it still holds the lease (it raises, and the rest stays, if not).
    """
    keys = store.list(layout.GENERATIONS)
    every = []
    for generation in layout.generations(keys):
        prefix = layout.generation_prefix(generation)
        every += [(generation, m) for m in _manifests(store, [k for k in keys if k.startswith(prefix)])]
    if not every:
        return []
    cutoff = now - keep_seconds
    kept = [i for i, (_, m) in enumerate(every) if m.uploaded >= cutoff]
    older = [i for i, (_, m) in enumerate(every) if m.uploaded < cutoff]
    first_kept = min(kept + older[-1:] + [len(every) - 1])
    oldest_generation, oldest = every[first_kept]
    doomed: list[str] = []
    for key in keys:
        found = layout.generations([key])
        if not found:
            continue  # not an object of ours: left alone
        generation = found[0]
        if generation < oldest_generation:
            doomed.append(key)
        elif generation == oldest_generation:
            parsed_log = layout.parse_log_key(key)
            parsed_manifest = layout.parse_manifest_key(key)
            snap_seq = _snap_seq(key)
            if parsed_log is not None and parsed_log[2] <= oldest.boundary:
                doomed.append(key)
            elif (parsed_manifest is not None and parsed_manifest[1] < oldest.seq) or (
                snap_seq is not None and snap_seq < oldest.seq
            ):
                doomed.append(key)
    doomed.sort(key=lambda k: (not k.endswith(".json"), k))  # manifests before the files they name
    if not dry_run:
        for key in doomed:
            if before_delete is not None:
                before_delete()
            store.delete(key)
    return doomed


def _snap_seq(key: str) -> int | None:
    if key.endswith(".snap") and "/snapshots/" in key:
        stem = key.rsplit("/", 1)[1][: -len(".snap")]
        return int(stem) if stem.isdigit() else None
    return None
