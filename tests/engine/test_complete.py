"""`Queue.complete`: the ack, a result and follow-up puts in one transaction, or nothing; the `result` op's rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from walqueue import KeyConflict, Queue, StaleLease
from walqueue.engine.state import InvalidTransaction, State, apply


def _leased(queue: Queue, task_id: str = "a") -> object:
    queue.put(task_id, {"x": 1})
    [lease] = queue.reserve("w", now=10, lease_seconds=100)
    return lease


def test_complete_acks_stores_the_result_and_puts_the_followups_in_one_transaction(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        lease = _leased(queue)
        before = queue.last_seq
        queue.complete(lease, now=20, result={"r": [1, 2]}, result_ttl=50, puts=[{"task_id": "a/1", "payload": {}}])
        assert queue.last_seq == before + 1
        assert queue.get("a").status == "completed" and queue.get("a/1").status == "ready"
        assert queue.result("a") == {"value": {"r": [1, 2]}, "expires": 70}
    with Queue(tmp_path / "q", sync=False) as reopened:  # replayed from the log
        assert reopened.result("a") == {"value": {"r": [1, 2]}, "expires": 70}
        assert reopened.get("a/1") is not None


def test_a_stale_lease_writes_nothing_neither_the_ack_nor_the_followups(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        lease = _leased(queue)
        queue.ack(lease, now=20)
        seq = queue.last_seq
        with pytest.raises(StaleLease):
            queue.complete(lease, now=21, result=1, puts=[{"task_id": "a/1", "payload": {}}])
        assert queue.last_seq == seq and queue.get("a/1") is None


def test_a_conflicting_followup_writes_nothing(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        lease = _leased(queue)
        queue.put("other", {}, key="a/1")
        with pytest.raises(KeyConflict):
            queue.complete(lease, now=20, puts=[{"task_id": "a/1", "payload": {"y": 1}}])
        assert queue.get("a").status == "leased"


def test_an_identical_followup_already_put_is_left_out(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        lease = _leased(queue)
        queue.put("a/1", {"y": 1})
        queue.complete(lease, now=20, puts=[{"task_id": "a/1", "payload": {"y": 1}}])
        assert queue.get("a").status == "completed"


def test_bad_arguments_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        lease = _leased(queue)
        seq = queue.last_seq
        with pytest.raises(TypeError):
            queue.complete(lease, now=20, result={1, 2})
        with pytest.raises(ValueError, match="result"):
            queue.complete(lease, now=20, result="x" * 70_000)
        with pytest.raises(TypeError):
            queue.complete(lease, now=20, puts=[{"task_id": "b", "payload": "not an object"}])
        assert queue.last_seq == seq


def test_results_are_dropped_once_a_later_result_passes_their_expiry(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        queue.complete(_leased(queue, "a"), now=20, result=1, result_ttl=5)
        assert queue.result("a", now=24) == {"value": 1, "expires": 25}
        assert queue.result("a", now=25) is None  # expired at that time, though still stored
        queue.complete(_leased(queue, "b"), now=30, result=2, result_ttl=5)
        assert queue.result("a") is None and queue.result("b") == {"value": 2, "expires": 35}
        with pytest.raises(ValueError, match="now"):
            queue.result("b", now=-1)


def _leased_state() -> State:
    state = State()
    apply(
        state,
        {
            "seq": 1,
            "ops": [{"op": "put", "task": "a", "key": "a", "payload": {}, "available_at": 0, "max_attempts": 3}],
        },
    )
    apply(state, {"seq": 2, "ops": [{"op": "lease", "task": "a", "worker": "w", "generation": 1, "deadline": 99}]})
    return state


RESULT_OP = {"op": "result", "task": "a", "generation": 1, "at": 5, "expires": 9, "value": [1]}


def test_a_result_op_alone_or_without_its_ack_is_refused() -> None:
    state = _leased_state()
    with pytest.raises(InvalidTransaction, match="result"):
        apply(state, {"seq": 3, "ops": [RESULT_OP]})
    with pytest.raises(InvalidTransaction, match="no ack"):
        apply(state, {"seq": 3, "ops": [RESULT_OP, {"op": "extend", "task": "a", "generation": 1, "deadline": 5}]})
    apply(state, {"seq": 3, "ops": [RESULT_OP, {"op": "ack", "task": "a", "generation": 1}]})
    assert state.result("a") == (9, b"[1]")


def test_a_store_that_never_stores_a_result_writes_no_result_op(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        lease = _leased(queue)
        queue.complete(lease, now=20)
    log = b"".join(path.read_bytes() for path in sorted((tmp_path / "q").rglob("wal-*")))
    assert b'"result"' not in log and b'"op":"ack"' in log


def test_results_are_carried_by_a_snapshot_and_read_back_after_compaction(tmp_path: Path) -> None:
    with Queue(tmp_path / "q", sync=False) as queue:
        queue.complete(_leased(queue, "a"), now=20, result={"k": ["v", 1.5]}, result_ttl=1000)
        queue.complete(_leased(queue, "b"), now=30)
        queue.compact()
        assert queue.result("a") == {"value": {"k": ["v", 1.5]}, "expires": 1020}
    with Queue(tmp_path / "q", sync=False) as reopened:
        assert reopened.result("a") == {"value": {"k": ["v", 1.5]}, "expires": 1020}
        assert reopened.result("b") is None and reopened.get("b").status == "completed"
        reopened.put("c", {})
        [lease] = reopened.reserve("w", now=1500, lease_seconds=1000)
        reopened.complete(lease, now=2000, result=3, result_ttl=5)  # its time passes a's expiry
        assert reopened.result("a") is None


def test_a_snapshot_result_is_refused_unless_its_task_is_completed() -> None:
    record = {
        "task": "a",
        "key": "a",
        "identity": "00" * 32,
        "status": "ready",
        "payload": {},
        "available_at": 0,
        "max_attempts": 3,
        "attempts": 0,
        "generation": 0,
        "worker": None,
        "deadline": None,
    }
    with pytest.raises(InvalidTransaction, match="has no result"):
        State.from_records(1, [{**record, "result": {"expires": 5, "value": 1}}])
    with pytest.raises(InvalidTransaction, match="last_error or result"):
        State.from_records(1, [{**record, "outcome": 1}])


def test_the_result_frame_of_format_md_is_what_complete_writes(tmp_path: Path) -> None:
    with Queue(tmp_path / "q") as queue:
        queue.put("t1", {"n": 1})
        [lease] = queue.reserve("w1", now=100, lease_seconds=30)
        queue.complete(
            lease, now=110, result={"ok": True}, result_ttl=1000, puts=[{"task_id": "t1/1", "payload": {"n": 2}}]
        )
    frame = (tmp_path / "q" / "wal-00000000000000000001.log").read_bytes()[265 : 265 + 272]
    body = (
        b'{"ops":[{"at":110,"expires":1110,"generation":1,"op":"result","task":"t1","value":{"ok":true}},'
        b'{"generation":1,"op":"ack","task":"t1"},'
        b'{"available_at":0,"key":"t1/1","max_attempts":3,"op":"put","payload":{"n":2},"task":"t1/1"}],"seq":3}'
    )
    assert frame[:4] == (236).to_bytes(4, "big") and frame[4:-32] == body
    assert frame[-32:].hex() == "aca83a8a58a20290459a537dcd5e5a2117587d41bc4be7727d10f0ade0d6222e"


def test_a_replayed_or_reloaded_state_holds_the_live_states_results(tmp_path: Path) -> None:
    """Results are dropped by the log's own times, so replay and a snapshot load agree with the live queue."""
    with Queue(tmp_path / "q", sync=False) as queue:
        for number, now in enumerate((20, 25, 60, 90)):
            queue.put(f"t{number}", {})
            [lease] = queue.reserve("w", now=now - 5, lease_seconds=100)
            queue.complete(lease, now=now, result=number, result_ttl=40)
            if number == 1:
                queue.compact()
        live = [queue.result(f"t{number}") for number in range(4)]
    assert live == [None, None, {"value": 2, "expires": 100}, {"value": 3, "expires": 130}]
    with Queue(tmp_path / "q", sync=False) as reopened:
        assert [reopened.result(f"t{number}") for number in range(4)] == live
    with_result, without = _leased_state(), _leased_state()
    apply(with_result, {"seq": 3, "ops": [RESULT_OP, {"op": "ack", "task": "a", "generation": 1}]})
    apply(without, {"seq": 3, "ops": [{"op": "ack", "task": "a", "generation": 1}]})
    assert with_result != without  # states differing only in a result are not equal
