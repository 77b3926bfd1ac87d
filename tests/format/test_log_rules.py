"""The live-range and sequence rules that recovery and fsck share (walqueue.format.log_rules)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from walqueue.format.errors import CorruptStore
from walqueue.format.log_rules import SequenceRule, live_segments


@given(st.sets(st.integers(1, 40)), st.integers(1, 45), st.booleans())
def test_live_segments_sort_every_number_and_name_every_gap(numbers: set[int], first_live: int, current: bool) -> None:
    found = live_segments(sorted(numbers), first_live, has_current=current)
    assert found.leftovers == sorted(n for n in numbers if n < first_live)
    assert found.live == sorted(n for n in numbers if n >= first_live)
    missing = set()
    for first, last in found.missing:
        assert first <= last
        missing.update(range(first, last + 1))
    top = max(found.live, default=first_live - 1)
    assert missing == set(range(first_live, top + 1)) - numbers
    assert found.first_missing == (not found.live and (current or bool(numbers)))
    assert found.new_store == (not numbers and not current)


def test_a_run_may_start_inside_the_snapshot_but_not_past_it() -> None:
    rule = SequenceRule(snapshot_seq=5)
    for seq in (3, 4, 5, 6, 7):
        rule.check(seq, "wal", 0)
    assert rule.last == 7
    with pytest.raises(CorruptStore, match="sequence 9 where 8 was expected"):
        rule.check(9, "wal", 10)
    with pytest.raises(CorruptStore, match="sequence 7 follows snapshot 5: a gap"):
        SequenceRule(snapshot_seq=5).check(7, "wal", 0)


def test_a_resync_forgets_continuity_and_the_anchor() -> None:
    rule = SequenceRule(snapshot_seq=0)
    rule.check(1, "wal", 0)
    rule.resync()
    rule.check(10, "wal", 50)  # after damage, any sequence starts a new run
    assert rule.last == 10
    rule.check(11, "wal", 60)


def test_a_log_that_ends_before_the_snapshot_cannot_be_continued() -> None:
    rule = SequenceRule(snapshot_seq=5)
    rule.check(2, "wal", 0)
    rule.check(3, "wal", 9)
    with pytest.raises(CorruptStore, match="ends at sequence 3, before the snapshot's 5"):
        rule.check_end("wal")
    SequenceRule(snapshot_seq=5).check_end("wal")  # no frame at all: nothing to continue from


@given(st.lists(st.integers(0, 12), max_size=12), st.integers(0, 6))
def test_check_accepts_exactly_the_contiguous_runs(seqs: list[int], snapshot_seq: int) -> None:
    rule = SequenceRule(snapshot_seq)
    accepted = []
    for seq in seqs:
        try:
            rule.check(seq, "wal", 0)
        except CorruptStore:
            break
        accepted.append(seq)
    if accepted:
        assert accepted[0] <= snapshot_seq + 1
        assert accepted == list(range(accepted[0], accepted[0] + len(accepted)))
    if len(accepted) < len(seqs):
        nxt = seqs[len(accepted)]
        assert (nxt > snapshot_seq + 1) if not accepted else nxt != accepted[-1] + 1
