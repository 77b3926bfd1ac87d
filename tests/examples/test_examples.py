"""The scripts in examples/ run, exit 0 and leave the queue they promise.

Each example runs as its own process (`run_python` passes the three src
directories on through PYTHONPATH, or nothing when pytest tests installed
copies) on a fresh directory; the test then opens that directory with
`Queue` and checks what the script's docstring says it leaves. Running an
example a second time must write nothing: their puts are identical retries.
The command-line session pasted in docs/guide/consumer.md is replayed here too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from walqueue import Queue

if TYPE_CHECKING:
    from conftest import RunPython

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SCRIPTS = ("producer.py", "worker.py", "dead_letters.py", "heartbeat.py", "redrive.py")


def run_example(run_python: RunPython, script: str, directory: Path) -> str:
    result = run_python([str(EXAMPLES / script), str(directory)])
    assert result.returncode == 0, f"{script} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
    output: str = result.stdout
    return output


def counts_and_seq(directory: Path) -> tuple[dict[str, int], int]:
    with Queue(directory, sync=False) as queue:
        return queue.stats()["counts"], queue.last_seq


def test_producer_leaves_six_ready_tasks_and_a_rerun_writes_nothing(run_python: RunPython, tmp_path: Path) -> None:
    directory = tmp_path / "q"
    output = run_example(run_python, "producer.py", directory)
    assert "attempt 2: ok, wrote nothing" in output  # the retry after the lost answer
    assert output.count("KeyConflict") == 2
    counts, last_seq = counts_and_seq(directory)
    assert counts == {"ready": 6, "leased": 0, "completed": 0, "dead": 0}
    assert last_seq == 4  # three puts, one put_many; no retry and no conflict wrote a frame
    with Queue(directory, sync=False) as queue:
        email = queue.get("email-1001")
        assert email is not None and email.key == "order:1001:confirmation-email"
        assert email.payload == {"order": 1001, "to": "ada@example.org", "template": "order-confirmed"}
        assert [task.task_id for task in queue.tasks()] == [
            "email-1001",
            "email-1002",
            "email-1003",
            "invoice-1001",
            "invoice-1002",
            "invoice-1003",
        ]
    before = sorted((path.name, path.read_bytes()) for path in directory.iterdir() if path.name != "LOCK")
    run_example(run_python, "producer.py", directory)
    after = sorted((path.name, path.read_bytes()) for path in directory.iterdir() if path.name != "LOCK")
    assert after == before


def test_worker_completes_three_jobs_and_dead_letters_the_one_that_always_fails(
    run_python: RunPython, tmp_path: Path
) -> None:
    directory = tmp_path / "q"
    output = run_example(run_python, "worker.py", directory)
    assert "worker-0: reserved resize-1 until t+30, then died" in output
    counts, last_seq = counts_and_seq(directory)
    assert counts == {"ready": 0, "leased": 0, "completed": 3, "dead": 1}
    with Queue(directory, sync=False) as queue:
        tasks = {task.task_id: task for task in queue.tasks()}
    # resize-1: leased by the worker that died, expired by a later reserve, done on attempt 2.
    assert (tasks["resize-1"].status, tasks["resize-1"].attempts) == ("completed", 2)
    # resize-2: failed twice, released with back-off 5 s then 10 s, done on attempt 3.
    assert (tasks["resize-2"].status, tasks["resize-2"].attempts) == ("completed", 3)
    # resize-3: failed on all 4 attempts; the 4th release (delay 40 s at t+35) made it dead.
    dead = tasks["resize-3"]
    assert (dead.status, dead.attempts, dead.max_attempts) == ("dead", 4, 4)
    assert dead.available_at == 1_700_000_000 + 35 + 40
    assert dead.payload == {"image": "broken.png", "fail_first": 99}
    assert (tasks["resize-4"].status, tasks["resize-4"].attempts) == ("completed", 1)
    run_example(run_python, "worker.py", directory)
    assert counts_and_seq(directory) == (counts, last_seq)


def test_dead_letters_makes_two_and_re_enqueues_them_once(run_python: RunPython, tmp_path: Path) -> None:
    directory = tmp_path / "q"
    output = run_example(run_python, "dead_letters.py", directory)
    assert "2 dead letter(s)" in output
    assert "last error (attempt 2, at 1700000032): PermissionError: account 42 is locked" in output
    assert "last error (attempt 1, at 1700000030): LeaseExpired: worker w1 did not ack" in output
    counts, last_seq = counts_and_seq(directory)
    assert counts == {"ready": 2, "leased": 0, "completed": 0, "dead": 2}
    with Queue(directory, sync=False) as queue:
        dead = {task.task_id: task for task in queue.tasks("dead")}
        assert (dead["sync-42"].attempts, dead["sync-43"].attempts) == (2, 1)
        for old_id in ("sync-42", "sync-43"):
            redo = queue.get(f"{old_id}~redo")
            assert redo is not None and redo.status == "ready"
            assert redo.key == f"redo:{old_id}"
            assert redo.payload == dead[old_id].payload
            assert redo.max_attempts == dead[old_id].max_attempts
    output = run_example(run_python, "dead_letters.py", directory)
    assert "wrote nothing (already re-enqueued)" in output
    assert counts_and_seq(directory) == (counts, last_seq)


def test_dead_letters_after_the_worker_re_enqueues_its_dead_job(run_python: RunPython, tmp_path: Path) -> None:
    directory = tmp_path / "q"
    run_example(run_python, "worker.py", directory)
    run_example(run_python, "dead_letters.py", directory)
    counts, _ = counts_and_seq(directory)
    assert counts == {"ready": 1, "leased": 0, "completed": 3, "dead": 1}
    with Queue(directory, sync=False) as queue:
        redo = queue.get("resize-3~redo")
    assert redo is not None and (redo.status, redo.key, redo.attempts) == ("ready", "redo:resize-3", 0)


@pytest.mark.parametrize("script", SCRIPTS)
def test_an_example_runs_from_a_checkout_without_pythonpath(script: str, tmp_path: Path) -> None:
    # Without PYTHONPATH the script imports an installed walqueue if there is
    # one, and otherwise adds the checkout's three src directories itself.
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / script), str(tmp_path / "q")],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "q" / "wal-00000000000000000001.log").exists()


@pytest.mark.parametrize("script", SCRIPTS)
def test_an_example_without_a_directory_argument_exits_2(run_python: RunPython, script: str) -> None:
    result = run_python([str(EXAMPLES / script)])
    assert result.returncode == 2
    assert "usage:" in result.stderr


def test_the_readme_cli_session_is_what_the_consumer_answers(run_python: RunPython, tmp_path: Path) -> None:
    # The consumer's guide pastes a real session; replaying its requests on a
    # new directory must give exactly its answers, so that the page cannot drift.
    guide = (EXAMPLES.parent / "docs" / "guide" / "consumer.md").read_text(encoding="utf-8")
    section = guide.split("# The command-line consumer", 1)[1].split("\n## ", 1)[0]
    session = section.split("```\n", 2)[1]
    requests = [line[2:] for line in session.splitlines() if line.startswith("> ")]
    answers = [line[2:] for line in session.splitlines() if line.startswith("< ")]
    assert len(requests) == len(answers) >= 10
    result = run_python(["-m", "walqueue.cli", str(tmp_path / "q")], input="\n".join(requests) + "\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == answers
