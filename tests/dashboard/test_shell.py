"""`walqueue --socket PATH`: the consumer and the operator verbs against a running walqueue-serve."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from walqueue.cli.shell import ShellExit
from walqueue.client import Client
from walqueue.protocol.storeclock import now_in

pytestmark = pytest.mark.timeout(120)

NOW = 1_800_000_000


@pytest.fixture
def served(src_pythonpath: str) -> Iterator[str]:
    """A walqueue-serve process on a fresh directory; yields its socket path (short: sun_path holds 108 bytes)."""
    place = Path(tempfile.mkdtemp(prefix="wq-", dir="/tmp"))
    socket_path = str(place / "s")
    process = subprocess.Popen(
        [sys.executable, "-m", "walqueue.serve", str(place / "q"), "--socket", socket_path],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={"PYTHONPATH": src_pythonpath, "PATH": "/usr/bin:/bin"},
    )
    try:
        deadline = time.monotonic() + 30
        while not Path(socket_path).exists():
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < deadline, "walqueue-serve did not start"
            time.sleep(0.05)
        yield socket_path
    finally:
        process.kill()
        process.communicate(timeout=30)
        shutil.rmtree(place, ignore_errors=True)


def shell(src_pythonpath: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "walqueue.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": src_pythonpath, "PATH": "/usr/bin:/bin"},
    )


def kill_through(client: Client, task_id: str, units: int | None = None) -> None:
    """Put, lease and release a one-attempt task: at NOW, or at the wall clock in `units` (read after the put)."""
    client.put(task_id, {"n": task_id}, max_attempts=1)
    now = NOW if units is None else now_in(units)  # a store with a recorded unit stamps the put with its clock
    (lease,) = client.reserve("w", now=now, lease_seconds=60)
    client.release(lease, now=now)


def test_the_consumer_relays_json_lines_to_the_server(served: str, src_pythonpath: str) -> None:
    requests = (
        '{"op": "put", "task_id": "a", "payload": {"x": 1}, "id": 1}\n'
        "\n"
        '{"op": "stats", "id": 2}\n'
        "[1]\n"
        '{"op": "get", "task_id": "a", "id": 3}\n'
    )
    result = shell(src_pythonpath, "--socket", served, stdin=requests)
    assert result.returncode == 0, result.stderr
    answers = [json.loads(line) for line in result.stdout.splitlines()]
    assert answers[0] == {"id": 1, "ok": True, "task_id": "a"}
    assert answers[1]["stats"]["counts"]["ready"] == 1
    assert answers[2]["ok"] is False and answers[2]["error"] == "BadRequest"
    assert answers[3]["task"]["payload"] == {"x": 1}


def test_the_verbs_list_redrive_and_cancel_with_documented_statuses(served: str, src_pythonpath: str) -> None:
    with Client(served) as client:
        kill_through(client, "d1")
        kill_through(client, "d2")
        client.put("ready-1", {})
    listed = shell(src_pythonpath, "--socket", served, "dead")
    assert listed.returncode == 0, listed.stderr
    assert [line.split("\t")[0] for line in listed.stdout.splitlines()] == ["d1", "d2"]
    as_json = shell(src_pythonpath, "--socket", served, "dead", "--format", "json", "--limit", "1")
    assert [json.loads(line)["task_id"] for line in as_json.stdout.splitlines()] == ["d1"]
    ids = shell(src_pythonpath, "--socket", served, "dead", "--format", "ids").stdout
    redriven = shell(src_pythonpath, "--socket", served, "redrive", "-", stdin=ids)
    assert redriven.returncode == 0, redriven.stderr
    again = shell(src_pythonpath, "--socket", served, "redrive", "d1", "ready-1")
    assert again.returncode == 1 and "ready-1" in again.stderr
    cancelled = shell(src_pythonpath, "--socket", served, "cancel", "ready-1")
    assert cancelled.returncode == 0
    stats = json.loads(shell(src_pythonpath, "--socket", served, "stats").stdout)
    assert stats["counts"] == {"ready": 2, "leased": 0, "completed": 0, "dead": 1}


def test_an_absent_server_is_exit_2_and_a_usage_error_64(tmp_path: Path, src_pythonpath: str) -> None:
    missing = shell(src_pythonpath, "--socket", str(tmp_path / "nobody"), "stats")
    assert missing.returncode == 2 and "cannot reach walqueue-serve" in missing.stderr
    assert shell(src_pythonpath, "--socket", str(tmp_path / "nobody"), "frobnicate").returncode == 64
    helped = shell(src_pythonpath, "--socket", "x", "--help")
    assert helped.returncode == 0 and "exit status" in helped.stdout


def test_the_help_lists_every_exit_status_the_shell_returns(src_pythonpath: str) -> None:
    helped = shell(src_pythonpath, "--socket", "x", "--help")
    table = helped.stdout.split("exit status:\n", 1)[1]
    listed = [int(line.split()[0]) for line in table.splitlines() if line.split() and line.split()[0].isdigit()]
    assert listed == sorted({*ShellExit, 64, 130})


def test_the_dashboard_works_over_a_client_of_a_served_queue(served: str) -> None:
    from dashboard_helpers import call

    from walqueue.dashboard import Dashboard

    with Client(served) as client:
        kill_through(client, "gone")
        client.put("waiting", {"<b>": "</script>"})
        app = Dashboard(client, clock=lambda: NOW)
        overview = call(app, "/api/overview").json()
        assert overview["counts"] == {"ready": 1, "leased": 0, "completed": 0, "dead": 1}
        assert [task["task_id"] for task in call(app, "/api/dead").json()["tasks"]] == ["gone"]
        assert call(app, "/metrics").status == 200
        assert call(app, "/api/dead", query="page=99999999").status == 400


@pytest.mark.parametrize("unit", [None, 1, 1000])
def test_redrive_makes_a_task_due_now_in_the_stores_clock_unit(
    served: str, src_pythonpath: str, unit: int | None
) -> None:
    """Not seconds by assumption: a store in milliseconds (recorded, or by default) gets milliseconds."""
    with Client(served) as client:
        if unit is not None:
            client.set_clock(unit)
        kill_through(client, "d1", unit)
        kill_through(client, "d2", unit)
    before = time.time()
    assert shell(src_pythonpath, "--socket", served, "redrive", "d1").returncode == 0
    assert shell(src_pythonpath, "--socket", served, "redrive", "--available-at", "2000000000", "d2").returncode == 0
    after = time.time()
    per_second = 1000 if unit is None else unit
    with Client(served) as client:
        redriven, later = client.get("d1"), client.get("d2")
    assert redriven is not None and later is not None
    assert int(before) * per_second <= redriven.available_at <= (int(after) + 1) * per_second
    assert later.available_at == 2_000_000_000 * per_second


def test_queues_pause_resume_and_limit_change_a_queue_through_the_server(served: str, src_pythonpath: str) -> None:
    with Client(served) as client:
        client.put("m1", {}, queue="mail", priority=3)
    for verb in (["pause", "mail"], ["limit", "mail", "--concurrency", "4", "--rate", "10/1"]):
        result = shell(src_pythonpath, "--socket", served, *verb)
        assert result.returncode == ShellExit.OK, result.stderr
    result = shell(src_pythonpath, "--socket", served, "queues")
    assert result.returncode == ShellExit.OK, result.stderr
    (mail,) = [q for q in json.loads(result.stdout) if q["name"] == "mail"]
    assert (mail["paused"], mail["concurrency"], mail["rate"], mail["counts"]["ready"]) == (True, 4, [10, 1], 1)
    with Client(served) as client:
        assert client.reserve("w", now=NOW, lease_seconds=60) == []  # paused
        assert shell(src_pythonpath, "--socket", served, "resume", "mail").returncode == ShellExit.OK
        assert shell(src_pythonpath, "--socket", served, "limit", "mail", "--rate", "none").returncode == 0
        assert [lease.task_id for lease in client.reserve("w", now=NOW, lease_seconds=60)] == ["m1"]
        (mail,) = [q for q in client.queues() if q["name"] == "mail"]
        assert (mail["paused"], mail["concurrency"], mail["rate"]) == (False, 4, None)


@pytest.mark.parametrize(
    "verb",
    [
        ["pause", "a,b"],
        ["resume", ""],
        ["limit", "mail"],
        ["limit", "mail", "--concurrency", "0"],
        ["limit", "mail", "--rate", "10"],
        ["limit", "mail", "--rate", "10/0"],
        ["limit", "bad name", "--concurrency", "1"],
    ],
)
def test_a_bad_queue_verb_is_a_usage_error_that_changes_nothing(
    served: str, src_pythonpath: str, verb: list[str]
) -> None:
    with Client(served) as client:
        before = client.last_seq
    result = shell(src_pythonpath, "--socket", served, *verb)
    assert result.returncode == 64, result.stderr
    assert result.stderr.strip()
    with Client(served) as client:
        assert client.last_seq == before
