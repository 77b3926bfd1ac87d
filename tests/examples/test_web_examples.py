"""examples/web: the Flask app puts tasks through walqueue-serve, the FastAPI app awaits a result.

A real walqueue-serve and a real walqueue-worker running ``web_tasks:app``;
the web apps are driven by their frameworks' test clients (test-only tools,
pinned in requirements-test.txt).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("flask")
pytest.importorskip("fastapi")
pytest.importorskip("httpx")

pytestmark = pytest.mark.timeout(120)
WEB = Path(__file__).resolve().parents[2] / "examples" / "web"
WAIT = 30.0


@pytest.fixture
def socket_path(src_pythonpath: str) -> Iterator[str]:
    """walqueue-serve on a fresh queue, a worker running web_tasks:app, and the examples importable."""
    place = Path(tempfile.mkdtemp(prefix="wq-", dir="/tmp"))
    env = dict(os.environ, PYTHONPATH=src_pythonpath)
    serve = [sys.executable, "-m", "walqueue.serve", str(place / "q"), "--socket", str(place / "s")]
    server = subprocess.Popen(serve, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    worker = None
    sys.path.insert(0, str(WEB))
    try:
        give_up = time.monotonic() + WAIT
        while not (place / "s").exists():
            assert server.poll() is None and time.monotonic() < give_up
            time.sleep(0.01)
        run = [sys.executable, "-m", "walqueue.worker", "--socket", str(place / "s"), "web_tasks:app"]
        worker = subprocess.Popen(run, cwd=WEB, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        yield str(place / "s")
    finally:
        sys.path.remove(str(WEB))
        if worker is not None:
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(WAIT) == 0
        server.kill()
        server.wait(WAIT)
        shutil.rmtree(place, ignore_errors=True)


def test_the_flask_app_enqueues_and_reports_the_result_and_its_follow_up(socket_path: str) -> None:
    import flask_app

    web = flask_app.create_app(socket_path).test_client()
    answer = web.post("/signup", data={"email": "ada@example.org"})
    assert answer.status_code == 202
    task_id = answer.get_json()["task_id"]
    assert web.post("/signup", data={"email": "ada@example.org"}).get_json()["task_id"] == task_id  # same key
    assert web.post("/signup", data={"email": "nobody"}).status_code == 400
    give_up = time.monotonic() + WAIT
    while (state := web.get(f"/tasks/{task_id}").get_json())["status"] != "completed":
        assert time.monotonic() < give_up
        time.sleep(0.05)
    assert state["result"] == {"to": "ada@example.org", "subject": "Welcome!"}
    follow_up = web.get(f"/tasks/{task_id}/1").get_json()
    assert follow_up["status"] in ("ready", "leased", "completed")
    assert web.get("/tasks/no-such-task").status_code == 404


def test_the_fastapi_app_awaits_the_result_of_an_async_task(socket_path: str) -> None:
    import fastapi_app
    from fastapi.testclient import TestClient

    with TestClient(fastapi_app.create_app(socket_path)) as web:
        answer = web.get("/add", params={"a": 2, "b": 40})
        assert answer.status_code == 200, answer.text
        assert answer.json()["sum"] == 42
