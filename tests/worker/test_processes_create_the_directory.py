"""`walqueue-worker NEWDIR h --processes P` creates the directory as the threaded worker does, and runs its tasks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from walqueue.client import Client

HANDLERS = """
import os

def handle(job, context):
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "done.log"), "a") as log:
        log.write(job.id + "\\n")
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("processes", [[], ["--processes", "2"]])
def test_a_new_directory_is_created_and_served_with_threads_or_processes(
    tmp_path: Path, src_pythonpath: str, processes: list[str]
) -> None:
    (tmp_path / "new_dir_tasks.py").write_text(HANDLERS)
    store = tmp_path / "parent" / "q"
    env = dict(os.environ)
    if src_pythonpath:
        env["PYTHONPATH"] = src_pythonpath + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    command = [sys.executable, "-m", "walqueue.worker", str(store), "new_dir_tasks:handle", *processes]
    worker = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        give_up = time.monotonic() + 60
        while not store.is_dir():
            assert worker.poll() is None, worker.communicate()
            assert time.monotonic() < give_up
            time.sleep(0.05)
        if processes:
            while not (store / "worker.sock").exists():
                assert worker.poll() is None, worker.communicate()
                assert time.monotonic() < give_up
                time.sleep(0.05)
            with Client(store / "worker.sock") as client:
                client.put("t", {})
            done = tmp_path / "done.log"
            while not (done.exists() and done.read_text() == "t\n"):
                assert worker.poll() is None, worker.communicate()
                assert time.monotonic() < give_up
                time.sleep(0.05)
    finally:
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    assert store.is_dir()
