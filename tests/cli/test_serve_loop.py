"""walqueue-serve's event loop: pipelining, fairness, clients that never read or read slowly, and `wait`.

Every blocking step runs under a timeout; no assertion is about speed
except "served while another client misbehaves", with generous bounds.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from support.servers import RawConnection, ServerProcess, running_server

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def server(place: Path) -> Any:
    with running_server(place / "q", place / "s", "--write-timeout", "2") as running:
        yield running


def line(request: dict[str, Any]) -> bytes:
    return json.dumps(request).encode() + b"\n"


def put(task_id: str, **fields: Any) -> dict[str, Any]:
    return {"op": "put", "task_id": task_id, "payload": fields.pop("payload", {"n": 1}), **fields}


def test_many_pipelined_requests_of_every_kind_are_answered_in_order(server: ServerProcess) -> None:
    connection = RawConnection(server.socket_path)
    batch = [put(f"t{i}", id=i) for i in range(300)]
    batch += [{"op": "get", "task_id": f"t{i}", "id": 300 + i} for i in range(300)]
    batch += [
        {"op": "reserve", "worker": "w", "now": 5, "lease_seconds": 9, "limit": 1, "id": 600 + i} for i in range(5)
    ]
    connection.send(b"".join(line(request) for request in batch))
    for i in range(300):
        assert connection.answer() == {"id": i, "ok": True, "task_id": f"t{i}"}
    for i in range(300):
        assert connection.answer()["task"]["task_id"] == f"t{i}"
    leased = [connection.answer()["leases"][0]["task_id"] for _ in range(5)]
    assert leased == sorted(leased) and len(set(leased)) == 5


def test_a_pipelining_client_does_not_starve_another(server: ServerProcess) -> None:
    busy = RawConnection(server.socket_path)
    other = RawConnection(server.socket_path)
    count = 20_000
    answered = []

    def read_all() -> None:
        for _ in range(count):
            answered.append(busy.answer())

    reader = threading.Thread(target=read_all, daemon=True)
    reader.start()
    busy.send(b"".join(line({"op": "get", "task_id": f"x{i}", "id": i}) for i in range(count)))
    assert other.request({"op": "stats", "id": "other"})["id"] == "other"
    busy_done_when_other_answered = len(answered)
    reader.join(60)
    assert len(answered) == count and [a["id"] for a in answered] == list(range(count))
    assert busy_done_when_other_answered < count


def test_a_pipelining_client_that_never_reads_stalls_no_one_and_is_dropped(server: ServerProcess) -> None:
    silent = RawConnection(server.socket_path, timeout=0.5)
    silent.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    chunk = b"".join(line({"op": "stats"}) for _ in range(2000))
    other = RawConnection(server.socket_path)
    try:
        for _ in range(200):
            silent.send(chunk)  # the server stops reading it once its answers pile up
    except (TimeoutError, BrokenPipeError, ConnectionResetError):
        pass
    started = time.monotonic()
    for i in range(50):
        assert other.request(put(f"o{i}", id=i))["id"] == i
    assert time.monotonic() - started < 10
    time.sleep(3)  # --write-timeout 2 without progress: dropped
    silent.read_until_closed()
    assert other.request({"op": "stats"})["ok"] is True


def test_a_slow_reader_of_a_large_answer_is_served_as_long_as_it_makes_progress(server: ServerProcess) -> None:
    writer = RawConnection(server.socket_path)
    for i in range(8):
        assert writer.request(put(f"big{i}", payload={"text": "z" * 2**20}))["ok"]
    reader = RawConnection(server.socket_path)
    reader.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2**16)
    reader.send(line({"op": "tasks", "id": "all"}))
    received = bytearray()
    started = time.monotonic()
    while not received.endswith(b"\n"):
        data = reader.sock.recv(2**16)
        assert data, f"dropped after {len(received)} bytes"
        received += data
        time.sleep(0.05)  # 64 KiB every 50 ms: far longer than --write-timeout 2 in all
    assert time.monotonic() - started > 2
    answer = json.loads(received)
    assert answer["id"] == "all" and len(answer["tasks"]) == 8


def test_a_request_trickled_one_byte_at_a_time_is_served_and_others_meanwhile(server: ServerProcess) -> None:
    slow = RawConnection(server.socket_path)
    other = RawConnection(server.socket_path)
    for index, byte in enumerate(line(put("trickled", id="t"))):
        slow.send(bytes([byte]))
        if index % 10 == 0:
            assert other.request({"op": "stats"})["ok"]
    assert slow.answer() == {"id": "t", "ok": True, "task_id": "trickled"}


def test_a_half_closed_connection_gets_every_answer_then_the_end(server: ServerProcess) -> None:
    connection = RawConnection(server.socket_path)
    connection.send(line(put("a", id=1)) + line(put("b", id=2)) + json.dumps(put("c", id=3)).encode())
    connection.sock.shutdown(socket.SHUT_WR)
    assert [connection.answer()["id"] for _ in range(3)] == [1, 2, 3]
    assert connection.closed_by_server()


def test_wait_after_a_reserve_that_reaped_misses_no_commit_made_before_it_parks(server: ServerProcess) -> None:
    setup = RawConnection(server.socket_path)
    for trial in range(20):
        assert setup.request(put(f"r{trial}", max_attempts=1))["ok"]
        assert setup.request({"op": "reserve", "worker": "w", "now": 1, "lease_seconds": 1})["leases"]
        worker = RawConnection(server.socket_path)
        putter = RawConnection(server.socket_path)
        # The reserve reaps the expired lease (the task dies) and finds nothing; the put lands while
        # that reap is being synced or just after: either way, the wait that follows must see it.
        worker.send(line({"op": "reserve", "worker": "w", "now": 10**6, "lease_seconds": 1}))
        putter.send(line(put(f"n{trial}", available_at=2**62)))
        assert worker.answer()["leases"] == []
        assert putter.answer()["ok"]
        started = time.monotonic()
        assert worker.request({"op": "wait", "timeout": 20}) == {"ok": True, "committed": True}
        assert time.monotonic() - started < 10
        worker.close()
        putter.close()


def test_a_wait_parked_behind_pipelined_requests_keeps_their_order(server: ServerProcess) -> None:
    connection = RawConnection(server.socket_path)
    connection.request({"op": "stats"})
    connection.send(line({"op": "wait", "timeout": 20, "id": "w"}) + line({"op": "get", "task_id": "x", "id": "g"}))
    time.sleep(0.3)
    RawConnection(server.socket_path).request(put("x"))
    assert connection.answer() == {"id": "w", "ok": True, "committed": True}
    assert connection.answer()["task"]["task_id"] == "x"


def test_many_parked_waits_are_all_woken_by_one_commit(server: ServerProcess) -> None:
    waiters = [RawConnection(server.socket_path) for _ in range(30)]
    for index, waiter in enumerate(waiters):
        waiter.request({"op": "stats"})
        waiter.send(line({"op": "wait", "timeout": 30, "id": index}))
    time.sleep(0.3)
    RawConnection(server.socket_path).request(put("wake"))
    for index, waiter in enumerate(waiters):
        assert waiter.answer() == {"id": index, "ok": True, "committed": True}


_FAILING_FSYNC_SERVER = """
import errno, os, sys
from walqueue.serve.cli import main

flag = sys.argv[3]

def failing(real):
    def sync(fd):
        if os.path.exists(flag):
            raise OSError(errno.EIO, "injected fsync failure")
        real(fd)
    return sync

os.fsync = failing(os.fsync)
os.fdatasync = failing(os.fdatasync)  # the WAL syncs its data with fdatasync
sys.exit(main([sys.argv[1], "--socket", sys.argv[2], "--log-level", "WARNING"]))
"""


def test_a_failed_fsync_makes_every_answer_of_its_turn_fatal_and_the_server_exits_1(place: Path) -> None:
    import subprocess
    import sys

    from support.children import child_environment

    flag = place / "fail"
    process = subprocess.Popen(
        [sys.executable, "-c", _FAILING_FSYNC_SERVER, str(place / "q"), str(place / "s"), str(flag)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_environment(),
    )
    try:
        assert process.stdout is not None and b"listening" in process.stdout.readline()
        connection = RawConnection(str(place / "s"))
        assert connection.request(put("kept", id=0))["ok"] is True
        flag.touch()
        connection.send(b"".join(line(put(f"lost{i}", id=i)) for i in range(1, 4)))
        answers = [connection.answer() for _ in range(3)]
        assert all(answer["ok"] is False and answer["error"] == "Fatal" for answer in answers), answers
        assert [answer["id"] for answer in answers] == [1, 2, 3]
        _, err = process.communicate(timeout=30)
        assert process.returncode == 1, err
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=30)


def test_a_client_that_closes_during_its_wait_frees_its_slot_at_once(place: Path) -> None:
    with running_server(place / "q", place / "s", "--max-clients", "1") as server:
        waiter = RawConnection(server.socket_path)
        waiter.request({"op": "stats"})
        waiter.send(line({"op": "wait", "timeout": 3600}))
        time.sleep(0.2)
        waiter.close()
        deadline = time.monotonic() + 10
        while True:  # the slot frees as soon as the server reads the end of the closed connection
            answer = RawConnection(server.socket_path).request({"op": "stats"})
            if answer.get("ok"):
                break
            assert answer["error"] == "TooManyClients" and time.monotonic() < deadline
            time.sleep(0.05)


def test_a_half_closed_client_still_gets_its_wait_answered(server: ServerProcess) -> None:
    connection = RawConnection(server.socket_path)
    connection.request({"op": "stats"})
    connection.send(line({"op": "wait", "timeout": 30, "id": "w"}))
    connection.sock.shutdown(socket.SHUT_WR)
    time.sleep(0.2)
    RawConnection(server.socket_path).request(put("wake"))
    assert connection.answer() == {"id": "w", "ok": True, "committed": True}


def test_the_metrics_answer_counts_the_served_requests_by_op(server: ServerProcess) -> None:
    from walqueue.client import Client

    with Client(server.socket_path) as client:
        for number in range(3):
            client.put(f"t{number}", {})
        [lease] = client.reserve("w", now=0, lease_seconds=30)
        client.ack(lease, now=0)
        client.reserve("w", now=0, lease_seconds=30)
        first = client.metrics()["request_seconds"]
        seconds = client.metrics()["request_seconds"]
    assert "metrics" not in first  # a reading is taken while its own request runs: it counts those before it
    assert seconds["put"]["count"] == 3
    assert seconds["reserve"]["count"] == 2
    assert seconds["ack"]["count"] == 1
    assert seconds["metrics"]["count"] == 1  # the first metrics request, answered before this one
    for reading in seconds.values():
        assert sum(reading["counts"]) == reading["count"] and reading["sum"] >= 0
