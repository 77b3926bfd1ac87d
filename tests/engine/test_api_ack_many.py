"""`Queue.ack_many`: many acks in one transaction, all of them or none, as `put_many` is many puts."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from model import nothing_written, wal_bodies
from walqueue import Lease, Queue, StaleLease


def leased(q: Queue, count: int, *, lease_seconds: int = 100) -> list[Lease]:
    q.put_many([{"task_id": f"t{n}", "payload": {"n": n}} for n in range(count)])
    return q.reserve("w", now=0, lease_seconds=lease_seconds, limit=count)


def statuses(q: Queue) -> dict[str, str]:
    return {task.task_id: task.status for task in q.tasks()}


def test_ack_many_completes_every_task_in_one_transaction(q: Queue, qdir: Path) -> None:
    leases = leased(q, 3)
    seq = q.last_seq
    q.ack_many(leases, now=1)
    assert q.last_seq == seq + 1
    assert statuses(q) == {"t0": "completed", "t1": "completed", "t2": "completed"}
    assert all(task.payload is None for task in q.tasks())
    last = wal_bodies(qdir)[-1]
    assert [op["op"] for op in last["ops"]] == ["ack", "ack", "ack"]
    assert q.metrics()["counters"]["acks"] == 3


def test_ack_many_takes_any_iterable_of_leases_and_survives_a_reopen(qdir: Path) -> None:
    with Queue(qdir, sync=False) as q:
        leases = leased(q, 4)
        q.ack_many((lease for lease in leases[:2]), now=1)
    with Queue(qdir, sync=False) as q:
        assert statuses(q) == {"t0": "completed", "t1": "completed", "t2": "leased", "t3": "leased"}
        q.ack_many(tuple(leases[2:]), now=2)
        assert q.stats()["counts"]["completed"] == 4


def test_ack_many_accepts_a_bare_token_as_ack_does(q: Queue) -> None:
    [lease] = leased(q, 1)
    q.ack_many([Lease(lease.task_id, lease.worker, lease.generation)], now=1)
    assert statuses(q) == {"t0": "completed"}


@pytest.mark.parametrize(
    "spoil",
    ["expired", "acked", "released", "re-leased", "other worker", "unknown task"],
)
def test_one_stale_lease_refuses_them_all_and_writes_nothing(q: Queue, qdir: Path, spoil: str) -> None:
    leases = leased(q, 3, lease_seconds=10)
    now = 5
    if spoil == "expired":
        leases[0], leases[2] = (q.extend(lease, now=1, lease_seconds=100) for lease in (leases[0], leases[2]))
        now = 10  # leases[1]'s deadline: too late for it alone
    elif spoil == "acked":
        q.ack(leases[1], now=1)
    elif spoil == "released":
        q.release(leases[1], now=1)
    elif spoil == "re-leased":
        q.release(leases[1], now=1)
        q.reserve("w", now=2, lease_seconds=10)
    elif spoil == "other worker":
        leases[1] = dataclasses.replace(leases[1], worker="someone else")
    else:
        leases[1] = Lease("never", "w", 1)
    before = statuses(q)
    with nothing_written(q, qdir), pytest.raises(StaleLease, match=r"leases\[1\]"):
        q.ack_many(leases, now=now)
    assert statuses(q) == before


def test_a_lease_listed_twice_refuses_them_all_and_writes_nothing(q: Queue, qdir: Path) -> None:
    leases = leased(q, 2)
    with nothing_written(q, qdir), pytest.raises(StaleLease, match=r"leases\[2\].*listed twice"):
        q.ack_many([leases[0], leases[1], Lease(leases[0].task_id, "w", leases[0].generation)], now=1)
    assert statuses(q) == {"t0": "leased", "t1": "leased"}


def test_an_empty_list_writes_nothing(q: Queue, qdir: Path) -> None:
    leased(q, 1)
    with nothing_written(q, qdir):
        q.ack_many([], now=1)
        q.ack_many(iter(()), now=1)


def _generator_that_fails() -> Iterator[Lease]:
    yield Lease("t0", "w", 1)
    raise RuntimeError("the caller's iterable failed")


@pytest.mark.parametrize(
    ("leases", "now", "error", "words"),
    [
        (None, 1, TypeError, "iterable of Lease"),
        ("t0", 1, TypeError, "iterable of Lease"),
        ({"task_id": "t0", "worker": "w", "generation": 1}, 1, TypeError, "iterable of Lease"),
        ("the lease", 1, TypeError, "iterable of Lease"),
        (["the lease", {"task_id": "t0"}], 1, TypeError, r"leases\[1\] must be a Lease"),
        (["the lease", 7], 1, TypeError, r"leases\[1\] must be a Lease"),
        (["the lease"], -1, ValueError, "now"),
        (["the lease"], 1.5, TypeError, "now"),
        (["the lease"], True, TypeError, "now"),
        ([], -1, ValueError, "now"),
    ],
)
def test_bad_input_is_refused_with_a_clear_error_and_writes_nothing(
    q: Queue, qdir: Path, leases: Any, now: Any, error: type[Exception], words: str
) -> None:
    [lease] = leased(q, 1)
    if leases == "the lease":
        leases = lease
    elif isinstance(leases, list):
        leases = [lease if item == "the lease" else item for item in leases]
    with nothing_written(q, qdir), pytest.raises(error, match=words):
        q.ack_many(leases, now=now)
    assert statuses(q) == {"t0": "leased"}


def test_a_failing_iterable_raises_its_own_error_and_writes_nothing(q: Queue, qdir: Path) -> None:
    leased(q, 1)
    with nothing_written(q, qdir), pytest.raises(RuntimeError, match="iterable failed"):
        q.ack_many(_generator_that_fails(), now=1)


def test_the_iterable_runs_before_the_lock_so_it_may_call_the_queue(q: Queue) -> None:
    leases = leased(q, 2)

    def reading() -> Iterator[Lease]:
        for lease in leases:
            q.stats()  # no ReentrantCall: the call takes the lock only after reading its argument
            yield lease

    q.ack_many(reading(), now=1)
    assert q.stats()["counts"]["completed"] == 2


def test_more_acks_than_a_frame_holds_are_refused_before_anything_is_written(qdir: Path) -> None:
    from walqueue.format.frame import MAX_FRAME_BYTES

    long_id = "x" * 1000
    count = MAX_FRAME_BYTES // 1000 + 10  # an ack op of a 1,000-byte id is over 1,000 bytes
    with Queue(qdir, sync=False, compact_bytes=None) as q:
        for start in range(0, count, 4000):
            q.put_many([{"task_id": f"{long_id}{n}", "payload": {}} for n in range(start, min(count, start + 4000))])
        leases: list[Lease] = []
        while len(leases) < count:  # a reserve's frame holds fewer
            leases += q.reserve("w", now=0, lease_seconds=100, limit=count)
        with nothing_written(q, qdir), pytest.raises(ValueError, match="frame"):
            q.ack_many(leases, now=1)
        assert q.stats()["counts"]["leased"] == count
