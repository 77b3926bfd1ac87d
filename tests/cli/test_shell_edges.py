"""The shell and the clients at their edges: bad limits, a closed output pipe, a relative socket after a chdir."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.children import child_environment
from support.servers import ServerProcess, running_server
from walqueue import Queue
from walqueue.cli.shell import ShellExit
from walqueue.client import Client

pytestmark = pytest.mark.timeout(120)


def shell(*arguments: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "walqueue.cli", *arguments],
        capture_output=True,
        text=True,
        env=child_environment(),
        timeout=60,
        cwd=cwd,
    )


@pytest.mark.parametrize(
    "arguments",
    [
        ("--timeout", "-1", "stats"),
        ("--timeout", "nan", "stats"),
        ("--timeout", "inf", "stats"),
        ("--timeout", "0", "stats"),
        ("dead", "--limit", "-1"),
        ("dead", "--limit", "x"),
    ],
)
def test_a_bad_timeout_or_limit_is_a_usage_error(server: ServerProcess, arguments: tuple[str, ...]) -> None:
    result = shell("--socket", server.socket_path, *arguments)
    assert result.returncode == 64, result.stderr
    assert "Traceback" not in result.stderr and "expected" in result.stderr


@pytest.mark.parametrize("name", ["", "x" * 1025, "\u00e9" * 513])
def test_an_invalid_worker_name_is_a_usage_error_that_creates_nothing(place: Path, name: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "walqueue.worker", str(place / "new"), "json:dumps", "--name", name],
        capture_output=True,
        text=True,
        env=child_environment(),
        timeout=60,
    )
    assert result.returncode == 64, result.stderr
    assert "--name" in result.stderr and "Traceback" not in result.stderr
    assert not (place / "new").exists()


@pytest.fixture
def many_dead(place: Path) -> Iterator[ServerProcess]:
    with Queue(place / "q", sync=False) as queue:
        queue.put_many([{"task_id": f"d{i:05}", "payload": {"pad": "x" * 100}, "max_attempts": 1} for i in range(3000)])
        while leases := queue.reserve("w", now=1, lease_seconds=60, limit=1000):
            for lease in leases:
                queue.release(lease, now=1, error={"type": "ValueError", "message": "bad"})
    with running_server(place / "q", place / "s") as running:
        yield running


def test_a_closed_output_pipe_ends_quietly_as_a_unix_tool_does(many_dead: ServerProcess) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "walqueue.cli", "--socket", many_dead.socket_path, "dead", "--format", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_environment(),
    )
    assert process.stdout is not None and process.stderr is not None
    first = process.stdout.readline()
    assert first.startswith(b'{"task_id": "d00000"')
    process.stdout.close()  # `| head -1`
    stderr = process.stderr.read()
    assert process.wait(60) == ShellExit.OUTPUT_CLOSED == 141
    assert stderr == b"", stderr


def test_a_client_on_a_relative_socket_path_survives_a_chdir(server: ServerProcess, place: Path) -> None:
    before = os.getcwd()
    os.chdir(place)
    try:
        client = Client("s", timeout=30, reconnect_seconds=1)
        os.chdir("/")  # a handler's chdir, before the first connection
        with client:
            client.put("t", {})
            assert client.get("t") is not None
            assert client.socket_path == str(place / "s")
    finally:
        os.chdir(before)


def test_the_shell_takes_a_relative_socket_path(server: ServerProcess, place: Path) -> None:
    result = shell("--socket", "s", "stats", cwd=place)
    assert result.returncode == 0, result.stderr


def test_the_relay_ends_quietly_too_when_its_output_is_closed(server: ServerProcess) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "walqueue.cli", "--socket", server.socket_path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_environment(),
    )
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    process.stdin.write(b'{"op": "stats"}\n')
    process.stdin.flush()
    assert b'"ok":true' in process.stdout.readline()
    process.stdout.close()  # the reader is gone
    with contextlib.suppress(BrokenPipeError):  # it may have stopped already
        for _ in range(50):
            process.stdin.write(b'{"op": "stats"}\n' * 100)
            process.stdin.flush()
    with contextlib.suppress(BrokenPipeError):
        process.stdin.close()
    assert process.wait(60) == ShellExit.OUTPUT_CLOSED
    assert process.stderr.read() == b""
