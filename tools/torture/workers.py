"""Campaign ``workers``: SIGKILL worker processes and the server of `walqueue-worker --processes` under load.

Each unit puts a mix of tasks (ones that succeed, fail a few times, always
fail, fail permanently, run long), starts ``walqueue-worker DIR
side:handle --processes 3 --schedule FILE`` (its supervisor starts
walqueue-serve and restarts whatever dies), and SIGKILLs a worker process
or the server at random moments (half of the server's kills after a
freeze, so that calls, completions among them, are in flight at the kill:
supervised.py), or stops a worker process cleanly with
SIGTERM (it gives back the leases it never started; the supervisor starts
it again), until every task is done. Handlers append
one line when they start and one when they end to a side log (outside the
store, in the unit's own directory). Then SIGTERM, or in a third of the
units SIGKILL to the supervisor itself, and the checks:

- the supervisor exits 0 (after SIGTERM); after SIGKILL, every process it
  started stops on its own within a bound (its workers as on SIGTERM, its
  server once they have left);
- the store holds no lease, but one granted by a reserve whose answer was
  lost (a server killed, often after a freeze) and never run: nobody knew
  of it, and it expires;
- every task is completed, or dead with its last error, as `max_attempts`
  allows: dead only with a `Permanent` error, or with its attempts used up;
  completed only if a run of it ended well;
- every handler run is accounted for: each start has its end, or ran in a
  process this campaign killed, or past the grace of the final stop (its
  lease then released); no run has an attempt beyond the task's;
- nothing acknowledged is lost: every task seen completed during the run
  is completed at the end;
- a dead task used its last attempt in a run (unless a kill took that
  lease): an unstarted lease given back at a stop restores its attempt;
- a task dead of ``LeaseExpired`` whose last run ended in a process that
  was not killed: that process logged the run lost, because the lease was
  lost (a server killed between the handler's end and its completion is
  no excuse: the worker sends a completion whose answer was lost again),
  or, stopping, because the answer was (its logs: ``WORKER_LOG``);
- failures the worker cannot record as raised (``str()`` raises, a class
  without a name, a retry at the end of time) are recorded truthfully,
  and the worker goes on;
- an ``async def`` handler is refused at start: exit 64, nothing written;
- no periodic firing is enqueued twice: one task per firing time, each a
  multiple of the interval, no more than the time allowed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from processes import child_environment, children, live_processes

from walqueue import Queue, Task

from . import supervised
from .harness import Report, socket_units

HANDLERS = """
import os, time
from walqueue.worker import Permanent, Retry

class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("this error cannot be printed")

Nameless = type("", (Exception,), {})

LOG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "side.log")

def note(*words):
    line = " ".join(str(word) for word in words) + "\\n"
    descriptor = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(descriptor, line.encode())
    finally:
        os.close(descriptor)

def handle(job, context):
    kind = job.payload.get("kind", "tick")
    note("start", job.id, job.attempts, os.getpid())
    try:
        if kind == "slow":
            deadline = time.monotonic() + job.payload["seconds"]
            while time.monotonic() < deadline:
                context.check()
                time.sleep(0.02)
        elif kind == "flaky" and job.attempts < job.payload["until"]:
            raise RuntimeError(f"flaky attempt {job.attempts}")
        elif kind == "fail":
            raise RuntimeError("always fails")
        elif kind == "permanent":
            raise Permanent("cannot ever work")
        elif kind == "unprintable":
            raise Unprintable()
        elif kind == "nameless":
            raise Nameless("a class without a name")
        elif kind == "far":
            raise Retry("see you at the end of time", delay=10**30)
    except BaseException as error:
        note("end", job.id, job.attempts, os.getpid(), type(error).__name__ or "unnamed")
        raise
    note("end", job.id, job.attempts, os.getpid(), "ok")

async def handle_async(job, context):
    note("start", job.id, job.attempts, os.getpid())
"""

KINDS = ("ok", "ok", "slow", "flaky", "fail", "permanent") + ("unprintable", "nameless", "far")
#: What each failure the worker cannot record as raised must be recorded as (its type, words of its message).
UNRECORDABLE = {
    "unprintable": ("Unprintable", "str() of the Unprintable raised RuntimeError"),
    "nameless": ("<unnamed exception>", "a class without a name"),
    "far": ("Retry", "see you at the end of time"),
}
#: The largest time the engine stores: where a retry beyond it is clamped.
MAX_TIME = 2**63 - 1
TASKS_PER_UNIT = 40
TICK_SECONDS = 1
UNIT_SECONDS = 60.0  # a unit that has not finished by then is a divergence (something is stuck)
SUPERVISOR_KILL_SHARE = 1 / 3  # the units that end with SIGKILL to the supervisor instead of SIGTERM
ORPHAN_SECONDS = 30.0  # how long a SIGKILLed supervisor's processes may take to stop on their own
WORKER_LOG = "worker.log"  # the supervisor's stderr: its worker processes' log lines, as JSON


@dataclass
class Unit(supervised.Unit):
    """One run of `walqueue-worker --processes` and what this campaign did to it."""

    completed_seen: set[str] = field(default_factory=set)
    started: float = 0.0


def campaign_workers(seed: int, budget: float, report: Report) -> None:
    """Units of kills under load until the budget is spent (at least one; longer while short of the targets)."""
    socket_units(
        "workers", seed, budget, report, lambda directory, rng, where: _run_unit(Unit(directory, rng, report, where))
    )


def _put_tasks(unit: Unit) -> dict[str, dict[str, Any]]:
    tasks = {}
    for number in range(TASKS_PER_UNIT):
        kind = unit.rng.choice(KINDS)
        payload: dict[str, Any] = {"kind": kind}
        if kind == "slow":
            payload["seconds"] = round(unit.rng.uniform(0.05, 0.6), 2)
        if kind == "flaky":
            payload["until"] = unit.rng.randint(2, 3)
        attempts = 1 if kind == "far" else unit.rng.randint(1, 4)  # a retry at the end of time: dead at once
        tasks[f"{kind}-{number:03}"] = {"payload": payload, "max_attempts": attempts}
    with Queue(unit.store) as queue:
        queue.put_many([{"task_id": task_id, **task} for task_id, task in tasks.items()])
    return tasks


def _refuse_async(unit: Unit) -> None:
    """An `async def` handler is a usage error (exit 64) that writes nothing, with threads or processes."""
    (unit.directory / "side.py").write_text(HANDLERS)
    fresh = unit.directory / "never"
    command = [sys.executable, "-m", "walqueue.worker", str(fresh), "side:handle_async"]
    command += unit.rng.choice([[], ["--processes", "2"]])
    result = subprocess.run(command, cwd=unit.directory, env=child_environment(), capture_output=True, timeout=60)
    if result.returncode != 64 or fresh.exists():
        unit.report.diverge(
            f"{unit.where}: an async handler ({' '.join(command[4:])}) exited {result.returncode}"
            f"{' and created its directory' if fresh.exists() else ''}, not a usage error writing nothing"
        )
    unit.report.count("async handlers refused")


def _progress(unit: Unit, tasks: dict[str, dict[str, Any]]) -> bool:
    """Whether every put task is completed or dead (asked of the server; False while it is away)."""
    states = supervised.ask_server(
        unit, lambda client: {t.task_id: t.status for t in client.tasks() if t.task_id in tasks}
    )
    if states is None:
        return False
    unit.completed_seen |= {task_id for task_id, status in states.items() if status == "completed"}
    return len(states) == len(tasks) and all(status in ("completed", "dead") for status in states.values())


def _run_unit(unit: Unit) -> None:
    unit.directory.mkdir(parents=True)
    _refuse_async(unit)
    tasks = _put_tasks(unit)
    (unit.directory / "side.py").write_text(HANDLERS)
    schedule = unit.directory / "schedule.json"
    schedule.write_text(json.dumps([{"name": "tick", "every": TICK_SECONDS, "payload": {"kind": "tick"}}]))
    options = ["--processes", "3", "--concurrency", "2", "--lease", "2", "--grace", "1", "--schedule", str(schedule)]
    unit.started = time.time()
    options += ["--log-level", "WARNING", "--log-json", "--summary", "0"]  # each run lost is logged (WORKER_LOG)
    with supervised.supervisor(unit, "side:handle", options, unit.directory / WORKER_LOG) as process:
        if not supervised.kill_until(
            unit,
            process,
            lambda: _progress(unit, tasks),
            seconds=UNIT_SECONDS,
            pauses=(0.1, 0.6),
            kill_share=0.6,
            stop_share=0.25,
        ):
            return
        unit.stopped |= {pid for pid, kind in children(process.pid) if kind == "worker"}
        if unit.rng.random() < SUPERVISOR_KILL_SHARE:
            _kill_supervisor(unit, process)
        else:
            supervised.terminate(unit, process)
    elapsed = time.time() - unit.started
    _check(unit, tasks, elapsed)


def _kill_supervisor(unit: Unit, supervisor: subprocess.Popen[bytes]) -> None:
    """SIGKILL the supervisor: nobody passes a signal on, and its server and workers must still stop by themselves."""
    group = supervisor.pid  # started with start_new_session: its children are in its process group
    supervisor.kill()
    supervisor.wait()
    unit.report.count("supervisor kills")
    give_up = time.monotonic() + ORPHAN_SECONDS
    while _group_alive(group):
        if time.monotonic() > give_up:
            unit.report.diverge(
                f"{unit.where}: {ORPHAN_SECONDS:.0f} s after the supervisor's SIGKILL, its children run"
            )
            os.killpg(group, signal.SIGKILL)
            return
        time.sleep(0.05)


def _group_alive(group: int) -> bool:
    """Whether a live (not zombie) process is in process group `group`."""
    return any(its_group == group for _, _, its_group in live_processes())


def _side_runs(unit: Unit) -> tuple[dict[tuple[str, int, int], str | None], list[str]]:
    """Each run from the side log: (task, attempt, pid) -> how it ended (None: no end line)."""
    runs: dict[tuple[str, int, int], str | None] = {}
    problems = []
    log = unit.directory / "side.log"
    for line in log.read_text().splitlines() if log.exists() else []:
        words = line.split()
        key = (words[1], int(words[2]), int(words[3]))
        if words[0] == "start":
            runs[key] = None
        elif key not in runs:
            problems.append(f"an end without a start: {line}")
        else:
            runs[key] = words[4]
    return runs, problems


def _lost_runs(unit: Unit) -> tuple[dict[tuple[str, int, int], str], bool]:
    """Each run a worker process logged as lost, (task, attempt, pid) -> why; and whether a reserve's answer was lost.

    The completions sent again are counted.
    """
    lost = {}
    reserve_lost = False
    log = unit.directory / WORKER_LOG
    for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # not a worker's log line (a traceback of a killed process, say)
        if isinstance(record, dict) and "resent" in record:  # a completion whose answer was lost, sent again
            unit.report.count("completions sent again")
        if isinstance(record, dict) and record.get("event") == "lost":
            pid = int(str(record["worker"]).rsplit(":", 1)[1])  # a worker's name is host:pid
            lost[(str(record["task"]), int(record["attempt"]), pid)] = str(record["message"])
        if isinstance(record, dict) and "during 'reserve'" in str(record.get("message")):  # the client's words
            reserve_lost = True
    return lost, reserve_lost


def _check(unit: Unit, tasks: dict[str, dict[str, Any]], elapsed: float) -> None:
    report, where = unit.report, unit.where
    with Queue(unit.store) as queue:
        final = {task.task_id: task for task in queue.tasks()}
    runs, problems = _side_runs(unit)
    lost, reserve_lost = _lost_runs(unit)
    for problem in problems:
        report.diverge(f"{where}: {problem}")
    for task in final.values():
        if task.status != "leased":
            continue
        # Only a lease nobody knew of may outlive the stop: granted by a reserve whose answer was lost, never run.
        if reserve_lost and not any(run[:2] == (task.task_id, task.attempts) for run in runs):
            report.count("leases of a reserve whose answer was lost")
        else:
            report.diverge(f"{where}: {task.task_id}'s lease (attempt {task.attempts}) is still held after the stop")
    for task_id, spec in tasks.items():
        task = final[task_id]
        kind = spec["payload"]["kind"]
        ended_well = any(end == "ok" for (run_id, _, _), end in runs.items() if run_id == task_id)
        report.count("tasks")
        if task.status == "completed":
            report.count("completed")
            if not ended_well or kind in ("fail", "permanent"):
                report.diverge(f"{where}: {task_id} ({kind}) completed without a run that ended well")
        elif task.status == "dead":
            report.count("dead")
            _check_dead(unit, task, kind, runs, lost)
        else:
            report.diverge(f"{where}: {task_id} ends {task.status}")
        if task_id in unit.completed_seen and task.status != "completed":
            report.diverge(f"{where}: {task_id} was seen completed, and is {task.status} now")
    for (task_id, attempt, pid), end in runs.items():
        report.count("handler runs")
        ran = final.get(task_id)
        if ran is None or attempt > ran.attempts:
            report.diverge(f"{where}: a run of {task_id} attempt {attempt} the store never leased")
        if end is None and pid in unit.killed:
            report.count("runs cut by a kill")
        elif end is None and pid in unit.stopped and _released_at_shutdown(ran, attempt):
            report.count("runs cut by the stop")  # past the grace: released, then the process ended
        elif end is None:
            report.diverge(f"{where}: the run of {task_id} attempt {attempt} in {pid} never ended, and was not killed")
    _check_firings(unit, final, elapsed)


def _check_dead(  # noqa: C901 - one check per way a task may have died
    unit: Unit,
    task: Task,
    kind: str,
    runs: dict[tuple[str, int, int], str | None],
    lost: dict[tuple[str, int, int], str],
) -> None:
    """A dead task used its last attempt in a run (or lost it to a kill), and its last error says what happened.

    An unstarted lease given back at a stop restores its attempt
    (`give_back`), so no task dies of a run that never was: a dead task
    that is not `Permanent` has a run of its last attempt, unless a kill
    took that lease (it expired: `LeaseExpired`).
    """
    report, where, error = unit.report, unit.where, task.last_error
    if error is None:
        report.diverge(f"{where}: {task.task_id} is dead without a last error")
        return
    if error.type != "Permanent" and task.attempts < task.max_attempts:
        report.diverge(f"{where}: {task.task_id} dead after {task.attempts} of {task.max_attempts}: {error}")
    last_run = any(run_id == task.task_id and attempt == task.attempts for run_id, attempt, _ in runs)
    if error.type != "LeaseExpired" and not last_run:
        report.diverge(f"{where}: {task.task_id} is dead ({error.type}) without a run of attempt {task.attempts}")
    if error.type == "LeaseExpired":
        _check_expired(unit, task, runs, lost)
    if kind in UNRECORDABLE and error.type != "LeaseExpired":
        expected_type, words = UNRECORDABLE[kind]
        if error.type != expected_type or words not in error.message:
            report.diverge(f"{where}: {task.task_id} ({kind}) recorded as {error}")
        if kind == "far" and task.available_at != MAX_TIME:
            report.diverge(f"{where}: {task.task_id}'s retry at the end of time is at {task.available_at}")
        report.count("unrecordable failures recorded")


def _check_expired(
    unit: Unit, task: Task, runs: dict[tuple[str, int, int], str | None], lost: dict[tuple[str, int, int], str]
) -> None:
    """A task dead of its last lease's expiry whose run ended in a process that lived: that process lost the lease.

    The worker sends a completion whose answer was lost again (a server
    killed between a handler's end and its answer), so its outcome is
    recorded unless the lease itself was lost first (the server away past
    its deadline, and a reserve reaped it), which the worker logs as lost;
    at a stop it tries once, and may log the answer lost instead.
    """
    for (run_id, attempt, pid), end in runs.items():
        if run_id != task.task_id or attempt != task.attempts or end is None or pid in unit.killed:
            continue
        why = lost.get((run_id, attempt, pid))
        if why is not None and ("lease was lost" in why or ("answer was lost" in why and pid in unit.stopped)):
            unit.report.count("expired leases the worker said it lost")
            continue
        said = "logged nothing" if why is None else f"logged only {why!r}"
        unit.report.diverge(
            f"{unit.where}: {task.task_id} is dead of LeaseExpired, but its run of attempt {attempt} ended in {pid}, "
            f"which was not killed and {said}: its outcome should have been recorded"
        )


def _released_at_shutdown(task: Task | None, attempt: int) -> bool:
    """Whether `task`'s attempt `attempt` was given back by a stopping worker (or the task went on after it)."""
    if task is None:
        return False
    error = task.last_error
    shutdown = error is not None and error.type == "Shutdown" and error.attempt == attempt
    return shutdown or task.attempts > attempt


def _check_firings(unit: Unit, final: dict[str, Any], elapsed: float) -> None:
    times = sorted(int(task_id.rsplit(":", 1)[1]) for task_id in final if task_id.startswith("cron:tick:"))
    unit.report.count("periodic firings", len(times))
    if len(times) != len(set(times)) or any(t % (TICK_SECONDS * 1000) for t in times):
        unit.report.diverge(f"{unit.where}: periodic firings not one per interval: {times}")
    if len(times) > elapsed / TICK_SECONDS + 2:
        unit.report.diverge(f"{unit.where}: {len(times)} firings in {elapsed:.1f} s of a {TICK_SECONDS} s interval")
