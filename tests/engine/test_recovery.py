"""CONTRACT §4 recovery, through the public API and crafted bytes.

- Restart equivalence: after random workloads with compaction at random
  points, reopening gives every read and every later answer the model gives.
- A torn tail of the newest segment is truncated on open (phases
  `recover.truncate.*` exactly once each, no other phase) and the state is
  the one before the torn write.
- Everything else is `CorruptStore`, with `.path`, `.offset` and `.reason`
  naming the damage, and the failed open writes nothing and keeps no lock:
  a bad CURRENT, a missing or altered snapshot (never a fallback to another),
  a damaged sealed segment, a gap or repeat in sequences or segment numbers,
  a complete frame with a bad length, digest, JSON or transaction.
- What is never authoritative is ignored: orphan snapshots, leftover
  segments below CURRENT's "wal" (never re-applied; deleted by the next
  compaction, not by opening), `*.tmp` files.
"""

from __future__ import annotations

import hashlib
import random
import shutil
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from model import Model, directory_digest, read_frames, render, view
from walqueue import CorruptStore, InjectedCrash, Lease, Queue, StaleLease
from walqueue.format import encode_frame

TRUNCATE_PHASES = ["recover.truncate.before", "recover.truncate.after"]


def wal(n: int) -> str:
    return f"wal-{n:020d}.log"


def snap(seq: int) -> str:
    return f"snapshot-{seq:020d}.snap"


def segments(qdir: Path) -> list[Path]:
    return sorted(qdir.glob("wal-*.log"))


def raw_frame(body: bytes) -> bytes:
    """A frame around arbitrary body bytes (a valid digest even for invalid JSON)."""
    return struct.pack(">I", len(body)) + body + hashlib.sha256(body).digest()


class Phases:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def __call__(self, phase: str) -> None:
        self.seen.append(phase)


# ---------------------------------------------------------------------------
# a simple valid workload, applied to a queue and the model in lockstep


class Workload:
    """Valid random operations (fresh ids, held tokens, identical retries), compared call by call with the model."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.model = Model()
        self.now = 0
        self.counter = 0
        self.leases: list[Lease] = []
        self.puts: list[tuple[str, dict[str, Any], dict[str, Any]]] = []

    def _new_id(self) -> str:
        self.counter += 1
        return self.rng.choice(["t", "task-", "é", "Z"]) + str(self.counter)

    def _put(self, q: Queue, task_id: str, payload: dict[str, Any], kwargs: dict[str, Any]) -> None:
        assert q.put(task_id, payload, **kwargs) == self.model.put(task_id, payload, **kwargs) == task_id
        assert q.last_seq == self.model.last_seq

    def step(self, q: Queue) -> None:
        rng, model = self.rng, self.model
        roll = rng.random()
        if roll < 0.3:
            task_id = self._new_id()
            payload = {"i": self.counter, "f": rng.random(), "l": [True, None]}
            kwargs: dict[str, Any] = {"available_at": rng.randrange(self.now + 5), "max_attempts": rng.randint(1, 3)}
            if rng.random() < 0.3:
                kwargs["key"] = "k" + task_id
            self.puts.append((task_id, payload, kwargs))
            self._put(q, task_id, payload, kwargs)
        elif roll < 0.4:
            items = [{"task_id": self._new_id(), "payload": {"n": n}} for n in range(rng.randrange(4))]
            self.puts.extend((item["task_id"], item["payload"], {}) for item in items)
            assert q.put_many(items) == model.put_many(items)
        elif roll < 0.45 and self.puts:
            self._put(q, *rng.choice(self.puts))  # an identical retry, whatever the status: no frame
        elif roll < 0.7:
            self.now += rng.randint(0, 4)
            worker = rng.choice(["w1", "w2"])
            lease_seconds, limit = rng.randint(1, 8), rng.randint(1, 3)
            got = q.reserve(worker, now=self.now, lease_seconds=lease_seconds, limit=limit)
            expected = model.reserve(worker, now=self.now, lease_seconds=lease_seconds, limit=limit)
            assert render(got) == render(expected)
            self.leases.extend(got)
        elif self.leases:
            lease = self.leases.pop(rng.randrange(len(self.leases)))
            now = max(0, lease.deadline - rng.randint(-1, 4))  # sometimes past the deadline: stale
            delay = rng.randint(0, 3) if rng.random() < 0.5 else None
            outcomes = []
            for target in (q, model):
                try:
                    if delay is None:
                        target.ack(lease, now=now)
                    else:
                        target.release(lease, now=now, delay=delay)
                    outcomes.append("ok")
                except StaleLease:
                    outcomes.append("stale")
            assert outcomes[0] == outcomes[1]
        assert q.last_seq == model.last_seq


def build(qdir: Path, seed: int = 0, steps: int = 40, *, compact_at: tuple[int, ...] = ()) -> Workload:
    """Run a workload on a fresh queue (compact() at the given steps) and close it."""
    work = Workload(seed)
    with Queue(qdir, sync=False, compact_bytes=None) as q:
        for i in range(steps):
            if i in compact_at:
                q.compact()
            work.step(q)
        assert view(q) == view(work.model)
    return work


def reopen_view(qdir: Path) -> dict[str, Any]:
    with Queue(qdir, sync=False) as q:
        return view(q)


def expect_corrupt(qdir: Path) -> CorruptStore:
    """Opening raises CorruptStore, writes nothing, and keeps no lock."""
    before = directory_digest(qdir)
    with pytest.raises(CorruptStore) as info:
        Queue(qdir, sync=False)
    assert directory_digest(qdir) == before, "a failed open changed the directory"
    error = info.value
    assert isinstance(error.reason, str) and error.reason
    assert error.offset is None or (type(error.offset) is int and error.offset >= 0)
    with pytest.raises(CorruptStore):  # the lock was released: the same error again, not DirectoryLocked
        Queue(qdir, sync=False)
    return error


def assert_names(error: CorruptStore, qdir: Path, *names: str) -> None:
    assert error.path is not None
    assert Path(error.path).name in names, (error.path, names)
    assert Path(error.path).parent.resolve() == qdir.resolve()


def compacted(qdir: Path, seed: int = 1) -> Workload:
    """A store with CURRENT, its snapshot and a non-empty live segment after it."""
    work = build(qdir, seed, steps=30, compact_at=(20,))
    assert (qdir / "CURRENT").exists()
    with Queue(qdir, sync=False, compact_bytes=None) as q:
        q.put("after-snapshot", {"x": 1})
        work.model.put("after-snapshot", {"x": 1})
    return work


def current_record(qdir: Path) -> dict[str, Any]:
    [(_, record)] = read_frames(qdir / "CURRENT")
    return record


def write_current(qdir: Path, record: dict[str, Any]) -> None:
    (qdir / "CURRENT").write_bytes(encode_frame(record))


def with_segments(qdir: Path, count: int) -> Model:
    """A store without CURRENT and with `count` live segments, each holding frames.

    Made the way a crash makes it: compaction dies right after rotating the WAL.
    """
    model = Model()
    for n in range(count):
        hook_armed = n < count - 1
        q = Queue(qdir, sync=False, hook=_crash_at("wal.rotate.after"), compact_bytes=None)
        for i in range(3):
            task_id = f"s{n}-{i}"
            q.put(task_id, {"n": n, "i": i})
            model.put(task_id, {"n": n, "i": i})
        leases = q.reserve("w", now=n, lease_seconds=5)
        model.reserve("w", now=n, lease_seconds=5)
        q.ack(leases[0], now=n)
        model.ack(leases[0], now=n)
        if hook_armed:
            with pytest.raises(InjectedCrash):
                q.compact()
        q.close()
    assert not (qdir / "CURRENT").exists()
    assert [p.name for p in segments(qdir)] == [wal(i) for i in range(1, count + 1)]
    assert reopen_view(qdir) == view(model)
    return model


# ---------------------------------------------------------------------------
# restart equivalence


@pytest.mark.parametrize("seed", range(5))
def test_restart_is_equivalent_after_random_workloads_with_compaction_at_random_points(
    tmp_path: Path, seed: int
) -> None:
    qdir = tmp_path / "q"
    rng = random.Random(10_000 + seed)
    work = Workload(seed)
    q = Queue(qdir, sync=False, compact_bytes=rng.choice([None, 2000]))
    try:
        for _ in range(250):
            roll = rng.random()
            if roll < 0.05:
                q.compact()
                assert q.stats()["wal_bytes"] == 0
            elif roll < 0.10:
                q.close()
                q = Queue(qdir, sync=False, compact_bytes=rng.choice([None, 2000]))
                assert view(q) == view(work.model)
            work.step(q)  # every later answer is compared with the model
        assert view(q) == view(work.model)
    finally:
        q.close()
    assert reopen_view(qdir) == view(work.model)


def test_restart_with_sync_true_is_equivalent(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    work = Workload(99)
    for round_ in range(3):
        with Queue(qdir, sync=True, compact_bytes=1500) as q:
            assert view(q) == view(work.model)
            for _ in range(25):
                work.step(q)
            if round_ == 1:
                q.compact()
    assert reopen_view(qdir) == view(work.model)


def test_opening_a_healthy_store_calls_no_phase_and_writes_nothing(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    compacted(qdir)
    before = directory_digest(qdir)
    hook = Phases()
    with Queue(qdir, sync=False, hook=hook) as q:
        q.stats()
    assert hook.seen == []
    assert directory_digest(qdir) == before


def test_generations_survive_snapshot_and_restart(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    with Queue(qdir, sync=False) as q:
        q.put("t", {"n": 1})
        [first] = q.reserve("w", now=0, lease_seconds=10)
        q.release(first, now=1)
        [second] = q.reserve("w", now=1, lease_seconds=10)
        q.compact()
    with Queue(qdir, sync=False) as q:
        with pytest.raises(StaleLease):
            q.ack(first, now=2)  # an old token stays stale after restart
        q.release(second, now=2)
        q.compact()
    with Queue(qdir, sync=False) as q:
        with pytest.raises(StaleLease):
            q.ack(second, now=3)
        [third] = q.reserve("w", now=3, lease_seconds=10)
        assert (third.generation, third.attempts) == (3, 3)
        task = q.get("t")
        assert task is not None and (task.generation, task.attempts) == (3, 3)


def test_a_lease_survives_restart_with_its_durable_deadline(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    with Queue(qdir, sync=False) as q:
        q.put("t", {})
        [lease] = q.reserve("w", now=0, lease_seconds=10)
        q.compact()
    with Queue(qdir, sync=False) as q:
        with pytest.raises(StaleLease):
            q.ack(lease, now=10)
        q.ack(lease, now=9)


# ---------------------------------------------------------------------------
# torn tails


def _next_put_frame(seq: int) -> bytes:
    return encode_frame(
        {
            "seq": seq,
            "ops": [
                {"op": "put", "task": "torn", "key": "torn", "payload": {"x": 1}, "available_at": 0, "max_attempts": 3}
            ],
        }
    )


@pytest.mark.parametrize("compact", [False, True], ids=["no-current", "after-compaction"])
@pytest.mark.parametrize("cut", [1, 2, 3, 4, 5, 20, -33, -1], ids=lambda c: f"cut{c}")
def test_a_torn_tail_is_truncated_on_open_and_the_state_is_unchanged(tmp_path: Path, compact: bool, cut: int) -> None:
    qdir = tmp_path / "q"
    work = compacted(qdir) if compact else build(qdir, seed=3, steps=20)
    newest = segments(qdir)[-1]
    size = newest.stat().st_size
    frame = _next_put_frame(work.model.last_seq + 1)
    torn = frame[:cut]
    assert 0 < len(torn) < len(frame)
    with newest.open("ab") as f:
        f.write(torn)
    hook = Phases()
    with Queue(qdir, sync=False, hook=hook) as q:
        assert hook.seen == TRUNCATE_PHASES
        assert newest.stat().st_size == size
        assert view(q) == view(work.model)
        assert q.get("torn") is None
        q.put("next", {})
        assert q.last_seq == work.model.last_seq + 1
    hook = Phases()
    with Queue(qdir, sync=False, hook=hook) as q:
        assert hook.seen == []
        assert q.get("next") is not None


def test_a_torn_tail_in_an_empty_newest_segment_is_truncated(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    work = build(qdir, seed=4, steps=10, compact_at=(9,))
    with Queue(qdir, sync=False) as q:
        q.compact()  # now the newest segment is empty
    newest = segments(qdir)[-1]
    assert newest.stat().st_size == 0
    newest.write_bytes(b"\x00")
    hook = Phases()
    with Queue(qdir, sync=False, hook=hook) as q:
        assert hook.seen == TRUNCATE_PHASES
        assert view(q) == view(work.model)
    assert newest.stat().st_size == 0


def test_a_crash_in_the_middle_of_a_frame_leaves_a_tail_that_opening_cuts(tmp_path: Path) -> None:
    qdir = tmp_path / "q"

    def hook(phase: str) -> None:
        if phase == "wal.append.partial":
            raise InjectedCrash(phase)

    with Queue(qdir, sync=False) as q:
        q.put("a", {"n": 1})
        before = view(q)
    q = Queue(qdir, sync=False, hook=hook)
    with pytest.raises(InjectedCrash):
        q.put("b", {"n": 2})
    seen = Phases()
    with Queue(qdir, sync=False, hook=seen) as again:
        assert seen.seen == TRUNCATE_PHASES
        assert view(again) == before  # rule 6: an incomplete frame never comes back


def test_a_truncated_transaction_is_gone_for_good(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    work = build(qdir, seed=5, steps=15)
    newest = segments(qdir)[-1]
    with newest.open("ab") as f:
        f.write(_next_put_frame(work.model.last_seq + 1)[:-1])
    with Queue(qdir, sync=False) as q:
        q.put("other", {"n": 2})  # takes the sequence number the torn transaction never had
        work.model.put("other", {"n": 2})
        assert view(q) == view(work.model)
    assert reopen_view(qdir) == view(work.model)


# ---------------------------------------------------------------------------
# CorruptStore: CURRENT and the snapshot


CURRENT_DAMAGE: list[tuple[str, Callable[[Path], None]]] = [
    ("garbage", lambda d: (d / "CURRENT").write_bytes(b"this is not a frame at all")),
    ("empty", lambda d: (d / "CURRENT").write_bytes(b"")),
    ("truncated", lambda d: (d / "CURRENT").write_bytes((d / "CURRENT").read_bytes()[:-1])),
    ("three-bytes", lambda d: (d / "CURRENT").write_bytes((d / "CURRENT").read_bytes()[:3])),
    ("byte-flipped", lambda d: _flip(d / "CURRENT", 10)),
    ("digest-flipped", lambda d: _flip(d / "CURRENT", -1)),
    ("two-frames", lambda d: (d / "CURRENT").write_bytes((d / "CURRENT").read_bytes() * 2)),
    ("trailing-byte", lambda d: (d / "CURRENT").write_bytes((d / "CURRENT").read_bytes() + b"\x00")),
    ("not-an-object", lambda d: (d / "CURRENT").write_bytes(encode_frame([1, 2]))),
    ("invalid-json", lambda d: (d / "CURRENT").write_bytes(raw_frame(b'{"current":1,'))),
    ("missing-wal", lambda d: _edit_current(d, lambda r: r.pop("wal"))),
    ("unknown-field", lambda d: _edit_current(d, lambda r: r.update(extra=1))),
    ("version-2", lambda d: _edit_current(d, lambda r: r.update(current=2))),
    ("seq-as-str", lambda d: _edit_current(d, lambda r: r.update(seq=str(r["seq"])))),
    ("size-wrong", lambda d: _edit_current(d, lambda r: r.update(size=r["size"] + 1))),
    ("sha256-wrong", lambda d: _edit_current(d, lambda r: r.update(sha256="0" * 64))),
    ("sha256-not-hex", lambda d: _edit_current(d, lambda r: r.update(sha256="xyz"))),
    ("seq-disagrees-with-snapshot", lambda d: _edit_current(d, lambda r: r.update(seq=r["seq"] + 1))),
    ("wal-segment-missing", lambda d: _edit_current(d, lambda r: r.update(wal=r["wal"] + 5))),
    ("wal-zero", lambda d: _edit_current(d, lambda r: r.update(wal=0))),
    ("snapshot-name-path", lambda d: _edit_current(d, lambda r: r.update(snapshot="../" + r["snapshot"]))),
    ("snapshot-name-missing-file", lambda d: _edit_current(d, lambda r: r.update(snapshot=snap(10**9)))),
]


def _flip(path: Path, index: int, bit: int = 0x01) -> None:
    data = bytearray(path.read_bytes())
    data[index] ^= bit
    path.write_bytes(bytes(data))


def _edit_current(qdir: Path, edit: Callable[[dict[str, Any]], Any]) -> None:
    record = current_record(qdir)
    edit(record)
    write_current(qdir, record)


@pytest.mark.parametrize("damage", [c[1] for c in CURRENT_DAMAGE], ids=[c[0] for c in CURRENT_DAMAGE])
def test_a_damaged_current_is_corrupt_store(tmp_path: Path, damage: Callable[[Path], None]) -> None:
    qdir = tmp_path / "q"
    compacted(qdir)
    snapshot = current_record(qdir)["snapshot"]
    damage(qdir)
    error = expect_corrupt(qdir)
    assert error.path is not None
    assert Path(error.path).name in ("CURRENT", snapshot, snap(10**9)) or Path(error.path).name.startswith("wal-")


def test_a_garbage_current_names_current(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    compacted(qdir)
    (qdir / "CURRENT").write_bytes(b"\x00\x00\x00\x05hello" + b"\x00" * 32)
    error = expect_corrupt(qdir)
    assert_names(error, qdir, "CURRENT")
    assert error.offset in (None, 0)


def test_current_naming_a_missing_snapshot_is_corrupt_store(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    compacted(qdir)
    name = current_record(qdir)["snapshot"]
    (qdir / name).unlink()
    error = expect_corrupt(qdir)
    assert_names(error, qdir, "CURRENT", name)


@pytest.mark.parametrize("where", ["header", "middle", "footer", "last-byte"])
def test_a_snapshot_with_altered_bytes_is_corrupt_store(tmp_path: Path, where: str) -> None:
    qdir = tmp_path / "q"
    compacted(qdir)
    path = qdir / current_record(qdir)["snapshot"]
    size = path.stat().st_size
    index = {"header": 10, "middle": size // 2, "footer": size - 40, "last-byte": size - 1}[where]
    _flip(path, index)
    assert path.stat().st_size == size
    error = expect_corrupt(qdir)
    assert_names(error, qdir, "CURRENT", path.name)


@pytest.mark.parametrize("change", ["append", "truncate"])
def test_a_snapshot_with_another_size_is_corrupt_store(tmp_path: Path, change: str) -> None:
    qdir = tmp_path / "q"
    compacted(qdir)
    path = qdir / current_record(qdir)["snapshot"]
    data = path.read_bytes()
    path.write_bytes(data + b"\x00" if change == "append" else data[:-1])
    error = expect_corrupt(qdir)
    assert_names(error, qdir, "CURRENT", path.name)


def test_a_corrupt_snapshot_never_falls_back_to_an_older_one(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    build(qdir, seed=6, steps=20, compact_at=(10,))
    older = current_record(qdir)["snapshot"]
    older_bytes = (qdir / older).read_bytes()
    kept = {p.name: p.read_bytes() for p in segments(qdir)}
    with Queue(qdir, sync=False) as q:
        q.put("more", {})
        q.compact()
    newer = current_record(qdir)["snapshot"]
    assert newer != older
    # put back everything the older snapshot would need, as valid files
    (qdir / older).write_bytes(older_bytes)
    for name, data in kept.items():
        if not (qdir / name).exists():
            (qdir / name).write_bytes(data)
    _flip(qdir / newer, 20)
    error = expect_corrupt(qdir)
    assert_names(error, qdir, "CURRENT", newer)


def test_a_deleted_current_after_compaction_is_corrupt_store_not_a_fresh_start(tmp_path: Path) -> None:
    # CURRENT deleted after compaction deleted segment 1: the live segments no
    # longer start at 1, which is a gap, not an empty queue.
    qdir = tmp_path / "q"
    compacted(qdir)
    (qdir / "CURRENT").unlink()
    error = expect_corrupt(qdir)
    assert error.reason


def _rewrite_snapshot(qdir: Path, edit: Callable[[list[Any]], list[Any]]) -> None:
    """Decode the published snapshot's frames, edit them, re-encode, and re-publish CURRENT for the new bytes."""
    record = current_record(qdir)
    path = qdir / record["snapshot"]
    bodies = [body for _, body in read_frames(path)]
    data = b"".join(encode_frame(body) for body in edit(bodies))
    path.write_bytes(data)
    record.update(size=len(data), sha256=hashlib.sha256(data).hexdigest())
    write_current(qdir, record)


def _records(bodies: list[Any]) -> list[Any]:
    return [r for body in bodies[1:-1] for r in body["tasks"]]


def _with_records(bodies: list[Any], records: list[Any]) -> list[Any]:
    return [bodies[0], {"tasks": records}, bodies[-1]]


SNAPSHOT_DAMAGE: list[tuple[str, Callable[[list[Any]], list[Any]]]] = [
    ("footer-seq-differs", lambda b: b[:-1] + [{**b[-1], "seq": b[-1]["seq"] + 1}]),
    ("footer-count-differs", lambda b: b[:-1] + [{**b[-1], "tasks": b[-1]["tasks"] + 1}]),
    ("header-count-differs", lambda b: [{**b[0], "tasks": b[0]["tasks"] + 1}] + b[1:]),
    ("no-footer", lambda b: b[:-1]),
    ("frame-after-footer", lambda b: b + [{"tasks": []}]),
    ("record-dropped", lambda b: _with_records(b, _records(b)[1:])),
    ("records-out-of-order", lambda b: _with_records(b, list(reversed(_records(b))))),
    ("record-duplicated", lambda b: _with_records(b, _records(b)[:1] + _records(b))),
    ("duplicate-key", lambda b: _with_records(b, [_records(b)[0], {**_records(b)[1], "key": _records(b)[0]["key"]}])),
    ("unknown-status", lambda b: _with_records(b, [{**_records(b)[0], "status": "weird"}] + _records(b)[1:])),
]


@pytest.mark.parametrize("edit", [c[1] for c in SNAPSHOT_DAMAGE], ids=[c[0] for c in SNAPSHOT_DAMAGE])
def test_a_snapshot_that_does_not_decode_consistently_is_corrupt_store(
    tmp_path: Path, edit: Callable[[list[Any]], list[Any]]
) -> None:
    qdir = tmp_path / "q"
    with Queue(qdir, sync=False) as q:
        q.put_many([{"task_id": f"t{i}", "payload": {"i": i}} for i in range(4)])
        q.compact()
    _rewrite_snapshot(qdir, edit)
    error = expect_corrupt(qdir)
    assert_names(error, qdir, "CURRENT", current_record(qdir)["snapshot"])


def test_a_rewritten_snapshot_with_the_same_content_is_accepted(tmp_path: Path) -> None:
    # the control for the test above: re-encoding without an edit is fine
    qdir = tmp_path / "q"
    with Queue(qdir, sync=False) as q:
        q.put_many([{"task_id": f"t{i}", "payload": {"i": i}} for i in range(4)])
        q.compact()
        before = view(q)
    _rewrite_snapshot(qdir, lambda b: b)
    assert reopen_view(qdir) == before


# ---------------------------------------------------------------------------
# CorruptStore: segments


def _frame_spans(path: Path) -> list[tuple[int, int]]:
    frames = read_frames(path)
    ends = [offset for offset, _ in frames[1:]] + [path.stat().st_size]
    return [(offset, end) for (offset, _), end in zip(frames, ends, strict=True)]


@pytest.mark.parametrize("part", ["length", "body", "digest"])
def test_a_bit_flip_in_a_sealed_segment_is_corrupt_store(tmp_path: Path, part: str) -> None:
    qdir = tmp_path / "q"
    with_segments(qdir, 2)
    sealed = qdir / wal(1)
    start, end = _frame_spans(sealed)[1]
    index = {"length": start + 3, "body": start + 4 + 5, "digest": end - 1}[part]
    _flip(sealed, index)
    error = expect_corrupt(qdir)
    assert_names(error, qdir, wal(1))
    assert error.offset is not None and start <= error.offset < end


def test_an_incomplete_frame_in_a_sealed_segment_is_corrupt_store(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    with_segments(qdir, 2)
    sealed = qdir / wal(1)
    start, end = _frame_spans(sealed)[-1]
    sealed.write_bytes(sealed.read_bytes()[: end - 5])
    error = expect_corrupt(qdir)
    assert_names(error, qdir, wal(1))
    assert error.offset == start


def test_a_missing_first_segment_is_corrupt_store(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    with_segments(qdir, 2)
    (qdir / wal(1)).unlink()
    expect_corrupt(qdir)


def test_a_missing_middle_segment_is_corrupt_store(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    with_segments(qdir, 3)
    (qdir / wal(2)).unlink()
    expect_corrupt(qdir)


def test_a_missing_live_segment_after_current_is_corrupt_store(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    compacted(qdir)
    first_live = current_record(qdir)["wal"]
    with Queue(qdir, sync=False, hook=_crash_at("wal.rotate.after")) as q:
        q.put("x", {})
        with pytest.raises(InjectedCrash):
            q.compact()
    with Queue(qdir, sync=False) as q:
        q.put("y", {})
    assert (qdir / wal(first_live + 1)).exists()
    (qdir / wal(first_live)).unlink()
    error = expect_corrupt(qdir)
    assert error.path is not None


def _crash_at(target: str) -> Callable[[str], None]:
    def hook(phase: str) -> None:
        if phase == target:
            raise InjectedCrash(phase)

    return hook


def test_a_frame_cut_out_of_a_segment_is_a_sequence_gap(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    with_segments(qdir, 2)
    sealed = qdir / wal(1)
    spans = _frame_spans(sealed)
    data = sealed.read_bytes()
    (start, end) = spans[1]
    sealed.write_bytes(data[:start] + data[end:])
    error = expect_corrupt(qdir)
    assert_names(error, qdir, wal(1))
    assert error.offset == start  # where the frame with the unexpected seq now begins


def test_a_frame_repeated_in_a_segment_is_a_sequence_repeat(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    with_segments(qdir, 2)
    sealed = qdir / wal(1)
    (start, end) = _frame_spans(sealed)[1]
    data = sealed.read_bytes()
    sealed.write_bytes(data[:end] + data[start:end] + data[end:])
    error = expect_corrupt(qdir)
    assert_names(error, qdir, wal(1))
    assert error.offset == end


def test_segments_swapped_are_corrupt_store(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    with_segments(qdir, 3)
    one, two = (qdir / wal(1)).read_bytes(), (qdir / wal(2)).read_bytes()
    (qdir / wal(1)).write_bytes(two)
    (qdir / wal(2)).write_bytes(one)
    expect_corrupt(qdir)


def _last_task(model: Model) -> str:
    return model.tasks()[-1].task_id


APPENDED: list[tuple[str, Callable[[Model], bytes]]] = [
    (
        "ack-unknown-task",
        lambda m: encode_frame({"seq": m.last_seq + 1, "ops": [{"op": "ack", "task": "nope", "generation": 1}]}),
    ),
    (
        "ack-ready-task",
        lambda m: encode_frame(
            {"seq": m.last_seq + 1, "ops": [{"op": "ack", "task": m.tasks("ready")[0].task_id, "generation": 0}]}
        ),
    ),
    (
        "lease-wrong-generation",
        lambda m: encode_frame(
            {
                "seq": m.last_seq + 1,
                "ops": [
                    {"op": "lease", "task": m.tasks("ready")[0].task_id, "worker": "w", "generation": 7, "deadline": 9}
                ],
            }
        ),
    ),
    (
        "expire-ready-task",
        lambda m: encode_frame(
            {"seq": m.last_seq + 1, "ops": [{"op": "expire", "task": m.tasks("ready")[0].task_id, "generation": 0}]}
        ),
    ),
    (
        "put-existing-task",
        lambda m: encode_frame(
            {
                "seq": m.last_seq + 1,
                "ops": [
                    {
                        "op": "put",
                        "task": _last_task(m),
                        "key": "fresh-key",
                        "payload": {},
                        "available_at": 0,
                        "max_attempts": 1,
                    }
                ],
            }
        ),
    ),
    (
        "second-op-invalid",
        lambda m: encode_frame(
            {
                "seq": m.last_seq + 1,
                "ops": [
                    {"op": "put", "task": "new", "key": "new", "payload": {}, "available_at": 0, "max_attempts": 1},
                    {"op": "ack", "task": "nope", "generation": 1},
                ],
            }
        ),
    ),
    ("unknown-op", lambda m: encode_frame({"seq": m.last_seq + 1, "ops": [{"op": "explode", "task": "x"}]})),
    ("empty-ops", lambda m: encode_frame({"seq": m.last_seq + 1, "ops": []})),
    ("ops-not-a-list", lambda m: encode_frame({"seq": m.last_seq + 1, "ops": {"op": "ack"}})),
    ("body-not-an-object", lambda m: encode_frame([m.last_seq + 1])),
    ("no-seq", lambda m: encode_frame({"ops": [{"op": "ack", "task": "nope", "generation": 1}]})),
    ("seq-gap", lambda m: _valid_put(m.last_seq + 2)),
    ("seq-repeat", lambda m: _valid_put(m.last_seq)),
    ("seq-zero", lambda m: _valid_put(0)),
    ("seq-as-str", lambda m: encode_frame({"seq": str(m.last_seq + 1), "ops": _valid_put_ops()})),
    # Equal (==) to the expected sequence, so replay's usual-frame path takes
    # them to `apply`, whose envelope checks must refuse them all the same.
    ("seq-as-float", lambda m: encode_frame({"seq": float(m.last_seq + 1), "ops": _valid_put_ops()})),
    ("extra-envelope-key", lambda m: encode_frame({"seq": m.last_seq + 1, "ops": _valid_put_ops(), "x": 1})),
    ("op-not-an-object", lambda m: encode_frame({"seq": m.last_seq + 1, "ops": ["put"]})),
    ("op-name-not-a-str", lambda m: encode_frame({"seq": m.last_seq + 1, "ops": [{"op": 7, "task": "x"}]})),
    ("op-with-an-extra-key", lambda m: encode_frame({"seq": m.last_seq + 1, "ops": [{**_valid_put_ops()[0], "x": 1}]})),
    ("invalid-json", lambda m: raw_frame(b'{"seq": 1, "ops": [')),
    ("not-utf8", lambda m: raw_frame(b'{"seq":1,"ops":["\xff"]}')),
    # A zero length followed only by zeros is a preallocated tail, the end of the log; anything after it is damage.
    ("zero-length", lambda m: b"\x00\x00\x00\x00" + b"x"),
    ("length-beyond-bound", lambda m: struct.pack(">I", 16 * 2**20 + 1) + b"x" * 64),
    ("length-max", lambda m: b"\xff\xff\xff\xff"),
    ("digest-mismatch", lambda m: _valid_put(m.last_seq + 1)[:-1] + b"\x00"),
]


def _valid_put_ops() -> list[dict[str, Any]]:
    return [{"op": "put", "task": "appended", "key": "appended", "payload": {}, "available_at": 0, "max_attempts": 1}]


def _valid_put(seq: int) -> bytes:
    return encode_frame({"seq": seq, "ops": _valid_put_ops()})


@pytest.mark.parametrize("compact", [False, True], ids=["no-current", "after-compaction"])
@pytest.mark.parametrize("make", [c[1] for c in APPENDED], ids=[c[0] for c in APPENDED])
def test_a_bad_frame_appended_to_the_newest_segment_is_corrupt_store(
    tmp_path: Path, make: Callable[[Model], bytes], compact: bool
) -> None:
    qdir = tmp_path / "q"
    work = compacted(qdir) if compact else build(qdir, seed=8, steps=25)
    if not work.model.tasks("ready"):
        work.model.put("ready-one", {})
        with Queue(qdir, sync=False) as q:
            q.put("ready-one", {})
    newest = segments(qdir)[-1]
    start = newest.stat().st_size
    with newest.open("ab") as f:
        f.write(make(work.model))
    error = expect_corrupt(qdir)
    assert_names(error, qdir, newest.name)
    assert error.offset == start


def test_the_control_a_valid_frame_appended_by_hand_is_applied(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    work = build(qdir, seed=8, steps=25)
    with segments(qdir)[-1].open("ab") as f:
        f.write(_valid_put(work.model.last_seq + 1))
    work.model.put("appended", {}, max_attempts=1)
    assert reopen_view(qdir) == view(work.model)


def test_a_damaged_length_before_a_complete_frame_is_corrupt_store_not_a_torn_tail(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    build(qdir, seed=9, steps=25)
    newest = segments(qdir)[-1]
    spans = _frame_spans(newest)
    assert len(spans) >= 3
    start, _ = spans[-3]
    data = bytearray(newest.read_bytes())
    data[start : start + 4] = struct.pack(">I", len(data) - start)  # looks like it runs past the end
    newest.write_bytes(bytes(data))
    error = expect_corrupt(qdir)
    assert_names(error, qdir, newest.name)
    assert error.offset == start


# ---------------------------------------------------------------------------
# what is never authoritative


def test_orphan_snapshots_with_newer_names_are_ignored(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    work = compacted(qdir)
    published = current_record(qdir)["snapshot"]
    (qdir / snap(10**6)).write_bytes(b"garbage that is not a snapshot")
    shutil.copyfile(qdir / published, qdir / snap(10**6 + 1))  # a valid snapshot under a wrong name
    (qdir / snap(0)).write_bytes(b"")
    before = directory_digest(qdir)
    assert reopen_view(qdir) == view(work.model)
    assert directory_digest(qdir) == before


def test_an_orphan_snapshot_without_current_is_ignored(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    work = build(qdir, seed=10, steps=15)
    (qdir / snap(work.model.last_seq)).write_bytes(b"not read")
    assert reopen_view(qdir) == view(work.model)


def test_leftover_segments_below_current_are_never_applied_again(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    work = build(qdir, seed=11, steps=30)
    leftovers = {p.name: p.read_bytes() for p in segments(qdir)}
    with Queue(qdir, sync=False) as q:
        q.compact()
        q.put("after", {"n": 1})
    work.model.put("after", {"n": 1})
    first_live = current_record(qdir)["wal"]
    for name, data in leftovers.items():
        assert int(name[4:24]) < first_live
        (qdir / name).write_bytes(data)
    assert reopen_view(qdir) == view(work.model)
    for name in leftovers:  # opening does not delete them
        assert (qdir / name).exists()
    with Queue(qdir, sync=False) as q:
        q.put("more", {})
        work.model.put("more", {})
        q.compact()  # the next compaction does
        assert view(q) == view(work.model)
    for name in leftovers:
        assert not (qdir / name).exists()
    assert reopen_view(qdir) == view(work.model)


def test_leftover_segments_are_not_validated(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    work = compacted(qdir)
    first_live = current_record(qdir)["wal"]
    assert first_live >= 2
    (qdir / wal(first_live - 1)).write_bytes(b"\x00\x00\x00\x09garbage")
    assert reopen_view(qdir) == view(work.model)


def test_compact_with_nothing_appended_deletes_only_leftover_segments(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    work = compacted(qdir)
    with Queue(qdir, sync=False) as q:
        q.compact()
    first_live = current_record(qdir)["wal"]
    (qdir / wal(first_live - 1)).write_bytes(b"leftover")
    before = directory_digest(qdir)
    hook = Phases()
    with Queue(qdir, sync=False, hook=hook) as q:
        q.compact()
    assert hook.seen == ["segment.deleted", "compact.done"]
    after = directory_digest(qdir)
    del before[wal(first_live - 1)]
    assert after == before
    assert reopen_view(qdir) == view(work.model)


@pytest.mark.parametrize("with_current", [False, True])
def test_tmp_files_are_ignored(tmp_path: Path, with_current: bool) -> None:
    qdir = tmp_path / "q"
    work = compacted(qdir) if with_current else build(qdir, seed=12, steps=20)
    (qdir / "CURRENT.tmp").write_bytes(b"half a CURRENT")
    (qdir / (snap(10**6) + ".tmp")).write_bytes(b"half a snapshot")
    (qdir / (wal(10**6) + ".tmp")).write_bytes(b"junk")
    (qdir / "other.tmp").write_bytes(b"junk")
    assert reopen_view(qdir) == view(work.model)


def test_a_valid_looking_current_tmp_is_never_authoritative(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    work = build(qdir, seed=13, steps=20)
    # a crash at current.written in the very first compaction: CURRENT.tmp exists, CURRENT does not
    with Queue(qdir, sync=False, hook=_crash_at("current.written")) as q:
        with pytest.raises(InjectedCrash):
            q.compact()
    assert (qdir / "CURRENT.tmp").exists() and not (qdir / "CURRENT").exists()
    assert reopen_view(qdir) == view(work.model)


def test_state_after_every_crash_point_of_compaction_reopens_equal(tmp_path: Path) -> None:
    from walqueue import PHASES

    for phase in [p for p in PHASES if not p.startswith(("wal.append", "recover."))]:
        qdir = tmp_path / phase
        work = build(qdir, seed=14, steps=20, compact_at=(10,))
        with Queue(qdir, sync=False, hook=_crash_at(phase)) as q:
            q.put("x", {})
            work.model.put("x", {})
            with pytest.raises(InjectedCrash):
                q.compact()
        assert reopen_view(qdir) == view(work.model), phase
        with Queue(qdir, sync=False) as q:  # and a later compaction cleans up and keeps it
            q.compact()
            assert view(q) == view(work.model)
        assert reopen_view(qdir) == view(work.model), phase


# ---------------------------------------------------------------------------
# more of rule 3, 4 and 5


def test_an_empty_next_segment_is_simply_the_newest_segment(tmp_path: Path) -> None:
    qdir = tmp_path / "q"
    work = compacted(qdir)
    newest = segments(qdir)[-1]
    number = int(newest.name[4:24])
    (qdir / wal(number + 1)).write_bytes(b"")  # what a crash right after rotation leaves
    with Queue(qdir, sync=False) as q:
        assert view(q) == view(work.model)
        q.put("lands-in-the-empty-segment", {})
        work.model.put("lands-in-the-empty-segment", {})
    assert (qdir / wal(number + 1)).stat().st_size > 0
    assert reopen_view(qdir) == view(work.model)


@pytest.mark.parametrize("with_current", [False, True])
def test_a_segment_beyond_a_gap_is_corrupt_store(tmp_path: Path, with_current: bool) -> None:
    qdir = tmp_path / "q"
    compacted(qdir) if with_current else build(qdir, seed=15, steps=10)
    number = int(segments(qdir)[-1].name[4:24])
    (qdir / wal(number + 2)).write_bytes(b"")
    expect_corrupt(qdir)


def test_live_frames_at_or_below_the_snapshot_seq_are_skipped(tmp_path: Path) -> None:
    # CURRENT points at a live segment that still holds the frames the
    # snapshot covers: they are skipped, never applied twice.
    qdir = tmp_path / "q"
    work = build(qdir, seed=16, steps=30)
    old_segment = {p.name: p.read_bytes() for p in segments(qdir)}
    assert list(old_segment) == [wal(1)]
    with Queue(qdir, sync=False) as q:
        q.compact()
        q.put("after", {})
        work.model.put("after", {})
    (qdir / wal(1)).write_bytes(old_segment[wal(1)])
    record = current_record(qdir)
    assert record["wal"] == 2
    write_current(qdir, {**record, "wal": 1})
    assert reopen_view(qdir) == view(work.model)


def test_replay_starts_inside_a_segment_right_after_the_snapshot_seq(tmp_path: Path) -> None:
    # A snapshot through seq 6 published over a segment holding seqs 1..N:
    # 1..6 are skipped, 7..N applied once. Both directories run the same
    # deterministic program, so their frames are byte-identical.
    short, long_ = tmp_path / "short", tmp_path / "long"
    program = Workload(17)
    with Queue(long_, sync=False, compact_bytes=None) as q:
        while program.model.last_seq < 12:
            program.step(q)
    short_program = Workload(17)
    with Queue(short, sync=False, compact_bytes=None) as q:
        while short_program.model.last_seq < 6:
            short_program.step(q)
        q.compact()
    record = current_record(short)
    assert record["seq"] == 6
    shutil.copyfile(short / record["snapshot"], long_ / record["snapshot"])
    write_current(long_, {**record, "wal": 1})
    assert [p.name for p in segments(long_)] == [wal(1)]
    assert reopen_view(long_) == view(program.model)


def test_a_damaged_length_in_the_very_last_frame_is_cut_like_a_torn_tail(tmp_path: Path) -> None:
    # The documented limit of the format: it cannot be told from a torn write.
    qdir = tmp_path / "q"
    work = build(qdir, seed=18, steps=20)
    newest = segments(qdir)[-1]
    start = newest.stat().st_size
    with Queue(qdir, sync=False) as q:
        q.put("last", {"n": 1})
    data = bytearray(newest.read_bytes())
    (length,) = struct.unpack(">I", data[start : start + 4])
    data[start : start + 4] = struct.pack(">I", length + 100)
    newest.write_bytes(bytes(data))
    hook = Phases()
    with Queue(qdir, sync=False, hook=hook) as q:
        assert hook.seen == TRUNCATE_PHASES
        assert view(q) == view(work.model)
    assert newest.stat().st_size == start
