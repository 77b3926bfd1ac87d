"""Snapshots stream to and from the replica: memory stays a few pieces, whatever the snapshot's size.

Measured with tracemalloc around the upload (the replicator's first tick, which
ships the snapshot) and around the restore, against file:// and against a moto
server in a child process (so that only this process's allocations count).
"""

from __future__ import annotations

import hashlib
import io
import os
import socket
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from backup_helpers import file_store, snapshot_of

from walqueue import Queue
from walqueue.backup import Replicator
from walqueue.backup.layout import ChainError
from walqueue.backup.objectstore import CHUNK_BYTES, Tally
from walqueue.backup.restore import execute, make_plan
from walqueue.backup.stores import ObjectStore, StoreUnavailable
from walqueue.format.current import read_current
from walqueue.format.directory import StoreDirectory

#: Tasks of ~60 kB each: a snapshot of about 15 MB, fifteen pieces.
TASKS = 256


def _big_store(path: Path) -> tuple[Queue, int]:
    """An open queue whose published snapshot is many pieces long; and that snapshot's size."""
    queue = Queue(path)
    with queue.batch():
        for number in range(TASKS):
            queue.put(f"t{number}", {"blob": os.urandom(30_000).hex()})
    queue.compact()
    directory = StoreDirectory.open(str(path))
    try:
        current = read_current(directory)
    finally:
        directory.close()
    assert current is not None and current.size > 12 * CHUNK_BYTES
    return queue, current.size


def _peak(action: Callable[[], Any]) -> int:
    """The most memory Python held at once during `action`, above what it held before."""
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _round_trip(store: ObjectStore, tmp_path: Path) -> None:
    queue, size = _big_store(tmp_path / "q")
    try:
        replicator = Replicator(queue, store)
        assert _peak(replicator.tick) < size / 4
        expected = snapshot_of(queue)
        replicator.stop()
    finally:
        queue.close()
    plan = make_plan(store)
    assert plan.snapshot.size == size
    assert _peak(lambda: execute(store, plan, str(tmp_path / "r"))) < size / 4
    with Queue(tmp_path / "r", create=False) as restored:
        assert snapshot_of(restored) == expected


def test_a_snapshot_goes_to_file_and_back_in_bounded_memory(tmp_path: Path) -> None:
    _round_trip(file_store(tmp_path), tmp_path)


def test_a_damaged_snapshot_is_refused_as_it_streams_and_nothing_is_left(tmp_path: Path) -> None:
    store = file_store(tmp_path)
    queue, _ = _big_store(tmp_path / "q")
    with queue:
        Replicator(queue, store).stop()
    plan = make_plan(store)
    [key] = [k for k in store.list("generations/") if k.endswith(".snap")]
    damaged = bytearray(store.get(key)[0])  # type: ignore[index]
    damaged[len(damaged) // 2] ^= 1
    store.delete(key)
    store.put(key, bytes(damaged))
    with pytest.raises(ChainError, match="missing or damaged"):
        execute(store, plan, str(tmp_path / "r"))
    assert sorted(os.listdir(tmp_path)) == ["q", "replica"]


def test_file_store_streams_a_file_in_and_out(tmp_path: Path) -> None:
    store = file_store(tmp_path)
    data = os.urandom(3 * CHUNK_BYTES + 17)
    etag = store.put_file("a/b.snap", io.BytesIO(data), len(data), if_none_match=True)
    assert store.get("a/b.snap") == (data, etag)
    pieces: list[bytes] = []
    assert store.read_into("a/b.snap", pieces.append)
    assert b"".join(pieces) == data and max(map(len, pieces)) <= CHUNK_BYTES
    assert not store.read_into("a/none.snap", pieces.append)
    with pytest.raises(StoreUnavailable, match="short"):
        store.put_file("a/c.snap", io.BytesIO(data[:10]), len(data))
    assert store.list("a/") == ["a/b.snap"]


# -- S3: a moto server in a child process, parts of 1 MiB (its floor lowered as S3's 5 MiB would hide the bound)


@pytest.fixture(scope="module")
def child_moto() -> Iterator[str]:
    pytest.importorskip("moto.server")
    pytest.importorskip("boto3")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    env = {**os.environ, "S3_UPLOAD_PART_MIN_SIZE": str(256 * 1024)}
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    pytest.fail("the moto server did not start")
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(30)


@pytest.fixture
def s3_store(child_moto: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> ObjectStore:
    import boto3  # type: ignore[import-untyped]

    from walqueue.backup.s3 import S3Store

    for name, value in (("AWS_ACCESS_KEY_ID", "t"), ("AWS_SECRET_ACCESS_KEY", "t"), ("AWS_REGION", "us-east-1")):
        monkeypatch.setenv(name, value)
    bucket = "s-" + request.node.name.replace("_", "-")[:40].lower()
    boto3.client("s3", endpoint_url=child_moto, region_name="us-east-1").create_bucket(Bucket=bucket)
    return S3Store(bucket, "q", endpoint=child_moto, region="us-east-1", part_bytes=CHUNK_BYTES)


def test_a_snapshot_goes_to_s3_in_parts_and_back_in_bounded_memory(s3_store: ObjectStore, tmp_path: Path) -> None:
    _round_trip(s3_store, tmp_path)


def test_a_multipart_upload_is_conditional_and_leaves_nothing_when_it_fails(s3_store: ObjectStore) -> None:
    from walqueue.backup.stores import PreconditionFailed

    data = os.urandom(3 * CHUNK_BYTES + 5)
    s3_store.put_file("x.snap", io.BytesIO(data), len(data), if_none_match=True)
    with pytest.raises(PreconditionFailed):
        s3_store.put_file("x.snap", io.BytesIO(data[::-1]), len(data), if_none_match=True)
    tally = Tally()
    assert s3_store.read_into("x.snap", tally) and tally.matches(len(data), hashlib.sha256(data).hexdigest())
    with pytest.raises(StoreUnavailable, match="short"):
        s3_store.put_file("y.snap", io.BytesIO(data[: 2 * CHUNK_BYTES]), len(data))
    assert s3_store.list("") == ["x.snap"]
