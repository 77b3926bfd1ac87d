"""CONTRACT §2 `ack` / `release`, every `StaleLease` case, and the `Lease` token.

A stale token changes nothing at all: the directory's bytes hash the same and
`last_seq` does not move.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from model import nothing_written, read_frames, view
from walqueue import Lease, Queue, StaleLease


def leased(q: Queue, *, max_attempts: int = 3, payload: dict[str, Any] | None = None) -> Lease:
    """Put task "t" and lease it to "w" at now=0 with deadline 100."""
    q.put("t", {"n": 1} if payload is None else payload, max_attempts=max_attempts, available_at=0)
    [lease] = q.reserve("w", now=0, lease_seconds=100)
    return lease


# ---------------------------------------------------------------------------
# ack


def test_ack_completes_the_task_and_drops_its_payload(q: Queue, qdir: Path) -> None:
    lease = leased(q)
    seq = q.last_seq
    assert q.ack(lease, now=50) is None
    assert q.last_seq == seq + 1
    task = q.get("t")
    assert task is not None
    assert (task.status, task.payload, task.worker, task.deadline) == ("completed", None, None, None)
    assert (task.key, task.attempts, task.generation, task.max_attempts) == ("t", 1, 1, 3)


def test_ack_leaves_available_at_unchanged(q: Queue) -> None:
    q.put("t", {}, available_at=7)
    [lease] = q.reserve("w", now=9, lease_seconds=10)
    q.ack(lease, now=10)
    assert q.get("t").available_at == 7  # type: ignore[union-attr]


def test_ack_just_before_the_deadline_succeeds(q: Queue) -> None:
    lease = leased(q)
    q.ack(lease, now=lease.deadline - 1)
    assert q.get("t").status == "completed"  # type: ignore[union-attr]


def test_ack_writes_one_frame_with_the_spec_ack_op(q: Queue, qdir: Path) -> None:
    lease = leased(q)
    q.ack(lease, now=1)
    [segment] = sorted(qdir.glob("wal-*.log"))
    _, last = read_frames(segment)[-1]
    assert last == {"seq": 3, "ops": [{"op": "ack", "task": "t", "generation": 1}]}


# ---------------------------------------------------------------------------
# release


def test_release_makes_the_task_ready_at_now_plus_delay(q: Queue) -> None:
    lease = leased(q)
    q.release(lease, now=40, delay=15)
    task = q.get("t")
    assert task is not None
    assert (task.status, task.available_at, task.worker, task.deadline) == ("ready", 55, None, None)
    assert (task.attempts, task.generation, task.payload) == (1, 1, {"n": 1})


def test_release_default_delay_is_zero(q: Queue) -> None:
    lease = leased(q)
    q.release(lease, now=40)
    assert q.get("t").available_at == 40  # type: ignore[union-attr]


def test_release_with_spent_attempts_makes_the_task_dead_at_now_plus_delay(q: Queue) -> None:
    lease = leased(q, max_attempts=1, payload={"keep": [1]})
    q.release(lease, now=30, delay=4)
    task = q.get("t")
    assert task is not None
    assert (task.status, task.available_at, task.payload) == ("dead", 34, {"keep": [1]})
    assert q.tasks("dead") == [task]
    assert q.reserve("w", now=10**6, lease_seconds=1) == []


def test_released_task_is_leased_again_with_the_next_generation(q: Queue) -> None:
    lease = leased(q)
    q.release(lease, now=1, delay=2)
    assert q.reserve("w", now=2, lease_seconds=5) == []
    [again] = q.reserve("w", now=3, lease_seconds=5)
    assert (again.generation, again.attempts) == (2, 2)


def test_release_writes_one_frame_with_the_spec_release_op(q: Queue, qdir: Path) -> None:
    lease = leased(q)
    q.release(lease, now=5, delay=6)
    [segment] = sorted(qdir.glob("wal-*.log"))
    _, last = read_frames(segment)[-1]
    assert last == {"seq": 3, "ops": [{"op": "release", "task": "t", "generation": 1, "available_at": 11}]}


def test_release_takes_now_as_given_even_going_back_in_time(q: Queue) -> None:
    q.put("t", {})
    [lease] = q.reserve("w", now=100, lease_seconds=100)
    q.release(lease, now=20, delay=1)
    assert q.get("t").available_at == 21  # type: ignore[union-attr]


# ---------------------------------------------------------------------------
# StaleLease: every way a token stops owning its task


def _after_ack(q: Queue, lease: Lease) -> Lease:
    q.ack(lease, now=1)
    return lease


def _after_release(q: Queue, lease: Lease) -> Lease:
    q.release(lease, now=1)
    return lease


def _after_release_to_dead(q: Queue, lease: Lease) -> Lease:
    q.release(lease, now=1)  # attempts 1 of max 1: dead
    return lease


def _expired_not_reaped_at_deadline(q: Queue, lease: Lease) -> Lease:
    return lease  # used with now == deadline below


def _expired_and_reaped(q: Queue, lease: Lease) -> Lease:
    q.put("other", {}, available_at=10**9)
    q.reserve("x", now=lease.deadline, lease_seconds=5)  # reaps "t" and leases it to "x"
    return lease


def _expired_reaped_to_dead(q: Queue, lease: Lease) -> Lease:
    q.reserve("x", now=lease.deadline + 5, lease_seconds=5)
    return lease


def _same_worker_reserved_again(q: Queue, lease: Lease) -> Lease:
    [newer] = q.reserve("w", now=lease.deadline, lease_seconds=100)
    assert newer.task_id == lease.task_id and newer.generation == lease.generation + 1
    return lease


def _wrong_worker(q: Queue, lease: Lease) -> Lease:
    return dataclasses.replace(lease, worker="w2")


def _generation_plus_one(q: Queue, lease: Lease) -> Lease:
    return dataclasses.replace(lease, generation=lease.generation + 1)


def _generation_minus_one(q: Queue, lease: Lease) -> Lease:
    return dataclasses.replace(lease, generation=lease.generation - 1)


def _unknown_task(q: Queue, lease: Lease) -> Lease:
    return dataclasses.replace(lease, task_id="never-stored")


def _too_long_task_id(q: Queue, lease: Lease) -> Lease:
    return dataclasses.replace(lease, task_id="t" * 5000)


def _too_long_worker(q: Queue, lease: Lease) -> Lease:
    return dataclasses.replace(lease, worker="w" * 5000)


def _empty_worker(q: Queue, lease: Lease) -> Lease:
    return dataclasses.replace(lease, worker="")


def _generation_as_bool(q: Queue, lease: Lease) -> Lease:
    assert lease.generation == 1
    return dataclasses.replace(lease, generation=True)  # True == 1 in Python, but is not an int here


def _generation_as_str(q: Queue, lease: Lease) -> Lease:
    return dataclasses.replace(lease, generation="1")  # type: ignore[arg-type]


def _generation_as_float(q: Queue, lease: Lease) -> Lease:
    return dataclasses.replace(lease, generation=1.0)  # type: ignore[arg-type]


def _generation_too_large(q: Queue, lease: Lease) -> Lease:
    return dataclasses.replace(lease, generation=2**64 + 1)


def _task_id_not_a_str(q: Queue, lease: Lease) -> Lease:
    return dataclasses.replace(lease, task_id=["t"])  # type: ignore[arg-type]


def _worker_none(q: Queue, lease: Lease) -> Lease:
    return dataclasses.replace(lease, worker=None)  # type: ignore[arg-type]


STALE_CASES: list[tuple[str, Callable[[Queue, Lease], Lease], int, int]] = [
    # (id, make the stale token, max_attempts, now of the ack/release; -1 means "the deadline")
    ("acked", _after_ack, 3, 2),
    ("released", _after_release, 3, 2),
    ("released-to-dead", _after_release_to_dead, 1, 2),
    ("expired-not-reaped-now-equals-deadline", _expired_not_reaped_at_deadline, 3, -1),
    ("expired-not-reaped-now-after-deadline", _expired_not_reaped_at_deadline, 3, 10**6),
    ("expired-and-reaped", _expired_and_reaped, 3, 2),
    ("expired-reaped-to-dead", _expired_reaped_to_dead, 1, 2),
    ("same-worker-reserved-again", _same_worker_reserved_again, 3, 101),
    ("wrong-worker", _wrong_worker, 3, 2),
    ("generation-plus-one", _generation_plus_one, 3, 2),
    ("generation-minus-one", _generation_minus_one, 3, 2),
    ("unknown-task", _unknown_task, 3, 2),
    ("too-long-task-id", _too_long_task_id, 3, 2),
    ("too-long-worker", _too_long_worker, 3, 2),
    ("empty-worker", _empty_worker, 3, 2),
    ("generation-bool", _generation_as_bool, 3, 2),
    ("generation-str", _generation_as_str, 3, 2),
    ("generation-float", _generation_as_float, 3, 2),
    ("generation-too-large", _generation_too_large, 3, 2),
    ("task-id-not-str", _task_id_not_a_str, 3, 2),
    ("worker-none", _worker_none, 3, 2),
]


@pytest.mark.parametrize("verb", ["ack", "release"])
@pytest.mark.parametrize(
    ("make_stale", "max_attempts", "now"), [c[1:] for c in STALE_CASES], ids=[c[0] for c in STALE_CASES]
)
def test_stale_lease_changes_nothing_and_writes_no_frame(
    q: Queue, qdir: Path, verb: str, make_stale: Callable[[Queue, Lease], Lease], max_attempts: int, now: int
) -> None:
    lease = leased(q, max_attempts=max_attempts)
    token = make_stale(q, lease)
    when = lease.deadline if now == -1 else now
    before = view(q)
    with nothing_written(q, qdir), pytest.raises(StaleLease):
        if verb == "ack":
            q.ack(token, now=when)
        else:
            q.release(token, now=when, delay=3)
    assert view(q) == before
    # the queue is not poisoned by a StaleLease
    assert q.get("t") is not None
    q.put("after", {})


def test_stale_lease_is_a_walqueue_error() -> None:
    from walqueue import WalQueueError

    assert issubclass(StaleLease, WalQueueError)


def test_ack_after_reaping_the_token_stays_stale_after_the_new_holder_acks(q: Queue, qdir: Path) -> None:
    lease = leased(q)
    [second] = q.reserve("w2", now=lease.deadline, lease_seconds=10)
    q.ack(second, now=lease.deadline + 1)
    with nothing_written(q, qdir), pytest.raises(StaleLease):
        q.ack(lease, now=lease.deadline + 1)


def test_an_old_token_is_stale_even_when_now_is_before_its_own_deadline(q: Queue) -> None:
    lease = leased(q)  # deadline 100
    q.release(lease, now=1)
    [newer] = q.reserve("w", now=1, lease_seconds=500)  # same worker, generation 2
    with pytest.raises(StaleLease):
        q.ack(lease, now=2)
    q.ack(newer, now=2)


# ---------------------------------------------------------------------------
# only task_id, worker and generation of the token are used


def test_changing_a_tokens_payload_attempts_or_deadline_changes_nothing_durable(q: Queue, qdir: Path) -> None:
    lease = leased(q)
    forged = dataclasses.replace(lease, payload={"evil": True}, attempts=99, deadline=10**12)
    # the durable deadline (100) counts, not the token's
    with nothing_written(q, qdir), pytest.raises(StaleLease):
        q.ack(forged, now=100)
    q.release(forged, now=99, delay=0)
    task = q.get("t")
    assert task is not None and (task.payload, task.attempts, task.status) == ({"n": 1}, 1, "ready")


def test_ack_with_a_token_whose_deadline_was_shortened_still_works(q: Queue) -> None:
    lease = leased(q)
    q.ack(dataclasses.replace(lease, deadline=0), now=99)
    assert q.get("t").status == "completed"  # type: ignore[union-attr]


def test_ack_and_release_require_a_lease_instance(q: Queue, qdir: Path) -> None:
    lease = leased(q)
    for bad in (lease.to_dict(), None, ("t", "w", 1), "t"):
        with nothing_written(q, qdir):
            with pytest.raises(TypeError):
                q.ack(bad, now=1)  # type: ignore[arg-type]
            with pytest.raises(TypeError):
                q.release(bad, now=1)  # type: ignore[arg-type]
    q.ack(lease, now=1)


# ---------------------------------------------------------------------------
# the Lease token


def test_lease_round_trips_through_to_dict_and_from_dict(q: Queue) -> None:
    lease = leased(q, payload={"a": [1, {"b": None}], "c": 1.5})
    data = lease.to_dict()
    assert set(data) == {"task_id", "worker", "generation", "deadline", "attempts", "payload"}
    rebuilt = Lease.from_dict(data)
    assert rebuilt == lease
    q.ack(rebuilt, now=1)
    assert q.get("t").status == "completed"  # type: ignore[union-attr]


def test_lease_is_frozen(q: Queue) -> None:
    lease = leased(q)
    with pytest.raises(dataclasses.FrozenInstanceError):
        lease.generation = 5  # type: ignore[misc]


def test_mutating_a_leases_payload_changes_nothing_stored(q: Queue) -> None:
    lease = leased(q, payload={"l": [1]})
    lease.payload["l"].append(2)
    lease.payload["x"] = 1
    assert q.get("t").payload == {"l": [1]}  # type: ignore[union-attr]
    lease.to_dict()["payload"]["y"] = 2
    assert lease.payload == {"l": [1, 2], "x": 1}


VALID_LEASE = {"task_id": "t", "worker": "w", "generation": 1, "deadline": 10, "attempts": 1, "payload": {}}


@pytest.mark.parametrize("missing", ["task_id", "worker", "generation"])
def test_lease_from_dict_refuses_a_missing_required_key(missing: str) -> None:
    data = dict(VALID_LEASE)
    del data[missing]
    with pytest.raises(ValueError, match=missing):
        Lease.from_dict(data)


@pytest.mark.parametrize(
    "omitted", [(), ("deadline",), ("attempts",), ("payload",), ("deadline", "attempts", "payload")]
)
def test_a_lease_of_task_id_worker_and_generation_alone_acks(q: Queue, omitted: tuple[str, ...]) -> None:
    lease = leased(q, payload={"big": "x" * 1000})
    data = {name: value for name, value in lease.to_dict().items() if name not in omitted}
    rebuilt = Lease.from_dict(data)
    for name in omitted:  # informational fields left out take their defaults
        assert getattr(rebuilt, name) == {"deadline": 0, "attempts": 0, "payload": {}}[name]
    q.ack(rebuilt, now=1)
    assert q.get("t").status == "completed"  # type: ignore[union-attr]


def test_a_lease_built_from_three_fields_is_the_token() -> None:
    assert Lease("t", "w", 1) == Lease("t", "w", 1, 0, 0, {})


def test_lease_from_dict_refuses_an_unknown_key() -> None:
    with pytest.raises(ValueError):
        Lease.from_dict({**VALID_LEASE, "extra": 1})
    with pytest.raises(ValueError):
        Lease.from_dict({**VALID_LEASE, 1: 1})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("task_id", 1),
        ("task_id", None),
        ("worker", b"w"),
        ("generation", "1"),
        ("generation", 1.0),
        ("generation", True),
        ("generation", None),
        ("deadline", "10"),
        ("deadline", False),
        ("attempts", 1.5),
        ("attempts", True),
        ("payload", []),
        ("payload", None),
        ("payload", "{}"),
    ],
)
def test_lease_from_dict_refuses_an_ill_typed_key(name: str, value: Any) -> None:
    with pytest.raises(ValueError):
        Lease.from_dict({**VALID_LEASE, name: value})


def test_lease_from_dict_refuses_a_non_mapping() -> None:
    with pytest.raises((TypeError, ValueError)):
        Lease.from_dict([("task_id", "t")])  # type: ignore[arg-type]


def test_lease_from_dict_copies_the_payload() -> None:
    data: dict[str, Any] = {**VALID_LEASE, "payload": {"l": [1]}}
    lease = Lease.from_dict(data)
    data["payload"]["l"].append(2)
    assert lease.payload == {"l": [1]}
