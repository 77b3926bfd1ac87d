"""walqueue-worker --processes forks its children from a supervisor that has imported the handler's module.

The handler module notes each import of itself and each task in a side
log, with the process ids, so a test sees how each child was started
without opening the queue. The supervisor-SIGKILL test (both start
methods) and the restart after a hard timeout are in test_worker_process.py.
The unit tests of `forkstart` fork inside a fresh interpreter (`run_python`),
never inside pytest's process, which may run threads.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from walqueue import Queue

if TYPE_CHECKING:
    from conftest import RunPython

HANDLERS = """
import os, threading
from pathlib import Path

def note(*words):
    with Path(os.environ["FORK_SIDE_LOG"]).open("a") as side:
        print(*words, file=side)

note("imported", os.getpid())
if os.environ.get("START_A_THREAD"):  # a module that starts a poller when imported
    threading.Thread(target=threading.Event().wait, name="app-poller", daemon=True).start()

def handle(job, context):
    note("done", job.id, os.getpid(), os.getppid())
"""

TASKS = 12
WAIT = 60.0


def _side(side_log: Path, word: str) -> list[list[str]]:
    if not side_log.exists():
        return []
    return [line.split()[1:] for line in side_log.read_text().splitlines() if line.startswith(word + " ")]


def _env(src_pythonpath: str, tmp_path: Path, env_extra: dict[str, str]) -> dict[str, str]:
    paths = os.pathsep.join(filter(None, [src_pythonpath, os.environ.get("PYTHONPATH")]))
    return {**os.environ, "FORK_SIDE_LOG": str(tmp_path / "side.log"), "PYTHONPATH": paths, **env_extra}


def _put_tasks(tmp_path: Path) -> None:
    (tmp_path / "fork_tasks.py").write_text(HANDLERS)
    with Queue(tmp_path / "q") as producer:
        producer.put_many([{"task_id": f"t{n:02}", "payload": {}} for n in range(TASKS)])


def _run_fleet(
    tmp_path: Path,
    src_pythonpath: str,
    extra: list[str],
    env_extra: dict[str, str],
    place: list[str] | None = None,
    imports: int = 1,
) -> tuple[int, str, set[str]]:
    """Run ``--processes 2`` until every task is done, then SIGTERM; (the supervisor's pid, its stderr, names).

    `place`: DIR (the default, tmp_path/q, with its tasks put) or ``--socket PATH`` (a server already has them).
    `imports`: also wait for that many imports of the module (a spawned child may start after the tasks are done).
    The names are the process names (/proc/PID/comm) of the processes that ran the tasks, read before the stop.
    """
    if place is None:
        _put_tasks(tmp_path)
    side_log = tmp_path / "side.log"
    env = _env(src_pythonpath, tmp_path, env_extra)
    where = [str(tmp_path / "q")] if place is None else place
    command = [sys.executable, "-m", "walqueue.worker", *where, "fork_tasks:handle", "--processes", "2"]
    quiet: dict[str, Any] = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL}  # stderr: the log lines
    supervisor = subprocess.Popen(
        [*command, "--grace", "1", *extra], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True, **quiet
    )
    give_up = time.monotonic() + WAIT
    while len(_side(side_log, "done")) < TASKS or len(_side(side_log, "imported")) < imports:
        assert supervisor.poll() is None, supervisor.communicate()
        assert time.monotonic() < give_up, "the fleet made no progress"
        time.sleep(0.05)
    names = {_name(int(worker)) for _, worker, _ in _side(side_log, "done")}
    supervisor.send_signal(signal.SIGTERM)
    _, stderr = supervisor.communicate(timeout=WAIT)
    assert supervisor.returncode == 0, stderr
    if place is None:
        with Queue(tmp_path / "q") as reopened:
            assert reopened.stats()["counts"]["completed"] == TASKS
    return supervisor.pid, stderr, names


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return "?"  # no /proc here, or it exited (a restart)


@pytest.mark.timeout(120)
def test_forked_children_run_the_tasks_with_the_module_the_supervisor_imported_once(
    tmp_path: Path, src_pythonpath: str
) -> None:
    pid, stderr, names = _run_fleet(tmp_path, src_pythonpath, ["--start-method", "fork"], {})
    assert _side(tmp_path / "side.log", "imported") == [[str(pid)]]  # no child imported it again
    done = _side(tmp_path / "side.log", "done")
    assert {parent for _, _, parent in done} == {str(pid)}  # each ran in a child of the supervisor
    assert str(pid) not in {worker for _, worker, _ in done}
    assert "(fork)" in stderr
    if Path("/proc/self/comm").exists():  # their command line is the supervisor's; their name says what they are
        assert names == {"walqueue-worker"}


@pytest.mark.timeout(120)
def test_forked_children_of_a_supervisor_without_a_server_use_the_socket_they_are_given(
    tmp_path: Path, src_pythonpath: str
) -> None:
    _put_tasks(tmp_path)
    socket_path = tmp_path / "s.sock"
    server = subprocess.Popen(
        [sys.executable, "-m", "walqueue.serve", str(tmp_path / "q"), "--socket", str(socket_path)],
        env=_env(src_pythonpath, tmp_path, {}),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert server.stdout is not None and "listening" in server.stdout.readline()
        pid, stderr, _ = _run_fleet(tmp_path, src_pythonpath, [], {}, place=["--socket", str(socket_path)])
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(WAIT)
    assert "(fork)" in stderr
    assert {parent for _, _, parent in _side(tmp_path / "side.log", "done")} == {str(pid)}
    with Queue(tmp_path / "q") as reopened:
        assert reopened.stats()["counts"]["completed"] == TASKS


@pytest.mark.timeout(120)
def test_with_spawn_each_child_is_a_fresh_interpreter_that_imports_the_module_itself(
    tmp_path: Path, src_pythonpath: str
) -> None:
    pid, stderr, _ = _run_fleet(tmp_path, src_pythonpath, ["--start-method", "spawn"], {}, imports=3)
    imported = [importer for [importer] in _side(tmp_path / "side.log", "imported")]
    assert imported.count(str(pid)) == 1 and len(imported) == 3  # the supervisor, then each of the two children
    assert "(spawn)" in stderr


@pytest.mark.timeout(120)
def test_a_module_that_starts_a_thread_when_imported_gets_fresh_interpreters_not_forks(
    tmp_path: Path, src_pythonpath: str
) -> None:
    _, stderr, _ = _run_fleet(tmp_path, src_pythonpath, [], {"START_A_THREAD": "1"}, imports=3)
    assert "not by fork (threads run: app-poller)" in stderr
    assert "(spawn)" in stderr
    assert len(_side(tmp_path / "side.log", "imported")) == 3


def test_start_method_without_processes_is_a_usage_error(run_python: RunPython, tmp_path: Path) -> None:
    (tmp_path / "fork_tasks.py").write_text("def handle(job, context):\n    pass\n")
    result = run_python(
        ["-m", "walqueue.worker", str(tmp_path / "q"), "fork_tasks:handle", "--start-method", "fork"], cwd=tmp_path
    )
    assert result.returncode == 64 and "--start-method applies to --processes" in result.stderr
    assert not (tmp_path / "q").exists()


FORK_PROBE = """
import json, os, signal, sys, threading
from walqueue.worker import forkstart

keep_read, keep_write = os.pipe()
gone_read, gone_write = os.pipe()  # the write end is the "supervisor's own": the child must not hold it
signal.signal(signal.SIGTERM, lambda number, frame: None)  # the supervisor's handler, not the child's

def is_open(fd):
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True

def main(argv):
    held = [fd for fd in (gone_write, keep_read, keep_write, gone_read) if is_open(fd)]
    handler = signal.getsignal(signal.SIGTERM)
    os.write(keep_write, json.dumps({"argv": argv, "held": held, "default": handler == signal.SIG_DFL}).encode())
    os.read(gone_read, 1)  # returns at the end of the pipe: only once the parent closes its write end
    return int(argv[0])

child = forkstart.fork(
    main, [sys.argv[1]], close=[gone_write, keep_read], handlers={signal.SIGTERM: signal.SIG_DFL}
)
os.close(keep_write)
seen = json.loads(os.read(keep_read, 65536))
assert child.poll() is None  # it waits on the pipe: the parent still holds the write end
os.close(gone_write)  # as the supervisor's death would: the child sees the end of the pipe
status = child.wait(30)
print(json.dumps({**seen, "status": status, "kept": [keep_write, gone_read], "threads": forkstart.other_threads()}))
"""


@pytest.mark.parametrize("status", [0, 3])
def test_a_forked_child_drops_the_supervisors_descriptors_and_handlers_and_exits_with_mains_status(
    run_python: RunPython, status: int
) -> None:
    result = run_python(["-c", FORK_PROBE, str(status)])
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["argv"] == [str(status)] and seen["status"] == status
    assert seen["held"] == seen["kept"]  # the descriptors named to close are closed in the child, the others kept
    assert seen["default"]  # the handler the supervisor found, not its own
    assert seen["threads"] == []


CRASH_PROBE = """
import sys
from walqueue.worker import forkstart

def main(argv):
    if argv == ["raise"]:
        raise RuntimeError("the child's main fails")
    sys.exit("a message, as sys.exit(text) gives")

print(forkstart.fork(main, [sys.argv[1]], close=[], handlers={}).wait(30))
"""


@pytest.mark.parametrize(("how", "said"), [("raise", "RuntimeError: the child's main fails"), ("exit", "a message")])
def test_a_forked_child_whose_main_fails_exits_1_and_says_why_as_an_interpreter_would(
    run_python: RunPython, how: str, said: str
) -> None:
    result = run_python(["-c", CRASH_PROBE, how])
    assert result.returncode == 0 and result.stdout.strip() == "1", result
    assert said in result.stderr


def test_other_threads_names_a_thread_the_process_runs(run_python: RunPython) -> None:
    probe = (
        "import threading; from walqueue.worker import forkstart; "
        "threading.Thread(target=threading.Event().wait, name='poller', daemon=True).start(); "
        "print(forkstart.other_threads())"
    )
    result = run_python(["-c", probe])
    assert result.stdout.strip() == "['poller']", result
