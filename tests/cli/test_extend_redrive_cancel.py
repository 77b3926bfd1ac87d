"""The lifecycle calls through the CLI: `extend`, `redrive`, `cancel`, `WrongStatus`, three-field leases, stats keys.

Each call is exercised where a user meets it: the consumer process
(`python -m walqueue.cli DIR`), a raw connection to `walqueue-serve`, and
`Client`/`AsyncClient`, whose answers must be exactly those of an in-process
`Queue`. The retry rules use `FlakyServer` (an in-process server that runs a
request and then drops the connection instead of answering). Every blocking
step has a timeout; nothing asserts on elapsed time.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_cli_process import Consumer, answers_bad_requests, put

from model import render
from support.children import run_consumer
from support.servers import FlakyServer, RawConnection, ServerProcess
from walqueue import KeyConflict, Lease, Queue, StaleLease, WrongStatus
from walqueue.client import AsyncClient, Client
from walqueue.protocol.requests import OPS

pytestmark = pytest.mark.timeout(120)


def token(lease: dict[str, Any]) -> dict[str, Any]:
    """A lease object cut down to the three fields a request needs."""
    return {name: lease[name] for name in ("task_id", "worker", "generation")}


@pytest.fixture
def consumer(tmp_path: Path) -> Iterator[Consumer]:
    running = Consumer(tmp_path / "q")
    yield running
    running.kill()


# -- the consumer process ---------------------------------------------------------------------


def test_extend_moves_the_deadline_keeps_attempts_and_generation_and_both_tokens_stay_valid(
    consumer: Consumer,
) -> None:
    consumer.ask(put("a", payload={"n": 1}))
    (lease,) = consumer.ask({"op": "reserve", "worker": "w", "now": 100, "lease_seconds": 30})["leases"]
    extended = consumer.ask({"op": "extend", "lease": token(lease), "now": 120, "lease_seconds": 50, "id": 1})
    assert extended == {"id": 1, "ok": True, "lease": {**lease, "deadline": 170}}
    task = consumer.ask({"op": "get", "task_id": "a"})["task"]
    assert (task["status"], task["deadline"], task["attempts"], task["generation"]) == ("leased", 170, 1, 1)
    # Shorter than before is allowed, and the old token (with its old deadline) still owns the task.
    shorter = consumer.ask({"op": "extend", "lease": lease, "now": 160, "lease_seconds": 1})
    assert shorter["lease"]["deadline"] == 161
    assert consumer.ask({"op": "ack", "lease": token(lease), "now": 160}) == {"ok": True}
    assert consumer.ask({"op": "get", "task_id": "a"})["task"]["status"] == "completed"
    assert consumer.finish()[0] == 0


def test_extend_at_or_after_the_deadline_or_by_another_worker_is_stale_and_writes_nothing(
    consumer: Consumer,
) -> None:
    consumer.ask(put("a"))
    (lease,) = consumer.ask({"op": "reserve", "worker": "w", "now": 0, "lease_seconds": 10})["leases"]
    before = consumer.ask({"op": "stats"})["stats"]
    for request in (
        {"op": "extend", "lease": lease, "now": 10, "lease_seconds": 5},
        {"op": "extend", "lease": {**token(lease), "worker": "x"}, "now": 1, "lease_seconds": 5},
        {"op": "extend", "lease": {**token(lease), "generation": 2}, "now": 1, "lease_seconds": 5},
        {"op": "extend", "lease": {**token(lease), "task_id": "never"}, "now": 1, "lease_seconds": 5},
    ):
        answer = consumer.ask(request)
        assert answer["ok"] is False and answer["error"] == "StaleLease", (request, answer)
    assert consumer.ask({"op": "stats"})["stats"] == before
    assert consumer.finish()[0] == 0


def test_cancel_makes_the_holder_stale_and_redrive_brings_the_task_back(consumer: Consumer) -> None:
    consumer.ask(put("a", payload={"n": 1}, max_attempts=3))
    (lease,) = consumer.ask({"op": "reserve", "worker": "w", "now": 0, "lease_seconds": 100})["leases"]
    assert consumer.ask({"op": "cancel", "task_id": "a", "id": "c"}) == {"id": "c", "ok": True}
    task = consumer.ask({"op": "get", "task_id": "a"})["task"]
    assert (task["status"], task["worker"], task["deadline"], task["payload"]) == ("dead", None, None, {"n": 1})

    before = consumer.ask({"op": "stats"})["stats"]
    for request in (
        {"op": "ack", "lease": token(lease), "now": 1},
        {"op": "release", "lease": token(lease), "now": 1},
        {"op": "extend", "lease": token(lease), "now": 1, "lease_seconds": 5},
    ):
        answer = consumer.ask(request)
        assert answer["ok"] is False and answer["error"] == "StaleLease", (request, answer)
    answer = consumer.ask({"op": "cancel", "task_id": "a"})
    assert answer["ok"] is False and answer["error"] == "WrongStatus" and answer["message"]
    assert consumer.ask({"op": "stats"})["stats"] == before

    assert consumer.ask({"op": "redrive", "task_id": "a", "available_at": 50, "extra_attempts": 2}) == {"ok": True}
    task = consumer.ask({"op": "get", "task_id": "a"})["task"]
    assert (task["status"], task["available_at"], task["max_attempts"], task["attempts"]) == ("ready", 50, 5, 1)
    assert consumer.ask({"op": "reserve", "worker": "w", "now": 49, "lease_seconds": 5})["leases"] == []
    (again,) = consumer.ask({"op": "reserve", "worker": "w", "now": 50, "lease_seconds": 5})["leases"]
    assert (again["generation"], again["attempts"]) == (2, 2)
    # Fencing holds across the redrive: the first lease is still stale.
    assert consumer.ask({"op": "ack", "lease": token(lease), "now": 51})["error"] == "StaleLease"
    # The task's identity is its original put: an identical put returns the id, another conflicts.
    assert consumer.ask(put("a", payload={"n": 1}, max_attempts=3)) == {"ok": True, "task_id": "a"}
    assert consumer.ask(put("a", payload={"n": 2}))["error"] == "KeyConflict"
    assert consumer.finish()[0] == 0


def test_redrive_without_extra_attempts_adds_one(consumer: Consumer) -> None:
    consumer.ask(put("a", max_attempts=1))
    consumer.ask({"op": "cancel", "task_id": "a"})
    assert consumer.ask({"op": "redrive", "task_id": "a", "available_at": 0}) == {"ok": True}
    assert consumer.ask({"op": "get", "task_id": "a"})["task"]["max_attempts"] == 2
    assert consumer.finish()[0] == 0


def test_wrong_status_is_answered_by_name_and_changes_nothing(consumer: Consumer) -> None:
    consumer.ask(put("ready"))
    consumer.ask(put("done"))
    (lease,) = consumer.ask({"op": "reserve", "worker": "w", "now": 0, "lease_seconds": 10})["leases"]
    consumer.ask({"op": "ack", "lease": token(lease), "now": 1})  # "done" is completed
    before = consumer.ask({"op": "stats"})["stats"]
    for request in (
        {"op": "redrive", "task_id": "ready", "available_at": 0},
        {"op": "redrive", "task_id": "done", "available_at": 0},
        {"op": "redrive", "task_id": "never", "available_at": 0},
        {"op": "cancel", "task_id": "done"},
        {"op": "cancel", "task_id": "never"},
    ):
        answer = consumer.ask({**request, "id": 7})
        assert answer["id"] == 7 and answer["ok"] is False and answer["error"] == "WrongStatus", (request, answer)
        assert request["task_id"] in answer["message"]
    assert consumer.ask({"op": "stats"})["stats"] == before
    assert consumer.finish()[0] == 0


NEW_OP_BAD_LINES = [
    (b'{"op":"extend","lease":{"task_id":"a","worker":"w"},"now":1,"lease_seconds":5}\n', "generation"),
    (b'{"op":"extend","lease":{"task_id":"a","worker":"w","generation":1},"now":1}\n', "'lease_seconds'"),
    (b'{"op":"extend","lease":{"task_id":"a","worker":"w","generation":1},"now":1,"lease_seconds":0}\n', ">= 1"),
    (
        b'{"op":"extend","lease":{"task_id":"a","worker":"w","generation":1,"payload":[]},"now":1,"lease_seconds":1}\n',
        "payload",
    ),
    (b'{"op":"redrive","task_id":"a"}\n', "'available_at'"),
    (b'{"op":"redrive","task_id":"a","available_at":-1}\n', ">= 0"),
    (b'{"op":"redrive","task_id":"a","available_at":0,"extra_attempts":0}\n', ">= 1"),
    (b'{"op":"redrive","task_id":"a","available_at":0,"extra_attempts":1.0}\n', "integer"),
    (b'{"op":"cancel","task_id":3}\n', "string"),
    (b'{"op":"cancel","task_id":""}\n', "empty"),
    (b'{"op":"cancel","task_id":"a","force":true}\n', "unknown field 'force'"),
    (b'{"op":"cancel","task_id":"' + b"n" * 1025 + b'"}\n', "1024"),  # refused by Queue itself
]


def test_bad_arguments_of_the_new_ops_are_clear_bad_requests_that_write_nothing(consumer: Consumer) -> None:
    consumer.ask(put("a", max_attempts=1))
    consumer.ask({"op": "reserve", "worker": "w", "now": 0, "lease_seconds": 10})
    before = consumer.ask({"op": "stats"})["stats"]
    answers_bad_requests(consumer, NEW_OP_BAD_LINES)
    assert consumer.ask({"op": "stats"})["stats"] == before
    assert consumer.ask({"op": "get", "task_id": "a"})["task"]["status"] == "leased"
    assert consumer.finish()[0] == 0


def test_a_three_field_lease_works_for_ack_release_and_extend(consumer: Consumer) -> None:
    consumer.ask(put("a"))
    consumer.ask(put("b"))
    leases = consumer.ask({"op": "reserve", "worker": "w", "now": 0, "lease_seconds": 10, "limit": 2})["leases"]
    lease_a, lease_b = (token(lease) for lease in leases)
    assert consumer.ask({"op": "extend", "lease": lease_a, "now": 1, "lease_seconds": 20})["ok"] is True
    assert consumer.ask({"op": "ack", "lease": lease_a, "now": 2}) == {"ok": True}
    assert consumer.ask({"op": "release", "lease": lease_b, "now": 2, "delay": 3}) == {"ok": True}
    statuses = [(task["task_id"], task["status"]) for task in consumer.ask({"op": "tasks"})["tasks"]]
    assert statuses == [("a", "completed"), ("b", "ready")]
    assert consumer.finish()[0] == 0


def test_stats_shows_when_work_is_next_due(consumer: Consumer) -> None:
    stats = consumer.ask({"op": "stats"})["stats"]
    assert stats["next_available_at"] is None and stats["next_deadline"] is None
    consumer.ask(put("late", available_at=40))
    consumer.ask(put("soon", available_at=7))
    consumer.ask({"op": "reserve", "worker": "w", "now": 10, "lease_seconds": 25})  # leases "soon"
    stats = consumer.ask({"op": "stats"})["stats"]
    assert (stats["next_available_at"], stats["next_deadline"]) == (40, 35)
    assert consumer.finish()[0] == 0


def test_help_lists_every_op_and_every_error_name() -> None:
    result = run_consumer("--help")
    assert result.returncode == 0
    text = result.stdout.decode()
    table = [line.split()[0] for line in text.splitlines() if line.startswith("  ") and line.split()]
    for op in OPS:
        assert op in table, op
    for word in ("extra_attempts", "WrongStatus", "next_available_at", "next_deadline", "committed"):
        assert word in text, word


# -- walqueue-serve on a raw connection -------------------------------------------------------


def test_the_server_answers_the_new_ops_as_the_consumer_does(server: ServerProcess) -> None:
    connection = RawConnection(server.socket_path)
    connection.request(put("t", available_at=3))
    (lease,) = connection.request({"op": "reserve", "worker": "w", "now": 5, "lease_seconds": 10})["leases"]
    extended = connection.request({"op": "extend", "lease": token(lease), "now": 6, "lease_seconds": 60})
    assert extended == {"ok": True, "lease": {**lease, "deadline": 66}}
    assert connection.request({"op": "stats"})["stats"]["next_deadline"] == 66
    assert connection.request({"op": "cancel", "task_id": "t", "id": 1}) == {"id": 1, "ok": True}
    assert connection.request({"op": "cancel", "task_id": "t"})["error"] == "WrongStatus"
    assert connection.request({"op": "ack", "lease": token(lease), "now": 7})["error"] == "StaleLease"
    assert connection.request({"op": "redrive", "task_id": "t", "available_at": 9}) == {"ok": True}
    stats = connection.request({"op": "stats"})["stats"]
    assert (stats["next_available_at"], stats["next_deadline"], stats["last_seq"]) == (9, None, 5)
    connection.close()


@pytest.mark.parametrize("op", ["extend", "cancel", "redrive"])
def test_wait_is_woken_by_each_new_op(server: ServerProcess, op: str) -> None:
    connection = RawConnection(server.socket_path)
    connection.request(put("t", max_attempts=1))
    (lease,) = connection.request({"op": "reserve", "worker": "w", "now": 0, "lease_seconds": 10})["leases"]
    if op == "redrive":
        connection.request({"op": "cancel", "task_id": "t"})
    waiting = RawConnection(server.socket_path)
    assert waiting.request({"op": "stats"})["ok"] is True  # the waiter has seen everything up to here
    waiting.send(b'{"op":"wait","timeout":60}\n')
    request = {
        "extend": {"op": "extend", "lease": token(lease), "now": 1, "lease_seconds": 30},
        "cancel": {"op": "cancel", "task_id": "t"},
        "redrive": {"op": "redrive", "task_id": "t", "available_at": 0},
    }[op]
    assert connection.request(request)["ok"] is True
    assert waiting.answer() == {"ok": True, "committed": True}
    waiting.close()
    connection.close()


# -- Client and AsyncClient: exactly Queue's answers -------------------------------------------


def exercise(target: Any) -> list[str]:
    """Every new call with its outcomes (and the stats keys), as text that is the same for Queue and Client."""
    results: list[str] = []

    def record(call: Callable[[], Any]) -> None:
        try:
            results.append(render(call()))
        except (KeyConflict, StaleLease, WrongStatus, TypeError, ValueError) as error:
            results.append(type(error).__name__)

    def stats() -> Any:
        found = target.stats()
        return {name: found[name] for name in ("counts", "last_seq", "next_available_at", "next_deadline")}

    record(stats)
    record(lambda: target.put("a", {"big": "x" * 1000}))
    record(lambda: target.put("b", {}, max_attempts=1, available_at=4))
    [lease] = target.reserve("w", now=1, lease_seconds=10)
    results.append(render(lease))
    slim = Lease(lease.task_id, lease.worker, lease.generation)
    record(lambda: target.extend(slim, now=2, lease_seconds=30))
    record(lambda: target.extend(lease, now=3, lease_seconds=1))
    record(lambda: target.extend(lease, now=4, lease_seconds=1))  # at the deadline: stale
    record(lambda: target.extend(lease, now=3, lease_seconds=0))
    record(lambda: target.extend(lease, now=-1, lease_seconds=1))
    record(lambda: target.extend("not a lease", now=3, lease_seconds=1))
    record(stats)
    [second] = target.reserve("w", now=5, lease_seconds=10)  # "a" expired at 4; "b" is due at 4
    results.append(render(second))
    record(lambda: target.cancel(second.task_id))
    record(lambda: target.cancel(second.task_id))
    record(lambda: target.cancel("never"))
    record(lambda: target.cancel(""))
    record(lambda: target.cancel(7))
    record(lambda: target.ack(second, now=6))
    record(lambda: target.release(second, now=6))
    record(lambda: target.extend(second, now=6, lease_seconds=1))
    record(lambda: target.redrive("b", available_at=0))  # ready, not dead
    record(lambda: target.redrive(second.task_id, available_at=8, extra_attempts=2))
    record(lambda: target.redrive(second.task_id, available_at=8))
    record(lambda: target.redrive("never", available_at=8))
    record(lambda: target.redrive("a", available_at=-1))
    record(lambda: target.redrive("a", available_at=0, extra_attempts=0))
    record(lambda: target.redrive("a", available_at=True))
    record(lambda: target.get(second.task_id))
    record(stats)
    [third] = target.reserve("w", now=8, lease_seconds=10, limit=2)[-1:]
    results.append(render(third))
    record(lambda: target.ack(Lease(third.task_id, third.worker, third.generation), now=9))
    record(lambda: target.ack(second, now=9))
    record(lambda: target.tasks())
    record(stats)
    return results


def test_client_answers_every_new_call_as_queue_does(client: Client, tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        expected = exercise(queue)
        queue_keys = set(queue.stats())
    assert "WrongStatus" in expected and "StaleLease" in expected
    assert exercise(client) == expected
    assert set(client.stats()) == queue_keys


def test_client_raises_the_queues_exception_classes(client: Client) -> None:
    client.put("t", {})
    with pytest.raises(WrongStatus, match="never"):
        client.cancel("never")
    with pytest.raises(WrongStatus):
        client.redrive("t", available_at=0)
    [lease] = client.reserve("w", now=0, lease_seconds=10)
    extended = client.extend(lease, now=1, lease_seconds=5)
    assert isinstance(extended, Lease) and extended.deadline == 6 and extended.payload == {}
    client.cancel("t")
    with pytest.raises(StaleLease):
        client.extend(lease, now=2, lease_seconds=5)
    with pytest.raises(TypeError):
        client.extend(lease, now=2, lease_seconds=5.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        client.redrive("t", available_at=0, extra_attempts="1")  # type: ignore[arg-type]


async def exercise_async(target: Any) -> list[str]:
    """The new calls on a Queue (plain calls) or an AsyncClient (coroutines), as text."""
    results: list[str] = []

    async def record(call: Callable[[], Any]) -> Any:
        try:
            value = call()
            if inspect.isawaitable(value):
                value = await value
        except (KeyConflict, StaleLease, WrongStatus, TypeError, ValueError) as error:
            results.append(type(error).__name__)
            return None
        results.append(render(value))
        return value

    await record(lambda: target.put("t", {"n": 1}))
    [lease] = await record(lambda: target.reserve("w", now=0, lease_seconds=10))
    await record(lambda: target.extend(Lease(lease.task_id, lease.worker, lease.generation), now=1, lease_seconds=20))
    await record(lambda: target.extend(lease, now=1, lease_seconds=0))
    await record(lambda: target.cancel("t"))
    await record(lambda: target.cancel("t"))
    await record(lambda: target.ack(lease, now=2))
    await record(lambda: target.redrive("t", available_at=3, extra_attempts=2))
    await record(lambda: target.redrive("t", available_at=3))
    await record(lambda: target.get("t"))
    stats = await record(target.stats)
    results[-1] = render({name: stats[name] for name in ("counts", "last_seq", "next_available_at", "next_deadline")})
    return results


def test_async_client_answers_every_new_call_as_queue_does(server: ServerProcess, tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        expected = asyncio.run(exercise_async(queue))
    assert "WrongStatus" in expected and "StaleLease" in expected

    async def scenario() -> list[str]:
        async with AsyncClient(server.socket_path, timeout=30) as aclient:
            return await exercise_async(aclient)

    assert asyncio.run(asyncio.wait_for(scenario(), 60)) == expected


def test_wait_of_a_client_is_woken_by_another_clients_cancel(server: ServerProcess, client: Client) -> None:
    client.put("t", {})
    ready = threading.Event()
    woke: list[bool] = []

    def wait_for_a_commit() -> None:
        client.stats()  # this thread's connection has seen everything so far
        ready.set()
        woke.append(client.wait(60))

    waiter = threading.Thread(target=wait_for_a_commit)
    waiter.start()
    assert ready.wait(30)
    with Client(server.socket_path) as other:
        other.cancel("t")
    waiter.join(90)
    assert woke == [True]


# -- retries: never across a reconnect -----------------------------------------------------------


def _lose_the_answer_of(op: str, client: Client | AsyncClient, lease: Lease) -> Any:
    if op == "extend":
        return client.extend(lease, now=2, lease_seconds=50)
    if op == "cancel":
        return client.cancel("t")
    return client.redrive("dead", available_at=0)


@pytest.mark.parametrize("op", ["extend", "cancel", "redrive"])
def test_a_lost_answer_of_a_new_op_is_a_connection_error_never_a_retry(
    flaky: tuple[FlakyServer, Client], op: str
) -> None:
    server, client = flaky
    client.put("t", {})
    client.put("dead", {})
    client.cancel("dead")
    [lease] = client.reserve("w", now=1, lease_seconds=10)
    server.drop_next(op)
    with pytest.raises(ConnectionError, match="may or may not have happened"):
        _lose_the_answer_of(op, client, lease)
    assert server.executed.count(op) == (2 if op == "cancel" else 1)  # the setup's cancel, then this one
    changed = {"extend": ("t", "leased", 52), "cancel": ("t", "dead", None), "redrive": ("dead", "ready", None)}[op]
    task = server.queue.get(changed[0])
    assert task is not None and (task.status, task.deadline) == changed[1:]
    client.stats()  # the client goes on with a new connection


@pytest.mark.parametrize("op", ["extend", "cancel", "redrive"])
def test_async_client_never_retries_a_lost_new_op(flaky: tuple[FlakyServer, Client], op: str) -> None:
    server, client = flaky
    client.put("t", {})
    client.put("dead", {})
    client.cancel("dead")
    [lease] = client.reserve("w", now=1, lease_seconds=10)

    async def scenario() -> None:
        async with AsyncClient(client.socket_path, timeout=30, reconnect_seconds=5) as aclient:
            server.drop_next(op)
            with pytest.raises(ConnectionError, match="may or may not have happened"):
                await _lose_the_answer_of(op, aclient, lease)

    asyncio.run(asyncio.wait_for(scenario(), 60))
    assert server.executed.count(op) == (2 if op == "cancel" else 1)


def test_the_client_sends_a_lease_as_its_three_owner_fields_only(flaky: tuple[FlakyServer, Client]) -> None:
    server, client = flaky
    client.put("a", {"big": "x" * 10_000})
    client.put("b", {"big": "y" * 10_000})
    first, second = client.reserve("w", now=1, lease_seconds=10, limit=2)
    client.extend(first, now=2, lease_seconds=10)
    client.ack(first, now=3)
    client.release(second, now=3)
    sent = [request["lease"] for request in server.requests if "lease" in request]
    assert sent == [
        {"task_id": "a", "worker": "w", "generation": 1},
        {"task_id": "a", "worker": "w", "generation": 1},
        {"task_id": "b", "worker": "w", "generation": 1},
    ]
