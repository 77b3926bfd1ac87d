"""worker_end_to_end (alias l): no-op tasks drained by walqueue-worker, against huey's consumer, end to end.

Put N tasks, then start the workers and watch them drain the queue: the
dequeue, the (no-op) handler and the acknowledgement of each. The figure
is the rate from the first task seen done to the last (polled every 5 ms),
so that neither side's start-up counts (huey forks its process workers;
walqueue-worker starts walqueue-serve and execs its processes); the rate
with start-up included is reported beside it, for information. Two configurations, each against
huey 3.x (`SqliteHuey`, its consumer) with the same number of workers:

- 1 process x 8 threads: `Worker(Queue(DIR), handler, concurrency=8)` in
  this process, against huey's consumer with ``workers=8,
  worker_type="thread"`` in this process;
- 4 processes: ``walqueue-worker DIR MODULE:noop --processes 4`` (one
  thread each; it starts walqueue-serve itself), against huey's consumer
  with ``workers=4, worker_type="process"``.

Durability is the same: WALQueue fsyncs every commit (`sync=True`, group
commit), huey is ``SqliteHuey(fsync=True)`` (SQLite ``synchronous=FULL``,
journal mode WAL, its default); huey stores no results (``results=False``,
as WALQueue keeps none). huey's consumer otherwise runs with its defaults
(``periodic=False``: no periodic tasks here, none on the WALQueue side
either). huey is a tool-only dependency (``pip install huey`` into the bench's
environment); without it the huey rows are skipped and said so.
"""

from __future__ import annotations

import multiprocessing
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from processes import child_environment

from walqueue import Queue

from .harness import Context, figure, pyplot, summary

#: Sizes at each scale (with the run's `reps` unless set here): `ctx.scale` during the run.
SCALES: dict[str, dict[str, int]] = {
    "tiny": {"tasks": 200, "reps": 1},
    "default": {"tasks": 3000, "reps": 3},
    "big": {"tasks": 10_000, "reps": 5},
}

CONFIGS = ("walqueue_threads_8", "huey_threads_8", "walqueue_processes_4", "huey_processes_4")
_GIVE_UP_SECONDS = 600.0
_POLL_SECONDS = 0.005
_HANDLER_MODULE = "bench_noop_handler"


def _tasks(count: int) -> list[dict[str, Any]]:
    return [{"task_id": f"t{number:07}", "payload": {"n": number}} for number in range(count)]


def _wait_until(done: Any, what: str) -> None:
    give_up = time.monotonic() + _GIVE_UP_SECONDS
    while not done():
        if time.monotonic() > give_up:
            raise RuntimeError(f"worker_end_to_end: {what} did not drain in {_GIVE_UP_SECONDS:.0f} s")
        time.sleep(_POLL_SECONDS)


class Drain:
    """When the workers started, when the first task was seen done (and how many), when the last was."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.start = time.perf_counter()
        self.first: tuple[float, int] | None = None
        self.end = 0.0

    def watch(self, done: Any, what: str) -> Drain:
        """Poll `done()` (the number of tasks done) every few ms until it reaches the count."""

        def finished() -> bool:
            number = done()
            now = time.perf_counter()
            if number and self.first is None:
                self.first = (now, number)
            self.end = now
            return bool(number >= self.count)

        _wait_until(finished, what)
        return self

    def rates(self) -> tuple[float, float]:
        """Tasks/s from the start (start-up included), and from the first task seen done to the last."""
        assert self.first is not None
        first_time, first_done = self.first
        steady = (self.count - first_done) / max(self.end - first_time, 1e-9)
        return self.count / (self.end - self.start), steady


def walqueue_threads(directory: Path, count: int) -> Drain:
    """`Worker(concurrency=8)` in this process draining `count` tasks."""
    from walqueue.worker import Worker

    with Queue(directory / "q") as queue:
        queue.put_many(_tasks(count))
        worker = Worker(queue, lambda job, context: None, concurrency=8)
        drain = Drain(count)
        worker.start()
        drain.watch(lambda: worker.stats()["completed"], "walqueue, 8 threads")
        worker.stop()
        worker.wait(60)
    return drain


def walqueue_processes(directory: Path, count: int) -> Drain:
    """`walqueue-worker DIR noop --processes 4` (its server's start included) draining `count` tasks."""
    from walqueue.client import Client

    (directory / f"{_HANDLER_MODULE}.py").write_text("def noop(job, context):\n    return None\n")
    store = directory / "q"
    with Queue(store) as queue:
        queue.put_many(_tasks(count))
    command = [sys.executable, "-m", "walqueue.worker", str(store), f"{_HANDLER_MODULE}:noop", "--processes", "4"]
    command += ["--log-level", "WARNING", "--summary", "0"]
    drain = Drain(count)
    process = subprocess.Popen(command, cwd=directory, env=child_environment(), stdin=subprocess.DEVNULL)
    client: Client | None = None
    try:
        socket_path = store / "worker.sock"
        _wait_until(lambda: socket_path.exists() or process.poll() is not None, "walqueue-serve's socket")
        client = Client(socket_path)
        drain.watch(lambda: client.stats()["counts"]["completed"], "walqueue, 4 processes")
    finally:
        if client is not None:
            client.close()
        process.send_signal(signal.SIGTERM)
        process.wait(120)
    return drain


def huey_missing() -> str | None:
    try:
        import huey  # type: ignore[import-untyped, import-not-found, unused-ignore]  # noqa: F401
    except ImportError as error:
        return f"huey is not importable here ({error}); pip install huey"
    return None


def huey_drain(directory: Path, count: int, workers: int, worker_type: str) -> Drain:
    """Seconds for huey's consumer (SqliteHuey, fsync=True) with `workers` of `worker_type` to run `count` tasks."""
    import logging

    from huey import SqliteHuey  # type: ignore[import-untyped, import-not-found, unused-ignore]

    logging.getLogger("huey").setLevel(logging.WARNING)
    done = multiprocessing.get_context("fork").Value("l", 0)  # shared with huey's forked process workers
    huey = SqliteHuey(name="bench", filename=str(directory / "huey.db"), fsync=True, results=False)

    @huey.task()  # type: ignore[untyped-decorator, misc, unused-ignore]
    def noop(number: int) -> None:
        with done.get_lock():
            done.value += 1

    for number in range(count):
        noop(number)
    consumer = huey.create_consumer(workers=workers, worker_type=worker_type, periodic=False)
    drain = Drain(count)
    consumer.start()
    try:
        drain.watch(lambda: done.value, f"huey, {workers} {worker_type} workers")
    finally:
        consumer.stop(graceful=True)
    return drain


def _measure(name: str, directory: Path, count: int) -> Drain:
    if name == "walqueue_threads_8":
        return walqueue_threads(directory, count)
    if name == "walqueue_processes_4":
        return walqueue_processes(directory, count)
    if name == "huey_threads_8":
        return huey_drain(directory, count, 8, "thread")
    if name == "huey_processes_4":
        return huey_drain(directory, count, 4, "process")
    raise ValueError(name)


def run(ctx: Context) -> dict[str, Any]:
    count, reps = ctx.scale["tasks"], ctx.scale["reps"]
    missing = huey_missing()
    configs = [name for name in CONFIGS if missing is None or not name.startswith("huey")]
    steady: dict[str, list[float]] = {name: [] for name in configs}
    whole: dict[str, list[float]] = {name: [] for name in configs}
    for rep in range(reps):
        shift = rep % len(configs)
        for name in configs[shift:] + configs[:shift]:
            with_start, without = _measure(name, ctx.dir(f"l-{name}"), count).rates()
            steady[name].append(without)
            whole[name].append(with_start)
            ctx.log(f"worker_end_to_end: rep {rep} {name}: {without:,.0f} tasks/s ({with_start:,.0f} with start-up)")
    backends: dict[str, Any] = {}
    for label, series in (("tasks/s", steady), ("tasks/s with start-up", whole)):
        block = {}
        for name, samples in series.items():
            fig = figure(samples, "tasks/s")
            fig["clock"] = "wall"
            fig["other_clock"] = dict(summary(samples), clock="wall")
            block[name] = fig
        backends[label] = block
    ratios: dict[str, Any] = {}
    if missing is None:
        for ours, theirs in (("walqueue_threads_8", "huey_threads_8"), ("walqueue_processes_4", "huey_processes_4")):
            per_rep = [a / b for a, b in zip(steady[ours], steady[theirs], strict=True)]
            ratios[f"{ours}_vs_{theirs}"] = figure(per_rep, "x", target=(">=", 2.0))
            per_rep = [a / b for a, b in zip(whole[ours], whole[theirs], strict=True)]
            ratios[f"{ours}_vs_{theirs}_with_start_up"] = figure(
                per_rep, "x", note="information: the workers' start-up included (exec'd processes vs forked)"
            )
    return {
        "clock": "wall",
        "title": f"end to end: {count} no-op tasks drained by the workers, from the first task done to the last",
        "params": {
            "tasks": count,
            "reps": reps,
            "walqueue": "Queue(sync=True); Worker(concurrency=8) in process; walqueue-worker --processes 4",
            "huey": missing
            or ("SqliteHuey(fsync=True, results=False); consumer 8 threads / 4 processes; periodic=False"),
        },
        "series": {"steady": steady, "with_start_up": whole},
        "backends": backends,
        "ratios": ratios,
    }


def plot(result: dict[str, Any], path: str) -> str:
    """Bars of tasks/s per configuration, median with min..max (needs matplotlib, a tool-only dependency)."""
    plt = pyplot()
    if plt is None:
        return f"worker_end_to_end plot skipped: matplotlib is not installed (pip install matplotlib) for {path}"
    series: dict[str, list[float]] = result["series"]["steady"]
    names = [name for name in CONFIGS if series.get(name)]
    medians = [statistics.median(series[name]) for name in names]
    errors = [
        [median - min(series[name]) for median, name in zip(medians, names, strict=True)],
        [max(series[name]) - median for median, name in zip(medians, names, strict=True)],
    ]
    colours = ["tab:blue" if name.startswith("walqueue") else "tab:gray" for name in names]
    figure_, axis = plt.subplots(figsize=(8, 4.5))
    axis.bar(range(len(names)), medians, yerr=errors, capsize=3, color=colours)
    axis.set_xticks(range(len(names)), [name.replace("_", " ") for name in names])
    axis.set_ylabel("no-op tasks per second (median, min..max)")
    axis.set_title("walqueue-worker vs huey's consumer, durable, same number of workers")
    figure_.tight_layout()
    figure_.savefig(path, dpi=110)
    plt.close(figure_)
    return f"worker_end_to_end plot written to {path}"
