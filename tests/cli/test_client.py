"""`walqueue.client.Client`: Queue's API over the socket, and what it retries.

Most tests run a real `walqueue-serve`; the retry rules use `FlakyServer`,
an in-process server that runs each request on a real `Queue` and then may
drop the connection instead of answering, which is exactly "the request
completed but its answer was lost".
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from model import Model, render
from support.servers import FlakyServer, ServerProcess, running_server
from walqueue import KeyConflict, Lease, Queue, QueueClosed, StaleLease, Task
from walqueue.client import AsyncClient, Client

pytestmark = pytest.mark.timeout(120)


def exercise(target: Any) -> list[str]:
    """Every call of the API, with errors, as rendered text (the same for Queue, Client and Model)."""
    results: list[str] = []

    def record(call: Any) -> None:
        try:
            results.append(render(call()))
        except (KeyConflict, StaleLease, TypeError, ValueError) as error:
            results.append(type(error).__name__)

    record(lambda: target.put("a", {"n": 1, "f": 1.0, "b": True, "s": "é\u0001", "l": [None, {"x": []}]}))
    record(lambda: target.put("a", {"n": 1, "f": 1.0, "b": True, "s": "é\u0001", "l": [None, {"x": []}]}))
    record(lambda: target.put("a", {"n": 2}))
    record(lambda: target.put("b", {"n": 1}, key="kb", available_at=5, max_attempts=1))
    record(lambda: target.put("c", {}, key="kb"))
    record(lambda: target.put_many([{"task_id": "d", "payload": {"d": 1}}, {"task_id": "e", "payload": {}}]))
    record(lambda: target.put_many([]))
    record(lambda: target.put("f", ({"tuple": 1},)))
    record(lambda: target.put("f", {"n": 1}, available_at=-1))
    record(lambda: target.put("f", {"n": 1}, max_attempts=True))
    record(lambda: target.put("n" * 1025, {}))
    leases = target.reserve("w1", now=10, lease_seconds=5, limit=2)
    results.append(render(leases))
    record(lambda: target.ack(leases[0], now=11))
    record(lambda: target.ack(leases[0], now=12))
    record(lambda: target.release(leases[1], now=12, delay=3))
    record(lambda: target.reserve("w2", now=100, lease_seconds=1, limit=10))
    record(lambda: target.reserve("w3", now=200, lease_seconds=1, limit=10))
    record(lambda: target.reserve("", now=1, lease_seconds=1))
    record(lambda: target.get("a"))
    record(lambda: target.get("never"))
    for status in (None, "ready", "leased", "completed", "dead"):
        record(lambda status=status: target.tasks(status))
    record(lambda: target.tasks("bogus"))
    record(lambda: target.last_seq)
    return results


def test_every_call_answers_as_queue_and_the_model_answer(client: Client, tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        expected = exercise(queue)
    assert exercise(Model()) == expected
    assert exercise(client) == expected
    stats = client.stats()
    assert stats["counts"] == {"ready": 0, "leased": 0, "completed": 2, "dead": 3} or stats["counts"]
    client.compact()
    assert client.stats()["wal_bytes"] == 0


class ByName:
    """A client whose every call goes through ``call(name, ...)``: the path of a call that has no typed method yet."""

    def __init__(self, client: Client) -> None:
        self.client = client

    @property
    def last_seq(self) -> int:
        return int(self.client.call("stats")["last_seq"])

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: self.client.call(name, *args, **kwargs)


def test_every_call_made_by_name_answers_as_queue_answers_it(client: Client, tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        expected = exercise(queue)
    assert exercise(ByName(client)) == expected


def test_a_call_by_an_unknown_name_is_a_value_error_and_sends_nothing(place: Path) -> None:
    with Client(str(place / "nobody-listens"), timeout=1, reconnect_seconds=0) as client:
        with pytest.raises(ValueError, match="no call named 'pause'"):
            client.call("pause", "t")
        with pytest.raises(TypeError, match="unexpected keyword"):
            client.call("get", "t", colour=1)  # the row binds as the method would, before connecting

    async def by_name() -> None:
        async with AsyncClient(str(place / "nobody-listens"), timeout=1, reconnect_seconds=0) as aclient:
            with pytest.raises(ValueError, match="no call named"):
                await aclient.call("pause", "t")

    asyncio.run(asyncio.wait_for(by_name(), 30))


def test_one_shot_iterators_are_read_once_by_put_many_and_ack_many(client: Client) -> None:
    ids = client.put_many({"task_id": f"g{n}", "payload": {"n": n}} for n in range(3))
    assert ids == ["g0", "g1", "g2"]
    leases = client.reserve("w", now=1, lease_seconds=10, limit=3)
    client.ack_many(iter(leases), now=2)
    assert [client.get(task_id).status for task_id in ids] == ["completed"] * 3  # type: ignore[union-attr]


def test_return_types_are_leases_and_tasks(client: Client) -> None:
    client.put("t", {"x": 1})
    [lease] = client.reserve("w", now=1, lease_seconds=10)
    assert isinstance(lease, Lease) and lease.payload == {"x": 1}
    task = client.get("t")
    assert isinstance(task, Task) and task.status == "leased" and task.worker == "w"
    assert all(isinstance(item, Task) for item in client.tasks())


def test_one_client_is_shared_safely_between_threads(client: Client) -> None:
    errors: list[BaseException] = []

    def work(number: int) -> None:
        try:
            for i in range(30):
                assert client.put(f"t{number}-{i}", {"i": i}) == f"t{number}-{i}"
                task = client.get(f"t{number}-{i}")
                assert task is not None and task.payload == {"i": i}
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    assert client.stats()["counts"]["ready"] == 240


def test_a_closed_client_raises_queue_closed(server: ServerProcess) -> None:
    with Client(server.socket_path) as closing:
        closing.stats()
    with pytest.raises(QueueClosed):
        closing.stats()
    closing.close()  # idempotent


def test_wait_is_a_long_poll_woken_by_another_client(server: ServerProcess, client: Client) -> None:
    assert client.reserve("w", now=1, lease_seconds=5) == []
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(client.wait(20)))
    started = time.monotonic()
    waiter.start()
    time.sleep(0.2)
    with Client(server.socket_path) as other:
        other.put("new", {})
    waiter.join(30)
    assert woke == [True] and time.monotonic() - started < 10
    # This thread's previous call (the empty reserve) came before the put: it counts.
    assert client.wait(0.1) is True
    assert client.wait(0.1) is False


def test_safe_calls_survive_a_server_restart_between_calls(place: Path) -> None:
    with running_server(place / "q", place / "s") as first, Client(first.socket_path, reconnect_seconds=20) as c:
        c.put("t", {"n": 1})
        [lease] = c.reserve("w", now=1, lease_seconds=100)
        first.terminate()
        restarted: list[ServerProcess] = []

        def restart() -> None:
            time.sleep(0.5)
            restarted.append(ServerProcess(place / "q", place / "s").wait_ready())

        thread = threading.Thread(target=restart)
        thread.start()
        try:
            assert c.get("t") is not None  # retried until the new server answers
            thread.join(30)
            # The idle connection was closed by the old server before anything was
            # sent, so even an ack may reconnect: it is not a retry.
            c.ack(lease, now=2)
            task = c.get("t")
            assert task is not None and task.status == "completed"
        finally:
            thread.join(30)
            for server in restarted:
                server.kill()


def test_an_unreachable_server_is_a_connection_error_after_the_reconnect_time(place: Path) -> None:
    with Client(str(place / "nobody"), reconnect_seconds=0.3) as lonely:
        started = time.monotonic()
        with pytest.raises(ConnectionError):
            lonely.stats()
        assert time.monotonic() - started < 5


def test_a_forked_child_uses_its_own_connection(client: Client) -> None:
    client.put("parent", {})
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 only if everything worked
        status = 1
        try:
            client.put("child", {})
            status = 0 if client.get("parent") is not None else 1
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    assert status == 0
    assert client.get("child") is not None and client.stats()["last_seq"] == 2


# ---------------------------------------------------------------------------
# Retries: an in-process server that loses answers on purpose


def test_a_put_whose_answer_was_lost_is_retried_with_its_key_and_applied_once(
    flaky: tuple[FlakyServer, Client],
) -> None:
    server, client = flaky
    server.drop_next("put", times=2)
    assert client.put("t", {"n": 1}, key="k") == "t"
    # a client's first put asks the store's clock unit once (its put time, DECISIONS §46), then the put is retried
    assert server.executed == ["stats", "put", "put", "put"]
    assert server.queue.last_seq == 1
    server.drop_next("put_many")
    assert client.put_many([{"task_id": "u", "payload": {}}, {"task_id": "t", "payload": {"n": 1}, "key": "k"}]) == [
        "u",
        "t",
    ]
    assert server.queue.last_seq == 2


def test_reads_are_retried_after_a_lost_answer(flaky: tuple[FlakyServer, Client]) -> None:
    server, client = flaky
    client.put("t", {})
    for op, call in (("get", lambda: client.get("t")), ("tasks", client.tasks), ("stats", client.stats)):
        server.drop_next(op)
        assert call() is not None
        assert server.executed[-2:] == [op, op]


@pytest.mark.parametrize("op", ["ack", "release", "reserve"])
def test_a_lost_answer_of_ack_release_or_reserve_is_a_connection_error_never_a_retry(
    flaky: tuple[FlakyServer, Client], op: str
) -> None:
    server, client = flaky
    client.put("t", {})
    if op == "reserve":
        server.drop_next("reserve")
        with pytest.raises(ConnectionError, match="may or may not have happened"):
            client.reserve("w", now=1, lease_seconds=10)
        assert server.executed.count("reserve") == 1
        return
    [lease] = client.reserve("w", now=1, lease_seconds=10)
    server.drop_next(op)
    with pytest.raises(ConnectionError, match="may or may not have happened"):
        client.ack(lease, now=2) if op == "ack" else client.release(lease, now=2)
    assert server.executed.count(op) == 1
    task = server.queue.get("t")
    assert task is not None and task.status == ("completed" if op == "ack" else "ready")
    client.stats()  # the client goes on with a new connection


# ---------------------------------------------------------------------------
# AsyncClient: the same API as coroutines


def test_async_client_answers_as_the_client_does(server: ServerProcess, client: Client) -> None:
    async def scenario() -> list[str]:
        async with AsyncClient(server.socket_path, timeout=30) as aclient:
            results = [render(await aclient.put("a", {"n": 1.0}))]
            results.append(render(await aclient.put("a", {"n": 1.0})))
            try:
                await aclient.put("a", {"n": 2})
            except KeyConflict:
                results.append("KeyConflict")
            results.append(render(await aclient.put_many([{"task_id": "b", "payload": {}}])))
            leases = await aclient.reserve("w", now=1, lease_seconds=10, limit=2)
            results.append(render(leases))
            await aclient.ack(leases[0], now=2)
            await aclient.release(leases[1], now=2, delay=1)
            try:
                await aclient.ack(leases[0], now=3)
            except StaleLease:
                results.append("StaleLease")
            results.append(render(await aclient.get("a")))
            results.append(render(await aclient.tasks()))
            results.append(render(await aclient.last_seq))
            await aclient.compact()
            results.append(render((await aclient.stats())["counts"]))
            return results

    results = asyncio.run(asyncio.wait_for(scenario(), 60))
    model = Model()
    expected = [render(model.put("a", {"n": 1.0})), render(model.put("a", {"n": 1.0})), "KeyConflict"]
    expected.append(render(model.put_many([{"task_id": "b", "payload": {}}])))
    leases = model.reserve("w", now=1, lease_seconds=10, limit=2)
    expected.append(render(leases))
    model.ack(leases[0], now=2)
    model.release(leases[1], now=2, delay=1)
    expected += ["StaleLease", render(model.get("a")), render(model.tasks()), render(model.last_seq)]
    expected.append(render(model.counts()))
    assert results == expected
    assert client.get("b") is not None


def test_async_client_serves_concurrent_coroutines_and_long_polls(server: ServerProcess) -> None:
    async def scenario() -> bool:
        async with AsyncClient(server.socket_path, timeout=30) as aclient:
            waiting = asyncio.create_task(aclient.wait(20))
            await asyncio.sleep(0.2)
            ids = await asyncio.gather(*(aclient.put(f"c{i}", {"i": i}) for i in range(40)))
            assert ids == [f"c{i}" for i in range(40)]
            return await waiting

    assert asyncio.run(asyncio.wait_for(scenario(), 60)) is True


def test_async_client_retries_a_lost_put_but_not_a_lost_ack(flaky: tuple[FlakyServer, Client]) -> None:
    server, client = flaky

    async def scenario() -> None:
        async with AsyncClient(client.socket_path, timeout=30, reconnect_seconds=5) as aclient:
            server.drop_next("put")
            assert await aclient.put("t", {}) == "t"
            [lease] = await aclient.reserve("w", now=1, lease_seconds=10)
            server.drop_next("ack")
            with pytest.raises(ConnectionError, match="may or may not have happened"):
                await aclient.ack(lease, now=2)

    asyncio.run(asyncio.wait_for(scenario(), 60))
    assert server.queue.last_seq == 3 and server.executed.count("put") == 2


def test_a_traceback_travels_with_an_error_through_the_server_and_back(tmp_path: Path) -> None:
    """The error's optional traceback (a format extension) is sent, stored with the last error and read back."""
    trace = "Traceback (most recent call last):\n  ...\nValueError: bad\n"
    with running_server(tmp_path / "q", tmp_path / "s"), Client(str(tmp_path / "s")) as client:
        client.put("t", {}, max_attempts=1)
        (lease,) = client.reserve("w", now=0, lease_seconds=10)
        client.fail(lease, now=1, error={"type": "ValueError", "message": "bad", "traceback": trace})
        task = client.get("t")
    assert task is not None and task.last_error is not None and task.last_error.traceback == trace
