"""Producers beside a server: `DirectoryLocked` names the owner's socket, and `walqueue DIR VERB` acts as `--socket`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.children import child_environment
from support.servers import ServerProcess, running_server
from walqueue import DirectoryLocked, Queue
from walqueue.client import Client

pytestmark = pytest.mark.timeout(120)


def walqueue(*arguments: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "walqueue.cli", *arguments],
        capture_output=True,
        text=True,
        input=stdin,
        env=child_environment(),
        timeout=60,
    )


def _fill(queue: Queue) -> None:
    queue.put("fresh", {})
    queue.put("doomed", {}, max_attempts=1)
    queue.put("victim", {})
    for lease in queue.reserve("w", now=1, lease_seconds=60, limit=1):  # "doomed": its id sorts first
        queue.release(lease, now=1, error={"type": "ValueError", "message": "bad"})


def test_directory_locked_names_the_socket_of_the_server_that_owns_it(server: ServerProcess) -> None:
    with pytest.raises(DirectoryLocked) as caught:
        Queue(server.directory)
    assert caught.value.socket_path == os.path.abspath(server.socket_path)
    assert f"Client({os.path.abspath(server.socket_path)!r})" in str(caught.value)
    with Client(caught.value.socket_path, timeout=30) as client:  # where it says to go works
        client.put("through-the-server", {})


def test_a_note_left_by_a_crashed_owner_is_cleared_by_the_next_one(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False):
        pass
    (tmp_path / "q" / "LOCK").write_text(json.dumps({"pid": 1, "socket": "/gone/s"}) + "\n")
    with Queue(tmp_path / "q", sync=False):
        assert (tmp_path / "q" / "LOCK").read_bytes() == b""
        with pytest.raises(DirectoryLocked) as caught:
            Queue(tmp_path / "q", sync=False)
    assert caught.value.socket_path is None and "/gone/s" not in str(caught.value)


def test_the_verbs_on_a_directory_answer_as_on_its_socket(place: Path) -> None:
    with Queue(place / "q", sync=False) as queue:
        _fill(queue)
    alone = {verb: walqueue(str(place / "q"), *verb.split()) for verb in ("stats", "dead --format ids", "dead")}
    with running_server(place / "q", place / "s") as running:
        served = {verb: walqueue("--socket", running.socket_path, *verb.split()) for verb in alone}
        through_owner = {verb: walqueue(str(place / "q"), *verb.split()) for verb in alone}
    for verb in alone:
        assert alone[verb].returncode == served[verb].returncode == through_owner[verb].returncode == 0, verb
        assert alone[verb].stdout == served[verb].stdout == through_owner[verb].stdout, verb
    assert alone["dead --format ids"].stdout == "doomed\n"


def test_redrive_and_cancel_on_a_directory_change_it_and_report_refusals(place: Path) -> None:
    with Queue(place / "q", sync=False) as queue:
        _fill(queue)
    assert walqueue(str(place / "q"), "redrive", "doomed").returncode == 0
    refused = walqueue(str(place / "q"), "cancel", "victim", "nobody")
    assert refused.returncode == 1 and "'nobody' refused" in refused.stderr
    assert walqueue(str(place / "q"), "cancel", "-", stdin="fresh\n").returncode == 0
    with Queue(place / "q", sync=False) as queue:
        statuses = {task.task_id: task.status for task in queue.tasks()}
    assert statuses == {"doomed": "ready", "victim": "dead", "fresh": "dead"}


def test_a_verb_on_a_missing_directory_creates_nothing(place: Path) -> None:
    result = walqueue(str(place / "missing"), "stats")
    assert result.returncode == 2 and "cannot open" in result.stderr
    assert not (place / "missing").exists()


def test_a_verb_on_a_directory_another_queue_owns_says_so(place: Path) -> None:
    with Queue(place / "q", sync=False):
        result = walqueue(str(place / "q"), "stats")
    assert result.returncode == 2 and "DirectoryLocked" not in result.stdout and "owned by" in result.stderr
