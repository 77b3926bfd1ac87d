"""walqueue-serve killed and restarted between a handler's end and its completion: the outcome is still recorded.

A relay between the worker's client and the server passes every line on,
except the first completion (``ack``, ``ack_many``, ``fail`` or
``release``): at that one it SIGKILLs the server, before passing the line
on or after the server answered it, starts a new server on the same store
and socket, and closes the worker's connection. The worker's client has
sent the call and lost its answer; the worker sends it again (resend.py),
so the handler's error is recorded (never ``LeaseExpired``) and an ack is
not lost (the handler runs once). No timing is asserted: every wait is for
a state, bounded only so that a broken worker fails instead of hanging.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from walqueue.client import Client
from walqueue.worker import Context, Job, Permanent, Worker

pytestmark = pytest.mark.timeout(180)

WAIT = 60.0  # seconds: only a broken worker takes this long
COMPLETIONS = frozenset({"ack", "ack_many", "fail", "release", "complete"})


class Restarting:
    """A walqueue-serve on `store` and `path` that `restart()` SIGKILLs and starts again."""

    def __init__(self, store: Path, path: Path, env: dict[str, str]) -> None:
        self.store, self.path, self.env = store, path, env
        self.server = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        command = [sys.executable, "-m", "walqueue.serve", str(self.store), "--socket", str(self.path)]
        server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.env)
        give_up = time.monotonic() + WAIT
        while True:  # answering: a killed server's socket file stays until the new one replaces it
            assert server.poll() is None and time.monotonic() < give_up, "walqueue-serve did not start"
            try:
                with Client(str(self.path), timeout=WAIT, reconnect_seconds=0) as probe:
                    probe.stats()
                return server
            except OSError:
                time.sleep(0.02)

    def restart(self) -> None:
        self.server.kill()
        self.server.wait(WAIT)
        self.server = self._start()

    def stop(self) -> None:
        self.server.kill()
        self.server.wait(WAIT)


class Relay(socketserver.ThreadingUnixStreamServer):
    """Lines from clients on `path` to the server and back; the first completion cut as `mode` says."""

    daemon_threads = True

    def __init__(self, path: Path, serving: Restarting, mode: str) -> None:
        self.serving, self.mode = serving, mode
        self.cut_op: str | None = None
        super().__init__(str(path), _Connection)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        try:
            self._pass_on(client)
        except OSError:  # a connection to the server the restart killed: the client's closes too
            pass

    def _pass_on(self, client: socket.socket) -> None:
        with client, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
            server.connect(str(self.serving.path))
            requests, answers = client.makefile("rb"), server.makefile("rb")
            for line in requests:
                op = json.loads(line).get("op")
                cut = self.cut_op is None and op in COMPLETIONS
                if cut and self.mode == "before":  # sent, never applied
                    self.cut_op = op
                    self.serving.restart()
                    return
                server.sendall(line)
                answer = answers.readline()
                if cut:  # applied, its answer lost
                    self.cut_op = op
                    self.serving.restart()
                    return
                client.sendall(answer)

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class _Connection(socketserver.BaseRequestHandler):
    """One client's connection, relayed by its server (`Relay`)."""

    server: Relay

    def handle(self) -> None:
        self.server._relay(self.request)


@pytest.fixture(params=["before", "after"], ids=["killed-before-applying", "killed-after-applying"])
def relayed(request: pytest.FixtureRequest, src_pythonpath: str) -> Iterator[tuple[Relay, Path, Path]]:
    """The relay, its socket (the worker's) and the server's (to read the store directly)."""
    place = Path(tempfile.mkdtemp(prefix="wq-", dir="/tmp"))
    serving = Restarting(place / "q", place / "s", dict(os.environ, PYTHONPATH=src_pythonpath))
    relay = Relay(place / "r", serving, request.param)
    try:
        yield relay, place / "r", place / "s"
    finally:
        relay.close()
        serving.stop()
        shutil.rmtree(place, ignore_errors=True)


def _run_until(socket_path: Path, handle: object, done: object) -> dict[str, int]:
    """A worker on the relay until `done(client)`; its stats once stopped."""
    with Client(str(socket_path), timeout=WAIT) as client:
        worker = Worker(client, handle, concurrency=1, lease=60_000, grace=1_000)  # type: ignore[arg-type]
        worker.start()
        try:
            give_up = time.monotonic() + WAIT
            while not done(client):  # type: ignore[operator]
                assert time.monotonic() < give_up, "the task never settled"
                time.sleep(0.02)
        finally:
            worker.stop()
            assert worker.wait(WAIT)
        return worker.stats()


def _settled(client: Client) -> bool:
    try:
        task = client.get("t")
    except OSError:
        return False
    return task is not None and task.status in ("completed", "dead")


@pytest.mark.parametrize("error", [Permanent("no such mailbox"), RuntimeError("smtp: 421")], ids=["fail", "release"])
def test_a_failure_recorded_across_a_server_restart(relayed: tuple[Relay, Path, Path], error: Exception) -> None:
    relay, path, served = relayed
    with Client(str(path), timeout=WAIT) as client:
        client.put("t", {}, max_attempts=1)  # a release of its only attempt makes it dead too

    def handle(job: Job, context: Context) -> None:
        raise error

    stats = _run_until(path, handle, _settled)
    assert relay.cut_op in ("fail", "release")
    with Client(str(served)) as direct:
        task = direct.get("t")
    assert task is not None and task.status == "dead" and task.last_error is not None
    assert (task.last_error.type, task.last_error.message) == (type(error).__name__, str(error))
    assert stats["dead"] == 1 and stats.get("lost", 0) == 0, stats


def test_an_ack_across_a_server_restart_is_not_lost(relayed: tuple[Relay, Path, Path]) -> None:
    relay, path, served = relayed
    with Client(str(path), timeout=WAIT) as client:
        client.put("t", {})
    runs: list[int] = []

    def handle(job: Job, context: Context) -> None:
        runs.append(job.attempts)

    stats = _run_until(path, handle, _settled)
    assert relay.cut_op in ("ack", "ack_many")
    with Client(str(served)) as direct:
        task = direct.get("t")
    assert task is not None and task.status == "completed"
    assert runs == [1] and stats["completed"] == 1 and stats.get("lost", 0) == 0, stats
