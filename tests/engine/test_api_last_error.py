"""The last error through the public API: `release`/`fail`/`cancel` with `error=`, and a lease's expiry.

Every rule of docs/DECISIONS.md's "The last error" section, one test each:
what is recorded (type, message, attempt, time), in the very transaction
that settles the task; how a long or unencodable error is cut or escaped;
that a bad error writes nothing; that `fail` is fenced like `ack`; which
transitions keep, replace or drop the last error; and that snapshots and
reopening keep it, while a store written without the new calls stays byte
for byte what the previous version wrote.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model import nothing_written, wal_bodies
from walqueue import LastError, Lease, Queue, StaleLease, Task, WrongStatus
from walqueue.engine.validate import (
    ERROR_MESSAGE_BYTES,
    ERROR_TYPE_BYTES,
    MAX_FRAME_BYTES,
    RECORD_WORST_CASE_EXTRA,
    cut_text,
)

if TYPE_CHECKING:
    from conftest import RunPython

BAD_INPUT = {"type": "ValueError", "message": "bad input"}


def leased(q: Queue, task_id: str = "t", *, max_attempts: int = 3, now: int = 0) -> Lease:
    """Put `task_id` and lease it to "w" at `now` until now + 100."""
    q.put(task_id, {"n": 1}, max_attempts=max_attempts)
    [lease] = q.reserve("w", now=now, lease_seconds=100)
    return lease


def last_error(q: Queue, task_id: str = "t") -> LastError | None:
    task = q.get(task_id)
    assert task is not None
    return task.last_error


# -- what is recorded, and where --------------------------------------------------------------


def test_release_records_type_message_attempt_and_now_in_the_same_transaction(q: Queue, qdir: Path) -> None:
    lease = leased(q)
    seq = q.last_seq
    q.release(lease, now=40, delay=5, error=BAD_INPUT)
    assert q.last_seq == seq + 1  # one transaction: the error is not a separate write
    task = q.get("t")
    assert task is not None and task.status == "ready" and task.available_at == 45
    assert task.last_error == LastError("ValueError", "bad input", 1, 40)
    assert wal_bodies(qdir)[-1] == {
        "seq": seq + 1,
        "ops": [
            {"op": "error", "task": "t", "type": "ValueError", "message": "bad input", "at": 40},
            {"op": "release", "task": "t", "generation": 1, "available_at": 45},
        ],
    }


def test_a_release_without_an_error_writes_the_release_alone_and_keeps_the_last_error(q: Queue, qdir: Path) -> None:
    q.release(leased(q), now=10, error=BAD_INPUT)
    [lease] = q.reserve("w", now=10, lease_seconds=100)
    q.release(lease, now=20)
    assert wal_bodies(qdir)[-1]["ops"] == [{"op": "release", "task": "t", "generation": 2, "available_at": 20}]
    assert last_error(q) == LastError("ValueError", "bad input", 1, 10)


def test_the_release_that_spends_the_last_attempt_leaves_a_dead_letter_with_its_error(q: Queue) -> None:
    q.release(leased(q, max_attempts=1), now=7, error={"type": "TimeoutError", "message": "smtp"})
    [dead] = q.tasks("dead")
    assert dead.last_error == LastError("TimeoutError", "smtp", 1, 7)


def test_each_failure_replaces_the_last_error_with_its_own_attempt(q: Queue) -> None:
    q.release(leased(q), now=10, error={"type": "A", "message": "first"})
    [lease] = q.reserve("w", now=10, lease_seconds=100)
    q.release(lease, now=20, error={"type": "B", "message": "second"})
    assert last_error(q) == LastError("B", "second", 2, 20)


def test_expiry_records_lease_expired_with_the_attempt_and_the_deadline(q: Queue, qdir: Path) -> None:
    q.put("t", {"n": 1}, max_attempts=2)
    q.reserve("worker-7", now=0, lease_seconds=30)
    q.reserve("other", now=31, lease_seconds=30)  # reaps (at 30), then leases again
    error = last_error(q)
    assert error == LastError(
        "LeaseExpired", "worker worker-7 did not ack, release or extend lease 1 by its deadline 30", 1, 30
    )
    reap = wal_bodies(qdir)[-2]
    assert reap["ops"] == [{"op": "expire", "task": "t", "generation": 1}]  # the op is what it always was
    q.reserve("w", now=100, lease_seconds=1)  # the second lease (deadline 61) expires: dead
    [dead] = q.tasks("dead")
    assert dead.last_error is not None and (dead.last_error.attempt, dead.last_error.at) == (2, 61)
    assert "worker other " in dead.last_error.message


def test_an_expiry_message_cuts_a_long_worker_name(q: Queue) -> None:
    q.put("t", {})
    q.reserve("w" * 1000, now=0, lease_seconds=9)
    q.reserve("w", now=9, lease_seconds=9)
    error = last_error(q)
    assert error is not None and (error.type, error.attempt, error.at) == ("LeaseExpired", 1, 9)
    assert "... [cut: 1000 bytes]" in error.message and len(error.message.encode()) < 300


def test_fail_kills_the_task_at_once_whatever_its_attempts_left(q: Queue, qdir: Path) -> None:
    lease = leased(q, max_attempts=5)
    q.fail(lease, now=3, error={"type": "KeyError", "message": "no handler for 'resize'"})
    task = q.get("t")
    assert task is not None and task.status == "dead" and task.attempts == 1 and task.max_attempts == 5
    assert task.last_error == LastError("KeyError", "no handler for 'resize'", 1, 3)
    assert [op["op"] for op in wal_bodies(qdir)[-1]["ops"]] == ["error", "fail"]


def test_fail_without_an_error_writes_the_fail_op_alone(q: Queue, qdir: Path) -> None:
    q.fail(leased(q), now=3)
    assert wal_bodies(qdir)[-1]["ops"] == [{"op": "fail", "task": "t", "generation": 1}]
    assert q.get("t") == Task("t", "t", "dead", {"n": 1}, 0, 3, 1, 1, None, None, None)


def test_cancel_records_its_reason_at_now_with_the_attempts_so_far(q: Queue) -> None:
    q.put("ready-one", {})
    q.cancel("ready-one", error={"type": "Cancelled", "message": "by the operator"}, now=12)
    assert last_error(q, "ready-one") == LastError("Cancelled", "by the operator", 0, 12)
    leased(q)
    q.cancel("t", error={"type": "Cancelled", "message": "superseded"}, now=13)
    assert last_error(q) == LastError("Cancelled", "superseded", 1, 13)


def test_cancel_without_an_error_keeps_the_last_one_and_may_be_given_now(q: Queue) -> None:
    q.release(leased(q), now=10, error=BAD_INPUT)
    q.cancel("t", now=11)
    assert last_error(q) == LastError("ValueError", "bad input", 1, 10)


# -- which transitions keep it -------------------------------------------------------------------


def test_redrive_lease_and_extend_keep_the_last_error_and_ack_drops_it(q: Queue) -> None:
    q.fail(leased(q), now=5, error=BAD_INPUT)
    kept = LastError("ValueError", "bad input", 1, 5)
    q.redrive("t", available_at=6)
    assert last_error(q) == kept
    [lease] = q.reserve("w", now=6, lease_seconds=10)
    assert last_error(q) == kept
    q.extend(lease, now=7, lease_seconds=10)
    assert last_error(q) == kept
    q.ack(lease, now=8)
    task = q.get("t")
    assert task is not None and task.status == "completed" and task.last_error is None


# -- bounds: cut, escaped, never refused for its length --------------------------------------------


def test_a_long_message_is_cut_to_its_bound_with_a_marker_naming_its_size(q: Queue) -> None:
    message = "é" * 3000  # 6,000 UTF-8 bytes
    q.release(leased(q), now=1, error={"type": "E", "message": message})
    error = last_error(q)
    assert error is not None
    stored = error.message.encode("utf-8")
    assert error.message.endswith("... [cut: 6000 bytes]")
    assert len(stored) <= ERROR_MESSAGE_BYTES and len(stored) >= ERROR_MESSAGE_BYTES - 1  # a 2-byte char fits or not
    assert message.startswith(error.message.removesuffix("... [cut: 6000 bytes]"))


def test_a_long_type_is_cut_too_and_a_message_at_the_bound_is_kept_whole(q: Queue) -> None:
    message = "m" * ERROR_MESSAGE_BYTES
    q.release(leased(q), now=1, error={"type": "T" * 1000, "message": message})
    error = last_error(q)
    assert error is not None and error.message == message
    assert error.type.endswith("... [cut: 1000 bytes]") and len(error.type) == ERROR_TYPE_BYTES


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=300), limit=st.integers(30, 400))
def test_cutting_keeps_the_longest_prefix_that_fits_beside_its_marker(text: str, limit: int) -> None:
    """`validate.cut_text`, against the rule stated plainly: whole characters, marker included, within `limit`."""
    size = len(text.encode("utf-8"))
    cut = cut_text(text, limit)
    if size <= limit:
        assert cut == text
        return
    marker = f"... [cut: {size} bytes]"
    kept = cut.removesuffix(marker)
    assert cut.endswith(marker) and text.startswith(kept)
    assert len(cut.encode("utf-8")) <= limit
    assert len((text[: len(kept) + 1] + marker).encode("utf-8")) > limit  # one more character would not fit


def test_lone_surrogates_are_written_as_their_escapes(q: Queue) -> None:
    q.release(leased(q), now=1, error={"type": "Os\udce9Error", "message": "file b'\\xe9': \udce9"})
    assert last_error(q) == LastError("Os\\udce9Error", "file b'\\xe9': \\udce9", 1, 1)


@settings(max_examples=60, deadline=None)
@given(text=st.text(max_size=3000), limit_type=st.text(min_size=1, max_size=400))
def test_any_text_is_stored_within_its_bounds_and_reads_back_the_same_after_reopening(
    tmp_path_factory: pytest.TempPathFactory, text: str, limit_type: str
) -> None:
    directory = tmp_path_factory.mktemp("q")
    with Queue(directory, sync=False, compact_bytes=None) as queue:
        queue.release(leased(queue), now=1, error={"type": limit_type, "message": text})
        error = last_error(queue)
        assert error is not None
        assert len(error.message.encode("utf-8")) <= ERROR_MESSAGE_BYTES
        assert len(error.type.encode("utf-8")) <= ERROR_TYPE_BYTES
        if len(text.encode("utf-8", "backslashreplace")) <= ERROR_MESSAGE_BYTES:
            assert error.message == text.encode("utf-8", "backslashreplace").decode("utf-8")
    with Queue(directory, sync=False, compact_bytes=None) as queue:
        assert last_error(queue) == error
        queue.compact()
    with Queue(directory, sync=False, compact_bytes=None) as queue:
        assert last_error(queue) == error


def test_beside_a_payload_at_the_frame_bound_the_error_is_cut_to_the_tight_bounds(q: Queue) -> None:
    largest = MAX_FRAME_BYTES - RECORD_WORST_CASE_EXTRA - len('"t""t"') - len('{"x":""}')
    q.put("t", {"x": "y" * largest})
    [lease] = q.reserve("w", now=0, lease_seconds=10)
    q.release(lease, now=1, error={"type": "\x01" * 100, "message": "\x01" * 2000})
    error = last_error(q)
    assert error is not None
    assert error.type.endswith("... [cut: 100 bytes]") and len(error.type) == 32
    assert error.message.endswith("... [cut: 2000 bytes]") and len(error.message) == 200
    q.compact()  # and the record, error and all, still fits one snapshot frame


# -- bad errors write nothing ----------------------------------------------------------------------

BAD_ERRORS: list[tuple[object, type[Exception]]] = [
    ("boom", TypeError),
    (["type", "message"], TypeError),
    (ValueError("boom"), TypeError),
    ({"type": "E"}, ValueError),
    ({"message": "m"}, ValueError),
    ({"type": "E", "message": "m", "at": 1}, ValueError),
    ({"type": "", "message": "m"}, ValueError),
    ({"type": 1, "message": "m"}, TypeError),
    ({"type": "E", "message": None}, TypeError),
    ({"type": "E", "message": b"m"}, TypeError),
    ({1: "E", "message": "m"}, ValueError),
]

CALLS: dict[str, Callable[[Queue, Lease, object], object]] = {
    "release": lambda q, lease, error: q.release(lease, now=1, error=error),  # type: ignore[arg-type]
    "fail": lambda q, lease, error: q.fail(lease, now=1, error=error),  # type: ignore[arg-type]
    "cancel": lambda q, lease, error: q.cancel(lease.task_id, error=error, now=1),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize(("error", "raised"), BAD_ERRORS, ids=[repr(e)[:30] for e, _ in BAD_ERRORS])
def test_a_bad_error_is_refused_and_writes_nothing(
    q: Queue, qdir: Path, call: str, error: object, raised: type[Exception]
) -> None:
    lease = leased(q)
    with nothing_written(q, qdir), pytest.raises(raised):
        CALLS[call](q, lease, error)
    assert q.get("t") == Task("t", "t", "leased", {"n": 1}, 0, 3, 1, 1, "w", 100, None)


def test_cancel_with_an_error_needs_now_and_a_bad_now_is_refused(q: Queue, qdir: Path) -> None:
    leased(q)
    with nothing_written(q, qdir):
        with pytest.raises(TypeError, match="needs now"):
            q.cancel("t", error=BAD_INPUT)
        with pytest.raises(ValueError):
            q.cancel("t", error=BAD_INPUT, now=-1)
        with pytest.raises(TypeError):
            q.cancel("t", now=1.5)  # type: ignore[arg-type]


def test_the_error_mapping_is_read_before_the_lock_is_taken(q: Queue) -> None:
    """A mapping's own code may call the queue: it runs before the call takes the lock (no ReentrantCall)."""

    class Calling(dict[str, str]):
        def keys(self) -> Any:
            q.stats()
            return super().keys()

    q.release(leased(q), now=1, error=Calling(BAD_INPUT))
    assert last_error(q) == LastError("ValueError", "bad input", 1, 1)


# -- fail is fenced like ack -------------------------------------------------------------------------


def test_fail_is_refused_for_a_token_that_no_longer_holds_its_task(q: Queue, qdir: Path) -> None:
    lease = leased(q)
    stale = [
        Lease("t", "other", 1),
        Lease("t", "w", 2),
        Lease("never", "w", 1),
    ]
    with nothing_written(q, qdir):
        for token in stale:
            with pytest.raises(StaleLease):
                q.fail(token, now=1, error=BAD_INPUT)
        with pytest.raises(StaleLease):
            q.fail(lease, now=100, error=BAD_INPUT)  # at the deadline: too late
        with pytest.raises(TypeError):
            q.fail(lease.to_dict(), now=1)  # type: ignore[arg-type]
    q.ack(lease, now=5)
    with nothing_written(q, qdir), pytest.raises(StaleLease):
        q.fail(lease, now=6)


def test_cancel_of_a_task_not_ready_or_leased_is_wrong_status_even_with_an_error(q: Queue, qdir: Path) -> None:
    q.fail(leased(q), now=1)
    with nothing_written(q, qdir), pytest.raises(WrongStatus):
        q.cancel("t", error=BAD_INPUT, now=2)


# -- durable: reopen, snapshots, and what older stores look like ----------------------------------


def test_the_last_error_survives_reopening_and_compaction(qdir: Path) -> None:
    with Queue(qdir, sync=False, compact_bytes=None) as q:
        q.release(leased(q), now=4, error=BAD_INPUT)
        leased(q, "u")
        q.reserve("w", now=200, lease_seconds=1)  # expires both leases: t's second, u's first
        expected = {task.task_id: task for task in q.tasks()}
        assert all(task.last_error is not None for task in expected.values())
    with Queue(qdir, sync=False, compact_bytes=None) as q:
        assert {task.task_id: task for task in q.tasks()} == expected
        q.compact()
    with Queue(qdir, sync=False, compact_bytes=None) as q:
        assert {task.task_id: task for task in q.tasks()} == expected


def test_a_snapshot_record_has_last_error_only_when_the_task_has_one(qdir: Path) -> None:
    with Queue(qdir, sync=False, compact_bytes=None) as q:
        q.release(leased(q), now=4, error=BAD_INPUT)
        q.put("plain", {})
        q.compact()
    [snapshot] = qdir.glob("snapshot-*.snap")
    data = snapshot.read_bytes()
    assert b'"key":"plain","max_attempts"' in data
    assert (
        b'"key":"t","last_error":{"at":4,"attempt":1,"message":"bad input","type":"ValueError"},"max_attempts"' in data
    )


def test_task_to_dict_shows_the_last_error_and_round_trips() -> None:
    task = Task("t", "t", "dead", {}, 0, 3, 1, 1, None, None, LastError("E", "m", 1, 2))
    plain = task.to_dict()
    assert plain["last_error"] == {"type": "E", "message": "m", "attempt": 1, "at": 2}
    assert Task(**json.loads(json.dumps(plain))) == task
    assert Task("t", "t", "ready", {}, 0, 3, 0, 0, None, None).to_dict()["last_error"] is None
    with pytest.raises(ValueError):
        LastError.from_dict({"type": "E", "message": "m", "attempt": 1})


#: What the version before the last error (commit 409e5c8) writes for `_old_calls`: the same bytes.
PREVIOUS_VERSION_DIGESTS = {
    "CURRENT": "43a9da9a730ed2713b5ad2616b0abf9d2ceadf841d4206b459fdad9f889558c0",
    "snapshot-00000000000000000010.snap": "b6c252a6ca23cc5aa2c5781e486846f24edf5e779d6a9bc805f99cf085716c5b",
    "wal-00000000000000000002.log": "ea71b10359e1220ce9a2c14e598991073bae14d889087283d2db1d5ab633147d",
}


def _old_calls(q: Queue) -> None:
    """Every call of the previous version but an expiry (which now records LeaseExpired), and a compaction."""
    q.put("t1", {"n": 1})
    q.put_many([{"task_id": f"t{i}", "payload": {"i": i}, "max_attempts": 2} for i in range(2, 6)])
    [a] = q.reserve("w1", now=100, lease_seconds=30)
    a = q.extend(a, now=110, lease_seconds=60)
    q.ack(a, now=120)
    b, c = q.reserve("w2", now=130, lease_seconds=30, limit=2)
    q.release(b, now=131, delay=5)
    q.cancel(c.task_id)
    q.redrive(c.task_id, available_at=200, extra_attempts=2)
    q.cancel("t5")
    q.compact()
    q.put("t6", {"after": "snapshot"})


def test_a_store_written_without_the_new_calls_is_byte_for_byte_the_previous_versions(qdir: Path) -> None:
    with Queue(qdir, sync=False, compact_bytes=None) as q:
        _old_calls(q)
    digests = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in qdir.iterdir() if p.name != "LOCK"}
    assert digests == PREVIOUS_VERSION_DIGESTS
    with Queue(qdir, sync=False, compact_bytes=None) as q:  # and it opens as before, with no last error anywhere
        assert all(task.last_error is None for task in q.tasks())


def test_fsck_replays_a_store_with_errors_and_fails_and_counts_its_tasks(qdir: Path, run_python: RunPython) -> None:
    with Queue(qdir, sync=False, compact_bytes=None) as q:
        q.release(leased(q, "a"), now=1, error=BAD_INPUT)
        q.fail(leased(q, "b"), now=2, error={"type": "KeyError", "message": "no handler"})
        q.put("c", {})
        q.cancel("c", error={"type": "Cancelled", "message": "by ops"}, now=3)
    result = run_python(["-m", "walqueue.format.fsck", "--replay", str(qdir)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "counts    ready 1, leased 0, completed 0, dead 2" in result.stdout
