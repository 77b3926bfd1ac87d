"""Running `walqueue-serve` as a real process for the server tests, always under timeouts.

Socket paths must stay under the 108-byte `sun_path` limit, so they live in
a short temporary directory, not in pytest's (long) tmp_path.
"""

from __future__ import annotations

import json
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from support.children import child_environment
from walqueue import Queue
from walqueue.protocol.requests import LineReader, encode_answer, respond

START_TIMEOUT = 30.0
STOP_TIMEOUT = 30.0
ANSWER_TIMEOUT = 30.0


@contextmanager
def short_directory() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="wq-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class ServerProcess:
    """One `python -m walqueue.serve DIR --socket PATH`; `ready` once it printed its line."""

    def __init__(self, directory: Path | str, socket_path: Path | str, *options: str) -> None:
        self.directory = Path(directory)
        self.socket_path = str(socket_path)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "walqueue.serve", str(directory), "--socket", self.socket_path, *options],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_environment(),
        )
        self.ready_line = ""

    def wait_ready(self) -> ServerProcess:
        assert self.process.stdout is not None
        readable, _, _ = select.select([self.process.stdout], [], [], START_TIMEOUT)
        if not readable:
            self.kill()
            raise AssertionError("the server printed no line in time")
        self.ready_line = self.process.stdout.readline().decode()
        if not self.ready_line:
            _, err = self.process.communicate(timeout=STOP_TIMEOUT)
            raise AssertionError(f"the server exited {self.process.returncode}: {err.decode()}")
        return self

    def exit_status(self, timeout: float = STOP_TIMEOUT) -> tuple[int, str]:
        _, err = self.process.communicate(timeout=timeout)
        return self.process.returncode, err.decode()

    def terminate(self) -> tuple[int, str]:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.exit_status()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.communicate(timeout=STOP_TIMEOUT)


@contextmanager
def running_server(directory: Path | str, socket_path: Path | str, *options: str) -> Iterator[ServerProcess]:
    server = ServerProcess(directory, socket_path, *options).wait_ready()
    try:
        yield server
    finally:
        server.kill()


@contextmanager
def served_store(*options: str) -> Iterator[ServerProcess]:
    """A walqueue-serve on a fresh store (``q``) in a short directory (its socket ``s``), ready; killed after."""
    with short_directory() as place, running_server(place / "q", place / "s", *options) as server:
        yield server


class RawConnection:
    """A socket speaking the protocol by hand: lines out, answers in, with timeouts."""

    def __init__(self, socket_path: str, timeout: float = ANSWER_TIMEOUT) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(socket_path)
        self.buffer = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request(self, request: dict[str, Any]) -> dict[str, Any]:
        self.send(json.dumps(request).encode() + b"\n")
        return self.answer()

    def answer_line(self) -> bytes:
        while b"\n" not in self.buffer:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionResetError(f"closed with {self.buffer!r} unanswered")
            self.buffer += data
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def answer(self) -> dict[str, Any]:
        answer: dict[str, Any] = json.loads(self.answer_line())
        return answer

    def read_until_closed(self, seconds: float = 30.0) -> None:
        """Read (and drop) what the server still sends until it closes the connection, within `seconds`."""
        self.sock.settimeout(seconds)
        deadline = time.monotonic() + seconds
        while True:
            try:
                if not self.sock.recv(2**20):
                    return
            except ConnectionResetError:
                return
            assert time.monotonic() < deadline, "the server kept the connection open"

    def closed_by_server(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()


def serve_command(directory: Path | str, socket_path: Path | str, *options: str) -> Sequence[str]:
    return [sys.executable, "-m", "walqueue.serve", str(directory), "--socket", str(socket_path), *options]


__all__ = [
    "ANSWER_TIMEOUT",
    "FlakyServer",
    "RawConnection",
    "ServerProcess",
    "running_server",
    "serve_command",
    "served_store",
    "short_directory",
]


class FlakyServer:
    """Runs each request on `queue`, then drops the connection instead of answering when told to."""

    def __init__(self, path: str, queue: Queue) -> None:
        self.queue = queue
        self.drop_ops: set[str] = set()
        self.drops_left = 0
        self.executed: list[str] = []
        self.requests: list[dict[str, Any]] = []  # every request as the server received it
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(16)
        self.listener.settimeout(0.1)
        self.stopping = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stopping:
            try:
                connection, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection: socket.socket) -> None:
        reader = LineReader()
        connection.settimeout(30)
        with connection:
            while data := connection.recv(65536):
                for line in reader.feed(data):
                    assert isinstance(line, bytearray)
                    reply = respond(line, self.queue)
                    request = json.loads(line)
                    op = request["op"]
                    self.executed.append(op)
                    self.requests.append(request)
                    if op in self.drop_ops and self.drops_left > 0:
                        self.drops_left -= 1
                        connection.shutdown(socket.SHUT_RDWR)
                        return
                    connection.sendall(encode_answer(reply.answer))

    def drop_next(self, *ops: str, times: int = 1) -> None:
        self.drop_ops = set(ops)
        self.drops_left = times

    def close(self) -> None:
        self.stopping = True
        self.thread.join(10)
        self.listener.close()
