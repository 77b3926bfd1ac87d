"""The replica's pure core: log objects, their digests, and the chain a restore follows."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from walqueue.backup import layout
from walqueue.backup.layout import ChainError, LogObject, SnapshotManifest


def _object(first: int, last: int, prev: str, frames: bytes, fence: int = 1) -> tuple[LogObject, bytes]:
    header = LogObject(1, first, last, fence, prev, layout.chain_digest(prev, frames), 5.0, len(frames))
    return header, layout.encode_log(header, frames)


def test_a_log_object_round_trips_and_is_named_by_its_first_and_last_sequence() -> None:
    root = layout.root_digest(1, None)
    header, data = _object(1, 3, root, b"frames")
    assert header.key.endswith("00000000000000000001-00000000000000000003-0000000001.wal")
    assert layout.decode_log(header.key, data) == (header, b"frames")


def test_a_partial_or_damaged_object_is_refused_by_digest() -> None:
    header, data = _object(1, 3, layout.root_digest(1, None), b"frames")
    with pytest.raises(ChainError, match="digest mismatch"):
        layout.decode_log(header.key, data[:-2])
    with pytest.raises(ChainError, match="digest mismatch"):
        layout.decode_log(header.key, data[:-1] + b"X")


def test_an_object_under_another_objects_name_is_refused() -> None:
    header, data = _object(1, 3, layout.root_digest(1, None), b"frames")
    with pytest.raises(ChainError, match="another object"):
        layout.decode_log(layout.log_key(1, 1, 4, 1), data)


def test_a_gap_is_refused_by_name() -> None:
    entries = [(1, 5, 1, "a"), (6, 9, 1, "b"), (12, 20, 1, "c")]
    with pytest.raises(ChainError, match=r"transactions 10\.\.11 are in no log object"):
        layout.resolve_chain(0, "x", entries)


def test_the_highest_fence_wins_and_a_lower_fence_never_follows_it() -> None:
    entries = [(1, 5, 1, "old-1"), (6, 8, 1, "old-2"), (6, 7, 2, "new-1"), (8, 9, 1, "old-3"), (8, 10, 2, "new-2")]
    assert layout.resolve_chain(0, "x", entries) == ["old-1", "new-1", "new-2"]


@given(st.lists(st.integers(min_value=1, max_value=5), min_size=0, max_size=30))
def test_any_cut_of_a_log_resolves_to_the_whole_chain(sizes: list[int]) -> None:
    entries, first = [], 1
    for number, size in enumerate(sizes):
        entries.append((first, first + size - 1, 1, f"k{number}"))
        first += size
    chain = layout.resolve_chain(0, "x", list(reversed(entries)))
    assert chain == [key for *_, key in entries]
    assert layout.head_of(0, [layout.log_key(1, 1, first - 1, 1)] if chain else []) == first - 1


def test_a_manifest_round_trips_and_is_checked_against_its_key() -> None:
    manifest = SnapshotManifest(2, 40, 100, "ab" * 32, 38, "cd" * 32, 7.5, 3)
    key = layout.manifest_key(2, 40)
    assert SnapshotManifest.from_bytes(key, manifest.to_bytes()) == manifest
    with pytest.raises(ChainError, match="another snapshot"):
        SnapshotManifest.from_bytes(layout.manifest_key(2, 41), manifest.to_bytes())
