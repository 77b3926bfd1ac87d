"""A put's time and the previous version: a store without it is byte for byte; the old reader refuses it by name.

As tests/engine/test_lanes_old_reader.py, against the main branch's head
before put times (`PREVIOUS`), taken from git and run in a child interpreter.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_lanes_old_reader import assert_same_files_as_previous, open_in_previous, sources_of

from walqueue import Queue

#: The main branch's head before put times: the previous version's reader.
PREVIOUS = "e8a61b1"


@pytest.fixture(scope="module")
def previous(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sources_of(PREVIOUS, tmp_path_factory.mktemp("previous"))


def test_a_store_without_put_times_is_byte_for_byte_the_previous_versions(previous: Path, tmp_path: Path) -> None:
    assert_same_files_as_previous(previous, tmp_path / "old", tmp_path / "new")


def test_the_previous_reader_refuses_a_stamped_put_by_name(previous: Path, tmp_path: Path) -> None:
    store = tmp_path / "q"
    with Queue(store, sync=False) as q:
        q.put("a", {}, put_at=1_000)
    done = open_in_previous(previous, store)
    assert done.stdout.startswith("CorruptStore") and "put_at" in done.stdout, done.stdout
    with Queue(store, sync=False) as q:  # compacted, the put time is spent: the snapshot keeps only the due time
        q.compact()
    done = open_in_previous(previous, store, then=f"print(Queue({str(store)!r}, sync=False).get('a'))")
    assert done.stdout.startswith("opened") and "available_at=1000" in done.stdout, done.stdout
