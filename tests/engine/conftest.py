"""Fixtures shared by the engine's API tests: a fresh directory and a queue on it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from walqueue import Queue


@pytest.fixture
def qdir(tmp_path: Path) -> Path:
    """A queue directory that does not exist yet (Queue creates it)."""
    return tmp_path / "queue"


@pytest.fixture
def q(qdir: Path) -> Iterator[Queue]:
    """An open queue without fsync or automatic compaction: fast, and every frame stays in the WAL."""
    queue = Queue(qdir, sync=False, compact_bytes=None)
    yield queue
    queue.close()
