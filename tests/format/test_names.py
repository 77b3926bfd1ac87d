"""File names (CONTRACT §3): exactly `wal-` + 20 digits + `.log` and `snapshot-` + 20 digits + `.snap`.

Strict parsing is what keeps a stray file (a backup, a hand-made copy) from
ever being read as part of the log.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walqueue.format import (
    CURRENT_NAME,
    CURRENT_TMP_NAME,
    LOCK_NAME,
    list_directory,
    parse_snapshot_name,
    parse_wal_name,
    snapshot_name,
    wal_name,
)

MAX_NUMBER = 10**20 - 1


def test_wal_and_snapshot_names_have_twenty_zero_padded_digits() -> None:
    assert wal_name(1) == "wal-00000000000000000001.log"
    assert wal_name(MAX_NUMBER) == "wal-99999999999999999999.log"
    assert snapshot_name(0) == "snapshot-00000000000000000000.snap"
    assert snapshot_name(1234) == "snapshot-00000000000000001234.snap"
    assert (CURRENT_NAME, CURRENT_TMP_NAME, LOCK_NAME) == ("CURRENT", "CURRENT.tmp", "LOCK")


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=1, max_value=MAX_NUMBER))
def test_wal_names_round_trip(number: int) -> None:
    assert parse_wal_name(wal_name(number)) == number
    assert parse_snapshot_name(wal_name(number)) is None


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=MAX_NUMBER))
def test_snapshot_names_round_trip(seq: int) -> None:
    assert parse_snapshot_name(snapshot_name(seq)) == seq
    assert parse_wal_name(snapshot_name(seq)) is None


@pytest.mark.parametrize("number", [0, -1, 10**20, True, 1.0, "1"])
def test_wal_name_refuses_what_is_not_a_segment_number(number: object) -> None:
    with pytest.raises(ValueError):
        wal_name(number)  # type: ignore[arg-type]


@pytest.mark.parametrize("seq", [-1, 10**20, False, 0.0])
def test_snapshot_name_refuses_what_is_not_a_sequence(seq: object) -> None:
    with pytest.raises(ValueError):
        snapshot_name(seq)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "name",
    [
        "wal-1.log",
        "wal-00000000000000000000.log",  # segment numbers start at 1
        "wal-0000000000000000001.log",  # 19 digits
        "wal-000000000000000000001.log",  # 21 digits
        "wal-00000000000000000001.log.bak",
        "wal-00000000000000000001.log.tmp",
        "wal-00000000000000000001.LOG",
        "WAL-00000000000000000001.log",
        "wal-00000000000000000001.log\n",
        " wal-00000000000000000001.log",
        "xwal-00000000000000000001.log",
        "wal-0000000000000000000１.log",  # a fullwidth digit one (U+FF11)
        "wal-0000000000000000000١.log",  # an Arabic-Indic digit one (U+0661)
        "wal-+0000000000000000001.log",
        "wal-0000000000000000000_1.log",
        "wal- 0000000000000000001.log",
        "wal-00000000000000000001.snap",
        "snapshot-00000000000000000001.snap",
        "snapshot-00000000000000000001.log",
        "wal-00000000000000000001",
        "",
    ],
)
def test_parse_wal_name_refuses_near_misses(name: str) -> None:
    assert parse_wal_name(name) is None


@pytest.mark.parametrize(
    "name",
    [
        "snapshot-1.snap",
        "snapshot-0000000000000000001.snap",  # 19 digits
        "snapshot-000000000000000000001.snap",  # 21 digits
        "snapshot-00000000000000000001.snap.tmp",
        "snapshot-00000000000000000001.snap.bak",
        "SNAPSHOT-00000000000000000001.snap",
        "snapshot-00000000000000000001.SNAP",
        "snapshot-0000000000000000000１.snap",  # fullwidth digit
        "wal-00000000000000000001.snap",  # a snapshot name with the wal prefix
        "wal-00000000000000000001.log",
        "../snapshot-00000000000000000001.snap",
        "dir/snapshot-00000000000000000001.snap",
        "snapshot-00000000000000000001.snap\n",
        "",
    ],
)
def test_parse_snapshot_name_refuses_near_misses(name: str) -> None:
    assert parse_snapshot_name(name) is None


def test_list_directory_sorts_every_entry_by_kind(tmp_path: Path) -> None:
    names = [
        "LOCK",
        "CURRENT",
        "CURRENT.tmp",
        wal_name(1),
        wal_name(2),
        wal_name(10),
        snapshot_name(7),
        snapshot_name(9) + ".tmp",
        "wal-1.log",
        "wal-00000000000000000003.log.bak",
        "notes.txt",
    ]
    for name in names:
        (tmp_path / name).write_bytes(b"")
    listing = list_directory(tmp_path)
    assert listing.segments == {1: wal_name(1), 2: wal_name(2), 10: wal_name(10)}
    assert listing.segment_numbers == [1, 2, 10]
    assert listing.snapshots == {7: snapshot_name(7)}
    assert sorted(listing.temps) == ["CURRENT.tmp", snapshot_name(9) + ".tmp"]
    assert listing.has_current and listing.has_lock
    assert sorted(listing.others) == ["notes.txt", "wal-00000000000000000003.log.bak", "wal-1.log"]


def test_list_directory_of_an_empty_directory_finds_nothing(tmp_path: Path) -> None:
    listing = list_directory(tmp_path)
    assert listing.segments == {} and listing.snapshots == {} and listing.temps == [] and listing.others == []
    assert not listing.has_current and not listing.has_lock
