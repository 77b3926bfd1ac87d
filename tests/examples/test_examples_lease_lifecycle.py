"""The lease lifecycle examples run end to end: heartbeat.py (a worker's heartbeats) and redrive.py (redrive, cancel).

Each runs as its own process on a fresh directory, with a timeout; the test
then opens the directory with `Queue` and checks what the script's
docstring says it leaves. A second run must write nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from walqueue import Queue

if TYPE_CHECKING:
    from conftest import RunPython

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TIMEOUT = 120  # heartbeat.py works for about 4 s of real time


def run(run_python: RunPython, args: list[str], expect: int = 0) -> str:
    result = run_python([str(EXAMPLES / args[0]), *args[1:]], timeout=TIMEOUT)
    assert result.returncode == expect, f"{args} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
    output: str = result.stdout
    return output


def files(directory: Path) -> list[tuple[str, bytes]]:
    return sorted((path.name, path.read_bytes()) for path in directory.iterdir() if path.name != "LOCK")


def test_heartbeat_keeps_a_long_job_leased_and_stops_when_the_lease_is_lost(
    run_python: RunPython, tmp_path: Path
) -> None:
    directory = tmp_path / "q"
    output = run(run_python, ["heartbeat.py", str(directory)])
    # report-1 ran 2.5 leases long; past its first deadline another worker found nothing.
    assert "worker-2 reserves: nothing" in output
    assert "report-1 done after" in output and "acked 1, leases lost 1" in output
    # report-2 was cancelled under the worker: the heartbeat's extend was StaleLease.
    assert "an operator cancels report-2" in output
    assert "report-2 lease lost after" in output and "job stopped, no ack" in output
    with Queue(directory, sync=False) as queue:
        done, cancelled = queue.get("report-1"), queue.get("report-2")
        assert done is not None and cancelled is not None
        assert (done.status, done.attempts, done.generation) == ("completed", 1, 1)
        # The cancel kept the attempts it had: dead with attempts left.
        assert (cancelled.status, cancelled.attempts, cancelled.max_attempts) == ("dead", 1, 3)
        assert (cancelled.worker, cancelled.deadline) == (None, None)
        stats = queue.stats()
        assert stats["counts"] == {"ready": 0, "leased": 0, "completed": 1, "dead": 1}
        assert (stats["next_available_at"], stats["next_deadline"]) == (None, None)
        # A heartbeat every third of the 1 s lease during 2.5 s of work: 7 unless the machine stalled.
        extends = int(output.split("report-1 done after ")[1].split(" ms, ")[1].split(" extends")[0])
        assert extends >= 3
        last_seq = queue.last_seq
    before = files(directory)
    output = run(run_python, ["heartbeat.py", str(directory)])
    assert "started" not in output and "acked 0" in output
    assert files(directory) == before
    with Queue(directory, sync=False) as queue:
        assert queue.last_seq == last_seq


def test_redrive_dry_run_writes_nothing_then_redrives_every_dead_letter(run_python: RunPython, tmp_path: Path) -> None:
    directory = tmp_path / "q"
    output = run(run_python, ["redrive.py", str(directory), "--dry-run"])
    assert "2 dead letter(s)" in output
    assert "import-7: would redrive" in output and "import-8: would redrive" in output
    with Queue(directory, sync=False) as queue:
        assert queue.stats()["counts"] == {"ready": 0, "leased": 0, "completed": 0, "dead": 2}
        made = queue.last_seq
        assert [(t.task_id, t.attempts, t.max_attempts) for t in queue.tasks("dead")] == [
            ("import-7", 2, 2),
            ("import-8", 0, 3),  # cancelled while ready: dead with attempts left
        ]
    before = files(directory)
    run(run_python, ["redrive.py", str(directory), "--dry-run"])
    assert files(directory) == before

    run(run_python, ["redrive.py", str(directory), "--now", "1700009000", "--extra-attempts", "2"])
    with Queue(directory, sync=False) as queue:
        assert queue.last_seq == made + 2  # one redrive op each
        stats = queue.stats()
        assert stats["counts"] == {"ready": 2, "leased": 0, "completed": 0, "dead": 0}
        assert stats["next_available_at"] == 1_700_009_000
        seven, eight = queue.get("import-7"), queue.get("import-8")
        assert seven is not None and eight is not None
        # Attempts and generation kept counting; max_attempts grew by 2; same key and payload.
        assert (seven.status, seven.attempts, seven.generation, seven.max_attempts) == ("ready", 2, 2, 4)
        assert (eight.status, eight.attempts, eight.generation, eight.max_attempts) == ("ready", 0, 0, 5)
        assert (seven.key, seven.payload) == ("import-7", {"file": "orders-7.csv"})
        # The original put is still an identical retry: it writes nothing.
        assert queue.put("import-7", {"file": "orders-7.csv"}, max_attempts=2) == "import-7"
        assert queue.last_seq == made + 2
        # The redriven task is leased with the next generation.
        [lease] = queue.reserve("w", now=1_700_009_000, lease_seconds=30)
        assert (lease.task_id, lease.generation, lease.attempts) == ("import-7", 3, 3)
    before = files(directory)
    output = run(run_python, ["redrive.py", str(directory)])
    assert "0 dead letter(s)" in output and "wrote 0 transaction(s)" in output
    assert files(directory) == before


def test_redrive_of_named_tasks_reports_the_ones_it_cannot_redrive(run_python: RunPython, tmp_path: Path) -> None:
    directory = tmp_path / "q"
    output = run(run_python, ["redrive.py", str(directory), "--now", "5", "import-8", "nope"], expect=1)
    assert "import-8: ready at 5, 0 of 4 attempts" in output
    assert "nope: not redriven: WrongStatus" in output
    output = run(run_python, ["redrive.py", str(directory), "import-8"], expect=1)
    assert "import-8: not redriven: WrongStatus" in output  # ready now, not dead: nothing written
    with Queue(directory, sync=False) as queue:
        seven, eight = queue.get("import-7"), queue.get("import-8")
        assert seven is not None and eight is not None
        assert (seven.status, eight.status, eight.available_at) == ("dead", "ready", 5)


def test_redrive_after_heartbeat_brings_the_cancelled_report_back(run_python: RunPython, tmp_path: Path) -> None:
    directory = tmp_path / "q"
    run(run_python, ["heartbeat.py", str(directory)])
    output = run(run_python, ["redrive.py", str(directory), "--now", "0"])
    assert "report-2: ready at 0, 1 of 4 attempts" in output
    with Queue(directory, sync=False) as queue:
        assert queue.stats()["counts"] == {"ready": 1, "leased": 0, "completed": 1, "dead": 0}
