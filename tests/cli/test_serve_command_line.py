"""The command lines an operator types: walqueue-serve's --version, usage status, --no-create, failed starts,
and a compaction that meets an obstacle (the server and the consumer keep serving).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.children import child_environment
from support.servers import RawConnection, running_server, serve_command
from walqueue import Queue
from walqueue.format.cmdline import EX_USAGE

pytestmark = pytest.mark.timeout(120)


def run(command: list[str] | tuple[str, ...], stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(list(command), input=stdin, capture_output=True, timeout=60, env=child_environment())


@pytest.mark.parametrize("module", ["walqueue.serve", "walqueue.cli.serve"])  # the second: the deprecated path
def test_version_prints_the_program_and_its_version(module: str) -> None:
    result = run([sys.executable, "-m", module, "--version"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().startswith("walqueue-serve ")


def test_the_deprecated_module_path_is_the_servers_main() -> None:
    from walqueue.cli.serve import main as old
    from walqueue.serve.cli import main

    assert old is main


@pytest.mark.parametrize(
    "arguments",
    [
        ["DIR"],  # no --socket
        ["DIR", "--socket", "S", "--max-clients", "0"],
        ["DIR", "--socket", "S", "--mode", "999"],
        ["DIR", "--socket", "S", "--write-timeout", "soon"],
        ["DIR", "--socket", "S", "--jsn"],
    ],
)
def test_a_usage_error_exits_64_and_creates_nothing(place: Path, arguments: list[str]) -> None:
    arguments = [str(place / "q") if a == "DIR" else str(place / "s") if a == "S" else a for a in arguments]
    result = run([sys.executable, "-m", "walqueue.serve", *arguments])
    assert result.returncode == EX_USAGE == 64, result.stderr
    assert not (place / "q").exists() and not (place / "s").exists()


def test_a_server_that_cannot_bind_its_socket_does_not_create_the_store(place: Path) -> None:
    (place / "s").write_text("not a socket")
    result = run(serve_command(place / "q", place / "s"))
    assert result.returncode == 3, result.stderr
    assert not (place / "q").exists()
    unbindable = run(serve_command(place / "q", place / "no-such-directory" / "s"))
    assert unbindable.returncode == 3, unbindable.stderr
    assert not (place / "q").exists()


def test_a_store_that_cannot_be_opened_leaves_no_socket_behind(place: Path) -> None:
    (place / "q").write_text("a file where the directory should be")
    result = run(serve_command(place / "q" / "inner", place / "s"))
    assert result.returncode == 2, result.stderr
    assert not (place / "s").exists()


def test_no_create_refuses_a_missing_store_and_creates_nothing(place: Path) -> None:
    result = run(serve_command(place / "q", place / "s", "--no-create"))
    assert result.returncode == 2, result.stderr
    assert b"--no-create" in result.stderr and b"FileNotFoundError" in result.stderr
    assert not (place / "q").exists() and not (place / "s").exists()


def test_no_create_serves_an_existing_store(place: Path) -> None:
    with Queue(place / "q") as queue:
        queue.put("kept", {})
    with running_server(place / "q", place / "s", "--no-create") as server:
        assert RawConnection(server.socket_path).request({"op": "get", "task_id": "kept"})["task"] is not None


def test_the_consumer_no_create_refuses_a_missing_store_and_serves_an_existing_one(place: Path) -> None:
    consumer = [sys.executable, "-m", "walqueue.cli", str(place / "q"), "--no-create"]
    refused = run(consumer, b'{"op":"stats"}\n')
    assert refused.returncode == 2 and b"FileNotFoundError" in refused.stderr
    assert not (place / "q").exists()
    Queue(place / "q").close()
    served = run(consumer, b'{"op":"stats"}\n')
    assert served.returncode == 0 and json.loads(served.stdout)["ok"] is True


def test_a_compaction_that_meets_an_obstacle_is_answered_by_name_and_the_server_serves_on(place: Path) -> None:
    with running_server(place / "q", place / "s") as server:
        connection = RawConnection(server.socket_path)
        assert connection.request({"op": "put", "task_id": "a", "payload": {}})["ok"]
        os.mkdir(place / "q" / "CURRENT.tmp")
        answer = connection.request({"op": "compact", "id": 1})
        assert answer["ok"] is False and answer["id"] == 1
        assert answer["error"] == "FileExistsError" and "CURRENT.tmp" in answer["message"]
        assert connection.request({"op": "put", "task_id": "b", "payload": {}})["ok"]
        os.rmdir(place / "q" / "CURRENT.tmp")
        assert connection.request({"op": "compact"}) == {"ok": True}
        assert server.process.poll() is None


def test_the_consumer_answers_a_compaction_obstacle_by_name_and_reads_on(tmp_path: Path) -> None:
    Queue(tmp_path / "q").close()
    os.mkdir(tmp_path / "q" / "CURRENT.tmp")
    lines = b'{"op":"compact"}\n{"op":"put","task_id":"a","payload":{}}\n'
    result = run([sys.executable, "-m", "walqueue.cli", str(tmp_path / "q")], lines)
    assert result.returncode == 0, result.stderr
    first, second = (json.loads(line) for line in result.stdout.splitlines())
    assert first["error"] == "FileExistsError" and second == {"ok": True, "task_id": "a"}


def test_python_m_walqueue_lists_the_server_among_the_commands() -> None:
    result = run([sys.executable, "-m", "walqueue"])
    assert result.returncode == 0, result.stderr
    assert b"walqueue-serve" in result.stdout and b"python -m walqueue.serve" in result.stdout


def test_the_clients_old_import_path_still_works_and_says_where_they_live() -> None:
    import walqueue.cli
    import walqueue.client

    for name in ("Client", "AsyncClient"):
        with pytest.warns(DeprecationWarning, match="walqueue.client"):
            assert getattr(walqueue.cli, name) is getattr(walqueue.client, name)
