"""`walqueue-fsck --replay` agrees with opening (SPEC §7), over a sweep of damaged copies of one store.

The store is written by a real `Queue` and holds every kind of file: a
published CURRENT and its snapshot, an orphan snapshot and a CURRENT.tmp
left by a compaction that died before publishing, a leftover segment left
by one that died after publishing, and two live segments. Each variant
changes exactly one thing: one bit flipped (every bit of CURRENT, one bit
of every byte of every other file), one file cut at every length, one file
deleted, one WAL frame or snapshot record rewritten with a valid digest but
a meaning the state machine refuses, one frame dropped or repeated, or
CURRENT re-pointed at another snapshot or first segment.

For each variant, fsck reads one fresh copy and `Queue` opens another:
fsck exits 2 exactly when opening raises `CorruptStore`, 1 exactly when
opening truncates a torn tail (it reports `recover.truncate.before`, and
the file is then exactly as long as fsck said), and 0 otherwise. Any other
exception from opening fails the test.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
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


def _crash_at(phase: str) -> Any:
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
    (directory / "LOCK").unlink()
    return {name: (directory / name).read_bytes() for name in sorted(os.listdir(directory))}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Files:
    files = _build_store(tmp_path_factory.mktemp("fsck-agreement") / "store")
    names = set(files)
    assert "CURRENT" in names and "CURRENT.tmp" in names
    assert sum(n.startswith("snapshot-") for n in names) == 3  # published, orphan before, orphan after
    assert sum(n.startswith("wal-") for n in names) == 3  # leftover + two live
    return files


# -- the variants -----------------------------------------------------------------------


def _flip(data: bytes, bit: int) -> bytes:
    out = bytearray(data)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


def _bit_flips(files: Files) -> Iterator[Variant]:
    for name, data in files.items():
        bits = range(len(data) * 8) if name == "CURRENT" else (8 * i + i % 8 for i in range(len(data)))
        for bit in bits:
            yield f"{name} bit {bit}", {**files, name: _flip(data, bit)}


def _truncations(files: Files) -> Iterator[Variant]:
    for name, data in files.items():
        for size in range(len(data)):
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
    edits = {
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


def _materialize(files: Files, directory: Path) -> None:
    directory.mkdir()
    for name, data in files.items():
        (directory / name).write_bytes(data)


def _open_outcome(directory: Path) -> tuple[int, list[str]]:
    """What opening does: 2 CorruptStore, 1 truncated a torn tail, 0 opened as is (with the phases seen)."""
    phases: list[str] = []
    try:
        queue = Queue(directory, sync=False, compact_bytes=None, hook=phases.append)
    except CorruptStore:
        return EXIT_CORRUPT, phases
    queue.close()
    return (EXIT_TORN if "recover.truncate.before" in phases else EXIT_HEALTHY), phases


def _compare(label: str, files: Files, root: Path) -> tuple[int, str | None]:
    """Run fsck and opening on two fresh copies of one variant: fsck's verdict, and any disagreement."""
    for name in ("fsck", "open"):
        if (root / name).exists():
            shutil.rmtree(root / name)
    _materialize(files, root / "fsck")
    _materialize(files, root / "open")
    report = check(root / "fsck", replay=True)
    return report.exit_code, _disagreement(label, files, report, root / "open")


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


def test_fsck_replay_exits_exactly_as_opening_behaves(store: Files, tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    outcomes: dict[int, int] = {EXIT_HEALTHY: 0, EXIT_TORN: 0, EXIT_CORRUPT: 0}
    failures: list[str] = []
    count = 0
    for label, files in _variants(store, scratch):
        count += 1
        verdict, problem = _compare(label, files, tmp_path)
        outcomes[verdict] += 1
        if problem is not None:
            failures.append(problem)
    assert not failures, f"{len(failures)} of {count} variants disagree:\n" + "\n".join(failures[:20])
    # The sweep really exercises all three verdicts.
    assert all(outcomes.values()), outcomes
