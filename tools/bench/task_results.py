"""task_results (alias m): task functions with results, against huey's tasks with results, 4 thread workers each.

WALQueue: an `App` bound to a `Queue(sync=True)` in this process and a
`Worker(app, concurrency=4)` running it; a result is read with
`handle.result()` (which waits on the queue's commits). huey 3.x:
`SqliteHuey(fsync=True)` (results stored, the default) and its consumer
with 4 thread workers (its defaults otherwise); a result is read with
`result.get(blocking=True)`. Both run in this process, from a fresh store.

- one_at_a_time: enqueue a task, wait for its result, then the next (a
  producer waiting on each result): tasks per second;
- in_flight: enqueue `in_flight` tasks, then read every result: tasks/s;
- chains: `chains` chains of 3 steps (WALQueue: each step a follow-up
  committed with the previous step's ack; huey: a pipeline,
  ``add.s(..).then(add, ..).then(add, ..)``), then every chain's last
  result: chains/s;
- first_result: a fleet started after one task was put, until that task's
  result is read: seconds (information, lower is better).

huey is a tool-only dependency (``pip install huey``); without it the
huey rows are skipped and said so.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from walqueue import Queue
from walqueue.worker import App, Worker, current

from .harness import Context, figure, summary

SCALES: dict[str, dict[str, int]] = {
    "tiny": {"one_at_a_time": 30, "in_flight": 200, "chains": 50, "reps": 1},
    "default": {"one_at_a_time": 200, "in_flight": 1000, "chains": 1000, "reps": 3},
    "big": {"one_at_a_time": 500, "in_flight": 1000, "chains": 1000, "reps": 5},
}
WORKERS = 4
MEASURES = ("one_at_a_time", "in_flight", "chains", "first_result")
_TIMEOUT = 120.0

app = App()


@app.task(name="bench.add")
def add(a: int, b: int) -> int:
    return a + b


@app.task(name="bench.step")
def step(value: int, left: int) -> int:
    """A step of a chain: adds 1 and, while steps are left, enqueues the next as a follow-up."""
    if left > 1:
        current().enqueue(step, value + 1, left - 1)
    return value + 1


def _walqueue(directory: Path, measure: str, count: int) -> float:
    """Seconds WALQueue takes for `measure` over `count` tasks (or chains)."""
    with Queue(directory / "q") as queue:
        app.bind(queue)
        worker = Worker(queue, app, concurrency=WORKERS)
        if measure == "first_result":
            handle = add.enqueue(1, 2)
            began = time.perf_counter()
            worker.start()
            handle.result(timeout=_TIMEOUT)
            seconds = time.perf_counter() - began
        else:
            worker.start()
            began = time.perf_counter()
            _WALQUEUE_RUNS[measure](count)
            seconds = time.perf_counter() - began
        worker.stop()
        worker.wait(60)
    return seconds


def _walqueue_one_at_a_time(count: int) -> None:
    for number in range(count):
        assert add.enqueue(number, 1).result(timeout=_TIMEOUT) == number + 1


def _walqueue_in_flight(count: int) -> None:
    handles = [add.enqueue(number, 1) for number in range(count)]
    assert [handle.result(timeout=_TIMEOUT) for handle in handles] == [n + 1 for n in range(count)]


def _walqueue_chains(count: int) -> None:
    firsts = [step.enqueue(number, 3) for number in range(count)]
    lasts = [app.handle(f"{first.id}/1/1") for first in firsts]
    assert [last.result(timeout=_TIMEOUT) for last in lasts] == [n + 3 for n in range(count)]


_WALQUEUE_RUNS: dict[str, Callable[[int], None]] = {
    "one_at_a_time": _walqueue_one_at_a_time,
    "in_flight": _walqueue_in_flight,
    "chains": _walqueue_chains,
}


def huey_missing() -> str | None:
    try:
        import huey  # type: ignore[import-untyped, import-not-found, unused-ignore]  # noqa: F401
    except ImportError as error:
        return f"huey is not importable here ({error}); pip install huey"
    return None


def _huey(directory: Path, measure: str, count: int) -> float:
    """Seconds huey takes for `measure` over `count` tasks (or chains)."""
    from huey import SqliteHuey  # type: ignore[import-untyped, import-not-found, unused-ignore]

    logging.getLogger("huey").setLevel(logging.WARNING)
    huey = SqliteHuey(name="bench", filename=str(directory / "huey.db"), fsync=True)

    @huey.task()  # type: ignore[untyped-decorator, misc, unused-ignore]
    def hadd(a: int, b: int) -> int:
        return a + b

    consumer = huey.create_consumer(workers=WORKERS, worker_type="thread", periodic=False)
    try:
        if measure == "first_result":
            result = hadd(1, 2)
            began = time.perf_counter()
            consumer.start()
            result.get(blocking=True, timeout=_TIMEOUT)
            return time.perf_counter() - began
        consumer.start()
        began = time.perf_counter()
        if measure == "one_at_a_time":
            for number in range(count):
                assert hadd(number, 1).get(blocking=True, timeout=_TIMEOUT) == number + 1
        elif measure == "in_flight":
            results = [hadd(number, 1) for number in range(count)]
            assert [r.get(blocking=True, timeout=_TIMEOUT) for r in results] == [n + 1 for n in range(count)]
        else:
            groups = [huey.enqueue(hadd.s(n, 1).then(hadd, 1).then(hadd, 1)) for n in range(count)]
            lasts = [group.get(blocking=True, timeout=_TIMEOUT)[-1] for group in groups]
            assert lasts == [n + 3 for n in range(count)]
        return time.perf_counter() - began
    finally:
        consumer.stop(graceful=True)


def _wall(samples: list[float], unit: str, better: str = "higher") -> dict[str, Any]:
    fig = figure(samples, unit, better=better)
    fig["clock"] = "wall"
    fig["other_clock"] = dict(summary(samples), clock="wall")
    return fig


def run(ctx: Context) -> dict[str, Any]:
    missing = huey_missing()
    systems = ["walqueue"] + ([] if missing else ["huey"])
    seconds: dict[str, dict[str, list[float]]] = {m: {s: [] for s in systems} for m in MEASURES}
    for rep in range(ctx.scale["reps"]):
        for measure in MEASURES:
            count = 1 if measure == "first_result" else ctx.scale[measure]
            for system in systems if rep % 2 == 0 else systems[::-1]:
                measured = _walqueue if system == "walqueue" else _huey
                taken = measured(ctx.dir(f"m-{system}-{measure}"), measure, count)
                seconds[measure][system].append(taken)
                ctx.log(f"task_results: rep {rep} {system} {measure}: {count} in {taken:.3f} s")
    backends: dict[str, Any] = {}
    ratios: dict[str, Any] = {}
    for measure in MEASURES:
        count = 1 if measure == "first_result" else ctx.scale[measure]
        if measure == "first_result":
            backends[measure] = {s: _wall(v, "s", "lower") for s, v in seconds[measure].items()}
        else:
            unit = "chains/s" if measure == "chains" else "tasks/s"
            backends[measure] = {s: _wall([count / t for t in v], unit) for s, v in seconds[measure].items()}
        if missing is None:
            per_rep = [h / w for w, h in zip(seconds[measure]["walqueue"], seconds[measure]["huey"], strict=True)]
            if measure == "first_result":
                ratios[f"{measure}_huey_over_walqueue"] = figure(per_rep, "x", note="information: huey's time / ours")
            else:
                ratios[f"{measure}_vs_huey"] = figure(per_rep, "x", target=(">=", 2.0))
    return {
        "clock": "wall",
        "title": "task functions with results vs huey (4 thread workers each, fsync on both)",
        "params": {
            **{name: ctx.scale[name] for name in ("one_at_a_time", "in_flight", "chains", "reps")},
            "walqueue": "App + Worker(concurrency=4) on Queue(sync=True) in process; handle.result()",
            "huey": missing or "SqliteHuey(fsync=True) + consumer(workers=4, thread); result.get(blocking=True)",
        },
        "series": seconds,
        "backends": backends,
        "ratios": ratios,
    }
