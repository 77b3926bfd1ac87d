"""A put's time on the command line and the protocol: the shell's `put` stamps it; bad ones are refused by name."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from test_protocol import answer_to, assert_bad_request
from test_shell_edges import shell

from support.servers import ServerProcess
from walqueue import Queue
from walqueue.client import AsyncClient, Client
from walqueue.protocol.storeclock import now_in

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("put_at", [-1, True, 1.5, "5", 2**63, None])
def test_a_bad_put_time_is_a_bad_request_naming_it(put_at: object) -> None:
    assert_bad_request({"op": "put", "task_id": "a", "payload": {}, "put_at": put_at}, "put_at")
    assert_bad_request({"op": "put_many", "tasks": [{"task_id": "a", "payload": {}, "put_at": put_at}]}, "put_at")


def test_the_protocol_carries_a_put_time(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        assert answer_to({"op": "put", "task_id": "a", "payload": {}, "put_at": 70}, queue)["ok"] is True
        assert queue.get("a").available_at == 70


@pytest.mark.parametrize(
    "arguments",
    [
        ("--put-at", "-1"),
        ("--put-at", "soon"),
        ("--available-at", "1.5"),
        ("--priority", "500"),
        ("--max-attempts", "0"),
        ("--queue", "no spaces"),
    ],
)
def test_a_bad_put_on_the_command_line_is_a_usage_error_that_writes_nothing(
    tmp_path: Path, arguments: tuple[str, ...]
) -> None:
    with Queue(tmp_path / "q", sync=False):
        pass
    result = shell(str(tmp_path / "q"), "put", "a", "{}", *arguments)
    assert result.returncode == 64, result.stderr
    assert "Traceback" not in result.stderr
    with Queue(tmp_path / "q", sync=False) as queue:
        assert queue.last_seq == 0


def test_the_shells_put_stamps_now_in_the_stores_unit(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        queue.set_clock(1000)
    before = now_in(1000)
    result = shell(str(tmp_path / "q"), "put", "a", '{"to": "ada"}', "--key", "k")
    assert result.returncode == 0 and result.stdout == "a\n", result.stderr
    again = shell(str(tmp_path / "q"), "put", "a", '{"to": "ada"}', "--key", "k")  # stamped later: identical
    assert again.returncode == 0, again.stderr
    conflict = shell(str(tmp_path / "q"), "put", "a", '{"to": "bob"}', "--key", "k")
    assert conflict.returncode == 1 and "refused" in conflict.stderr
    timed = shell(str(tmp_path / "q"), "put", "b", "{}", "--put-at", "2000000000")
    assert timed.returncode == 0, timed.stderr
    with Queue(tmp_path / "q", sync=False) as queue:
        assert before <= queue.get("a").available_at <= now_in(1000)
        assert queue.get("b").available_at == 2_000_000_000_000  # seconds on the command line, the store's unit
        assert queue.metrics(now=now_in(1000))["gauges"]["undated_ready"] == 0


def test_a_store_with_no_unit_is_not_stamped_by_the_shell(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False):
        pass
    assert shell(str(tmp_path / "q"), "put", "a", "{}").returncode == 0
    with Queue(tmp_path / "q", sync=False) as queue:
        assert queue.get("a").available_at == 0
        assert queue.metrics(now=5)["gauges"]["undated_ready"] == 1


def test_a_client_stamps_its_puts_once_the_store_records_its_unit(server: ServerProcess) -> None:
    with Client(server.socket_path, timeout=30) as client:
        client.put("logical", {})  # no unit recorded: the store's times may be a counter, so no stamp
        assert client.get("logical").available_at == 0
    with Client(server.socket_path, timeout=30) as client:
        client.set_clock(1000)
    with Client(server.socket_path, timeout=30) as client:
        before = now_in(1000)
        client.put("a", {})
        client.put_many([{"task_id": "b", "payload": {}}, {"task_id": "c", "payload": {}, "put_at": 0}])
        with client.pipeline() as batch:
            batch.put("d", {})
        client.put("e", {}, put_at=5)  # the caller's own time is sent as it is
        after = now_in(1000)
        assert all(before <= client.get(t).available_at <= after for t in "abd")
        assert client.get("c").available_at == 0 and client.get("e").available_at == 5

    async def stamped() -> int:
        async with AsyncClient(server.socket_path) as async_client:
            await async_client.put("f", {})
            await async_client.put_many([{"task_id": "g", "payload": {}}])
            tasks = [await async_client.get(task_id) for task_id in "fg"]
            return min(task.available_at for task in tasks if task is not None)

    assert asyncio.run(stamped()) >= before
