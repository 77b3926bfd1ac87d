"""walqueue-serve as a real process: the protocol on a socket, lifecycle, isolation, security.

Every blocking step runs under a timeout (sockets, subprocesses, waits).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_cli_process import BAD_LINES

from support.children import child_environment
from support.servers import RawConnection, ServerProcess, running_server, serve_command
from walqueue import Queue
from walqueue.protocol.requests import MAX_LINE_BYTES, respond

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def server(place: Path) -> Iterator[ServerProcess]:
    with running_server(place / "q", place / "s", "--write-timeout", "2") as running:
        yield running


def put(task_id: str, **fields: Any) -> dict[str, Any]:
    return {"op": "put", "task_id": task_id, "payload": {"n": 1}, **fields}


def test_it_prints_the_socket_path_once_listening_and_the_socket_is_owner_only(server: ServerProcess) -> None:
    assert server.socket_path in server.ready_line
    status = os.stat(server.socket_path)
    assert stat.S_ISSOCK(status.st_mode)
    assert stat.S_IMODE(status.st_mode) == 0o600


def test_mode_sets_the_socket_permissions(place: Path) -> None:
    with running_server(place / "q", place / "s", "--mode", "660"):
        assert stat.S_IMODE(os.stat(place / "s").st_mode) == 0o660


def test_a_connection_speaks_the_consumer_protocol(server: ServerProcess) -> None:
    connection = RawConnection(server.socket_path)
    assert connection.request(put("t1", id=1)) == {"id": 1, "ok": True, "task_id": "t1"}
    [lease] = connection.request({"op": "reserve", "worker": "w", "now": 100, "lease_seconds": 30})["leases"]
    assert connection.request({"op": "ack", "lease": lease, "now": 101, "id": "a"}) == {"id": "a", "ok": True}
    again = connection.request({"op": "ack", "lease": lease, "now": 102})
    assert again["error"] == "StaleLease"
    assert connection.request(put("t1", payload={"n": 2}))["error"] == "KeyConflict"
    assert connection.request({"op": "get", "task_id": "t1"})["task"]["status"] == "completed"
    assert connection.request({"op": "stats"})["stats"]["last_seq"] == 3
    assert connection.request({"op": "compact"}) == {"ok": True}


def test_every_bad_line_is_answered_as_the_consumer_answers_it(server: ServerProcess, tmp_path: Path) -> None:
    connection = RawConnection(server.socket_path)
    with Queue(tmp_path / "reference", sync=False) as reference:
        for line, _ in BAD_LINES:
            connection.send(line)
            assert connection.answer() == respond(line, reference).answer, line
    assert connection.request({"op": "stats"})["stats"]["last_seq"] == 0


def test_answers_come_in_order_for_pipelined_requests(server: ServerProcess) -> None:
    connection = RawConnection(server.socket_path)
    lines = b"".join(json.dumps(put(f"t{i}", id=i)).encode() + b"\n" for i in range(200))
    connection.send(lines + b"\n\n" + b'{"op":"stats","id":"last"}\n')
    for i in range(200):
        assert connection.answer() == {"id": i, "ok": True, "task_id": f"t{i}"}
    assert connection.answer()["id"] == "last"


def test_a_line_just_over_the_bound_is_refused_and_the_next_served_while_others_go_on(server: ServerProcess) -> None:
    hostile = RawConnection(server.socket_path)
    other = RawConnection(server.socket_path)
    block = b"x" * 2**20

    def flood() -> None:
        hostile.send(b'{"op":"put","pad":"')
        for _ in range(MAX_LINE_BYTES // len(block) + 1):
            hostile.send(block)
        hostile.send(b'"}\n{"op":"get","task_id":"t","id":"after"}\n')

    sender = threading.Thread(target=flood, daemon=True)
    sender.start()
    for i in range(20):  # another client is served throughout
        assert other.request(put(f"o{i}"))["ok"] is True
    first = hostile.answer()
    assert first["error"] == "BadRequest" and "line longer than" in first["message"]
    sender.join(60)
    assert hostile.answer() == {"id": "after", "ok": True, "task": None}


def test_a_client_that_never_reads_is_disconnected_and_others_are_served(server: ServerProcess) -> None:
    silent = RawConnection(server.socket_path)
    silent.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    other = RawConnection(server.socket_path)
    other.request(put("big", payload={"text": "y" * 200_000}))
    request = json.dumps({"op": "tasks"}).encode() + b"\n"
    silent.sock.settimeout(0.5)
    try:
        for _ in range(200):  # answers of 200 kB each, never read
            silent.send(request)
    except (TimeoutError, BrokenPipeError, ConnectionResetError):
        pass  # the server stopped reading it (backpressure) or dropped it
    started = time.monotonic()
    for i in range(10):
        assert other.request({"op": "get", "task_id": "big", "id": i})["id"] == i
    assert time.monotonic() - started < 5
    # After --write-timeout (2 s) without progress, the server lets it go:
    # what it had written is still readable, then the end of the stream.
    time.sleep(3)
    silent.read_until_closed()
    assert other.request({"op": "stats"})["ok"] is True


def test_a_request_cut_by_a_disconnect_never_starts_and_a_whole_one_completes(server: ServerProcess) -> None:
    cut = RawConnection(server.socket_path)
    cut.send(json.dumps(put("cut")).encode()[:-1])  # the closing brace never arrives
    cut.close()
    whole = RawConnection(server.socket_path)
    whole.send(json.dumps(put("whole")).encode() + b"\n")
    whole.close()  # before its answer
    checker = RawConnection(server.socket_path)
    deadline = time.monotonic() + 10
    while checker.request({"op": "get", "task_id": "whole"})["task"] is None:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert checker.request({"op": "get", "task_id": "cut"})["task"] is None
    assert checker.request({"op": "stats"})["stats"]["last_seq"] == 1


def test_max_clients_refuses_the_next_connection_and_frees_a_slot_on_disconnect(place: Path) -> None:
    with running_server(place / "q", place / "s", "--max-clients", "2") as server:
        first = RawConnection(server.socket_path)
        second = RawConnection(server.socket_path)
        assert first.request({"op": "stats"})["ok"] and second.request({"op": "stats"})["ok"]
        third = RawConnection(server.socket_path)
        assert third.answer()["error"] == "TooManyClients"
        assert third.closed_by_server()
        first.close()
        deadline = time.monotonic() + 10
        while True:
            fourth = RawConnection(server.socket_path)
            answer = json.loads(fourth.answer_line()) if _readable(fourth) else fourth.request({"op": "stats"})
            if answer.get("ok"):
                break
            assert time.monotonic() < deadline
            time.sleep(0.05)


def _readable(connection: RawConnection) -> bool:
    import select

    return bool(select.select([connection.sock], [], [], 0.2)[0])


def test_sigterm_finishes_in_flight_work_closes_the_queue_removes_the_socket_and_exits_0(place: Path) -> None:
    server = ServerProcess(place / "q", place / "s").wait_ready()
    try:
        waiting = RawConnection(server.socket_path)
        waiting.send(b'{"op":"wait","timeout":60,"id":"w"}\n')
        writer = RawConnection(server.socket_path)
        assert writer.request(put("kept"))["ok"]
        time.sleep(0.2)
        started = time.monotonic()
        status, err = server.terminate()
        assert status == 0, err
        assert time.monotonic() - started < 10
        # The wait was woken by the commit or the stop: either way it was answered.
        assert waiting.answer()["id"] == "w"
        assert not os.path.exists(place / "s")
        assert "stopped" in err and "pid=" in err and "uid=" in err
    finally:
        server.kill()
    with Queue(place / "q") as reopened:  # the lock was released
        assert reopened.get("kept") is not None


def test_sigint_stops_gracefully_too(place: Path) -> None:
    server = ServerProcess(place / "q", place / "s").wait_ready()
    try:
        server.process.send_signal(2)
        status, err = server.exit_status()
        assert status == 0, err
        assert not os.path.exists(place / "s")
    finally:
        server.kill()


def test_a_second_server_for_the_same_directory_exits_with_directory_locked_and_leaves_the_socket(
    server: ServerProcess, place: Path
) -> None:
    second = subprocess.run(
        serve_command(place / "q", place / "s"), capture_output=True, timeout=30, env=child_environment()
    )
    assert second.returncode == 2
    assert b"DirectoryLocked" in second.stderr
    assert RawConnection(server.socket_path).request({"op": "stats"})["ok"] is True
    other_socket = subprocess.run(
        serve_command(place / "q", place / "s2"), capture_output=True, timeout=30, env=child_environment()
    )
    assert other_socket.returncode == 2 and not os.path.exists(place / "s2")


def test_a_socket_that_answers_is_never_replaced(server: ServerProcess, place: Path) -> None:
    second = subprocess.run(
        serve_command(place / "q2", place / "s"), capture_output=True, timeout=30, env=child_environment()
    )
    assert second.returncode == 3, second.stderr
    assert RawConnection(server.socket_path).request({"op": "stats"})["ok"] is True


def test_a_stale_socket_of_a_killed_server_is_replaced(place: Path) -> None:
    killed = ServerProcess(place / "q", place / "s").wait_ready()
    RawConnection(killed.socket_path).request(put("before"))
    killed.process.kill()
    killed.exit_status()
    assert stat.S_ISSOCK(os.lstat(place / "s").st_mode)  # left behind
    with running_server(place / "q", place / "s") as server:
        assert RawConnection(server.socket_path).request({"op": "get", "task_id": "before"})["task"] is not None


def test_a_file_that_is_not_a_socket_is_left_alone(place: Path) -> None:
    (place / "s").write_text("precious")
    completed = subprocess.run(
        serve_command(place / "q", place / "s"), capture_output=True, timeout=30, env=child_environment()
    )
    assert completed.returncode == 3
    assert (place / "s").read_text() == "precious"
    with Queue(place / "q"):  # it released the directory
        pass


def test_wait_is_woken_by_another_connections_commit(server: ServerProcess) -> None:
    waiter = RawConnection(server.socket_path)
    writer = RawConnection(server.socket_path)
    started = time.monotonic()
    waiter.send(b'{"op":"wait","timeout":20}\n')
    time.sleep(0.2)
    writer.request(put("wake"))
    assert waiter.answer() == {"ok": True, "committed": True}
    assert time.monotonic() - started < 10


def test_wait_answers_false_after_its_timeout_when_nothing_commits(server: ServerProcess) -> None:
    connection = RawConnection(server.socket_path)
    connection.request({"op": "get", "task_id": "x"})
    started = time.monotonic()
    assert connection.request({"op": "wait", "timeout": 0.3}) == {"ok": True, "committed": False}
    assert time.monotonic() - started >= 0.3


def test_wait_after_an_empty_reserve_misses_no_commit_made_in_between(server: ServerProcess) -> None:
    worker = RawConnection(server.socket_path)
    assert worker.request({"op": "reserve", "worker": "w", "now": 1, "lease_seconds": 5})["leases"] == []
    RawConnection(server.socket_path).request(put("between"))
    started = time.monotonic()
    assert worker.request({"op": "wait", "timeout": 20}) == {"ok": True, "committed": True}
    assert time.monotonic() - started < 5


def test_there_is_never_a_tcp_listener(server: ServerProcess) -> None:
    pid = server.process.pid
    inodes = set()
    for name in os.listdir(f"/proc/{pid}/fd"):
        target = os.readlink(f"/proc/{pid}/fd/{name}")
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    for table in ("/proc/net/tcp", "/proc/net/tcp6", "/proc/net/udp", "/proc/net/udp6"):
        if os.path.exists(table):
            with open(table) as rows:
                for row in list(rows)[1:]:
                    assert row.split()[9] not in inodes, f"an inet socket in {table}"


def test_an_io_error_that_poisons_the_queue_is_fatal_and_the_server_exits_1(place: Path) -> None:
    def limit_file_size() -> None:
        # A write beyond the limit fails with EFBIG (a real OSError inside Queue).
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    process = subprocess.Popen(
        serve_command(place / "q", place / "s"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_environment(),
        preexec_fn=limit_file_size,
    )
    try:
        assert process.stdout is not None
        assert b"listening" in process.stdout.readline()
        connection = RawConnection(str(place / "s"))
        answer = connection.request(put("big", payload={"text": "z" * 10_000}, id=7))
        assert answer["id"] == 7 and answer["error"] == "Fatal"
        _, err = process.communicate(timeout=30)
        assert process.returncode == 1, err
        assert not os.path.exists(place / "s")
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=30)
