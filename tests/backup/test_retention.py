"""Retention applied by the replicator (``--replicate-retain``): after each new snapshot, by the lease holder only."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from backup_helpers import Clock, FaultyStore, file_store, put_tasks, restore_to, snapshot_of

from walqueue import Queue
from walqueue.backup import Replicator, layout
from walqueue.backup.restore import make_plan


def _manifest_seqs(store: FaultyStore) -> list[int]:
    return sorted(m[1] for key in store.list(layout.GENERATIONS) if (m := layout.parse_manifest_key(key)) is not None)


def _round(queue: Queue, clock: Clock, first: int) -> None:
    """Five puts, a compaction (a new snapshot to upload), 100 simulated seconds."""
    put_tasks(queue, first, 5)
    queue.compact()
    clock.now += 100


@contextlib.contextmanager
def _replicating(tmp_path: Path, rounds: int, **options: Any) -> Iterator[tuple[Queue, Replicator, FaultyStore, Clock]]:
    """A queue and its replicator (a snapshot every 100 s) after `rounds` rounds, each ending in a tick."""
    store, clock = FaultyStore(file_store(tmp_path)), Clock()
    with Queue(tmp_path / "q") as queue:
        replicator = Replicator(queue, store, snapshot_interval=100, clock=clock, **options)
        assert replicator.tick()
        for number in range(rounds):
            _round(queue, clock, number * 5)
            assert replicator.tick()
        yield queue, replicator, store, clock
        replicator.stop()


def test_the_replicator_deletes_only_what_no_kept_snapshots_chain_needs(tmp_path: Path) -> None:
    with _replicating(tmp_path, 6, retain=250) as (queue, replicator, store, _):
        head, expected = replicator.head, snapshot_of(queue)
        # The snapshots of the last 250 s (uploaded at +400, +500, +600) and the newest before (+300).
        assert _manifest_seqs(store) == [15, 20, 25, 30]
        assert replicator.status()["objects_deleted"] > 0
        for key in store.list(layout.GENERATIONS):
            manifest = layout.parse_manifest_key(key)
            if manifest is not None:  # every kept snapshot's chain runs unbroken to the head
                uploaded = make_plan(store, to_seq=manifest[1]).snapshot.uploaded
                assert make_plan(store, to_time=uploaded).head == head
    assert restore_to(store, str(tmp_path / "r"))["tasks"] == expected
    assert restore_to(store, str(tmp_path / "r15"), to_seq=16)["last_seq"] == 16


def test_without_retention_the_replicator_deletes_nothing(tmp_path: Path) -> None:
    with _replicating(tmp_path, 4) as (_, _, store, _):
        pass
    assert _manifest_seqs(store) == [0, 5, 10, 15, 20]


def test_a_replicator_whose_lease_is_taken_mid_pass_deletes_nothing_more(tmp_path: Path) -> None:
    """The lease is checked before every deletion: once a rival holds it, the old holder stops at once."""
    deleted: list[str] = []
    with _replicating(tmp_path, 2, lease_seconds=30) as (queue, old, store, clock):
        rival = Replicator(queue, store.inner, clock=clock, lease_seconds=30)

        def takeover(key: str) -> None:
            deleted.append(key)
            if len(deleted) == 1:  # the old holder stalls past its lease; a rival takes the replica over
                clock.now += 31
                assert rival.tick()

        store.on_delete = takeover
        old.retain = 150
        _round(queue, clock, 10)
        assert not old.tick()
        assert old.status()["state"] == "stopped" and "taken by another" in (old.fatal or "")
        assert len(deleted) == 1
        put_tasks(queue, 15, 3)
        assert rival.tick()
        expected = snapshot_of(queue)
        rival.stop()
    assert restore_to(store.inner, str(tmp_path / "r"))["tasks"] == expected


def test_a_failed_retention_pass_is_tried_again_at_the_next_tick(tmp_path: Path) -> None:
    with _replicating(tmp_path, 2, retain=150) as (queue, replicator, store, clock):
        store.on_delete = lambda key: setattr(store, "down", True)  # the store fails after the first deletion
        _round(queue, clock, 10)
        assert not replicator.tick()
        assert replicator.status()["state"] == "retrying"
        store.down, store.on_delete = False, None
        clock.now += 1
        assert replicator.tick()
        assert _manifest_seqs(store) == [5, 10, 15]


def test_walqueue_serve_passes_its_retention_to_the_replicator(tmp_path: Path) -> None:
    import argparse

    from walqueue.backup.serving import add_replicate_arguments, check_replicate_arguments, start_replicator

    parser = argparse.ArgumentParser()
    add_replicate_arguments(parser)
    arguments = parser.parse_args(["--replicate", f"file://{tmp_path}/replica", "--replicate-retain", "7d"])
    assert check_replicate_arguments(arguments) is None
    with Queue(tmp_path / "q") as queue:
        replicator = start_replicator(queue, arguments)
        assert replicator is not None and replicator.retain == 7 * 86400
        replicator.stop()
