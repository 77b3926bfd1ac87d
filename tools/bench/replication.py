"""replication (alias m): durable puts with continuous backup (async and sync, file:// and S3) and restore.

The same durable single puts as put_durable, to a queue with no replicator,
with an asynchronous replicator (interval 1 s) to file:// and to S3 (moto's
ThreadedMotoServer on 127.0.0.1, when moto and boto3 are installed), and
with a synchronous one (each answer waits for its log object), the
asynchronous and the synchronous ones in two phases, each with its own
queue without replication to compare with. Then the
restore of a store of `restore_tasks` tasks (a snapshot) plus `restore_tx`
transactions from file://, against reopening that store from local disk.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from walqueue import Queue
from walqueue.backup import Replicator
from walqueue.backup.restore import execute, make_plan
from walqueue.backup.stores import FileStore, ObjectStore, open_store

from .figures import backends_block, figure, per_op, speed_ratio, time_ratio
from .harness import Context, warm_puts
from .inputs import PAYLOAD_BYTES, puts
from .timing import Clock, Times, clock, interleave, put_chunk, since

#: `put_reps`: the puts' repetitions, more than the run's `reps` (which the restores use): a chunk is
#: short and cheap, and a shared disk's fsync times swing several-fold between chunks.
SCALES: dict[str, dict[str, int]] = {
    "tiny": {"chunk": 3, "put_reps": 3, "restore_tasks": 2_000, "restore_tx": 200},
    "default": {"chunk": 12, "put_reps": 31, "restore_tasks": 100_000, "restore_tx": 10_000},
    "big": {"chunk": 30, "put_reps": 41, "restore_tasks": 1_000_000, "restore_tx": 100_000},
}


def _moto() -> tuple[Any, str] | None:
    try:
        import boto3  # type: ignore[import-untyped]
        from moto.server import ThreadedMotoServer
    except ImportError:
        return None
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server logs every request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    for name, value in (
        ("AWS_ACCESS_KEY_ID", "bench"),
        ("AWS_SECRET_ACCESS_KEY", "bench"),
        ("AWS_REGION", "us-east-1"),
    ):
        os.environ.setdefault(name, value)
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket="bench")
    return server, endpoint


def _phase(ctx: Context, stores: dict[str, tuple[ObjectStore | None, bool]], reps: int, k: int) -> Times:
    """Interleaved chunks of `k` durable puts to a queue per store (None: no replicator), `reps` times."""
    queues = {name: Queue(ctx.dir(f"m-{name}")) for name in stores}
    replicators = [
        Replicator(queues[name], store, sync=sync).start() for name, (store, sync) in stores.items() if store
    ]
    try:
        for queue in queues.values():
            warm_puts(queue, "warm")
        inputs = [puts("m", rep * k, k) for rep in range(reps)]
        return interleave({name: put_chunk(queue, inputs) for name, queue in queues.items()}, reps)
    finally:
        for replicator in replicators:
            replicator.stop()
        for queue in queues.values():
            queue.close()


def _puts(ctx: Context) -> dict[str, Any]:
    """Two phases, each against its own queue without replication: asynchronous, then synchronous.

    Apart, because a synchronous replicator's uploads (an fsync and a directory fsync per answer on
    file://) leave the disk busy into whatever chunk runs next; in one rotation that chunk is always
    the same backend's, which would charge the asynchronous figures with the synchronous ones' I/O.
    """
    s = ctx.scale
    k, reps = s["chunk"], s["put_reps"]
    moto = _moto()
    phases: list[dict[str, tuple[ObjectStore | None, bool]]] = [
        {"plain": (None, False), "async_file": (FileStore(str(ctx.dir("m-replica-async"))), False)},
        {"plain_sync_phase": (None, False), "sync_file": (FileStore(str(ctx.dir("m-replica-sync"))), True)},
    ]
    if moto is not None:
        phases[0]["async_s3"] = (open_store("s3://bench/async", endpoint=moto[1]), False)
        phases[1]["sync_s3"] = (open_store("s3://bench/sync", endpoint=moto[1]), True)
    try:
        measured = [_phase(ctx, stores, reps, k) for stores in phases]
    finally:
        if moto is not None:
            moto[0].stop()
    times = Times([name for phase in measured for name in phase.wall])
    for phase in measured:
        times.wall.update(phase.wall)
        times.cpu.update(phase.cpu)
    per = per_op(times, k, "wall")
    ratios = {
        "async_file_vs_plain": figure(speed_ratio(per, "async_file", "plain"), "x", target=(">=", 0.9)),
        "sync_file_vs_plain": figure(
            speed_ratio(per, "sync_file", "plain_sync_phase"), "x", note="reported, no target"
        ),
    }
    if moto is not None:
        ratios["async_s3_vs_plain"] = figure(speed_ratio(per, "async_s3", "plain"), "x", target=(">=", 0.9))
        ratios["sync_s3_vs_plain"] = figure(
            speed_ratio(per, "sync_s3", "plain_sync_phase"), "x", note="reported, no target"
        )
    return {"times": times, "k": k, "ratios": ratios}


def _restore(ctx: Context) -> dict[str, list[float]]:
    """Seconds to restore, and to reopen the same store, per repetition."""
    s = ctx.scale
    source = ctx.dir("m-source")
    store = FileStore(str(ctx.dir("m-replica-restore")))
    with Queue(source, compact_bytes=None) as queue:
        with queue.batch():
            for tid, body in puts("r", 0, s["restore_tasks"]):
                queue.put(tid, body)
        queue.compact()
        replicator = Replicator(queue, store)
        replicator.tick()
        with queue.batch():
            for tid, body in puts("x", 0, s["restore_tx"]):
                queue.put(tid, body)
        replicator.stop()
    restore_seconds, reopen_seconds = [], []
    for rep in range(s["reps"]):
        target = ctx.root / f"m-restored-{rep}"
        start: Clock = clock()
        execute(store, make_plan(store), str(target))
        with Queue(target, create=False) as restored:
            restored.last_seq  # noqa: B018 - opened: the restore is usable
        restore_seconds.append(since(start)[0])
        start = clock()
        with Queue(source, create=False) as reopened:
            reopened.last_seq  # noqa: B018
        reopen_seconds.append(since(start)[0])
    return {"restore": restore_seconds, "reopen": reopen_seconds}


def run(ctx: Context) -> dict[str, Any]:
    measured = _puts(ctx)
    restore = _restore(ctx)
    ratios = measured["ratios"]
    ratios["restore_vs_reopen"] = figure(
        time_ratio({"restore": restore["restore"], "reopen": restore["reopen"]}, "restore", "reopen"),
        "x",
        target=("<=", 2.0),
        better="lower",
        note="restore from file:// then open, against reopening the source",
    )
    s = ctx.scale
    return {
        "title": "durable puts with continuous backup; restore",
        "clock": "wall",
        "params": {
            "ops_per_chunk": measured["k"],
            "reps": s["reps"],
            "put_reps": s["put_reps"],
            "payload_bytes": PAYLOAD_BYTES,
            "restore_tasks": s["restore_tasks"],
            "restore_tx": s["restore_tx"],
        },
        "backends": backends_block(measured["times"], measured["k"], "wall"),
        "ratios": ratios,
    }
