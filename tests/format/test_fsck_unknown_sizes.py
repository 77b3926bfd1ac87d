"""fsck's text never prints a size it does not know ("None bytes"): it says what it could not do."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_fsck_unreadable_files import refuse_to_open, store_with_snapshot

from walqueue.format import wal_name
from walqueue.format.fsck import check
from walqueue.format.fsck.render import render_text
from walqueue.format.fsck.report import LeftoverSummary


def test_an_unreadable_segment_is_said_to_be_unreadable_not_none_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = store_with_snapshot(tmp_path / "q")
    refuse_to_open(monkeypatch, wal_name(2))
    text = render_text(check(store))
    assert "None" not in text
    [line] = [line for line in text.splitlines() if line.startswith("  segment") and wal_name(2) in line]
    assert "could not be read" in line and "size is unknown" in line and "no frame verified" in line


def test_a_leftover_whose_size_is_unknown_says_so(tmp_path: Path) -> None:
    report = check(store_with_snapshot(tmp_path / "q"))
    report.leftover_segments.append(LeftoverSummary(wal_name(1), 1, None))
    text = render_text(report)
    assert "None" not in text and "size unknown" in text
