"""latency_while_compacting (alias i): latency of durable calls while a large state is compacted in the background."""

from __future__ import annotations

import gc
import logging
import math
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from walqueue import Queue

from .harness import LEASE_SECONDS, NOW, WORKER, Context, figure, fill, payload, pyplot, task_id, warm_cycles, warm_puts

#: Sizes at each scale (with the run's `reps` unless set here): `ctx.scale` during the run.
SCALES: dict[str, dict[str, int]] = {
    "tiny": {"tasks": 2000, "rounds": 2, "min_pairs": 20},
    "default": {"tasks": 100_000, "rounds": 8, "min_pairs": 100},
    "big": {"tasks": 1_000_000, "rounds": 4, "min_pairs": 500},
}


#
# Automatic compaction is due once the live WAL exceeds max(compact_bytes, 2 x the last
# snapshot's size) (compaction.compaction_threshold). Right after a snapshot of a large state,
# the next one is therefore hundreds of megabytes of WAL away, whatever compact_bytes says:
# no window of durable single calls can contain several compactions of a million tasks. So
# each round opens a fresh copy of a template store whose live WAL is over that threshold:
# the first durable call in the round triggers one automatic background snapshot of the
# whole state, and the window runs until that snapshot is published. Several rounds give
# several compactions. The rounds' windows are pooled, and set beside windows of the same
# length on a copy of the same store opened with compact_bytes=None (compaction disabled),
# each right after its round's compaction window.
#
# Every variant runs this same code: the template's origin ("wal": filled without ever
# compacting, its whole state is live WAL; "snapshot": a tenth of the tasks went into a
# published snapshot, the rest into live WAL, which opening must load and replay) and the
# sync setting of the measured stores (True: each call waits for its fsync; False: none).

#: Far below any template's live WAL, so that the first durable call of a round triggers compaction.
COMPACT_BYTES = 64 * 1024
#: A window that has not seen its compaction published by then is an error, not a figure.
WINDOW_LIMIT_SECONDS = 900.0
PERCENTILES = (("p50", 0.50), ("p99", 0.99), ("p999", 0.999), ("max", 1.0))
#: (origin, sync) of each variant. The first keeps the figure names of the one configuration measured before.
VARIANTS = (("wal", True), ("wal", False), ("snapshot", True), ("snapshot", False))
#: The "snapshot" template puts 1/SNAPSHOT_SHARE of its tasks in the snapshot: a task's snapshot
#: record is about 2.5x its share of a put_many in the WAL, so a quarter would leave the WAL
#: under twice the snapshot (no automatic compaction); a tenth leaves it near 3.5x.
SNAPSHOT_SHARE = 10


def variant_name(origin: str, sync: bool) -> str:
    return f"{origin}_{'sync' if sync else 'nosync'}"


def variant_suffix(origin: str, sync: bool) -> str:
    """The figures' suffix: none for the first variant (the names docs and older runs use)."""
    return "" if (origin, sync) == VARIANTS[0] else f"_{variant_name(origin, sync)}"


class _Compactions(logging.Handler):
    """When each compaction was published, and its snapshot's size (from the engine's INFO line)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.published: list[tuple[float, int]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.msg.startswith("compacted through sequence"):
            self.published.append((time.perf_counter(), int(record.args[-1])))  # type: ignore[index, arg-type]


class _Collector:
    """The cyclic collector's passes during the windows of one mode: how many per generation, and the longest.

    A pass over a large young container (a million-entry dict or list) stalls
    whichever call triggers it for tens of milliseconds; this says whether
    one happened (docs/DECISIONS.md §60). Recording allocates nothing the
    collector tracks.
    """

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.longest = [0.0, 0.0, 0.0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        generation = info["generation"]
        self.count[generation] += 1
        self.longest[generation] = max(self.longest[generation], time.perf_counter() - self._started)

    def watching(self, window: Callable[[], Any]) -> Any:
        gc.callbacks.append(self)
        try:
            return window()
        finally:
            gc.callbacks.remove(self)

    def summary(self) -> dict[str, list[float]]:
        """Per generation: [collections, longest in ms]."""
        return {f"gen{n}": [self.count[n], round(self.longest[n] * 1e3, 3)] for n in range(3)}


def _window(
    queue: Any, prefix: str, pairs: int, until: Callable[[], bool] | None = None
) -> tuple[list[float], list[float], list[float]]:
    """Latencies of alternating durable puts and reserve+ack cycles: `pairs` of them, then more until `until()`.

    Also when each pair started (`time.perf_counter`), to place the slowest calls in the compaction's course.
    """
    put, reserve, ack = queue.put, queue.reserve, queue.ack
    put_seconds: list[float] = []
    cycle_seconds: list[float] = []
    started: list[float] = []
    give_up = time.perf_counter() + WINDOW_LIMIT_SECONDS
    i = 0
    while i < pairs or (until is not None and not until()):
        tid, body = task_id(prefix, i), payload(i)
        t0 = time.perf_counter()
        put(tid, body)
        t1 = time.perf_counter()
        ack(reserve(WORKER, now=NOW, lease_seconds=LEASE_SECONDS)[0], now=NOW)
        t2 = time.perf_counter()
        put_seconds.append(t1 - t0)
        cycle_seconds.append(t2 - t1)
        started.append(t0)
        i += 1
        if t2 > give_up:
            raise RuntimeError(
                f"latency_while_compacting: no compaction was published within {WINDOW_LIMIT_SECONDS:.0f} s"
            )
    return put_seconds, cycle_seconds, started


def _percentile(ordered: list[float], fraction: float) -> float:
    """Nearest-rank percentile of sorted samples (fraction 1.0 is the maximum)."""
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def _copy(template: Path, to: Path) -> None:
    """A copy of the template, on the disk before a window opens.

    The kernel writes a file's dirty pages back about 30 s after they were
    written: without the sync, the copy's (and the template's) hundreds of
    megabytes went to the disk in the middle of the first window and stalled
    its commits' fdatasync there (DECISIONS §60). A real store's files are
    on the disk already; the bench's setup must not be charged to a window.
    """
    shutil.copytree(template, to)
    os.sync()


def _template(ctx: Context, n: int, origin: str) -> tuple[Path, dict[str, int]]:
    """A store of `n` ready tasks whose live WAL is over the compaction threshold, and its sizes.

    "wal": never compacted (its whole state is live WAL). "snapshot": the first tenth of the
    tasks compacted into a published snapshot, the rest in live WAL over twice its size.
    """
    template = ctx.dir(f"i-template-{origin}") / "q"
    queue = Queue(template, sync=False, compact_bytes=None)
    in_snapshot = n // SNAPSHOT_SHARE if origin == "snapshot" else 0
    if in_snapshot:
        fill(queue, "i", in_snapshot)
        queue.compact()
    fill(queue, "i", n - in_snapshot, start=in_snapshot)
    wal_bytes = queue.stats()["wal_bytes"]
    queue.close()
    del queue
    os.sync()  # (written with sync=False: its writeback must not land in the first window; see _copy)
    snapshot_bytes = sum(path.stat().st_size for path in template.glob("snapshot-*"))
    if wal_bytes <= max(COMPACT_BYTES, 2 * snapshot_bytes):
        raise SystemExit(
            f"scale error: latency_while_compacting {origin} template of {wal_bytes} bytes of WAL"
            f" and a snapshot of {snapshot_bytes} bytes would not trigger compaction"
        )
    ctx.log(
        f"latency_while_compacting: {origin} template of {n} tasks, {wal_bytes:,} bytes of WAL,"
        f" snapshot of {snapshot_bytes:,} bytes ({in_snapshot} tasks)"
    )
    sizes = {
        "template_wal_bytes": wal_bytes,
        "template_snapshot_bytes": snapshot_bytes,
        "tasks_in_snapshot": in_snapshot,
    }
    return template, sizes


class _Rounds:
    """The windows of every round, compacting and not, and what they measured."""

    def __init__(
        self, ctx: Context, template: Path, min_pairs: int, watcher: _Compactions, none_queue: Any, sync: bool
    ) -> None:
        self.ctx, self.template, self.min_pairs, self.sync = ctx, template, min_pairs, sync
        self.watcher, self.none_queue = watcher, none_queue
        self.lat: dict[str, dict[str, list[float]]] = {
            kind: {"compaction": [], "none": []} for kind in ("put", "cycle")
        }
        self.compaction_seconds: list[float] = []
        self.pairs_per_round: list[int] = []
        self.snapshot_bytes: list[int] = []
        self.none_compactions = 0
        self.slowest: dict[str, list[list[float]]] = {"put": [], "cycle": []}
        self.collector = {"compaction": _Collector(), "none": _Collector()}

    def none_window(self, rep: int, pairs: int) -> None:
        before = len(self.watcher.published)
        gc.collect()
        put_s, cycle_s, _ = self.collector["none"].watching(lambda: _window(self.none_queue, f"n{rep}", pairs))
        self.none_compactions += len(self.watcher.published) - before
        self.lat["put"]["none"] += put_s
        self.lat["cycle"]["none"] += cycle_s

    def compaction_window(self, rep: int) -> int:
        directory = self.ctx.dir(f"i-compaction-{self.template.parent.name}-{self.sync}-{rep}")
        _copy(self.template, directory / "q")
        queue = Queue(directory / "q", sync=self.sync, compact_bytes=COMPACT_BYTES)
        watcher = self.watcher
        try:
            before = len(watcher.published)
            snapshot_seq = queue.stats()["snapshot_seq"]
            gc.collect()
            start = time.perf_counter()
            put_s, cycle_s, started = self.collector["compaction"].watching(
                lambda: _window(queue, f"c{rep}", self.min_pairs, lambda: len(watcher.published) > before)
            )
            published = watcher.published[before:]
            if queue.stats()["snapshot_seq"] == snapshot_seq:
                raise RuntimeError(
                    "latency_while_compacting: the engine logged a compaction that stats() does not show"
                )
        finally:
            queue.close()
        shutil.rmtree(directory)
        os.sync()  # (the removal's journal commit, too, before the next window)
        self.compaction_seconds.extend(at - start for at, _ in published)
        published_at = published[0][0]
        for kind, seconds in (("put", put_s), ("cycle", cycle_s)):
            self.slowest[kind] += [
                [round(seconds[k], 6), rep, round(started[k] - start, 3), round(published_at - started[k], 3)]
                for k in sorted(range(len(seconds)), key=seconds.__getitem__)[-5:]
            ]
        self.snapshot_bytes.extend(size for _, size in published)
        self.lat["put"]["compaction"] += put_s
        self.lat["cycle"]["compaction"] += cycle_s
        self.pairs_per_round.append(len(put_s))
        self.ctx.log(
            f"latency_while_compacting: {self.template.parent.name}, sync={self.sync}, round {rep}:"
            f" compaction published after"
            f" {published[0][0] - start:.2f} s, {len(put_s)} pairs"
        )
        return len(put_s)


def _measure(ctx: Context, template: Path, rounds: int, min_pairs: int, sync: bool, seconds: float = 0.0) -> _Rounds:
    """`rounds` compaction windows (and more until they add up to `seconds`), each followed by one without."""
    none_dir = ctx.dir(f"i-none-{template.parent.name}-{sync}") / "q"
    _copy(template, none_dir)
    none_queue = Queue(none_dir, sync=sync, compact_bytes=None)
    warm_puts(none_queue, "warm")
    warm_cycles(none_queue)
    watcher = _Compactions()
    logger = logging.getLogger("walqueue")
    level = logger.level
    logger.addHandler(watcher)
    logger.setLevel(logging.INFO)
    measured = _Rounds(ctx, template, min_pairs, watcher, none_queue, sync)
    try:
        rep = 0
        while rep < rounds or sum(measured.compaction_seconds) < seconds:
            # The none window right after, as long: the two modes seconds apart, alike in size.
            measured.none_window(rep, measured.compaction_window(rep))
            rep += 1
    finally:
        logger.removeHandler(watcher)
        logger.setLevel(level)
        none_queue.close()
    shutil.rmtree(none_dir)
    if measured.none_compactions:
        raise RuntimeError(f"latency_while_compacting: {measured.none_compactions} compactions with compact_bytes=None")
    return measured


def _ratios(measured: _Rounds, origin: str, sync: bool) -> dict[str, Any]:
    """The variant's figures, named with its suffix; the targets apply to the durable (sync) variants."""
    sfx, variant = variant_suffix(origin, sync), f"store opened from its {origin}, sync={sync}"
    stats: dict[str, dict[str, dict[str, float]]] = {}
    for kind, modes in measured.lat.items():
        stats[kind] = {}
        for mode, samples in modes.items():
            samples.sort()
            stats[kind][mode] = {name: _percentile(samples, fraction) for name, fraction in PERCENTILES}
    ratios: dict[str, Any] = {}
    for kind in ("put", "cycle"):
        for mode in ("compaction", "none"):
            for name, _ in PERCENTILES:
                target = ("<=", 0.050) if sync and (kind, mode, name) == ("put", "compaction", "max") else None
                ratios[f"{kind}_{name}_{mode}{sfx}"] = figure(
                    [stats[kind][mode][name]],
                    "s/op",
                    target=target,
                    better="lower",
                    note="" if target else f"information: {kind} latency, {name}, pooled over the rounds; {variant}",
                )
        ratios[f"{kind}_p99_compaction_over_none{sfx}"] = figure(
            [stats[kind]["compaction"]["p99"] / stats[kind]["none"]["p99"]],
            "x time",
            target=("<=", 2.0) if sync else None,
            better="lower",
            note="" if sync else f"information: no fsync to wait for; {variant}",
        )
    ratios[f"compactions{sfx}"] = figure(
        [float(len(measured.compaction_seconds))],
        "compactions",
        note=f"information: automatic compactions in the windows; {variant}",
    )
    ratios[f"compaction_seconds{sfx}"] = figure(
        measured.compaction_seconds,
        "s/compaction",
        better="lower",
        note=f"information: from the call that triggered it to the publication, per round; {variant}",
    )
    return ratios


def _params(measured: _Rounds, sizes: dict[str, int]) -> dict[str, Any]:
    """What one variant measured besides its figures: window lengths, sizes, the slowest calls."""
    return {
        **sizes,
        "pairs_per_round": measured.pairs_per_round,
        "snapshot_bytes": measured.snapshot_bytes,
        "next_compaction_after_wal_bytes": [2 * size for size in measured.snapshot_bytes],
        "compactions_with_compaction_disabled": measured.none_compactions,
        "collector": {mode: collector.summary() for mode, collector in measured.collector.items()},
        "slowest_while_compacting": {
            "columns": ["seconds", "round", "started after the trigger (s)", "started before the publication (s)"],
            **{kind: sorted(rows, reverse=True)[:10] for kind, rows in measured.slowest.items()},
        },
    }


def run(ctx: Context) -> dict[str, Any]:
    s = ctx.scale
    n, rounds, min_pairs = s["tasks"], s["rounds"], s["min_pairs"]
    ratios: dict[str, Any] = {}
    variants: dict[str, Any] = {}
    series: dict[str, dict[str, list[float]]] = {"put": {}, "cycle": {}}
    for origin in dict.fromkeys(origin for origin, _ in VARIANTS):
        template, sizes = _template(ctx, n, origin)
        for sync in (sync for o, sync in VARIANTS if o == origin):
            measured = _measure(ctx, template, rounds, min_pairs, sync)
            ratios |= _ratios(measured, origin, sync)
            variants[variant_name(origin, sync)] = _params(measured, sizes)
            for kind, modes in measured.lat.items():
                for mode, samples in modes.items():
                    series[kind][f"{mode}{variant_suffix(origin, sync)}"] = [round(x, 7) for x in samples]
        shutil.rmtree(template.parent)
    return {
        "clock": "wall",
        "title": f"latency of durable puts and reserve+ack cycles with {n:,} tasks, compacting or not",
        "params": {
            "tasks": n,
            "rounds": rounds,
            "min_pairs_per_window": min_pairs,
            "compact_bytes": COMPACT_BYTES,
            "variants": variants,
            "window": "alternating put and reserve+ack, one thread, until the compaction is published",
        },
        "series": series,
        "backends": {},
        "ratios": ratios,
    }


def plot(result: dict[str, Any], path: str) -> str:
    """The wal+sync variant's latencies, compaction against none: share of calls slower than x (needs matplotlib)."""
    plt = pyplot()
    if plt is None:
        return f"latency_while_compacting plot skipped: matplotlib is not installed (pip install matplotlib) for {path}"
    figure_, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
    for axis, (kind, title) in zip(axes, (("put", "durable put"), ("cycle", "durable reserve+ack")), strict=True):
        for mode, label in (("compaction", "a background compaction per window"), ("none", "compaction disabled")):
            ordered = sorted(result["series"][kind][mode])
            count = len(ordered)
            slower = [(count - i) / count for i in range(count)]
            axis.step([x * 1e3 for x in ordered], slower, where="post", label=label)
        if kind == "put":
            axis.axvline(50, color="grey", linestyle=":", label="target: longest put <= 50 ms")
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("latency (ms)")
        axis.set_title(title)
        axis.grid(alpha=0.3, which="both")
        axis.legend(fontsize="small")
    axes[0].set_ylabel("share of calls at least this slow")
    figure_.suptitle(f"{result['params']['tasks']:,} tasks: latency while compacting vs with compaction disabled")
    figure_.tight_layout()
    figure_.savefig(path, dpi=110)
    plt.close(figure_)
    return f"latency_while_compacting plot written to {path}"
