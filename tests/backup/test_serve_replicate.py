"""walqueue-serve --replicate: the server ships, the shell's `backup status`, /metrics, usage errors."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from backup_helpers import restore_to

from walqueue.backup.stores import FileStore
from walqueue.client import Client

TIMEOUT = 30.0


@pytest.fixture
def short() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="wqb-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def env(src_pythonpath: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": src_pythonpath}


def _serve(env: dict[str, str], directory: Path, sock: Path, *options: str) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [sys.executable, "-m", "walqueue.serve", str(directory), "--socket", str(sock), *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert process.stdout is not None
    readable, _, _ = select.select([process.stdout], [], [], TIMEOUT)
    assert readable, "the server printed nothing"
    line = process.stdout.readline().decode()
    assert "listening" in line, process.stderr.read().decode() if process.stderr else line
    return process


def _stop(process: subprocess.Popen[bytes]) -> tuple[int, str]:
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=TIMEOUT)
    return process.returncode, err.decode()


def _backup_status(socket: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``walqueue --socket S backup status``, run as an operator would."""
    return subprocess.run(
        [sys.executable, "-m", "walqueue.cli", "--socket", str(socket), "backup", "status"],
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT,
        check=False,
    )


def test_served_puts_reach_the_replica_and_the_shell_reports_it(
    short: Path, env: dict[str, str], tmp_path: Path
) -> None:
    replica = tmp_path / "replica"
    process = _serve(env, short / "q", short / "s", "--replicate", f"file://{replica}", "--replicate-interval", "0.05")
    try:
        with Client(str(short / "s")) as client:
            for number in range(5):
                client.put(f"t{number}", {"n": number})
        deadline = time.monotonic() + TIMEOUT
        while True:
            shell = _backup_status(short / "s", env)
            assert shell.returncode == 0, shell.stderr
            status = json.loads(shell.stdout)
            if status["lag_transactions"] == 0 and status["shipped_seq"] == 5 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert status["state"] == "ok" and status["shipped_seq"] == 5
    finally:
        code, err = _stop(process)
    assert code == 0, err
    restored = restore_to(FileStore(str(replica)), str(tmp_path / "restored"))
    assert sorted(restored["tasks"]) == [f"t{n}" for n in range(5)]


def test_sync_replication_answers_after_the_upload_and_metrics_show_it(
    short: Path, env: dict[str, str], tmp_path: Path
) -> None:
    replica = tmp_path / "replica"
    process = _serve(
        env, short / "q", short / "s", "--replicate", f"file://{replica}", "--replicate-sync", "--http", "127.0.0.1:0"
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().decode().split(" on ", 1)[1].strip()
        with Client(str(short / "s")) as client:
            client.put("a", {})
            client.put("b", {})
        restored = restore_to(FileStore(str(replica)), str(tmp_path / "restored"))  # while the server runs
        assert sorted(restored["tasks"]) == ["a", "b"]
        text = urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=TIMEOUT).read().decode()
        assert "walqueue_replica_lag_transactions 0" in text and "walqueue_replica_broken 0" in text
        overview = json.loads(urllib.request.urlopen(url.rstrip("/") + "/api/overview", timeout=TIMEOUT).read())
        assert overview["replica"]["state"] == "ok" and overview["replica"]["shipped_seq"] == 2
    finally:
        code, err = _stop(process)
    assert code == 0, err


@pytest.mark.parametrize(
    "options",
    [
        ["--replicate", "ftp://x/y"],
        ["--replicate-sync"],
        ["--replicate", "file://host/x"],
        ["--replicate-retain", "7d"],
        ["--replicate", "file:///tmp/x", "--replicate-retain", "a week"],
    ],
)
def test_bad_replication_options_are_usage_errors_that_create_nothing(
    short: Path, env: dict[str, str], options: list[str]
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "walqueue.serve", str(short / "q"), "--socket", str(short / "s"), *options],
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode == 64, result.stderr
    assert sorted(os.listdir(short)) == []


def test_backup_status_without_a_replica_says_so(short: Path, env: dict[str, str]) -> None:
    process = _serve(env, short / "q", short / "s")
    try:
        shell = _backup_status(short / "s", env)
        assert shell.returncode == 4 and "replicates nowhere" in shell.stderr
    finally:
        _stop(process)
