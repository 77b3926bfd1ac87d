"""The lease lifecycle calls through the public API: `extend`, `redrive`, `cancel`, and `stats`' next times.

Every refusal (a stale token, a wrong status, a bad argument) writes
nothing: the directory's bytes hash the same and `last_seq` does not move.
Every acceptance is one frame of the documented op, and survives a reopen.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from model import nothing_written, read_frames
from walqueue import Lease, Queue, StaleLease, WalQueueError, WrongStatus

MAX_INT = 2**63 - 1


def leased(q: Queue, task_id: str = "t", *, max_attempts: int = 3, lease_seconds: int = 100) -> Lease:
    """Put `task_id` and lease it to "w" at now=0."""
    q.put(task_id, {"n": 1}, max_attempts=max_attempts)
    [lease] = q.reserve("w", now=0, lease_seconds=lease_seconds)
    return lease


def last_op(qdir: Path) -> dict[str, Any]:
    [segment] = sorted(qdir.glob("wal-*.log"))
    _, body = read_frames(segment)[-1]
    [op] = body["ops"]
    assert isinstance(op, dict)
    return op


def dead(q: Queue, task_id: str = "t") -> None:
    """Put `task_id` with one attempt and let its lease expire: it dies."""
    q.put(task_id, {"n": 1}, max_attempts=1)
    q.reserve("w", now=0, lease_seconds=1)
    assert q.reserve("w", now=5, lease_seconds=1) == []
    assert q.get(task_id).status == "dead"  # type: ignore[union-attr]


# -- extend -------------------------------------------------------------------------------


def test_extend_moves_the_deadline_and_keeps_attempts_and_generation(q: Queue, qdir: Path) -> None:
    lease = leased(q)
    renewed = q.extend(lease, now=50, lease_seconds=200)
    assert renewed == Lease("t", "w", lease.generation, 250, lease.attempts, lease.payload)
    task = q.get("t")
    assert task is not None and task.deadline == 250 and task.attempts == 1 and task.generation == 1
    assert last_op(qdir) == {"op": "extend", "task": "t", "generation": 1, "deadline": 250}
    q.ack(lease, now=120)  # the old token stays valid: its deadline is informational
    assert q.get("t").status == "completed"  # type: ignore[union-attr]


def test_extend_may_shorten_and_caps_at_the_end_of_time(q: Queue) -> None:
    lease = leased(q)
    assert q.extend(lease, now=10, lease_seconds=1).deadline == 11
    [again] = q.reserve("x", now=11, lease_seconds=5)  # expired at 11, leased again
    assert again.worker == "x"
    assert q.extend(again, now=12, lease_seconds=MAX_INT).deadline == MAX_INT


def test_extend_survives_a_reopen(qdir: Path) -> None:
    with Queue(qdir, sync=False) as q:
        lease = leased(q)
        q.extend(lease, now=1, lease_seconds=1000)
    with Queue(qdir, sync=False) as q:
        assert q.get("t").deadline == 1001  # type: ignore[union-attr]
        assert q.reserve("x", now=500, lease_seconds=1) == []


@pytest.mark.parametrize(
    "change",
    [
        {"worker": "other"},
        {"generation": 2},
        {"task_id": "nope"},
        {"generation": True},
        {"worker": 1},
    ],
)
def test_extend_of_a_token_that_does_not_hold_the_task_is_stale(q: Queue, qdir: Path, change: dict[str, Any]) -> None:
    lease = leased(q)
    token = Lease(**{**lease.to_dict(), **change})
    with nothing_written(q, qdir), pytest.raises(StaleLease):
        q.extend(token, now=1, lease_seconds=10)


def test_extend_at_or_after_the_deadline_is_stale(q: Queue, qdir: Path) -> None:
    lease = leased(q, lease_seconds=100)
    with nothing_written(q, qdir), pytest.raises(StaleLease, match="expired"):
        q.extend(lease, now=100, lease_seconds=10)


@pytest.mark.parametrize("finish", ["ack", "release", "cancel"])
def test_extend_after_the_lease_ended_is_stale(q: Queue, qdir: Path, finish: str) -> None:
    lease = leased(q)
    if finish == "cancel":
        q.cancel("t")
    else:
        getattr(q, finish)(lease, now=1)
    with nothing_written(q, qdir), pytest.raises(StaleLease):
        q.extend(lease, now=2, lease_seconds=10)


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"now": -1, "lease_seconds": 1}, ValueError),
        ({"now": 1.0, "lease_seconds": 1}, TypeError),
        ({"now": 1, "lease_seconds": 0}, ValueError),
        ({"now": 1, "lease_seconds": True}, TypeError),
        ({"now": 1, "lease_seconds": MAX_INT + 1}, ValueError),
    ],
)
def test_extend_with_bad_arguments_writes_nothing(
    q: Queue, qdir: Path, arguments: dict[str, Any], error: type[Exception]
) -> None:
    lease = leased(q)
    with nothing_written(q, qdir), pytest.raises(error):
        q.extend(lease, **arguments)


def test_extend_of_something_that_is_no_lease_is_type_error(q: Queue, qdir: Path) -> None:
    leased(q)
    with nothing_written(q, qdir), pytest.raises(TypeError):
        q.extend({"task_id": "t", "worker": "w", "generation": 1}, now=1, lease_seconds=1)  # type: ignore[arg-type]


# -- redrive -------------------------------------------------------------------------------


def test_redrive_makes_a_dead_task_ready_with_more_attempts(q: Queue, qdir: Path) -> None:
    dead(q)
    q.redrive("t", available_at=7, extra_attempts=2)
    task = q.get("t")
    assert task is not None
    assert (task.status, task.available_at, task.max_attempts, task.attempts, task.generation) == ("ready", 7, 3, 1, 1)
    assert last_op(qdir) == {"op": "redrive", "task": "t", "available_at": 7, "max_attempts": 3}
    assert q.reserve("w", now=6, lease_seconds=1) == []
    [lease] = q.reserve("w", now=7, lease_seconds=1)
    assert (lease.generation, lease.attempts) == (2, 2)  # fencing keeps counting across the redrive


def test_redrive_keeps_the_identity_of_the_original_put(q: Queue) -> None:
    dead(q)
    q.redrive("t", available_at=0)
    assert q.put("t", {"n": 1}, max_attempts=1) == "t"  # an identical retry: nothing written
    from walqueue import KeyConflict

    with pytest.raises(KeyConflict):
        q.put("t", {"n": 1}, max_attempts=2)  # max_attempts is part of the identity, as put it


def test_a_redriven_task_can_die_and_be_redriven_again(q: Queue) -> None:
    dead(q)
    q.redrive("t", available_at=0)
    q.reserve("w", now=10, lease_seconds=1)
    q.reserve("w", now=20, lease_seconds=1)
    assert q.get("t").status == "dead"  # type: ignore[union-attr]
    q.redrive("t", available_at=0)
    assert q.get("t").max_attempts == 3  # type: ignore[union-attr]


def test_an_old_token_stays_stale_after_a_redrive(q: Queue, qdir: Path) -> None:
    q.put("t", {}, max_attempts=1)
    [lease] = q.reserve("w", now=0, lease_seconds=1)
    q.reserve("w", now=5, lease_seconds=1)  # expired: dead
    q.redrive("t", available_at=0)
    q.reserve("w", now=6, lease_seconds=10)  # the same worker leases it again, generation 2
    with nothing_written(q, qdir), pytest.raises(StaleLease):
        q.ack(lease, now=7)


@pytest.mark.parametrize("status", ["unknown", "ready", "leased", "completed"])
def test_redrive_of_a_task_that_is_not_dead_is_wrong_status(q: Queue, qdir: Path, status: str) -> None:
    q.put("ready", {})
    leased(q, "leased")
    done = leased(q, "completed")
    q.ack(done, now=1)
    with nothing_written(q, qdir), pytest.raises(WrongStatus) as raised:
        q.redrive(status, available_at=0)
    assert isinstance(raised.value, WalQueueError) and isinstance(raised.value, ValueError)


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"task_id": 1, "available_at": 0}, TypeError),
        ({"task_id": "t", "available_at": -1}, ValueError),
        ({"task_id": "t", "available_at": 0, "extra_attempts": 0}, ValueError),
        ({"task_id": "t", "available_at": 0, "extra_attempts": 1.0}, TypeError),
        ({"task_id": "t", "available_at": 0, "extra_attempts": MAX_INT}, ValueError),
    ],
)
def test_redrive_with_bad_arguments_writes_nothing(
    q: Queue, qdir: Path, arguments: dict[str, Any], error: type[Exception]
) -> None:
    dead(q)
    with nothing_written(q, qdir), pytest.raises(error):
        q.redrive(**arguments)


# -- cancel --------------------------------------------------------------------------------


def test_cancel_of_a_ready_task_kills_it_with_its_attempts_left(q: Queue, qdir: Path) -> None:
    q.put("t", {"n": 1}, available_at=4)
    q.cancel("t")
    task = q.get("t")
    assert task is not None
    assert (task.status, task.attempts, task.available_at, task.worker, task.deadline) == ("dead", 0, 4, None, None)
    assert last_op(qdir) == {"op": "cancel", "task": "t"}
    assert q.reserve("w", now=10, lease_seconds=1) == []


@pytest.mark.parametrize("finish", ["ack", "release"])
def test_cancel_of_a_leased_task_makes_its_holder_stale(q: Queue, qdir: Path, finish: str) -> None:
    lease = leased(q)
    q.cancel("t")
    task = q.get("t")
    assert task is not None and (task.status, task.worker, task.deadline) == ("dead", None, None)
    with nothing_written(q, qdir), pytest.raises(StaleLease):
        getattr(q, finish)(lease, now=1)


def test_a_cancelled_task_survives_reopen_and_compaction_and_can_be_redriven(qdir: Path) -> None:
    with Queue(qdir, sync=False) as q:
        q.put("t", {"n": 1})
        q.cancel("t")
        q.compact()  # a snapshot holds a dead task with attempts left
    with Queue(qdir, sync=False) as q:
        assert q.get("t").status == "dead"  # type: ignore[union-attr]
        q.redrive("t", available_at=0)
        [lease] = q.reserve("w", now=0, lease_seconds=1)
        assert lease.attempts == 1


@pytest.mark.parametrize("status", ["unknown", "completed", "dead"])
def test_cancel_of_a_task_that_is_not_ready_or_leased_is_wrong_status(q: Queue, qdir: Path, status: str) -> None:
    done = leased(q, "completed")
    q.ack(done, now=1)
    q.put("dead", {})
    q.cancel("dead")
    with nothing_written(q, qdir), pytest.raises(WrongStatus):
        q.cancel(status)


@pytest.mark.parametrize("task_id", [1, None, b"t", ""])
def test_cancel_with_a_bad_task_id_writes_nothing(q: Queue, qdir: Path, task_id: Any) -> None:
    q.put("t", {})
    with nothing_written(q, qdir), pytest.raises((TypeError, ValueError)):
        q.cancel(task_id)


# -- knowing when work is due ---------------------------------------------------------------


def test_stats_say_when_the_next_task_is_due_and_the_next_lease_ends(q: Queue) -> None:
    stats = q.stats()
    assert stats["next_available_at"] is None and stats["next_deadline"] is None
    q.put("late", {}, available_at=30)
    q.put("soon", {}, available_at=10)
    assert q.stats()["next_available_at"] == 10
    [lease] = q.reserve("w", now=10, lease_seconds=5)
    assert (q.stats()["next_available_at"], q.stats()["next_deadline"]) == (30, 15)
    q.extend(lease, now=11, lease_seconds=100)
    assert q.stats()["next_deadline"] == 111
    q.cancel("late")
    assert q.stats()["next_available_at"] is None
    q.ack(lease, now=12)
    assert q.stats()["next_deadline"] is None
