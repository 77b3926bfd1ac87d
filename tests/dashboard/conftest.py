"""Fixtures of the dashboard tests: a real queue, its dashboard (read-only or acting), and one served over HTTP.

`served` runs the dashboard on wsgiref in its own thread, the way
walqueue-serve runs it, for tests that speak real HTTP; `place` is a short
directory for a real walqueue-serve's store and socket.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from dashboard_helpers import NOW

from support.servers import short_directory
from walqueue import Queue
from walqueue.dashboard import Dashboard, RunningServer, serve_in_thread


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[Queue]:
    with Queue(tmp_path / "q", sync=False) as opened:
        opened.set_clock(1)  # these tests count seconds (NOW): the store says so, as every tool reads it
        yield opened


@pytest.fixture
def app(queue: Queue) -> Dashboard:
    return Dashboard(queue, clock=lambda: NOW)


@pytest.fixture
def acting(queue: Queue) -> Dashboard:
    return Dashboard(queue, actions=True, clock=lambda: NOW)


@pytest.fixture
def served(acting: Dashboard) -> Iterator[RunningServer]:
    running = serve_in_thread(acting, "127.0.0.1", 0)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def place() -> Iterator[Path]:
    """A short directory under /tmp (a socket path holds 108 bytes), removed after."""
    with short_directory() as path:
        yield path
