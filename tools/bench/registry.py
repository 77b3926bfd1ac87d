"""Every workload, in the order a run goes through them, with the letter it had before it had a name.

Adding a workload is a module (its `SCALES`, its `run`, and a `plot` if it
draws one) and one row here; the command line, the JSON and the Markdown
tables take everything else from the row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import (
    cpu_per_call,
    cycle_cost_growth,
    group_commit_threads,
    lanes,
    latency_while_compacting,
    memory_per_task,
    mixed_run_compacting,
    open_torn_tail,
    put_durable,
    put_many_durable,
    reopen,
    replication,
    reserve_ack_durable,
    server_processes,
    task_results,
    worker_end_to_end,
)
from .harness import Context


@dataclass(frozen=True)
class Workload:
    """One row: a workload's name (what it measures), its letter (an alias), and its entry points."""

    name: str
    letter: str
    run: Callable[[Context], dict[str, Any]]
    #: Per scale, the sizes `run` reads from `ctx.scale` (with the run's `reps` unless set here).
    scales: dict[str, dict[str, int]]
    #: Draws a run's result into a PNG and says what it did; `--plot-LETTER` / `--plot-NAME` ask for it.
    plot: Callable[[dict[str, Any], str], str] | None = None

    @property
    def summary(self) -> str:
        """What the workload measures: its module's first docstring line, after "name (alias x): "."""
        module = __import__(self.run.__module__, fromlist=["__doc__"])
        return (module.__doc__ or "").split("\n", 1)[0].split(": ", 1)[-1]


WORKLOADS: tuple[Workload, ...] = (
    Workload("put_durable", "a", put_durable.run, put_durable.SCALES),
    Workload("reserve_ack_durable", "b", reserve_ack_durable.run, reserve_ack_durable.SCALES),
    Workload("put_many_durable", "c", put_many_durable.run, put_many_durable.SCALES),
    Workload("cpu_per_call", "d", cpu_per_call.run, cpu_per_call.SCALES),
    Workload("reopen", "e", reopen.run, reopen.SCALES),
    Workload("cycle_cost_growth", "f", cycle_cost_growth.run, cycle_cost_growth.SCALES),
    Workload("memory_per_task", "g", memory_per_task.run, memory_per_task.SCALES),
    Workload(
        "group_commit_threads", "h", group_commit_threads.run, group_commit_threads.SCALES, group_commit_threads.plot
    ),
    Workload(
        "latency_while_compacting",
        "i",
        latency_while_compacting.run,
        latency_while_compacting.SCALES,
        latency_while_compacting.plot,
    ),
    Workload("open_torn_tail", "k", open_torn_tail.run, open_torn_tail.SCALES),
    Workload("server_processes", "j", server_processes.run, server_processes.SCALES, server_processes.plot),
    Workload("worker_end_to_end", "l", worker_end_to_end.run, worker_end_to_end.SCALES, worker_end_to_end.plot),
    Workload("lanes", "m", lanes.run, lanes.SCALES),
    Workload("replication", "n", replication.run, replication.SCALES),
    Workload("task_results", "o", task_results.run, task_results.SCALES),
    Workload("mixed_run_compacting", "p", mixed_run_compacting.run, mixed_run_compacting.SCALES),
)
BY_NAME = {workload.name: workload for workload in WORKLOADS}
BY_LETTER = {workload.letter: workload for workload in WORKLOADS}


def resolve(word: str) -> Workload:
    """The workload called `word`, by name or by letter; KeyError if there is none."""
    return BY_NAME.get(word) or BY_LETTER[word]
