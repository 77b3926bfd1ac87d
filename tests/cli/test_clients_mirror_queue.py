"""`Client` and `AsyncClient` behave as `Queue` does: for every argument (generated), in every state a long-running
service reaches (a server restarted under a pooled connection, thousands of open files), and in batches
(`Client.pipeline`, many `AsyncClient` calls in flight on one connection).
"""

from __future__ import annotations

import asyncio
import math
import os
import resource
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from model import render
from support.servers import FlakyServer, ServerProcess, running_server
from walqueue import KeyConflict, Lease, Queue, StaleLease
from walqueue.client import AsyncClient, Client

pytestmark = pytest.mark.timeout(300)

NAMES = st.sampled_from(["a", "b", "", "n" * 1025, "é", "\ud800", "x" * 1024])
INTS = st.sampled_from([0, 1, 5, -1, 2**63 - 1, 2**63, True, 1.0, None, "1"])
PAYLOADS = st.sampled_from(
    [{}, {"n": 1}, {"f": 1.5}, {"nan": math.nan}, {1: "key"}, [], None, {"t": (1,)}, {"s": "\ud800"}, {"b": b"x"}]
)
LEASE_FIELDS = st.sampled_from(["a", "b", 1, None, "\ud800"])
TIMEOUTS = st.sampled_from([0, 0.0, -1, math.nan, math.inf, "1", None, True])
STATUSES = st.sampled_from([None, "ready", "leased", "completed", "dead", "bogus", 1])
ERRORS = st.sampled_from(
    [None, {"type": "E", "message": "m"}, {"type": "", "message": "m"}, {"type": 1, "message": "m"}, {"type": "E"}, "E"]
)


@st.composite
def calls(draw: st.DrawFn) -> tuple[str, Callable[[Any, list[Lease]], Any]]:
    """One call with generated arguments, as (name, run(target, leases))."""
    kind = draw(st.sampled_from(["put", "put_many", "reserve", "ack", "ack_many", "release", "fail", "extend",
                                 "redrive", "cancel", "get", "tasks", "page", "metrics", "wait"]))  # fmt: skip
    name, number, other, payload = draw(NAMES), draw(INTS), draw(INTS), draw(PAYLOADS)
    pick = draw(st.integers(0, 3))
    status, timeout, error = draw(STATUSES), draw(TIMEOUTS), draw(ERRORS)
    token = (draw(LEASE_FIELDS), draw(LEASE_FIELDS), draw(INTS))

    def lease(leases: list[Lease]) -> Any:
        if pick < len(leases):
            return leases[pick]
        if pick == 3:
            return {"task_id": "a"}  # not a Lease at all
        return Lease(token[0], token[1], token[2], 10, 1, None)  # type: ignore[arg-type]

    runs: dict[str, Callable[[Any, list[Lease]], Any]] = {
        "put": lambda q, _: q.put(name, payload, available_at=number, max_attempts=other),
        "put_many": lambda q, _: q.put_many([{"task_id": name, "payload": payload}, {"task_id": "m", "payload": {}}]),
        "reserve": lambda q, _: q.reserve(name, now=number, lease_seconds=other, limit=2),
        "ack": lambda q, leases: q.ack(lease(leases), now=number),
        "ack_many": lambda q, leases: q.ack_many([lease(leases), *leases[1:3]], now=number),  # [1] may repeat
        "release": lambda q, leases: q.release(lease(leases), now=number, delay=other, error=error),
        "fail": lambda q, leases: q.fail(lease(leases), now=number, error=error),
        "extend": lambda q, leases: q.extend(lease(leases), now=number, lease_seconds=other),
        "redrive": lambda q, _: q.redrive(name, available_at=number, extra_attempts=other),
        "cancel": lambda q, _: q.cancel(name, error=error, now=number if pick else None),
        "get": lambda q, _: q.get(name),
        "tasks": lambda q, _: q.tasks(status),
        "page": lambda q, _: q.page(status, after=name if pick else None, limit=other),
        "metrics": lambda q, _: q.metrics(now=number if pick else None),
        "wait": lambda q, _: q.wait(timeout),
    }
    return kind, runs[kind]


def outcome(kind: str, run: Callable[[Any, list[Lease]], Any], target: Any, leases: list[Lease]) -> tuple[str, str]:
    """What a call came to, comparably; the leases a reserve returned are kept for later calls."""
    try:
        result = run(target, leases)
    except Exception as error:
        return "raised", type(error).__name__
    if kind == "wait":
        return "returned", "a bool" if isinstance(result, bool) else repr(result)  # who else commits differs
    if kind == "metrics":  # counters since each side opened its queue differ; the shape does not
        if not isinstance(result, dict):
            return "returned", repr(result)
        keys = set(result)
        if not isinstance(target, Queue):  # a server adds its own figures, and only those
            assert "request_seconds" in keys
            keys.discard("request_seconds")
        return "returned", repr(sorted(keys))
    if kind == "reserve":
        leases[:0] = result
    return "returned", render(result)


class AsyncRunner:
    """`AsyncClient` driven from synchronous test code: each call runs to completion on one event loop."""

    def __init__(self, socket_path: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.client = AsyncClient(socket_path, timeout=30, reconnect_seconds=5)

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.client, name)
        return lambda *args, **kwargs: self.loop.run_until_complete(method(*args, **kwargs))

    def close(self) -> None:
        self.loop.run_until_complete(self.client.close())
        self.loop.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Queue, Client, AsyncRunner, AsyncRunner]]:
    from support.servers import short_directory

    with short_directory() as place, running_server(place / "q", place / "s") as server:
        reference = Queue(tmp_path_factory.mktemp("reference") / "q", sync=False)
        async_dir = place / "q2"
        with running_server(async_dir, place / "s2") as async_server:
            client = Client(server.socket_path, timeout=30, reconnect_seconds=5)
            runner = AsyncRunner(async_server.socket_path)
            reference_for_async = Queue(tmp_path_factory.mktemp("reference2") / "q", sync=False)
            try:
                yield reference, client, runner, reference_for_async  # type: ignore[misc]
            finally:
                runner.close()
                client.close()
                reference.close()
                reference_for_async.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(program=st.lists(calls(), min_size=1, max_size=12))
def test_every_generated_call_answers_as_queue_answers_it(
    served: tuple[Queue, Client, AsyncRunner, Queue], program: list[tuple[str, Callable[[Any, list[Lease]], Any]]]
) -> None:
    reference, client, runner, reference_for_async = served
    for target, mirror in ((client, reference), (runner, reference_for_async)):
        mirror_leases: list[Lease] = []
        leases: list[Lease] = []
        for kind, run in program:
            expected = outcome(kind, run, mirror, mirror_leases)
            got = outcome(kind, run, target, leases)
            assert got == expected, (kind, type(target).__name__)


def test_an_async_call_on_a_connection_the_server_closed_is_sent_again_on_a_new_one(place: Path) -> None:
    async def scenario() -> None:
        async with AsyncClient(str(place / "s"), timeout=30, reconnect_seconds=10) as client:
            with running_server(place / "q", place / "s"):
                await client.put("t", {})
                [lease] = await client.reserve("w", now=1, lease_seconds=10**6)
            # The first server stopped and closed the pooled connection; the ack never reached it.
            with running_server(place / "q", place / "s"):
                await client.ack(lease, now=2)
                task = await client.get("t")
                assert task is not None and task.status == "completed"

    asyncio.run(scenario())


def test_a_sync_call_on_a_connection_the_server_closed_is_sent_again_on_a_new_one(place: Path) -> None:
    with Client(str(place / "s"), timeout=30, reconnect_seconds=10) as client:
        with running_server(place / "q", place / "s"):
            client.put("t", {})
            [lease] = client.reserve("w", now=1, lease_seconds=10**6)
        with running_server(place / "q", place / "s"):
            client.ack(lease, now=2)
            assert client.tasks("completed")[0].task_id == "t"


@pytest.fixture
def many_open_files() -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2100:
        pytest.skip("the hard limit of open files is below 2,100")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2100), hard))
    opened = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        yield
    finally:
        for fd in opened:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_clients_work_in_a_process_with_more_than_1024_open_files(server: ServerProcess, many_open_files: None) -> None:
    with Client(server.socket_path, timeout=30) as client:
        client.put("a", {})
        client.stats()  # a second call: the idle connection's check runs on a descriptor past 1024
        assert client.get("a") is not None

    async def through_async() -> None:
        async with AsyncClient(server.socket_path, timeout=30) as async_client:
            await async_client.put("b", {})
            assert await async_client.wait(0) in (True, False)

    asyncio.run(through_async())


def test_a_pipeline_sends_many_calls_and_returns_their_results_in_order(client: Client) -> None:
    with client.pipeline() as batch:
        for n in range(100):
            batch.put(f"t{n}", {"n": n})
        batch.get("t5")
        batch.stats()
    ids, task, stats = batch.results[:100], batch.results[100], batch.results[101]
    assert ids == [f"t{n}" for n in range(100)]
    assert task is not None and task.payload == {"n": 5}
    assert stats["counts"]["ready"] == 100


def test_a_failed_call_in_a_pipeline_fails_alone(client: Client) -> None:
    batch = client.pipeline()
    batch.put("a", {"n": 1})
    batch.put("a", {"n": 2})  # another payload under the same key
    batch.put("b", {})
    results = batch.execute(raise_on_error=False)
    assert results[0] == "a" and isinstance(results[1], KeyConflict) and results[2] == "b"
    batch.put("a", {"n": 3})
    batch.put("c", {})
    with pytest.raises(KeyConflict):
        batch.execute()
    assert client.get("c") is not None  # raised once every answer had come
    with pytest.raises(TypeError):
        batch.put("d", "not a dict")  # type: ignore[arg-type]  # refused as it is added, as Queue refuses it


def test_a_pipeline_whose_connection_drops_resends_only_what_is_safe(flaky: tuple[FlakyServer, Client]) -> None:
    server, client = flaky
    client.put("t", {})
    [lease] = client.reserve("w", now=1, lease_seconds=10**6)
    server.drop_next("ack")
    batch = client.pipeline()
    batch.put("p1", {})
    batch.ack(lease, now=2)
    batch.put("p2", {})
    results = batch.execute(raise_on_error=False)
    assert results[0] == "p1" and results[2] == "p2"
    assert isinstance(results[1], ConnectionError) and "may or may not" in str(results[1])
    assert server.executed.count("ack") == 1  # never sent twice
    assert server.queue.get("p2") is not None


def test_many_async_calls_in_flight_share_one_connection(server: ServerProcess) -> None:
    async def scenario() -> None:
        async with AsyncClient(server.socket_path, timeout=30) as client:
            ids = await asyncio.gather(*(client.put(f"t{n}", {"n": n}) for n in range(300)))
            assert ids == [f"t{n}" for n in range(300)]
            leases = await asyncio.gather(*(client.reserve(f"w{n}", now=1, lease_seconds=60) for n in range(300)))
            assert sorted(lease.task_id for [lease] in leases) == sorted(ids)
            await asyncio.gather(*(client.ack(lease, now=2) for [lease] in leases))
            assert (await client.stats())["counts"]["completed"] == 300

    asyncio.run(scenario())
    _, err = server.terminate()
    assert err.count(" connected (") == 1, err


def test_an_async_stale_ack_raises_stale_lease_as_queue_does(server: ServerProcess) -> None:
    async def scenario() -> None:
        async with AsyncClient(server.socket_path, timeout=30) as client:
            await client.put("t", {})
            [lease] = await client.reserve("w", now=1, lease_seconds=5)
            with pytest.raises(StaleLease):
                await client.ack(lease, now=100)

    asyncio.run(scenario())


def test_an_async_client_serves_on_in_a_second_event_loop(server: ServerProcess) -> None:
    client = AsyncClient(server.socket_path, timeout=30)
    assert asyncio.run(client.put("first", {})) == "first"
    assert asyncio.run(client.put("second", {})) == "second"  # the first loop, and its connection, are gone
    asyncio.run(client.close())


def test_a_cancelled_async_call_leaves_the_connection_in_step(server: ServerProcess) -> None:
    async def scenario() -> None:
        async with AsyncClient(server.socket_path, timeout=30) as client:
            slow = asyncio.ensure_future(client.tasks())
            slow.cancel()
            assert await client.put("after", {}) == "after"
            assert (await client.get("after")) is not None

    asyncio.run(scenario())


def test_a_client_refused_by_a_full_server_raises_connection_error_at_once(place: Path) -> None:
    import time

    with running_server(place / "q", place / "s", "--max-clients", "1") as server:
        with Client(server.socket_path, timeout=30, reconnect_seconds=30) as first:
            first.stats()
            with Client(server.socket_path, timeout=30, reconnect_seconds=30) as second:
                started = time.monotonic()
                with pytest.raises(ConnectionError, match="TooManyClients|refused"):
                    second.stats()
                assert time.monotonic() - started < 10  # not after reconnecting for 30 s
