"""`walqueue-fsck --replay` agrees with opening (CONTRACT §7), over a sweep of damaged copies of one store.

The store is written by a real `Queue` and holds every kind of file: a
published CURRENT and its snapshot, an orphan snapshot and a CURRENT.tmp
left by a compaction that died before publishing, a leftover segment left
by one that died after publishing, and two live segments. Each variant
changes exactly one thing: one bit flipped or the file cut at one length
(every bit of CURRENT and every cut of it; one bit of every byte and every
cut of the live segments; a sample elsewhere, see STRIDES), one file
deleted, one WAL frame or snapshot record rewritten with a valid digest but
a meaning the state machine refuses, one frame dropped or repeated, or
CURRENT re-pointed at another snapshot or first segment.

For each variant, fsck reads one exact copy and `Queue` opens another
(`Mirror` keeps both exact while rewriting only what changed):
fsck exits 2 exactly when opening raises `CorruptStore`, 1 exactly when
opening truncates a torn tail (it reports `recover.truncate.before`, and
the file is then exactly as long as fsck said), and 0 otherwise. Any other
exception from opening fails the test.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from walqueue import CorruptStore, InjectedCrash, Queue
from walqueue.format import (
    Current,
    SnapshotReader,
    canonical_json,
    encode_frame,
    read_frames,
    write_snapshot,
)
from walqueue.format.fsck import EXIT_CORRUPT, EXIT_HEALTHY, EXIT_TORN, Report, check

Files = dict[str, bytes]
Variant = tuple[str, Files]

#: Every how many bytes a file is damaged (one bit flip, one cut), by its role. Live segments, where
#: torn tails and damaged lengths live, get every byte; the published snapshot's digest refuses any
#: change alike, so a sample shows it; files opening never reads get a sparse sample. CURRENT gets
#: every bit besides. About 5,000 variants: some 15 s of CPU.
STRIDES = {"current": 1, "live": 1, "snapshot": 8, "unread": 61}


def _crash_at(phase: str) -> Callable[[str], None]:
    """A hook that simulates the process dying at `phase`."""

    def hook(seen: str) -> None:
        if seen == phase:
            raise InjectedCrash(seen)

    return hook


def _work(q: Queue, start: int, now: int) -> None:
    """A few transactions of every op kind: puts (one with a key), a lease, an ack, a release."""
    for i in range(start, start + 3):
        q.put(f"t{i:03d}", {"i": i}, key=f"k{i}" if i % 2 else None, max_attempts=2)
    leases = q.reserve("w", now=now, lease_seconds=10, limit=2)
    q.ack(leases[0], now=now + 1)
    q.release(leases[1], now=now + 1, delay=3)


def _build_store(directory: Path) -> Files:
    with Queue(directory, sync=False, compact_bytes=None) as q:
        _work(q, 0, 10)
        q.compact()
        _work(q, 10, 20)
    # A compaction that dies once CURRENT is published: leftover segment, orphan old snapshot.
    q = Queue(directory, sync=False, compact_bytes=None, hook=_crash_at("current.published"))
    with pytest.raises(InjectedCrash):
        q.compact()
    with Queue(directory, sync=False, compact_bytes=None) as q:
        _work(q, 20, 30)
    # A compaction that dies before publishing: orphan complete snapshot, CURRENT.tmp, two live segments.
    q = Queue(directory, sync=False, compact_bytes=None, hook=_crash_at("current.written"))
    with pytest.raises(InjectedCrash):
        q.compact()
    with Queue(directory, sync=False, compact_bytes=None) as q:
        _work(q, 30, 40)
    # LOCK stays: every real store has one (empty), and opening then creates nothing.
    return {name: (directory / name).read_bytes() for name in sorted(os.listdir(directory))}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Files:
    files = _build_store(tmp_path_factory.mktemp("fsck-agreement") / "store")
    names = set(files)
    assert "CURRENT" in names and "CURRENT.tmp" in names and files["LOCK"] == b""
    assert sum(n.startswith("snapshot-") for n in names) == 3  # published, orphan before, orphan after
    assert sum(n.startswith("wal-") for n in names) == 3  # leftover + two live
    return files


# -- the variants -----------------------------------------------------------------------


def _flip(data: bytes, bit: int) -> bytes:
    out = bytearray(data)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


def _role(files: Files, name: str) -> str:
    """`current`, `snapshot` (the published one), `live` (a live segment) or `unread` (never read by opening)."""
    if name == "CURRENT":
        return "current"
    if name == _decode_current(files).snapshot:
        return "snapshot"
    return "live" if name in _live_segments(files) else "unread"


def _sampled_bytes(files: Files, name: str) -> range:
    """Which byte offsets of `name` the sweep damages (see STRIDES)."""
    return range(0, len(files[name]), STRIDES[_role(files, name)])


def _bit_flips(files: Files) -> Iterator[Variant]:
    for name, data in files.items():
        if name == "CURRENT":
            bits: Iterable[int] = range(len(data) * 8)
        else:
            bits = (8 * i + i % 8 for i in _sampled_bytes(files, name))
        for bit in bits:
            yield f"{name} bit {bit}", {**files, name: _flip(data, bit)}


def _truncations(files: Files) -> Iterator[Variant]:
    for name, data in files.items():
        for size in _sampled_bytes(files, name):
            yield f"{name} cut to {size}", {**files, name: data[:size]}


def _deletions(files: Files) -> Iterator[Variant]:
    for name in files:
        yield f"{name} deleted", {k: v for k, v in files.items() if k != name}


def _split_frames(path: Path) -> list[tuple[bytes, Any]]:
    """(raw bytes, decoded value) of every frame of a healthy file, read with the format layer's reader."""
    data = path.read_bytes()
    with open(path, "rb") as file:
        return [(data[f.offset : f.offset + f.size], f.value) for f in read_frames(file, str(path))]


def _live_segments(files: Files) -> list[str]:
    current = _decode_current(files)
    return sorted(n for n in files if n.startswith("wal-") and int(n[4:-4]) >= current.wal)


def _decode_current(files: Files) -> Current:
    data = json.loads(files["CURRENT"][4:-32])
    return Current(data["snapshot"], data["seq"], data["size"], data["sha256"], data["wal"])


def _frame_edits(files: Files, tmp: Path) -> Iterator[Variant]:
    """Valid frames with a wrong meaning, dropped frames and repeated frames in the live segments."""
    for name in _live_segments(files):
        path = tmp / name
        path.write_bytes(files[name])
        frames = _split_frames(path)
        raws = [raw for raw, _ in frames]
        for index, (_, value) in enumerate(frames):
            for label, edited in _semantic_edits(value):
                body = raws[:index] + [encode_frame(edited)] + raws[index + 1 :]
                yield f"{name} frame {index} {label}", {**files, name: b"".join(body)}
            dropped = raws[:index] + raws[index + 1 :]
            yield f"{name} frame {index} dropped", {**files, name: b"".join(dropped)}
            repeated = raws[: index + 1] + raws[index:]
            yield f"{name} frame {index} repeated", {**files, name: b"".join(repeated)}


def _semantic_edits(tx: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Transactions with a valid envelope that the state machine may refuse."""
    first = tx["ops"][0]
    if "generation" in first:
        yield "generation+1", {**tx, "ops": [{**first, "generation": first["generation"] + 1}, *tx["ops"][1:]]}
    yield "unknown task", {**tx, "ops": [{**first, "task": "no-such-task"}, *tx["ops"][1:]]}
    yield "ops doubled", {**tx, "ops": tx["ops"] * 2}


def _snapshot_bytes(seq: int, records: list[dict[str, Any]], tmp: Path) -> bytes:
    path = tmp / "edited.snap"
    write_snapshot(path, seq, len(records), [canonical_json(r) for r in records])
    return path.read_bytes()


def _current_bytes(snapshot: str, data: bytes, wal: int) -> bytes:
    seq = int(snapshot[len("snapshot-") : -len(".snap")])
    return encode_frame(Current(snapshot, seq, len(data), hashlib.sha256(data).hexdigest(), wal).to_json())


def _record_edits(files: Files, tmp: Path) -> Iterator[Variant]:
    """The published snapshot rewritten (CURRENT updated to its new size and digest) with one record changed."""
    current = _decode_current(files)
    path = tmp / current.snapshot
    path.write_bytes(files[current.snapshot])
    with SnapshotReader(path) as reader:
        records = list(reader.records())
    edits: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
        "attempts+1": lambda r: {**r, "attempts": r["attempts"] + 1},
        "both+1": lambda r: {**r, "attempts": r["attempts"] + 1, "generation": r["generation"] + 1},
        "status dead": lambda r: {**r, "status": "dead", "worker": None, "deadline": None},
        "payload dropped": lambda r: {**r, "payload": None},
    }
    for index in range(len(records)):
        for label, edit in edits.items():
            edited = [*records[:index], edit(records[index]), *records[index + 1 :]]
            data = _snapshot_bytes(current.seq, edited, tmp)
            new_current = _current_bytes(current.snapshot, data, current.wal)
            yield f"snapshot record {index} {label}", {**files, current.snapshot: data, "CURRENT": new_current}


def _repointed_currents(files: Files) -> Iterator[Variant]:
    """CURRENT naming each snapshot present, with every first live segment from 1 to one past the newest."""
    newest = max(int(n[4:-4]) for n in files if n.startswith("wal-"))
    for snapshot in (n for n in files if n.startswith("snapshot-")):
        for wal in range(1, newest + 2):
            yield (
                f"CURRENT -> {snapshot} wal {wal}",
                {**files, "CURRENT": _current_bytes(snapshot, files[snapshot], wal)},
            )


def _variants(files: Files, tmp: Path) -> Iterator[Variant]:
    yield "unchanged", files
    yield from _bit_flips(files)
    yield from _truncations(files)
    yield from _deletions(files)
    yield from _frame_edits(files, tmp)
    yield from _record_edits(files, tmp)
    yield from _repointed_currents(files)


# -- running one variant both ways -------------------------------------------------------


class Mirror:
    """A directory kept equal to a variant's files, rewriting only what differs from what is on disk.

    Rewriting a whole store per variant would cost most of the sweep's time
    (opening a file is the expensive system call here); writing only the
    changed file gives the same bytes. `settle` then compares every entry's
    name, size and mtime with what was written and forgets whatever a run
    changed (opening may cut a torn tail or create a first segment), so each
    run starts from an exact copy of its variant. (Opening only ever
    truncates or creates files, which size and listing reveal.)
    """

    def __init__(self, directory: Path) -> None:
        directory.mkdir()
        self.directory = directory
        self.on_disk: dict[str, tuple[bytes, os.stat_result]] = {}

    def become(self, files: Files) -> None:
        for name in set(self.on_disk) - set(files):
            (self.directory / name).unlink()
            del self.on_disk[name]
        for name, data in files.items():
            known = self.on_disk.get(name)
            if known is None or known[0] != data:
                path = self.directory / name
                path.write_bytes(data)
                self.on_disk[name] = (data, path.stat())

    def settle(self) -> list[str]:
        """Return (and forget) every entry a run created, deleted or changed since `become`."""
        changed = []
        present = os.listdir(self.directory)
        for name in present:
            known = self.on_disk.get(name)
            path = self.directory / name
            if known is None:
                path.unlink()
                changed.append(name)
                continue
            st = path.stat()
            if (st.st_size, st.st_mtime_ns, st.st_ino) != (known[1].st_size, known[1].st_mtime_ns, known[1].st_ino):
                changed.append(name)
                del self.on_disk[name]
        for name in set(self.on_disk) - set(present):
            changed.append(name)
            del self.on_disk[name]
        return sorted(changed)


def _open_outcome(directory: Path) -> tuple[int, list[str]]:
    """What opening does: 2 CorruptStore, 1 truncated a torn tail, 0 opened as is (with the phases seen)."""
    phases: list[str] = []
    try:
        queue = Queue(directory, sync=False, compact_bytes=None, hook=phases.append)
    except CorruptStore:
        return EXIT_CORRUPT, phases
    queue.close()
    return (EXIT_TORN if "recover.truncate.before" in phases else EXIT_HEALTHY), phases


def _compare(label: str, files: Files, fsck_copy: Mirror, open_copy: Mirror) -> tuple[int, str | None]:
    """Run fsck and opening on two exact copies of one variant: fsck's verdict, and any disagreement."""
    fsck_copy.become(files)
    open_copy.become(files)
    report = check(fsck_copy.directory, replay=True)
    changed = fsck_copy.settle()
    if changed:
        return report.exit_code, f"{label}: fsck changed {changed}"
    problem = _disagreement(label, files, report, open_copy.directory)
    open_copy.settle()
    return report.exit_code, problem


def _disagreement(label: str, files: Files, report: Report, directory: Path) -> str | None:
    try:
        opened, phases = _open_outcome(directory)
    except Exception as exc:  # anything but CorruptStore is a failure of its own
        return f"{label}: opening raised {type(exc).__name__}: {exc}"
    if report.exit_code != opened:
        return f"{label}: fsck exits {report.exit_code} ({report.findings}), opening gives {opened}"
    if opened == EXIT_TORN:
        if phases != ["recover.truncate.before", "recover.truncate.after"]:
            return f"{label}: opening called {phases}"
        [torn] = [f for f in report.findings if f.kind == "torn-tail"]
        assert torn.file is not None and torn.offset is not None and torn.bytes is not None
        if (directory / torn.file).stat().st_size != torn.offset:
            return f"{label}: fsck said {torn.file} would be cut at {torn.offset}, opening cut elsewhere"
        if len(files[torn.file]) - torn.offset != torn.bytes:
            return f"{label}: fsck said {torn.bytes} bytes would be cut"
    elif phases:
        return f"{label}: opening called {phases}"
    return None


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A directory for the sweep's copies, in memory (/dev/shm) where there is one.

    The sweep rewrites and truncates small files thousands of times; on a
    disk file system each truncation is a journal transaction, which is most
    of the run's time and none of its meaning.
    """
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK):
        with tempfile.TemporaryDirectory(dir=shm, prefix="walqueue-fsck-") as name:
            yield Path(name)
    else:
        yield tmp_path


def test_fsck_replay_exits_exactly_as_opening_behaves(store: Files, scratch: Path) -> None:
    edits = scratch / "edits"
    edits.mkdir()
    fsck_copy, open_copy = Mirror(scratch / "fsck"), Mirror(scratch / "open")
    outcomes = {EXIT_HEALTHY: 0, EXIT_TORN: 0, EXIT_CORRUPT: 0}
    failures: list[str] = []
    for label, files in _variants(store, edits):
        verdict, problem = _compare(label, files, fsck_copy, open_copy)
        outcomes[verdict] += 1
        if problem is not None:
            failures.append(problem)
    total = sum(outcomes.values())
    assert not failures, f"{len(failures)} of {total} variants disagree:\n" + "\n".join(failures[:20])
    # The sweep really exercises all three verdicts.
    assert all(outcomes.values()), outcomes
