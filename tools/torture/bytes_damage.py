"""Campaign ``bytes``: stores with CURRENT, a snapshot, orphans, a leftover segment
and three live segments are damaged one way at a time (every truncation
offset, single-bit flips of every file): opening recovers exactly the
model's state (minus the cut transactions, only for a torn tail of the
newest segment) or raises `CorruptStore`, and ``walqueue-fsck --replay``
agrees (2 iff `CorruptStore`, 1 iff opening cut a torn tail).

Every other store (the first among them) keeps a zero tail after its newest segment's frames, as
a crash leaves a preallocated segment, and is first damaged where that
matters: every byte of its last frame and of the start of its zero tail.
"""

from __future__ import annotations

import itertools
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import scratch, tmpfs, units

from model import Model, read_frames, view
from walqueue import (
    CorruptStore,
    InjectedCrash,
    Queue,
)
from walqueue.format.current import read_current
from walqueue.format.frame import FRAME_OVERHEAD
from walqueue.format.names import LOCK_NAME, parse_wal_name

from . import lifecycle
from .checks import compare_views, view_difference
from .harness import Abort, Report, guarded
from .workload import Op, PhaseLog, Workload, count_lifecycle_call, expected_states, outcome

EVERY_BIT_BUDGET = 90.0
FIRST_STORE_FLIPS = 300
STORE_WEIGHTS = {
    "put": 1, "retry": 1, "conflict": 0, "put_many": 0, "reserve": 4, "ack": 3, "release": 3,
    "stale": 0, "compact": 0, "get": 0, "tasks": 0, "extend": 3, "redrive": 3, "cancel": 2,
}  # fmt: skip
#: The zero tail a crash leaves after the newest segment's frames (every other store), and how much of it is flipped.
ZERO_TAIL_BYTES = 512
ZERO_TAIL_FLIPPED = 64
#: Compactions interrupted while building a store, and what each leaves behind.
STORE_INTERRUPTIONS = (
    "current.published",  # the published snapshot, and a leftover segment below CURRENT.wal
    "current.written",  # CURRENT.tmp, a complete orphan snapshot, a second live segment
    "snapshot.partial",  # a partial orphan snapshot, a third live segment
)


@dataclass
class Frame:
    start: int
    end: int
    seq: int


@dataclass
class Store:
    """A store built by a workload, its model states by sequence, and the role of each file."""

    directory: Path
    views: dict[int, dict[str, Any]]
    final_seq: int
    snapshot_seq: int
    files: dict[str, bytes]
    live: list[str]  # live segment names, oldest first
    frames: dict[str, list[Frame]]  # live segment name -> its frames
    authoritative: set[str]  # CURRENT and the snapshot it names
    zero_tail: int = 0  # zeros after the newest segment's frames (a preallocated segment's crash)

    @property
    def newest(self) -> str:
        return self.live[-1]


def build_store(seed: int, unit: int, directory: Path, report: Report) -> Store:
    """A small store with every kind of file, written by a seeded workload checked against the model."""
    # Few tasks, many state changes: every byte of the store is damaged in turn, so a small
    # store is a thorough one, and snapshots grow with the number of tasks.
    workload = Workload(f"bytes-ops:{seed}:{unit}", weights=STORE_WEIGHTS)
    rng = random.Random(f"bytes:{seed}:{unit}")
    model = Model()
    views = {0: view(model)}
    where = f"--seed {seed} bytes unit {unit} (building)"

    def run_ops(count: int, *, with_lifecycle: bool = False) -> None:
        nonlocal model
        with Queue(directory, sync=False, compact_bytes=None) as queue:
            for index in range(count + (lifecycle.SHORT if with_lifecycle else 0)):
                # A put first, so that every compaction below has something to compact.
                if with_lifecycle and index < lifecycle.SHORT:  # a task leased, extended, cancelled, redriven, failed
                    op = lifecycle.lifecycle_op(index, workload, model)
                else:
                    op = Op("put", {"spec": workload.new_spec()}) if index == 0 else workload.next_op(model)
                expected = expected_states(model, op)
                if outcome(op, queue) != expected.answer:
                    raise Abort(f"{where}: {op.describe()} answered differently from the model")
                count_lifecycle_call(report, op, expected.answer, "in stores:")
                for seq, state in expected.by_seq.items():
                    views.setdefault(seq, view(state))
                model = expected.after
            if not compare_views(queue, model, report, where):
                raise Abort(f"{where}: aborted")

    run_ops(rng.randrange(3, 5))
    for phase in STORE_INTERRUPTIONS:
        run_ops(rng.randrange(2, 4))
        dying = Queue(directory, hook=PhaseLog(crash_phase=phase), sync=False, compact_bytes=None)
        try:
            dying.compact()
        except InjectedCrash:
            pass
        else:
            raise Abort(f"{where}: compaction never reached {phase}")
    run_ops(rng.randrange(3, 5), with_lifecycle=True)
    store = _describe_store(directory, views, model.last_seq)
    if unit % 2 == 0:  # the first store among them: every run has one
        store.zero_tail = ZERO_TAIL_BYTES
        store.files[store.newest] += bytes(ZERO_TAIL_BYTES)
        (directory / store.newest).write_bytes(store.files[store.newest])
    return store


def _describe_store(directory: Path, views: dict[int, dict[str, Any]], final_seq: int) -> Store:
    current = read_current(directory)
    assert current is not None
    files = {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.name != LOCK_NAME}
    live = sorted(
        (name for name in files if (parse_wal_name(name) or 0) >= current.wal),
        key=lambda name: parse_wal_name(name) or 0,
    )
    frames: dict[str, list[Frame]] = {}
    for name in live:
        data = files[name]
        frames[name] = [
            Frame(offset, offset + FRAME_OVERHEAD + int.from_bytes(data[offset : offset + 4], "big"), body["seq"])
            for offset, body in read_frames(directory / name)
        ]
    return Store(
        directory=directory,
        views=views,
        final_seq=final_seq,
        snapshot_seq=current.seq,
        files=files,
        live=live,
        frames=frames,
        authoritative={"CURRENT", current.snapshot},
    )


@dataclass
class Allowed:
    """What opening a damaged store may do: raise CorruptStore, or give the state of `seq` (torn or not)."""

    corrupt: bool
    seq: int | None = None
    torn: bool | None = None  # None: either


def _seq_before(store: Store, name: str, offset: int) -> int:
    """The last sequence whose frame ends at or before `offset` of live segment `name` (or earlier)."""
    seq = store.snapshot_seq
    for segment in store.live:
        for frame in store.frames[segment]:
            if segment == name and frame.end > offset:
                return seq
            seq = frame.seq
        if segment == name:
            return seq
    raise AssertionError(name)


def _allowed_outside_the_log(store: Store, name: str) -> Allowed:
    """CURRENT and its snapshot: any damage is CorruptStore. Anything else is never read: no effect."""
    if name in store.authoritative:
        return Allowed(corrupt=True)
    return Allowed(corrupt=False, seq=store.final_seq, torn=False)


def allowed_after_truncation(store: Store, name: str, size: int) -> Allowed:
    if name not in store.live:
        return _allowed_outside_the_log(store, name)
    frames = store.frames[name]
    boundary = size == 0 or any(frame.end == size for frame in frames)
    seq = _seq_before(store, name, size)
    if name == store.newest:
        frames_end = frames[-1].end if frames else 0
        if store.zero_tail and size > frames_end:
            # Zeros cut short: 1-3 of them are a cut length field (torn), 4 or more a zero tail.
            return Allowed(corrupt=False, seq=store.final_seq, torn=size - frames_end < 4)
        return Allowed(corrupt=False, seq=seq, torn=not boundary)
    later = store.live[store.live.index(name) + 1 :]
    if boundary and not any(store.frames[segment] for segment in later):
        # A sealed segment cut at a frame boundary, with nothing after it: indistinguishable
        # from a shorter log (see docs/RELIABILITY.md, limits).
        return Allowed(corrupt=True, seq=seq, torn=False)
    return Allowed(corrupt=True)


def allowed_after_flip(store: Store, name: str, offset: int, damaged: bytes | None = None) -> Allowed:
    """What opening may do after one bit of byte `offset` of `name` flipped (`damaged`: the file after it)."""
    if name not in store.live:
        return _allowed_outside_the_log(store, name)
    frames = store.frames[name]
    if damaged is not None and _cleared_into_the_zero_tail(store, name, damaged):
        # The flip cleared the last non-zero byte(s) of the last frame's digest: byte for byte the write
        # of that frame cut short by the zeros, so it is a torn tail (docs/FORMAT.md §7, the limits).
        return Allowed(corrupt=False, seq=_seq_before(store, name, frames[-1].start), torn=True)
    if name == store.newest and frames and frames[-1].start <= offset < frames[-1].start + 4:
        # A damaged length in the very last frame looks exactly like a torn write (CONTRACT §4 rule 5).
        return Allowed(corrupt=True, seq=_seq_before(store, name, frames[-1].start), torn=True)
    frames_end = frames[-1].end if frames else 0
    if name == store.newest and frames_end <= offset < frames_end + 4:
        # A bit in the zero tail where a next length would start: a torn write of a frame (cut), or a length
        # out of bounds (corrupt); never a lost transaction.
        return Allowed(corrupt=True, seq=store.final_seq, torn=True)
    return Allowed(corrupt=True)


def _cleared_into_the_zero_tail(store: Store, name: str, damaged: bytes) -> bool:
    """Whether the zeros that end the newest segment's `damaged` copy now start earlier, inside its last frame."""
    frames = store.frames[name]
    if name != store.newest or not store.zero_tail or not frames:
        return False
    last = frames[-1]
    zeros_after = damaged[last.end :].count(0) == len(damaged) - last.end
    written = len(store.files[name][: last.end].rstrip(b"\x00"))  # a digest may end in zero bytes itself
    return zeros_after and len(damaged[: last.end].rstrip(b"\x00")) < written


def campaign_bytes(seed: int, budget: float, report: Report) -> None:
    """Every truncation and single-bit flip of every file of seeded stores: recover exactly, or refuse."""
    from walqueue.format.fsck import check

    deadline = time.monotonic() + budget
    every_bit = budget >= EVERY_BIT_BUDGET
    report.notes.append("every bit of every byte" if every_bit else "one random bit of every byte")
    report.counts.update({"stores": 0, "variants": 0, "truncations": 0, "bit flips": 0})
    with scratch("walqueue-bytes-", tmpfs()) as tmp:
        for unit in units(lambda: time.monotonic() >= deadline):
            directory = tmp / f"u{unit}"
            with guarded(report, f"bytes unit {unit}", scratch=directory):
                store = build_store(seed, unit, directory, report)
                report.count("stores")
                _damage_store(store, seed, unit, every_bit, deadline, check, report)


def _damage_store(
    store: Store,
    seed: int,
    unit: int,
    every_bit: bool,
    deadline: float,
    check: Callable[..., Any],
    report: Report,
) -> None:
    """Truncations first, then bit flips in a shuffled order (a sample cut by the deadline is spread out).

    The first store always gets every truncation, and every flip in
    every-bit mode (FIRST_STORE_FLIPS of them otherwise), whatever the
    deadline: that is the coverage a run promises.
    """
    rng = random.Random(f"bytes-bits:{seed}:{unit}")
    first = unit == 0
    if store.zero_tail:
        _damage_zero_tail(store, seed, unit, check, report)
    for name, data in store.files.items():
        for size in range(len(data)):
            if not first and time.monotonic() >= deadline:
                report.notes.append(f"store {unit} stopped by the time limit during truncations")
                return
            where = f"--seed {seed} bytes unit {unit}: {name} cut to {size} bytes"
            _variant(store, name, data[:size], allowed_after_truncation(store, name, size), check, report, where)
            report.count("truncations")
    places = _flip_order(store, rng)
    forced = (len(places) if every_bit else FIRST_STORE_FLIPS) if first else 0
    for done, (name, offset) in enumerate(places):
        if done >= forced and time.monotonic() >= deadline:
            report.notes.append(f"store {unit}: flips in {done} of {len(places)} bytes")
            return
        bits = range(8) if every_bit else [rng.randrange(8)]
        for bit in bits:
            damaged = bytearray(store.files[name])
            damaged[offset] ^= 1 << bit
            where = f"--seed {seed} bytes unit {unit}: {name} bit {bit} of byte {offset} flipped"
            allowed = allowed_after_flip(store, name, offset, bytes(damaged))
            _variant(store, name, bytes(damaged), allowed, check, report, where)
            report.count("bit flips")


def _damage_zero_tail(store: Store, seed: int, unit: int, check: Callable[..., Any], report: Report) -> None:
    """Every bit of the last frame before the zero tail, of the tail's first bytes and of every earlier length.

    A flipped earlier length can make a frame's body run over the later
    frames into the zeros: that must be damage, never a torn tail that
    cuts acknowledged frames.
    """
    name = store.newest
    data = store.files[name]
    frames = store.frames[name]
    start = frames[-1].start if frames else 0
    stop = (frames[-1].end if frames else 0) + ZERO_TAIL_FLIPPED
    lengths = [frame.start + n for frame in frames[:-1] for n in range(4)]
    for offset in [*lengths, *range(start, stop)]:
        for bit in range(8):
            damaged = bytearray(data)
            damaged[offset] ^= 1 << bit
            where = f"--seed {seed} bytes unit {unit}: {name} (zero tail) bit {bit} of byte {offset} flipped"
            allowed = allowed_after_flip(store, name, offset, bytes(damaged))
            _variant(store, name, bytes(damaged), allowed, check, report, where)
            report.count("zero-tail flips")


def _flip_order(store: Store, rng: random.Random) -> list[tuple[str, int]]:
    """Every (file, byte offset), each file's in a random order, the files taken in turn.

    Any prefix of this order (a run cut short by its deadline) has damaged
    every file about equally, at random places.
    """
    per_file = [
        [(name, offset) for offset in rng.sample(range(len(data)), len(data))] for name, data in store.files.items()
    ]
    return [place for row in itertools.zip_longest(*per_file) for place in row if place is not None]


def _variant(
    store: Store, name: str, data: bytes, allowed: Allowed, check: Callable[..., Any], report: Report, where: str
) -> None:
    """Write one damaged file, ask fsck, open, judge, and put the original bytes back."""
    directory = store.directory
    report.count("variants")
    (directory / name).write_bytes(data)
    try:
        fsck = check(directory, replay=True)
        log = PhaseLog()
        try:
            queue = Queue(directory, hook=log, sync=False, compact_bytes=None)
        except CorruptStore:
            result: dict[str, Any] | None = None
            report.count("refused")
        except Exception as exc:
            report.diverge(f"{where}: opening raised {type(exc).__name__}: {exc}")
            return
        else:
            try:
                result = view(queue)
            finally:
                queue.close()
        torn = "recover.truncate.before" in log.phases
        if result is not None:
            report.count("recovered torn" if torn else "recovered")
        _judge(store, result, torn, allowed, where, report)
        _judge_fsck(fsck, result, torn, where, report)
    finally:
        (directory / name).write_bytes(store.files[name])
        (directory / store.newest).write_bytes(store.files[store.newest])


def _judge(
    store: Store, result: dict[str, Any] | None, torn: bool, allowed: Allowed, where: str, report: Report
) -> None:
    if result is None:
        if not allowed.corrupt:
            report.diverge(f"{where}: CorruptStore, but this damage must be recovered (state {allowed.seq})")
        return
    if allowed.seq is None:
        report.diverge(f"{where}: opened (last_seq {result['last_seq']}), but this damage must be CorruptStore")
        return
    if result != store.views[allowed.seq]:
        report.diverge(
            f"{where}: opened to a state other than the model's at seq {allowed.seq}: "
            f"{view_difference(result, store.views[allowed.seq])}"
        )
    if allowed.torn is not None and torn != allowed.torn:
        report.diverge(f"{where}: opening {'cut' if torn else 'did not cut'} a torn tail")


def _judge_fsck(fsck: Any, result: dict[str, Any] | None, torn: bool, where: str, report: Report) -> None:
    """fsck --replay says 2 iff opening raised CorruptStore, 1 iff it cut a torn tail, else 0 (CONTRACT §7)."""
    want = 2 if result is None else 1 if torn else 0
    if fsck.exit_code != want:
        findings = "; ".join(f"{f.severity} {f.kind} {f.file}@{f.offset}: {f.message}" for f in fsck.findings[:3])
        report.diverge(f"{where}: fsck exit {fsck.exit_code}, opening implies {want} ({findings})")
        return
    report.count("fsck agreed")
    if result is not None and fsck.replay is not None:
        counts = json.loads(result["counts"])
        if fsck.replay.last_seq != result["last_seq"] or fsck.replay.counts != counts:
            report.diverge(
                f"{where}: fsck replay ends at {fsck.replay.last_seq} {fsck.replay.counts}, "
                f"opening at {result['last_seq']} {counts}"
            )
