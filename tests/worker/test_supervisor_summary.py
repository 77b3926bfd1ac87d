"""With --processes, the supervisor logs one summary line for all its processes, never one partial line each."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from walqueue import Queue
from walqueue.client import Client

HANDLERS = "def handle(job, context):\n    pass\n"


def _all_completed(socket_path: Path) -> bool:
    try:
        with Client(str(socket_path), timeout=5, reconnect_seconds=0) as client:
            return bool(client.stats()["counts"]["completed"] == 20)
    except OSError:
        return False


@pytest.mark.timeout(120)
def test_the_supervisor_logs_one_combined_summary(tmp_path: Path, src_pythonpath: str) -> None:
    (tmp_path / "summary_tasks.py").write_text(HANDLERS)
    with Queue(tmp_path / "q") as queue:
        queue.put_many([{"task_id": f"t{n}", "payload": {}} for n in range(20)])
    env = dict(os.environ)
    if src_pythonpath:
        env["PYTHONPATH"] = src_pythonpath + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    command = [sys.executable, "-m", "walqueue.worker", str(tmp_path / "q"), "summary_tasks:handle"]
    command += ["--processes", "3", "--summary", "0.3"]
    worker = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    give_up = time.monotonic() + 60
    while not _all_completed(tmp_path / "q" / "worker.sock"):
        assert worker.poll() is None and time.monotonic() < give_up, worker.communicate()
        time.sleep(0.1)
    time.sleep(1.0)  # a few summary intervals
    worker.send_signal(signal.SIGTERM)
    _, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    combined = re.findall(r"summary of (\d+) process\(es\): processed (\d+), completed (\d+)", err)
    assert combined, err
    assert not re.search(r"\bsummary: processed", err), err  # no partial line of one process
    processes, processed, completed = map(int, combined[-1])  # the last: at the stop, every process's final counts
    assert processes == 3 and processed == completed == 20, combined
