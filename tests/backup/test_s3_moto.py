"""s3:// against a real S3 endpoint on 127.0.0.1: moto's server, signed requests, conditional writes."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from backup_helpers import restore_to, snapshot_of

from walqueue import Queue
from walqueue.backup import Replicator
from walqueue.backup.stores import PreconditionFailed, StoreUnavailable, open_store

moto_server = pytest.importorskip("moto.server")
boto3 = pytest.importorskip("boto3")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    port = _free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


@pytest.fixture
def s3_env(endpoint: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> str:
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    bucket = "b-" + request.node.name.replace("_", "-")[:40].lower()
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    return f"s3://{bucket}/queues/one"


def test_conditional_writes_hold_on_a_real_endpoint(s3_env: str) -> None:
    store = open_store(s3_env)
    etag = store.put("k", b"v1", if_none_match=True)
    with pytest.raises(PreconditionFailed):
        store.put("k", b"v2", if_none_match=True)
    newer = store.put("k", b"v3", if_match=etag)
    with pytest.raises(PreconditionFailed):
        store.put("k", b"v4", if_match=etag)
    assert store.get("k") == (b"v3", newer)
    assert store.list("") == ["k"]
    store.delete("k")
    assert store.get("k") is None


def test_replicate_to_s3_and_restore(s3_env: str, tmp_path: Path) -> None:
    with Queue(tmp_path / "q") as queue:
        replicator = Replicator(queue, s3_env, snapshot_interval=0)
        for number in range(20):
            queue.put(f"t{number}", {"n": number})
        assert replicator.tick()
        queue.compact()
        queue.put("late", {})
        assert replicator.tick()
        expected = snapshot_of(queue)
        replicator.stop()
    assert restore_to(open_store(s3_env), str(tmp_path / "r"))["tasks"] == expected


def test_two_replicators_on_one_bucket_prefix(s3_env: str, tmp_path: Path) -> None:
    with Queue(tmp_path / "a") as a, Queue(tmp_path / "b") as b:
        first, second = Replicator(a, s3_env), Replicator(b, s3_env)
        a.put("x", {})
        assert first.tick()
        assert not second.tick() and second.status()["state"] == "waiting"
        assert "is leased to" in (second.status()["last_error"] or "")
        first.stop()
        second.stop()


def test_an_unreachable_endpoint_is_store_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    store = open_store("s3://nobody/x", endpoint=f"http://127.0.0.1:{_free_port()}", region="us-east-1")
    with pytest.raises(StoreUnavailable):
        store.get("lease.json")


class FaultProxy:
    """A TCP proxy between boto3 and moto: passes, resets, answers 500, or stalls, per connection."""

    def __init__(self, endpoint: str) -> None:
        self.target = int(endpoint.rsplit(":", 1)[1])
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.mode = "pass"
        self.delay = 0.0
        self.live: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def set(self, mode: str, delay: float = 0.0) -> None:
        self.mode, self.delay = mode, delay
        for sock in self.live:  # kept-alive connections see the new mode too
            with contextlib.suppress(OSError):
                sock.close()
        self.live.clear()

    def close(self) -> None:
        self.set("pass")
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        mode, delay = self.mode, self.delay
        if mode == "reset":
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()
            return
        if mode == "500":
            with contextlib.suppress(OSError):
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            conn.close()
            return
        if delay:
            time.sleep(delay)
        upstream = socket.create_connection(("127.0.0.1", self.target))
        self.live += [conn, upstream]
        threading.Thread(target=self._pump, args=(upstream, conn), daemon=True).start()
        self._pump(conn, upstream)

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.close()


@pytest.fixture
def proxied(s3_env: str, endpoint: str) -> Iterator[tuple[FaultProxy, str]]:
    proxy = FaultProxy(endpoint)
    yield proxy, s3_env
    proxy.close()


@pytest.mark.parametrize(("mode", "delay"), [("500", 0.0), ("reset", 0.0), ("pass", 2.0)], ids=["500", "reset", "slow"])
def test_s3_faults_are_retried_and_nothing_is_lost(
    proxied: tuple[FaultProxy, str], tmp_path: Path, mode: str, delay: float
) -> None:
    from walqueue.backup.s3 import S3Store

    proxy, url = proxied
    bucket, prefix = url[len("s3://") :].split("/", 1)
    store = S3Store(bucket, prefix, endpoint=proxy.url, region="us-east-1", timeout=0.5, attempts=1)
    with Queue(tmp_path / "q") as queue:
        replicator = Replicator(queue, store)
        queue.put("before", {})
        assert replicator.tick()
        proxy.set(mode, delay)
        queue.put("during", {})
        assert not replicator.tick()
        status = replicator.status()
        assert status["state"] == "retrying" and status["failures"] == 1 and status["lag_transactions"] == 1
        proxy.set("pass")
        assert replicator.tick()
        expected = snapshot_of(queue)
        replicator.stop()
    assert restore_to(open_store(url), str(tmp_path / "r"))["tasks"] == expected
