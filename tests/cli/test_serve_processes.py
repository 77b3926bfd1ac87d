"""Eight client processes on one walqueue-serve, checked against the reference model.

Two runs:

- `mixed`: eight processes call every method of the API (puts, identical
  retries over a fresh connection, conflicts, put_many, reserve, ack and
  release with live and stale leases, reads, compact, wait). Each call is
  made under a lock shared by the processes and numbered, so the parent
  knows the order in which the server saw them: it replays them in that
  order on a `Model` and every answer, then the final state, must agree.
- `racing`: eight processes without any lock put their own tasks (each put
  sent twice, the second time over a new connection) and compete to reserve
  and ack all of them. Every task must be acked exactly once, and the
  server must have written exactly one transaction per put, lease and ack.
"""

from __future__ import annotations

import json
import multiprocessing
import random
from pathlib import Path
from typing import Any

import pytest

from model import Model, render, view
from support.servers import ServerProcess
from walqueue import KeyConflict, Lease, Queue, StaleLease, WrongStatus
from walqueue.client import Client

pytestmark = pytest.mark.timeout(180)

PROCESSES = 8
MIXED_STEPS = 40
RACING_TASKS = 30
_fork = multiprocessing.get_context("fork")


def _reconnect(client: Client) -> None:
    """Drop this thread's connection: the next call makes a new one."""
    connection = getattr(client._local, "connection", None)
    if connection is not None:
        client._drop(connection)


def call(target: Any, op: str, args: dict[str, Any]) -> str:
    """Run one recorded call on a Client or a Model; its outcome as exact text."""
    args = dict(args)
    try:
        if op in ("ack", "release", "extend"):
            args = {**args, "lease": Lease.from_dict(args["lease"])}
        if op == "stats":
            stats = target.counts() if isinstance(target, Model) else target.stats()["counts"]
            return render([stats, target.last_seq])
        if op == "wait":
            return (
                "waited" if isinstance(target, Model) else ("waited" if target.wait(**args) in (True, False) else "?")
            )
        if op == "compact":
            target.compact()
            return "null"
        positional = args.pop("_positional", [])
        return render(getattr(target, op)(*positional, **args))
    except (KeyConflict, StaleLease, WrongStatus, TypeError, ValueError) as error:
        return type(error).__name__


def mixed_child(socket_path: str, number: int, lock: Any, counter: Any, out: str) -> None:
    rng = random.Random(number)
    records: list[dict[str, Any]] = []
    leases: list[dict[str, Any]] = []
    puts: list[dict[str, Any]] = []
    cancelled: list[str] = []
    with Client(socket_path, timeout=60) as client:
        for step in range(MIXED_STEPS):
            kind = rng.choice(["put", "put", "retry", "conflict", "put_many", "reserve", "reserve", "ack", "release",
                               "stale", "extend", "redrive", "cancel", "get", "tasks", "stats", "compact",
                               "wait"])  # fmt: skip
            with lock:
                counter.value += 1
                order, now = counter.value, counter.value * 3
                if kind == "put" or (kind in ("retry", "conflict") and not puts):
                    args = {"_positional": [f"p{number}-{step}", {"n": step, "f": 0.5}], "max_attempts": 2}
                    puts.append(args)
                    op = "put"
                elif kind == "retry":
                    _reconnect(client)  # an identical retry over a new connection
                    op, args = "put", json.loads(json.dumps(rng.choice(puts)))
                elif kind == "conflict":
                    original = rng.choice(puts)["_positional"]
                    op, args = "put", {"_positional": [original[0], {"other": True}]}
                elif kind == "put_many":
                    op = "put_many"
                    args = {
                        "_positional": [[{"task_id": f"m{number}-{step}-{i}", "payload": {"i": i}} for i in range(3)]]
                    }
                elif kind == "reserve":
                    op = "reserve"
                    args = {
                        "_positional": [f"w{number}"],
                        "now": now,
                        "lease_seconds": rng.choice([2, 500, 500]),
                        "limit": 2,
                    }
                elif kind in ("ack", "release", "stale"):
                    if not leases:
                        op, args = "stats", {}
                    else:
                        lease = leases.pop(rng.randrange(len(leases))) if kind != "stale" else rng.choice(leases)
                        op = "ack" if kind != "release" else "release"
                        args = {"lease": lease, "now": now}
                        if op == "release":
                            args["delay"] = 1
                elif kind == "extend" and leases:
                    op = "extend"
                    lease = rng.choice(leases)  # three fields suffice; the rest stays behind
                    args = {"lease": {name: lease[name] for name in ("task_id", "worker", "generation")}, "now": now}
                    args["lease_seconds"] = rng.choice([3, 500])
                elif kind in ("redrive", "cancel"):
                    op = kind
                    task_id = f"p{rng.randrange(8)}-{rng.randrange(MIXED_STEPS)}"  # any process's put, if made yet
                    if kind == "redrive" and cancelled and rng.random() < 0.7:
                        task_id = rng.choice(cancelled)  # dead, unless another process redrove it first
                    elif kind == "cancel" and puts and rng.random() < 0.7:
                        task_id = rng.choice(puts)["_positional"][0]  # this process's, if still ready or leased
                    args = {"_positional": [task_id]}
                    if kind == "redrive":
                        args["available_at"] = now
                elif kind == "get":
                    op, args = (
                        "get",
                        {"_positional": [rng.choice([f"p{rng.randrange(8)}-{rng.randrange(MIXED_STEPS)}", "x"])]},
                    )
                elif kind == "tasks":
                    op, args = "tasks", {"_positional": [rng.choice([None, "ready", "leased", "completed", "dead"])]}
                elif kind == "wait":
                    op, args = "wait", {"timeout": 0}
                else:
                    op, args = ("stats" if kind == "extend" else kind), {}
                recorded = json.loads(json.dumps(args))
                outcome = call(client, op, args)
                if op == "reserve" and outcome.startswith("["):
                    leases.extend(item["Lease"] for item in json.loads(outcome))
                if op == "cancel" and outcome == "null":
                    cancelled.append(args["_positional"][0])
                if op == "extend" and outcome.startswith("{"):
                    renewed = json.loads(outcome)["Lease"]  # the same token, its new deadline
                    leases[:] = [renewed if held["task_id"] == renewed["task_id"] else held for held in leases]
                records.append({"order": order, "op": op, "args": recorded, "outcome": outcome})
    Path(out).write_text(json.dumps(records))


def _start_all(target: Any, argument_lists: list[tuple[Any, ...]]) -> list[Any]:
    processes = [_fork.Process(target=target, args=arguments) for arguments in argument_lists]
    for process in processes:
        process.start()
    return processes


def _join_all(processes: list[Any]) -> None:
    for process in processes:
        process.join(120)
    for process in processes:
        if process.is_alive():
            process.kill()
    assert [process.exitcode for process in processes] == [0] * len(processes)


def test_eight_processes_mixing_every_call_agree_with_the_model(server: ServerProcess, tmp_path: Path) -> None:
    lock, counter = _fork.Lock(), _fork.Value("q", 0)
    outs = [str(tmp_path / f"records-{n}.json") for n in range(PROCESSES)]
    _join_all(_start_all(mixed_child, [(server.socket_path, n, lock, counter, outs[n]) for n in range(PROCESSES)]))
    records = sorted((record for out in outs for record in json.loads(Path(out).read_text())), key=lambda r: r["order"])
    assert [record["order"] for record in records] == list(range(1, PROCESSES * MIXED_STEPS + 1))
    model = Model()
    for record in records:
        expected = call(model, record["op"], json.loads(json.dumps(record["args"])))
        assert record["outcome"] == expected, record
    seen = {record["op"] for record in records}
    assert seen >= {"put", "put_many", "reserve", "ack", "release", "get", "tasks", "stats", "compact", "wait"}
    assert seen >= {"extend", "redrive", "cancel"}
    for op in ("extend", "redrive", "cancel"):  # each new call succeeded at least once, and was refused
        assert any(record["op"] == op and record["outcome"] not in ("StaleLease", "WrongStatus") for record in records)
    assert any(record["outcome"] == "WrongStatus" for record in records)
    assert any(record["outcome"] == "KeyConflict" for record in records)
    assert any(record["outcome"] == "StaleLease" for record in records)
    assert not any(record["outcome"] in ("TypeError", "ValueError") for record in records)
    assert sum(record["op"] in ("ack", "release") and record["outcome"] == "null" for record in records) >= 5
    with Client(server.socket_path) as client:
        assert view(client) == view(model)
    status, err = server.terminate()
    assert status == 0, err
    with Queue(server.directory) as reopened:
        assert view(reopened) == view(model)


def racing_child(socket_path: str, number: int, out: str) -> None:
    acked: list[str] = []
    with Client(socket_path, timeout=60) as client:
        for i in range(RACING_TASKS):
            task_id = f"r{number}-{i}"
            assert client.put(task_id, {"i": i}) == task_id
            _reconnect(client)
            assert client.put(task_id, {"i": i}) == task_id  # identical retry: no new transaction
        idle = 0
        while idle < 3:
            leases = client.reserve(f"w{number}", now=1, lease_seconds=10**6)
            if not leases:
                idle += 1 if client.stats()["counts"]["ready"] == 0 else 0
                continue
            idle = 0
            for lease in leases:
                client.ack(lease, now=2)
                acked.append(lease.task_id)
    Path(out).write_text(json.dumps(acked))


def test_eight_racing_processes_ack_every_task_exactly_once(server: ServerProcess, tmp_path: Path) -> None:
    outs = [str(tmp_path / f"acked-{n}.json") for n in range(PROCESSES)]
    _join_all(_start_all(racing_child, [(server.socket_path, n, outs[n]) for n in range(PROCESSES)]))
    acked = [task_id for out in outs for task_id in json.loads(Path(out).read_text())]
    every = {f"r{n}-{i}" for n in range(PROCESSES) for i in range(RACING_TASKS)}
    assert sorted(acked) == sorted(every)
    with Client(server.socket_path) as client:
        stats = client.stats()
    total = PROCESSES * RACING_TASKS
    assert stats["counts"] == {"ready": 0, "leased": 0, "completed": total, "dead": 0}
    assert stats["last_seq"] == 3 * total  # one put, one lease and one ack each; retries wrote nothing
