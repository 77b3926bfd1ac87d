"""`Queue.give_back`: a lease nobody started is undone, so a task never loses an attempt it did not use.

A worker that reserved more than it ran (a shutdown, a full pipeline, a
timeout before its handler began) gives those leases back: the task is
ready again exactly as before the lease (attempts and generation one less,
the same available_at and last error), fenced like `release`.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from walqueue import Lease, Queue, StaleLease
from walqueue.engine import events
from walqueue.format import CorruptStore, transaction
from walqueue.format.transaction import transaction_seq


def test_a_task_on_its_last_attempt_given_back_unstarted_is_ready_and_dies_only_after_a_real_run(
    tmp_path: Path,
) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        queue.put("t", {}, max_attempts=2, available_at=7)
        [first] = queue.reserve("w", now=10, lease_seconds=100)
        queue.release(first, now=11, error={"type": "Boom", "message": "first run"})
        [last] = queue.reserve("w", now=12, lease_seconds=100)
        assert last.attempts == 2  # its last attempt
        queue.give_back(last, now=13)
        task = queue.get("t")
        assert task is not None
        assert (task.status, task.attempts, task.generation, task.available_at) == ("ready", 1, 1, 11)
        assert task.last_error is not None and (task.last_error.message, task.last_error.attempt) == ("first run", 1)
        [again] = queue.reserve("w", now=14, lease_seconds=100)
        assert (again.attempts, again.generation) == (2, 2)
        queue.release(again, now=15, error={"type": "Boom", "message": "second run"})
        task = queue.get("t")
        assert task is not None and (task.status, task.attempts) == ("dead", 2)
        assert task.last_error is not None and task.last_error.message == "second run"


@pytest.mark.parametrize(
    "token",
    [
        Lease("t", "w", 2),  # a later generation than held
        Lease("t", "other", 1),  # another worker
    ],
    ids=["generation", "worker"],
)
def test_give_back_is_fenced_like_release_and_a_refusal_writes_nothing(tmp_path: Path, token: Lease) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        queue.put("t", {})
        queue.reserve("w", now=10, lease_seconds=100)
        seq = queue.stats()["last_seq"]
        with pytest.raises(StaleLease):
            queue.give_back(token, now=11)
        [held] = queue.tasks("leased")
        with pytest.raises(StaleLease):
            queue.give_back(Lease("t", "w", 1), now=110)  # the lease ran out
        assert queue.stats()["last_seq"] == seq and held.attempts == 1


def test_a_token_given_back_is_stale_at_once(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        queue.put("t", {})
        [lease] = queue.reserve("w", now=10, lease_seconds=100)
        queue.give_back(lease, now=11)
        for call in (queue.ack, queue.give_back):
            with pytest.raises(StaleLease):
                call(lease, now=12)
        with pytest.raises(StaleLease):
            queue.release(lease, now=12)


def test_a_give_back_survives_replay_and_compaction(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        queue.put_many([{"task_id": name, "payload": {"n": 1}} for name in "abc"])
        leases = queue.reserve("w", now=10, lease_seconds=100, limit=3)
        for lease in leases[:2]:
            queue.give_back(lease, now=11)
        before = queue.tasks()
    with Queue(tmp_path / "q", sync=False) as queue:
        assert queue.tasks() == before  # replayed from the WAL
        queue.compact()
    with Queue(tmp_path / "q", sync=False) as queue:
        assert queue.tasks() == before  # loaded from the snapshot


def test_a_give_back_is_a_lifecycle_event(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    events.enable()
    try:
        with caplog.at_level(logging.INFO, logger="walqueue.events"), Queue(tmp_path / "q", sync=False) as queue:
            queue.put("t", {})
            [lease] = queue.reserve("w", now=10, lease_seconds=100)
            queue.give_back(lease, now=11)
    finally:
        events.enable(False)
    given = [record for record in caplog.records if getattr(record, "event", None) == events.GIVE_BACK]
    assert [record.fields for record in given] == [  # type: ignore[attr-defined]
        {"task_id": "t", "worker": "w", "generation": 1, "seq": 3}
    ]


def test_a_reader_without_the_kind_refuses_it_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    body = {"ops": [{"generation": 1, "op": "give_back", "task": "t1"}], "seq": 3}
    monkeypatch.setattr(transaction, "OP_NAMES", transaction.OP_NAMES - {"give_back"})  # today's older readers
    with pytest.raises(CorruptStore, match=r"op 0 is not a known op \(op name 'give_back'\)"):
        transaction_seq(json.loads(json.dumps(body)), "wal", 265)
