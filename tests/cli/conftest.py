"""The fixtures of the server tests: a short directory (a socket path has 108 bytes), a server in it, a client of it,
and `flaky`: a `FlakyServer` (tests/support/servers.py) on a real queue, with a client of it.

`test_serve.py` overrides `server` with a short write timeout of its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support.servers import FlakyServer, ServerProcess, running_server, short_directory
from walqueue import Queue
from walqueue.client import Client


@pytest.fixture
def place() -> Iterator[Path]:
    with short_directory() as path:
        yield path


@pytest.fixture
def server(place: Path) -> Iterator[ServerProcess]:
    with running_server(place / "q", place / "s") as running:
        yield running


@pytest.fixture
def client(server: ServerProcess) -> Iterator[Client]:
    with Client(server.socket_path, timeout=30, reconnect_seconds=5) as connected:
        yield connected


@pytest.fixture
def flaky(place: Path, tmp_path: Path) -> Iterator[tuple[FlakyServer, Client]]:
    with Queue(tmp_path / "q", sync=False) as queue:
        server = FlakyServer(str(place / "flaky"), queue)
        try:
            with Client(str(place / "flaky"), timeout=30, reconnect_seconds=5) as flaky_client:
                yield server, flaky_client
        finally:
            server.close()
