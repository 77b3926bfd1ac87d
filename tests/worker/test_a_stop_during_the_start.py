"""A SIGTERM reaching `walqueue-worker DIR h` while it opens its store is a clean stop, not death by the signal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from walqueue import Queue

HANDLERS = """
def handle(job, context):
    pass
"""

#: The worker's own `main`, with a SIGTERM sent to itself from inside the store's opening (where a
#: service manager's stop can land when it comes right after the start).
SCRIPT = """
import os, signal, sys
from walqueue.worker import cli

opened = cli.open_store

def open_store(directory):
    os.kill(os.getpid(), signal.SIGTERM)
    return opened(directory)

cli.open_store = open_store
sys.exit(cli.main([sys.argv[1], "stop_tasks:handle", "--log-level", "INFO"]))
"""


@pytest.mark.timeout(120)
def test_a_sigterm_while_the_store_opens_stops_the_worker_cleanly(tmp_path: Path, src_pythonpath: str) -> None:
    (tmp_path / "stop_tasks.py").write_text(HANDLERS)
    store = tmp_path / "q"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp_path), src_pythonpath, env.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(store)], cwd=tmp_path, env=env, capture_output=True, timeout=100
    )
    assert done.returncode == 0, done.stderr
    assert b"SIGTERM received: stopping" in done.stderr
    with Queue(store) as queue:  # the store was opened and closed cleanly: it opens again, with no lease held
        assert queue.stats()["counts"]["leased"] == 0
