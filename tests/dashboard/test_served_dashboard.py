"""`walqueue-serve DIR --socket PATH --http 127.0.0.1:PORT`: the dashboard beside the socket, and its refusals."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from walqueue.cli import Client

pytestmark = pytest.mark.timeout(120)


def serve(src_pythonpath: str, place: Path, *options: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "walqueue.cli.serve", str(place / "q"), "--socket", str(place / "s"), *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": src_pythonpath, "PATH": "/usr/bin:/bin"},
    )


@pytest.fixture
def place() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="wq-", dir="/tmp"))  # a socket path holds 108 bytes
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_the_server_serves_its_dashboard_metrics_and_api(src_pythonpath: str, place: Path) -> None:
    process = serve(src_pythonpath, place, "--http", "127.0.0.1:0", "--log-level", "WARNING")
    try:
        assert process.stdout is not None
        assert "listening on" in process.stdout.readline()
        line = process.stdout.readline()
        assert line.startswith("walqueue-serve: dashboard on http://127.0.0.1:"), line
        url = line.split("dashboard on ", 1)[1].strip()
        with Client(str(place / "s")) as client:
            client.put("a", {"<script>": 1})
            client.put("b", {})
        with urllib.request.urlopen(url + "api/overview", timeout=30) as answer:
            assert json.loads(answer.read())["counts"]["ready"] == 2
        with urllib.request.urlopen(url + "metrics", timeout=30) as answer:
            text = answer.read().decode()
        assert 'walqueue_tasks{status="ready"} 2' in text and "walqueue_puts_total 2" in text
        with urllib.request.urlopen(url, timeout=30) as answer:
            assert b'content="off"' in answer.read()  # no actions without --http-actions
    finally:
        process.terminate()
        process.communicate(timeout=60)
    assert process.returncode == 0


@pytest.mark.parametrize(
    "options",
    [
        ("--http", "0.0.0.0:0"),
        ("--http", "0.0.0.0:0", "--http-allow-remote"),
        ("--http", "nowhere"),
        ("--http-actions",),
    ],
)
def test_an_unsafe_or_malformed_http_option_is_a_usage_error(
    src_pythonpath: str, place: Path, options: tuple[str, ...]
) -> None:
    process = serve(src_pythonpath, place, *options)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 64, err
    assert "--http" in err
    assert not (place / "q").exists() and not (place / "s").exists()  # nothing created
