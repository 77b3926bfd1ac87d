"""The ids a snapshot lists: kept in order cheaply, and never sorted all at once under the queue's lock.

The rule (docs/DECISIONS.md, "Compaction never stalls a call"): freezing
the state for a snapshot takes time independent of the number of tasks; the
ids created since the last snapshot are sorted by the snapshot's thread in
short runs, with a pause between two runs, and merged lazily. Whatever the
run length, the snapshot lists every task once, in task-id order, as it was
at the frozen sequence.
"""

from __future__ import annotations

import gc
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walqueue.engine import compaction
from walqueue.engine.compaction import SnapshotSource
from walqueue.engine.ops import plan_puts, put_op
from walqueue.engine.state import State, apply


def _put(state: State, source: SnapshotSource, task_ids: list[str]) -> None:
    """Commit puts of `task_ids` the way `Queue` does, telling `source` what they created."""
    plan, _ = plan_puts(state, [put_op(task_id, {"n": 1}) for task_id in task_ids])
    if not plan.ops:
        return
    source.before_change(plan.ops, state.tasks)
    source.created(apply(state, {"seq": state.last_seq + 1, "ops": plan.ops}, _planned=True))


def _listed(frozen: compaction.FrozenState, pauses: list[int] | None = None) -> list[str]:
    def pause() -> None:
        if pauses is not None:
            pauses.append(1)

    return [json.loads(record)["task"] for record in frozen.record_json(pause)]


def test_freezing_leaves_the_new_ids_unsorted_for_the_snapshot_thread() -> None:
    state = State()
    source = SnapshotSource(state)
    created = ["m", "c", "x", "a"]
    _put(state, source, created)
    frozen = source.freeze(state)
    assert frozen.new == created  # the order they came in: no sort happened under the lock
    assert _listed(frozen) == sorted(created)


def test_the_snapshot_thread_sorts_new_ids_in_short_runs_with_pauses_between(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compaction, "SORT_RUN", 3)
    state = State()
    source = SnapshotSource(state)
    _put(state, source, [f"old-{n:02d}" for n in range(5)])
    source.thaw(source.freeze(state), written=False)  # an abandoned snapshot keeps them new
    _put(state, source, [f"id-{n:02d}" for n in reversed(range(10))])
    frozen = source.freeze(state)
    pauses: list[int] = []
    listed = _listed(frozen, pauses)
    assert listed == sorted(state.tasks)
    assert len(pauses) >= 5  # one after each of the 5 runs of at most 3 ids


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(st.lists(st.text("abcdef", min_size=1, max_size=4), max_size=12), min_size=1, max_size=5),
    run=st.integers(1, 6),
    written=st.lists(st.booleans(), min_size=5, max_size=5),
)
def test_every_snapshot_lists_each_task_once_in_order_whatever_the_run_length(
    batches: list[list[str]], run: int, written: list[bool]
) -> None:
    original = compaction.SORT_RUN
    compaction.SORT_RUN = run
    try:
        state = State()
        source = SnapshotSource(state)
        for batch, keep in zip(batches, written, strict=False):
            _put(state, source, list(dict.fromkeys(batch)))
            frozen = source.freeze(state)
            listed = _listed(frozen)
            assert listed == sorted(state.tasks)
            source.thaw(frozen, written=keep)
    finally:
        compaction.SORT_RUN = original


def test_the_ordered_ids_are_short_tuples_the_collector_untracks(monkeypatch: pytest.MonkeyPatch) -> None:
    # A list of every id is walked item by item by each collection that sees it (tens of ms at a million).
    monkeypatch.setattr(compaction, "ID_CHUNK", 32)
    state = State()
    source = SnapshotSource(state)
    _put(state, source, [f"id-{n:04d}" for n in range(500)])
    source = SnapshotSource(state)  # as opening builds it
    _put(state, source, [f"new-{n:04d}" for n in reversed(range(300))])
    frozen = source.freeze(state)
    assert _listed(frozen) == sorted(state.tasks)
    source.thaw(frozen, written=True)
    for chunks in (source._sorted, SnapshotSource(state)._sorted):
        assert [task_id for chunk in chunks for task_id in chunk] == sorted(state.tasks)
        assert all(type(chunk) is tuple and len(chunk) < 32 + 16 for chunk in chunks)
        gc.collect()
        assert not any(gc.is_tracked(chunk) for chunk in chunks)


@pytest.mark.parametrize("written", [True, False])
def test_a_thawed_snapshot_frees_what_it_no_longer_needs_piece_by_piece(
    monkeypatch: pytest.MonkeyPatch, written: bool
) -> None:
    monkeypatch.setattr(compaction, "ID_CHUNK", 16)
    state = State()
    source = SnapshotSource(state)
    _put(state, source, [f"id-{n:03d}" for n in range(200)])
    frozen = source.freeze(state)
    _listed(frozen)
    _put(state, source, [f"after-{n:03d}" for n in range(100)])  # pre-images kept while frozen
    source.thaw(frozen, written=written)  # under the queue's lock: nothing freed there
    assert frozen.retired and frozen.new == [] and frozen.results == {}
    steps: list[int] = []
    frozen.release(lambda: steps.append(1))
    assert frozen.retired == []
    assert len(steps) >= 200 // 16 if written else len(steps) >= 3
    assert _listed(source.freeze(state)) == sorted(state.tasks)  # what the source keeps is intact
