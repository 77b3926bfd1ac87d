"""The replicator beside the writer: what it ships, the hold, faults, the lease, resume, sync mode."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from backup_helpers import Clock, FaultyStore, file_store, replicate_once, restore_to, snapshot_of
from backup_helpers import put_tasks as _put

from walqueue import Queue
from walqueue.backup import Replicator
from walqueue.backup.layout import ChainError
from walqueue.backup.restore import make_plan
from walqueue.format.names import list_directory


def test_every_durable_transaction_is_shipped_and_a_restore_equals_the_store(tmp_path: Path) -> None:
    store = file_store(tmp_path)
    with Queue(tmp_path / "q") as queue:
        replicator = Replicator(queue, store, snapshot_interval=0)
        _put(queue, 0, 30)
        lease = queue.reserve("w", now=1, lease_seconds=30)[0]
        queue.ack(lease, now=2)
        assert replicator.tick()
        queue.compact()
        _put(queue, 30, 10)
        assert replicator.tick()
        expected = snapshot_of(queue)
        last = queue.last_seq
        replicator.stop()
    restored = restore_to(store, str(tmp_path / "restored"))
    assert restored == {"last_seq": last, "tasks": expected}


def test_a_later_snapshot_lets_a_restore_start_there(tmp_path: Path) -> None:
    store, clock = file_store(tmp_path), Clock()
    with Queue(tmp_path / "q") as queue:
        replicator = Replicator(queue, store, snapshot_interval=10, clock=clock)
        _put(queue, 0, 20)
        replicator.tick()
        queue.compact()
        clock.now += 11
        _put(queue, 20, 5)
        replicator.tick()
        expected = snapshot_of(queue)
        replicator.stop()
    plan = make_plan(store)
    assert plan.snapshot.seq == 20
    assert restore_to(store, str(tmp_path / "r"))["tasks"] == expected


def test_compaction_keeps_a_segment_until_it_is_shipped(tmp_path: Path) -> None:
    store = file_store(tmp_path)
    with Queue(tmp_path / "q") as queue:
        replicator = Replicator(queue, store)
        replicator.tick()  # begins the generation: the hold is set
        _put(queue, 0, 5)
        queue.compact()
        assert 1 in list_directory(str(tmp_path / "q")).segments  # unshipped: held
        replicator.tick()
        queue.compact()
        assert 1 not in list_directory(str(tmp_path / "q")).segments  # shipped: deleted
        replicator.stop()


def test_store_faults_are_retried_and_nothing_is_lost(tmp_path: Path) -> None:
    store, clock = FaultyStore(file_store(tmp_path)), Clock()
    with Queue(tmp_path / "q") as queue:
        replicator = Replicator(queue, store, clock=clock)
        _put(queue, 0, 5)
        store.fail_puts = 2
        assert not replicator.tick()
        assert replicator.status()["state"] == "retrying"
        assert not replicator.tick()
        store.partial_next = True
        assert not replicator.tick()
        assert replicator.tick()
        status = replicator.status()
        assert status["failures"] == 3 and status["lag_transactions"] == 0 and status["state"] == "ok"
        expected = snapshot_of(queue)
        replicator.stop()
    assert restore_to(store.inner, str(tmp_path / "r"))["tasks"] == expected


def test_a_long_outage_breaks_the_backup_loudly_then_a_new_generation_restarts_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, clock = FaultyStore(file_store(tmp_path)), Clock()
    with Queue(tmp_path / "q", compact_bytes=None) as queue:
        replicator = Replicator(queue, store, clock=clock, max_hold_bytes=2000)
        assert replicator.tick()
        store.down = True
        for minute in range(10):  # the store is down for ten (simulated) minutes; the queue keeps working
            clock.now += 60
            _put(queue, minute * 10, 10)
            replicator.tick()
            queue.compact()
        assert replicator.status()["broken"]
        assert "BACKUP BROKEN" in caplog.text
        assert replicator.seat.held is None  # the hold is released: the disk stays bounded
        store.down = False
        clock.now += 60
        assert replicator.tick()
        status = replicator.status()
        assert status["generation"] == 2 and not status["broken"]
        expected = snapshot_of(queue)
        replicator.stop()
    assert restore_to(store.inner, str(tmp_path / "r"))["tasks"] == expected


def test_a_second_replicator_is_refused_by_the_lease(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store, clock = file_store(tmp_path), Clock()
    with Queue(tmp_path / "a") as first_queue, Queue(tmp_path / "b") as second_queue:
        first = Replicator(first_queue, store, clock=clock)
        second = Replicator(second_queue, store, clock=clock)
        _put(first_queue, 0, 3)
        _put(second_queue, 100, 3)
        assert first.tick()
        assert not second.tick()
        assert second.status()["state"] == "waiting"  # the holder may be a crashed writer: its lease may expire
        for _ in range(5):  # but a live holder renews it: after two lifetimes the second one stops
            clock.now += 15
            assert first.tick()
            assert not second.tick()
        assert second.status()["state"] == "stopped"
        assert "is leased to" in (second.fatal or "")
        expected = snapshot_of(first_queue)
        first.stop()
        second.stop()
    assert restore_to(store, str(tmp_path / "r"))["tasks"] == expected


def test_a_replicator_that_lost_its_lease_stops_and_never_interleaves(tmp_path: Path) -> None:
    store, clock = file_store(tmp_path), Clock()
    with Queue(tmp_path / "q") as queue:
        old = Replicator(queue, store, clock=clock, lease_seconds=30)
        _put(queue, 0, 3)
        assert old.tick()
        clock.now += 31  # the old holder stalls past its lease
        new = Replicator(queue, store, clock=clock)
        _put(queue, 3, 3)
        assert new.tick()
        _put(queue, 6, 3)
        assert not old.tick()
        assert old.status()["state"] == "stopped" and "taken by another" in (old.fatal or "")
        assert new.tick()
        expected = snapshot_of(queue)
        new.stop()
        old.stop()
    assert restore_to(store, str(tmp_path / "r"))["tasks"] == expected


def test_a_restart_resumes_where_the_replica_ends(tmp_path: Path) -> None:
    store = file_store(tmp_path)
    replicate_once(store, tmp_path / "q", 0, 3)
    again = replicate_once(store, tmp_path / "q", 3, 3)
    assert again["shipped"] and again["status"]["generation"] == 1
    assert restore_to(store, str(tmp_path / "r"))["tasks"] == again["tasks"]


def test_a_store_restored_to_an_earlier_point_starts_a_new_lineage_and_uploads(tmp_path: Path) -> None:
    """Litestream #781: after a restore, replication must not silently upload nothing."""
    store = file_store(tmp_path)
    replicate_once(store, tmp_path / "q", 0, 10)
    restore_to(store, str(tmp_path / "back"), to_seq=4)
    after = replicate_once(store, tmp_path / "back", 500, 3)  # sequences 5..7 again, with other contents
    assert after["shipped"] and after["status"]["generation"] == 2
    restored = restore_to(store, str(tmp_path / "again"))
    assert restored["tasks"] == after["tasks"] and "t500" in restored["tasks"]


def test_a_store_restored_to_the_head_resumes_the_same_lineage(tmp_path: Path) -> None:
    store = file_store(tmp_path)
    replicate_once(store, tmp_path / "q", 0, 10)
    restore_to(store, str(tmp_path / "back"))
    after = replicate_once(store, tmp_path / "back", 10, 2)
    assert after["shipped"] and after["status"]["generation"] == 1 and after["status"]["shipped_seq"] == 12


def test_sync_mode_answers_only_after_the_replica_has_the_transaction(tmp_path: Path) -> None:
    store = file_store(tmp_path)
    with Queue(tmp_path / "q") as queue:
        replicator = Replicator(queue, store, sync=True, interval=60).start()
        for number in range(5):
            queue.put(f"s{number}", {})
            assert replicator.head >= queue.last_seq
        with queue.batch():
            queue.put("b1", {})
            queue.put("b2", {})
        assert replicator.head >= queue.last_seq
        replicator.stop()


def test_a_lease_left_by_a_writer_that_died_elsewhere_is_taken_once_it_expires(tmp_path: Path) -> None:
    store, clock = file_store(tmp_path), Clock()
    with Queue(tmp_path / "a") as old_queue, Queue(tmp_path / "b") as new_queue:
        dead = Replicator(old_queue, store, clock=clock)
        _put(old_queue, 0, 2)
        assert dead.tick()  # then its host is gone: nobody renews
        successor = Replicator(new_queue, store, clock=clock)
        _put(new_queue, 0, 3)
        assert not successor.tick() and successor.status()["state"] == "waiting"
        clock.now += 31
        assert successor.tick() and successor.status()["state"] == "ok"
        expected = snapshot_of(new_queue)
        successor.stop()
    assert restore_to(store, str(tmp_path / "r"))["tasks"] == expected


def test_the_thread_ships_within_the_interval(tmp_path: Path) -> None:
    store = file_store(tmp_path)
    with Queue(tmp_path / "q") as queue:
        replicator = Replicator(queue, store, interval=0.05).start()
        _put(queue, 0, 3)
        for _ in range(200):
            if replicator.head >= queue.last_seq:
                break
            import time

            time.sleep(0.01)
        assert replicator.head == queue.last_seq
        replicator.stop()


def test_a_restore_refuses_a_gap_by_name(tmp_path: Path) -> None:
    store = file_store(tmp_path)
    replicate_once(store, tmp_path / "q", 0, 5, object_bytes=1)  # one log object per transaction
    doomed = [key for key in store.list("generations/") if "-00000000000000000003-" in key]
    store.delete(doomed[0])
    with pytest.raises(ChainError, match=r"transactions 3\.\.3 are in no log object"):
        make_plan(store)
    assert not os.path.exists(tmp_path / "r")


logging.getLogger("walqueue.backup").setLevel(logging.INFO)


def test_an_upload_whose_answer_was_lost_is_not_taken_for_another_writer(tmp_path: Path) -> None:
    store, clock = FaultyStore(file_store(tmp_path)), Clock()
    with Queue(tmp_path / "q") as queue:
        replicator = Replicator(queue, store, clock=clock)
        _put(queue, 0, 2)
        store.lose_answer_next = True
        assert not replicator.tick()
        clock.now += 5  # the retry is cut later: another upload time in the same object
        assert replicator.tick()
        assert replicator.fatal is None and replicator.status()["state"] == "ok"
        expected = snapshot_of(queue)
        replicator.stop()
    assert restore_to(store.inner, str(tmp_path / "r"))["tasks"] == expected


def test_a_restarted_writer_takes_its_own_lease_over_at_once(tmp_path: Path) -> None:
    store, clock = file_store(tmp_path), Clock()
    with Queue(tmp_path / "q") as queue:
        crashed = Replicator(queue, store, clock=clock)
        _put(queue, 0, 2)
        assert crashed.tick()  # then the process dies: its lease is still live
        restarted = Replicator(queue, store, clock=clock)
        _put(queue, 2, 2)
        assert restarted.tick()
        assert restarted.status()["fence"] == crashed.status()["fence"] + 1
        restarted.stop()


def test_a_partial_object_at_the_end_of_the_chain_is_as_good_as_absent(tmp_path: Path) -> None:
    store = FaultyStore(file_store(tmp_path))
    with Queue(tmp_path / "q") as queue:
        replicator = Replicator(queue, store)
        _put(queue, 0, 3)
        assert replicator.tick()
        _put(queue, 3, 2)
        store.partial_next = True
        assert not replicator.tick()  # and the writer dies here: the damaged object stays
    assert restore_to(store.inner, str(tmp_path / "r"))["last_seq"] == 3


def test_sync_answers_stop_waiting_once_a_failing_store_outlasts_the_grace(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, clock = FaultyStore(file_store(tmp_path)), Clock()
    with Queue(tmp_path / "q") as queue:
        replicator = Replicator(queue, store, clock=clock, sync=True, sync_grace=60)
        assert replicator.tick()
        store.down = True
        queue.put("a", {})  # not started: nothing waits yet
        replicator.tick()
        clock.now += 30
        replicator.tick()
        assert replicator.status()["state"] == "retrying"
        clock.now += 31
        replicator.tick()
        assert replicator.status()["broken"] and "synchronous answers waited" in caplog.text
        replicator.wait_shipped(queue.last_seq)  # returns at once: broken
        store.down = False
        # Nothing was compacted away meanwhile: the local log still holds all after the generation's end,
        # so it goes on (a compaction in between would begin generation 2 from a fresh snapshot).
        assert replicator.tick() and replicator.status()["generation"] == 1
        assert "the store answers again; generation 1 goes on" in caplog.text
        expected = snapshot_of(queue)
        replicator.stop()
    assert restore_to(store.inner, str(tmp_path / "r"))["tasks"] == expected


def test_a_stop_while_the_store_fails_does_not_wait_for_it(tmp_path: Path) -> None:
    store = FaultyStore(file_store(tmp_path))
    with Queue(tmp_path / "q") as queue:
        replicator = Replicator(queue, store)
        assert replicator.tick()
        store.down = True
        queue.put("a", {})
        assert not replicator.tick()
        calls = store.attempts
        replicator.stop()
        assert store.attempts == calls  # no last upload, no lease release tried against a failing store


def test_a_replica_with_a_gap_is_never_continued(tmp_path: Path) -> None:
    store = file_store(tmp_path)
    replicate_once(store, tmp_path / "q", 0, 4, object_bytes=1)
    store.delete(next(key for key in store.list("generations/") if "-00000000000000000002-" in key))
    with Queue(tmp_path / "q") as queue:
        replicator = Replicator(queue, store)
        _put(queue, 4, 1)
        assert replicator.tick() and replicator.status()["generation"] == 2
        expected = snapshot_of(queue)
        replicator.stop()
    assert restore_to(store, str(tmp_path / "r"))["tasks"] == expected


def test_a_restart_after_a_shipped_snapshot_resumes_without_taking_its_own_manifest_for_another_writer(
    tmp_path: Path,
) -> None:
    store = file_store(tmp_path)
    with Queue(tmp_path / "q") as queue:
        replicator = Replicator(queue, store, snapshot_interval=0)
        _put(queue, 0, 5)
        assert replicator.tick()
        queue.compact()
        assert replicator.tick()  # the snapshot at 5 goes up too
        replicator.stop()
    again = replicate_once(store, tmp_path / "q", 5, 2, snapshot_interval=0)
    assert again["shipped"], again["status"]["last_error"]
    assert again["status"]["generation"] == 1
    assert restore_to(store, str(tmp_path / "r"))["tasks"] == again["tasks"]


def test_a_slow_upload_never_holds_up_the_writer_and_the_lag_shows_it(tmp_path: Path) -> None:
    """Asynchronous mode: the replicator reads and uploads outside the writer's lock; the writer never waits."""
    import threading
    import time

    store = FaultyStore(file_store(tmp_path))
    store.stall = threading.Event()
    with Queue(tmp_path / "q") as queue:
        replicator = Replicator(queue, store, interval=0.01).start()
        _put(queue, 0, 1)
        while replicator.head < queue.last_seq:
            time.sleep(0.01)
        store.stall.set()  # the next upload hangs, as on a saturated link, until the test lets it go
        attempts = store.attempts
        _put(queue, 1, 1)
        while store.attempts == attempts:  # the log object's upload has begun, and hangs
            time.sleep(0.01)
        _put(queue, 2, 50)  # 50 durable puts while the upload hangs: none waits for it
        status = replicator.status()
        assert status["lag_transactions"] >= 50 and status["state"] in ("ok", "starting")
        store.stall.clear()
        deadline = time.monotonic() + 30
        while replicator.head < queue.last_seq and time.monotonic() < deadline:
            time.sleep(0.01)
        assert replicator.status()["lag_transactions"] == 0
        expected = snapshot_of(queue)
        replicator.stop()
    assert restore_to(store.inner, str(tmp_path / "r"))["tasks"] == expected


def test_a_restart_resumes_a_generation_that_holds_its_snapshot_alone_without_uploading_it_again(
    tmp_path: Path,
) -> None:
    store = file_store(tmp_path)
    with Queue(tmp_path / "q") as queue:
        _put(queue, 0, 5)
        queue.compact()
    first = replicate_once(store, tmp_path / "q", 5, 0)  # generation 1 begins at the snapshot at 5
    again = replicate_once(store, tmp_path / "q", 5, 2)
    assert first["status"]["generation"] == again["status"]["generation"] == 1
    assert len([key for key in store.list("generations/") if key.endswith(".snap")]) == 1
    assert restore_to(store, str(tmp_path / "r"))["tasks"] == again["tasks"]


def test_a_generation_whose_snapshot_is_no_longer_the_stores_is_not_continued(tmp_path: Path) -> None:
    store = file_store(tmp_path)
    with Queue(tmp_path / "q") as queue:
        _put(queue, 0, 5)
        queue.compact()
    replicate_once(store, tmp_path / "q", 5, 0)
    with Queue(tmp_path / "q") as queue:  # written and compacted with no replicator: nothing to compare with
        _put(queue, 5, 3)
        queue.compact()
    again = replicate_once(store, tmp_path / "q", 8, 1)
    assert again["status"]["generation"] == 2
    assert restore_to(store, str(tmp_path / "r"))["tasks"] == again["tasks"]
