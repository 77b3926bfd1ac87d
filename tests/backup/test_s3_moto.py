"""s3:// against a real S3 endpoint on 127.0.0.1: moto's server, signed requests, conditional writes."""

from __future__ import annotations

import socket
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
        assert not second.tick() and "is leased to" in (second.fatal or "")
        first.stop()
        second.stop()


def test_an_unreachable_endpoint_is_store_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    store = open_store("s3://nobody/x", endpoint=f"http://127.0.0.1:{_free_port()}", region="us-east-1")
    with pytest.raises(StoreUnavailable):
        store.get("lease.json")
