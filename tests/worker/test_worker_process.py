"""walqueue-worker as a process: usage errors write nothing; SIGTERM stops it cleanly, with threads or processes.

The handlers live in a module written into the test's directory, which is
the command's working directory (the command searches it first, as
``python -m`` does). They append a line to a side log when they start and
when they finish, so the test sees progress without opening the queue
(which the worker or its server holds).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from walqueue import Queue, Task

if TYPE_CHECKING:
    from conftest import RunPython

HANDLERS = """
import os, time

LOG = os.environ["WORKER_SIDE_LOG"]

def note(line):
    with open(LOG, "a") as log:
        log.write(line + "\\n")

def handle(job, context):
    note(f"start {job.id} {os.getpid()}")
    if job.payload.get("stuck"):
        time.sleep(600)  # ignores its context: only a hard timeout or the end of the grace stops it
    deadline = time.monotonic() + job.payload.get("seconds", 0)
    while time.monotonic() < deadline:
        context.check()
        time.sleep(0.01)
    note(f"done {job.id} {os.getpid()}")
"""

WAIT = 60.0


@pytest.fixture
def app(tmp_path: Path) -> Path:
    (tmp_path / "side_tasks.py").write_text(HANDLERS)
    (tmp_path / "broken_tasks.py").write_text("raise RuntimeError('the module fails on import')\n")
    return tmp_path


def worker_env(src_pythonpath: str, side_log: Path) -> dict[str, str]:
    env = dict(os.environ, WORKER_SIDE_LOG=str(side_log))
    if src_pythonpath:
        env["PYTHONPATH"] = src_pythonpath + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def side_lines(side_log: Path, word: str) -> list[str]:
    if not side_log.exists():
        return []
    return [line for line in side_log.read_text().splitlines() if line.startswith(word + " ")]


def wait_for(predicate: object, process: subprocess.Popen[str]) -> None:
    give_up = time.monotonic() + WAIT
    while not predicate():  # type: ignore[operator]
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < give_up, "the worker made no progress"
        time.sleep(0.05)


def start_worker(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "walqueue.worker", *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_python_m_walqueue_lists_the_worker(run_python: RunPython) -> None:
    result = run_python(["-m", "walqueue"])
    assert result.returncode == 0, result.stderr
    assert "walqueue-worker" in result.stdout and "python -m walqueue.worker" in result.stdout


def test_help_and_version_exit_0(run_python: RunPython) -> None:
    result = run_python(["-m", "walqueue.worker", "--help"])
    assert result.returncode == 0 and "MODULE:CALLABLE" in result.stdout and "exit status" in result.stdout
    result = run_python(["-m", "walqueue.worker", "--version"])
    assert result.returncode == 0 and result.stdout.startswith("walqueue-worker ")


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("no_such_module:handle", "cannot import 'no_such_module': ModuleNotFoundError"),
        ("broken_tasks:handle", "RuntimeError: the module fails on import"),
        ("side_tasks:no_such_function", "has no attribute 'no_such_function'"),
        ("side_tasks:LOG", "is not callable"),
        ("side_tasks", "MODULE:CALLABLE"),
    ],
)
@pytest.mark.parametrize("processes", [[], ["--processes", "4"]])
def test_a_handler_that_cannot_be_imported_is_a_usage_error_and_writes_nothing(
    run_python: RunPython, app: Path, spec: str, words: str, processes: list[str]
) -> None:
    env = dict(os.environ, WORKER_SIDE_LOG=str(app / "side.log"))
    result = run_python(["-m", "walqueue.worker", str(app / "q"), spec, *processes], cwd=app, env=env)
    assert result.returncode == 64, result.stderr
    assert words in result.stderr and "usage:" in result.stderr
    assert not (app / "q").exists()  # not even the directory


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["side_tasks:handle"],
        ["--socket", "s.sock", "q", "side_tasks:handle"],
        ["q", "side_tasks:handle", "--concurrency", "0"],
        ["q", "side_tasks:handle", "--lease", "soon"],
        ["q", "side_tasks:handle", "--schedule", "missing.toml"],
    ],
)
def test_usage_errors_exit_64_and_write_nothing(run_python: RunPython, app: Path, args: list[str]) -> None:
    result = run_python(["-m", "walqueue.worker", *args], cwd=app)
    assert result.returncode == 64, result.stderr
    assert not (app / "q").exists()


@pytest.mark.parametrize(
    "text",
    [
        '[[task]]\nname = "x"\ncron = 5\n',
        '[[task]]\nname = "x"\nevery = inf\n',
        '[[task]]\nname = "x"\nevery = 1\n\n[[task]]\nname = "x"\nevery = 2\n',
        '[[task]]\nname = "x"\nevery = 1\nmax_attempts = 0\n',
        '[[task]]\nname = "x"\nevery = 1\npayload = {n = nan}\n',
    ],
)
@pytest.mark.parametrize("processes", [[], ["--processes", "2"]])
def test_a_bad_schedule_file_is_a_usage_error_that_writes_nothing(
    run_python: RunPython, app: Path, text: str, processes: list[str]
) -> None:
    (app / "schedule.toml").write_text(text)
    env = dict(os.environ, WORKER_SIDE_LOG=str(app / "side.log"))
    result = run_python(
        ["-m", "walqueue.worker", "q", "side_tasks:handle", "--schedule", "schedule.toml", *processes],
        cwd=app,
        env=env,
        timeout=30,
    )
    assert result.returncode == 64, result.stderr
    assert "schedule" in result.stderr and "Traceback" not in result.stderr
    assert not (app / "q").exists()


@pytest.mark.timeout(120)
def test_sigterm_to_two_processes_mid_jobs_exits_0_within_the_grace_holding_no_lease(
    app: Path, src_pythonpath: str
) -> None:
    side_log = app / "side.log"
    with Queue(app / "q") as producer:
        producer.put_many([{"task_id": f"job-{n:02}", "payload": {"seconds": 0.3}} for n in range(40)])
    grace = 2.0
    worker = start_worker(
        [str(app / "q"), "side_tasks:handle", "--processes", "2", "--concurrency", "2", "--grace", str(grace)],
        app,
        worker_env(src_pythonpath, side_log),
    )
    wait_for(lambda: len(side_lines(side_log, "done")) >= 4, worker)
    assert len({line.split()[2] for line in side_lines(side_log, "start")}) >= 1
    stopped_at = time.monotonic()
    worker.send_signal(signal.SIGTERM)
    _, stderr = worker.communicate(timeout=grace + 30)
    took = time.monotonic() - stopped_at
    assert worker.returncode == 0, stderr
    assert took < grace + 30  # a bound on hanging, not a speed claim
    with Queue(app / "q") as reopened:
        counts = reopened.stats()["counts"]
        assert counts["leased"] == 0 and counts["dead"] == 0
        assert counts["ready"] + counts["completed"] == 40
        done = {line.split()[1] for line in side_lines(side_log, "done")}
        completed = {task.task_id for task in reopened.tasks("completed")}
        assert completed <= done  # nothing was acked that did not finish
    assert not (app / "q" / "worker.sock").exists()  # the server it started removed its socket


def stuck_worker(app: Path, src_pythonpath: str, grace: str) -> subprocess.Popen[str]:
    """A walqueue-worker with `grace` on a queue of one task whose handler never returns, once it started."""
    side_log = app / "side.log"
    with Queue(app / "q") as producer:
        producer.put("stuck", {"stuck": True})
    worker = start_worker(
        [str(app / "q"), "side_tasks:handle", "--grace", grace], app, worker_env(src_pythonpath, side_log)
    )
    wait_for(lambda: side_lines(side_log, "start"), worker)
    return worker


def released(worker: subprocess.Popen[str], app: Path, says: str) -> Task:
    """The stuck task once `worker` exited 0 saying `says`: given back, ready with no worker (the reopened store)."""
    _, stderr = worker.communicate(timeout=WAIT)
    assert worker.returncode == 0, stderr
    assert says in stderr
    with Queue(app / "q") as reopened:
        task = reopened.get("stuck")
    assert task is not None and (task.status, task.worker) == ("ready", None)
    return task


@pytest.mark.timeout(120)
def test_sigterm_releases_a_stuck_handlers_lease_after_the_grace_and_exits_0(app: Path, src_pythonpath: str) -> None:
    worker = stuck_worker(app, src_pythonpath, "0.5")
    worker.send_signal(signal.SIGTERM)
    task = released(worker, app, "interrupted stuck")
    assert task.attempts == 1 and task.last_error is not None and task.last_error.type == "Shutdown"


@pytest.mark.timeout(120)
def test_a_hard_timeout_ends_the_process_and_a_new_one_runs_the_rest(app: Path, src_pythonpath: str) -> None:
    side_log = app / "side.log"
    with Queue(app / "q") as producer:
        producer.put("a-stuck", {"stuck": True}, max_attempts=1)
        producer.put_many([{"task_id": f"b-{n}", "payload": {}, "available_at": 1} for n in range(3)])
    worker = start_worker(
        [str(app / "q"), "side_tasks:handle", "--processes", "1", "--timeout", "0.5"],
        app,
        worker_env(src_pythonpath, side_log),
    )
    wait_for(lambda: len(side_lines(side_log, "done")) == 3, worker)
    pids = {line.split()[2] for line in side_lines(side_log, "start")}
    assert len(pids) == 2  # the stuck one's process, and the one started after it exited
    worker.send_signal(signal.SIGTERM)
    _, stderr = worker.communicate(timeout=WAIT)
    assert worker.returncode == 0, stderr
    with Queue(app / "q") as reopened:
        stuck = reopened.get("a-stuck")
        assert stuck is not None and stuck.status == "dead"
        assert stuck.last_error is not None and stuck.last_error.type == "Timeout"
        assert reopened.stats()["counts"] == {"ready": 0, "leased": 0, "completed": 3, "dead": 1}


@pytest.mark.timeout(120)
def test_a_second_sigterm_releases_at_once_without_waiting_for_the_grace(app: Path, src_pythonpath: str) -> None:
    worker = stuck_worker(app, src_pythonpath, "3600")
    worker.send_signal(signal.SIGTERM)
    time.sleep(0.5)  # the first signal is acted on: the grace of an hour has begun
    worker.send_signal(signal.SIGTERM)
    released(worker, app, "releasing at once")


@pytest.mark.timeout(120)
def test_json_lines_logging_gives_one_line_per_outcome_and_a_summary(app: Path, src_pythonpath: str) -> None:
    side_log = app / "side.log"
    with Queue(app / "q") as producer:
        producer.put_many([{"task_id": f"job-{n}", "payload": {}} for n in range(3)])
    worker = start_worker(
        [str(app / "q"), "side_tasks:handle", "--log-json", "--summary", "0.2"],
        app,
        worker_env(src_pythonpath, side_log),
    )
    wait_for(lambda: len(side_lines(side_log, "done")) == 3, worker)
    time.sleep(0.5)  # a summary line or two
    worker.send_signal(signal.SIGTERM)
    _, stderr = worker.communicate(timeout=WAIT)
    assert worker.returncode == 0, stderr
    lines = [json.loads(line) for line in stderr.splitlines()]
    outcomes = [line for line in lines if line.get("event") == "completed"]
    assert sorted(line["task"] for line in outcomes) == ["job-0", "job-1", "job-2"]
    assert all(line["attempt"] == 1 and line["logger"] == "walqueue.worker" for line in outcomes)
    summaries = [line for line in lines if line.get("event") == "summary"]
    assert summaries and summaries[-1]["counts"]["completed"] == 3 and summaries[-1]["counts"]["processed"] == 3


def test_a_directory_owned_by_another_process_exits_2_and_says_what_to_do(run_python: RunPython, app: Path) -> None:
    with Queue(app / "q") as owner:  # this process holds the directory's lock
        owner.put("t", {})
        env = dict(os.environ, WORKER_SIDE_LOG=str(app / "side.log"))
        result = run_python(["-m", "walqueue.worker", str(app / "q"), "side_tasks:handle"], cwd=app, env=env)
    assert result.returncode == 2, result.stderr
    assert "DirectoryLocked" in result.stderr and "--socket PATH" in result.stderr


def _live_processes_naming(text: str) -> list[str]:
    """The command lines of live (not zombie) processes that contain `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # it exited while we looked
        if text in command and state != "Z":
            found.append(command)
    return found


@pytest.mark.timeout(120)
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_when_the_supervisor_is_sigkilled_its_server_and_workers_stop_on_their_own_holding_no_lease(
    app: Path, src_pythonpath: str, start_method: str
) -> None:
    side_log = app / "side.log"
    with Queue(app / "q") as producer:
        producer.put("stuck", {"stuck": True})
        producer.put_many([{"task_id": f"job-{n:02}", "payload": {"seconds": 0.2}} for n in range(20)])
    with open(app / "supervisor.log", "w") as output:  # a file: nobody is left to read a pipe once it is killed
        supervisor = subprocess.Popen(
            [sys.executable, "-m", "walqueue.worker", str(app / "q"), "side_tasks:handle", "--processes", "2"]
            + ["--grace", "1", "--start-method", start_method],
            cwd=app,
            env=worker_env(src_pythonpath, side_log),
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=output,
        )
    try:
        wait_for(lambda: any(" stuck " in line + " " for line in side_lines(side_log, "start")), supervisor)
        wait_for(lambda: len(side_lines(side_log, "done")) >= 2, supervisor)
        assert len(_live_processes_naming(str(app / "q"))) == 4  # the supervisor, its server, two workers
    finally:
        supervisor.kill()  # no signal is passed on: its children are orphans now
        supervisor.wait()
    give_up = time.monotonic() + WAIT
    while _live_processes_naming(str(app / "q")):
        assert time.monotonic() < give_up, "orphans left running:\n" + "\n".join(_live_processes_naming(str(app / "q")))
        time.sleep(0.1)
    log = (app / "supervisor.log").read_text()
    assert "the process that started this one is gone" in log
    with Queue(app / "q") as reopened:  # the server let the directory go
        assert reopened.stats()["counts"]["leased"] == 0
        stuck = reopened.get("stuck")
        assert stuck is not None and (stuck.status, stuck.worker) == ("ready", None)
        assert stuck.last_error is not None and stuck.last_error.type == "Shutdown"  # released, not left to expire
    assert not (app / "q" / "worker.sock").exists()
