"""A fast start imports only what it uses: no scheduler without a schedule, no dashboard without --http.

Checked through `sys.modules` in real processes (DECISIONS §59): a worker
child of ``walqueue-worker DIR --processes 2`` writes its own modules from
the handler, and ``walqueue-serve`` writes its modules once it listens. The
names the worker package exports still resolve, on first use (PEP 562).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import walqueue.worker
from walqueue import Queue

if TYPE_CHECKING:
    from conftest import RunPython

#: Imported only for a schedule (`--schedule`, `Worker(schedule=...)`).
SCHEDULER = {"walqueue.worker.schedule", "walqueue.worker.cron", "tomllib"}
#: Imported only with --http.
DASHBOARD = {"walqueue.dashboard.http", "walqueue.dashboard.web", "walqueue.dashboard.app", "wsgiref"}

HANDLER = """
import os, sys

def handle(job, context):
    with open(os.environ["MODULES_OUT"] + "." + str(os.getpid()), "w") as out:
        out.write("\\n".join(sorted(sys.modules)))
"""


def _env(src_pythonpath: str, extra: dict[str, str]) -> dict[str, str]:
    paths = os.pathsep.join(filter(None, [src_pythonpath, os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": paths, **extra}


@pytest.mark.timeout(120)
def test_a_worker_fleet_without_a_schedule_runs_its_first_task_without_the_scheduler(
    tmp_path: Path, src_pythonpath: str
) -> None:
    (tmp_path / "modules_handler.py").write_text(HANDLER)
    with Queue(tmp_path / "q") as producer:
        producer.put("t", {})
    out = tmp_path / "modules"
    command = [sys.executable, "-m", "walqueue.worker", str(tmp_path / "q"), "modules_handler:handle"]
    fleet = subprocess.Popen(
        [*command, "--processes", "2", "--start-method", "fork", "--grace", "1"],
        cwd=tmp_path,
        env=_env(src_pythonpath, {"MODULES_OUT": str(out)}),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    give_up = time.monotonic() + 60
    while not list(tmp_path.glob("modules.*")):
        assert fleet.poll() is None, fleet.communicate()
        assert time.monotonic() < give_up, "the first task did not run"
        time.sleep(0.05)
    time.sleep(0.1)  # the file is complete once written and closed: give the handler its moment
    fleet.send_signal(signal.SIGTERM)
    _, stderr = fleet.communicate(timeout=60)
    assert fleet.returncode == 0, stderr
    (written,) = tmp_path.glob("modules.*")
    modules = set(written.read_text().split())
    assert "walqueue.worker.runner" in modules  # it is a worker's
    assert modules & (SCHEDULER | DASHBOARD) == set()


def test_walqueue_serve_without_http_listens_without_the_dashboard(tmp_path: Path, run_python: RunPython) -> None:
    socket_path, out = tmp_path / "s.sock", tmp_path / "modules"
    code = f"""
import os, signal, sys, threading, time
from walqueue.serve.cli import main

def note_modules_then_stop():
    while not os.path.exists({str(socket_path)!r}):
        time.sleep(0.01)
    with open({str(out)!r}, "w") as written:
        written.write("\\n".join(sorted(sys.modules)))
    os.kill(os.getpid(), signal.SIGTERM)

threading.Thread(target=note_modules_then_stop, daemon=True).start()
sys.exit(main([{str(tmp_path / "q")!r}, "--socket", {str(socket_path)!r}]))
"""
    result = run_python(["-c", code])
    assert result.returncode == 0, result.stderr
    modules = set(out.read_text().split())
    assert "walqueue.serve.eventloop" in modules
    assert modules & (SCHEDULER | DASHBOARD | {"pathlib", "shutil"}) == set()


def test_the_worker_package_resolves_every_public_name_on_first_use(run_python: RunPython) -> None:
    code = """
import sys
import walqueue.worker
assert "walqueue.worker.schedule" not in sys.modules and "walqueue.worker.app" not in sys.modules
from walqueue.worker import *
import walqueue.worker.current
assert callable(walqueue.worker.current) and not isinstance(walqueue.worker.current, type(sys))
print(sorted(name for name in walqueue.worker.__all__ if getattr(walqueue.worker, name) is None))
"""
    result = run_python(["-c", code])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
    assert set(walqueue.worker.__all__) <= set(dir(walqueue.worker))
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        walqueue.worker.Nothing  # noqa: B018
