"""file://: objects as files, written atomically, with conditional puts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from walqueue.backup.stores import FileStore, PreconditionFailed, UsageError, open_store


def test_put_get_list_delete(tmp_path: Path) -> None:
    store = FileStore(str(tmp_path / "r"))
    etag = store.put("a/b.json", b"one")
    assert store.get("a/b.json") == (b"one", etag)
    assert store.list("a/") == ["a/b.json"]
    store.delete("a/b.json")
    assert store.get("a/b.json") is None
    store.delete("a/b.json")  # gone already: nothing


def test_if_none_match_refuses_an_existing_key(tmp_path: Path) -> None:
    store = FileStore(str(tmp_path / "r"))
    store.put("k", b"first", if_none_match=True)
    with pytest.raises(PreconditionFailed):
        store.put("k", b"second", if_none_match=True)
    assert store.get("k") is not None and store.get("k")[0] == b"first"  # type: ignore[index]


def test_if_match_replaces_only_the_object_that_was_read(tmp_path: Path) -> None:
    store = FileStore(str(tmp_path / "r"))
    etag = store.put("k", b"v1")
    newer = store.put("k", b"v2", if_match=etag)
    with pytest.raises(PreconditionFailed):
        store.put("k", b"v3", if_match=etag)
    assert store.get("k") == (b"v2", newer)


def test_no_temporary_file_is_left_and_none_is_listed(tmp_path: Path) -> None:
    store = FileStore(str(tmp_path / "r"))
    store.put("k", b"v", if_none_match=True)
    with pytest.raises(PreconditionFailed):
        store.put("k", b"w", if_none_match=True)
    assert sorted(os.listdir(tmp_path / "r")) == ["k"]


def test_a_key_that_could_leave_the_replica_is_refused(tmp_path: Path) -> None:
    store = FileStore(str(tmp_path / "r"))
    for key in ("../x", "/abs", "a/../../x", "a//b", ""):
        with pytest.raises(ValueError, match="not a replica key"):
            store.put(key, b"v")
    assert not (tmp_path / "x").exists()


def test_urls_are_checked(tmp_path: Path) -> None:
    assert isinstance(open_store(f"file://{tmp_path}/r"), FileStore)
    for url in ("ftp://x/y", "file://host/path", "s3://", "/plain/path"):
        with pytest.raises(UsageError):
            open_store(url)
