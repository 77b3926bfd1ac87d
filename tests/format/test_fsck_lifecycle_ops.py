"""walqueue-fsck and the lifecycle op kinds (extend, redrive, cancel).

The format layer keeps its own list of op names (it cannot import the
engine), so fsck could fall behind a new kind without any engine test
noticing: a store the engine wrote would then be called corrupt. These
tests write stores holding each new op, by a real `Queue` (in the WAL and,
after a compaction, as the records they leave in a snapshot) and frame by
frame, and require fsck and ``fsck --replay`` to find them healthy and to
agree with opening. The other direction is the older reader's: an op kind
it does not know is `CorruptStore` "invalid transaction", naming the op.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from walqueue import CorruptStore, Queue
from walqueue.format import encode_frame, wal_name
from walqueue.format.fsck import EXIT_CORRUPT, EXIT_HEALTHY, check, main

NEW_KINDS = ("extend", "redrive", "cancel")


def put(task: str, max_attempts: int = 3) -> dict[str, Any]:
    return {"op": "put", "task": task, "key": task, "payload": {"n": task}, "available_at": 0,
            "max_attempts": max_attempts}  # fmt: skip


def write_log(directory: Path, *transactions: list[dict[str, Any]]) -> list[bytes]:
    """Segment 1 holding one frame per transaction, sequences from 1; returns the frames."""
    frames = [encode_frame({"seq": seq, "ops": ops}) for seq, ops in enumerate(transactions, start=1)]
    (directory / wal_name(1)).write_bytes(b"".join(frames))
    return frames


def fsck_json(directory: Path, *args: str) -> tuple[int, dict[str, Any]]:
    """fsck's command line, in-process, with --json: its exit status and its report."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main([str(directory), "--json", *args])
    return status, json.loads(out.getvalue())


def wal_op_names(directory: Path) -> set[str]:
    """The op names in the WAL frames (each a 4-byte length, the JSON body, a 32-byte digest)."""
    names: set[str] = set()
    for segment in sorted(directory.glob("wal-*.log")):
        data = segment.read_bytes()
        offset = 0
        while offset < len(data):
            length = int.from_bytes(data[offset : offset + 4], "big")
            body = json.loads(data[offset + 4 : offset + 4 + length])
            names.update(op["op"] for op in body["ops"])
            offset += 4 + length + 32
    return names


def lifecycle_store(directory: Path) -> dict[str, Any]:
    """A store a `Queue` wrote with every new call: before a compaction (in the snapshot) and after (in the WAL)."""
    with Queue(directory, sync=False, compact_bytes=None) as q:
        for i in range(4):
            q.put(f"t{i}", {"i": i}, max_attempts=1)
        leases = q.reserve("w1", now=10, lease_seconds=30, limit=3)
        q.extend(leases[0], now=11, lease_seconds=100)
        q.cancel(leases[1].task_id)  # leased -> dead, with no attempt left
        q.cancel("t3")  # ready -> dead, with its attempt unused
        q.redrive("t3", available_at=12, extra_attempts=2)
        q.release(leases[2], now=12)  # dead: its one attempt is spent
        q.compact()  # the snapshot holds an extended lease, a redriven task, cancelled dead ones
        q.redrive(leases[1].task_id, available_at=20)
        q.redrive(leases[2].task_id, available_at=20, extra_attempts=3)
        again = q.reserve("w2", now=20, lease_seconds=5, limit=2)
        q.extend(again[0], now=21, lease_seconds=2**63 - 1)  # capped at the end of time
        q.cancel(again[1].task_id)
        q.cancel("t3")
        return {"stats": q.stats(), "tasks": [t.to_dict() for t in q.tasks()]}


def test_a_store_written_with_every_new_call_passes_fsck_and_replay(tmp_path: Path) -> None:
    written = lifecycle_store(tmp_path)
    stats = written["stats"]
    assert wal_op_names(tmp_path) >= set(NEW_KINDS)  # the WAL after the snapshot holds each new kind
    assert stats["snapshot_seq"] > 0
    plain = check(tmp_path)
    assert plain.exit_code == EXIT_HEALTHY and plain.findings == []
    report = check(tmp_path, replay=True)
    assert report.exit_code == EXIT_HEALTHY and report.findings == []
    assert report.replay is not None and report.replay.complete
    assert report.replay.last_seq == stats["last_seq"] == report.last_seq
    assert report.replay.counts == stats["counts"]
    assert report.replay.applied == stats["last_seq"] - stats["snapshot_seq"]
    for args in ((), ("--replay",)):
        status, as_json = fsck_json(tmp_path, *args)
        assert status == EXIT_HEALTHY and as_json["findings"] == []
    with Queue(tmp_path, sync=False) as reopened:  # and opening agrees with what was written
        assert [t.to_dict() for t in reopened.tasks()] == written["tasks"]


@pytest.mark.parametrize("kind", NEW_KINDS)
def test_a_log_holding_each_new_op_passes_fsck_and_replay(tmp_path: Path, kind: str) -> None:
    """Frames written by hand, one new op each, exactly as docs/FORMAT.md spells them."""
    new_op = {
        "extend": {"op": "extend", "task": "a", "generation": 1, "deadline": 99},
        "cancel": {"op": "cancel", "task": "a"},
        "redrive": {"op": "redrive", "task": "b", "available_at": 7, "max_attempts": 2},
    }[kind]
    write_log(
        tmp_path,
        [put("a"), put("b", max_attempts=1)],
        [{"op": "lease", "task": "a", "worker": "w", "generation": 1, "deadline": 50}],
        [{"op": "lease", "task": "b", "worker": "w", "generation": 1, "deadline": 50}],
        [{"op": "release", "task": "b", "generation": 1, "available_at": 5}],  # b: dead, its attempt spent
        [new_op],
    )
    report = check(tmp_path, replay=True)
    assert report.exit_code == EXIT_HEALTHY and report.findings == []
    assert report.replay is not None and report.replay.complete and report.replay.last_seq == 5
    status, _ = fsck_json(tmp_path, "--replay")
    assert status == EXIT_HEALTHY
    with Queue(tmp_path, sync=False) as q:
        assert q.stats()["counts"] == report.replay.counts


@pytest.mark.parametrize(
    ("bad_op", "why"),
    [
        ({"op": "extend", "task": "a", "generation": 2, "deadline": 99}, "another generation"),
        ({"op": "extend", "task": "a", "generation": 1}, "a missing deadline"),
        ({"op": "redrive", "task": "a", "available_at": 7, "max_attempts": 9}, "a task not dead"),
        ({"op": "redrive", "task": "b", "available_at": 7, "max_attempts": 1}, "no attempt granted"),
        ({"op": "cancel", "task": "b"}, "a dead task"),
        ({"op": "cancel", "task": "nobody"}, "an unknown task"),
    ],
    ids=lambda value: value if isinstance(value, str) else value["op"],
)
def test_replay_refuses_a_new_op_the_state_machine_refuses(tmp_path: Path, bad_op: dict[str, Any], why: str) -> None:
    """Known names, impossible ops: only --replay (the engine's apply) can see it, as opening does."""
    frames = write_log(
        tmp_path,
        [put("a"), put("b", max_attempts=1)],
        [{"op": "lease", "task": "a", "worker": "w", "generation": 1, "deadline": 50}],
        [{"op": "lease", "task": "b", "worker": "w", "generation": 1, "deadline": 50}],
        [{"op": "release", "task": "b", "generation": 1, "available_at": 5}],
        [bad_op],
    )
    assert check(tmp_path).exit_code == EXIT_HEALTHY, why  # the envelope and the op name are fine
    report = check(tmp_path, replay=True)
    assert report.exit_code == EXIT_CORRUPT, why
    [finding] = report.findings
    where = sum(map(len, frames[:4]))  # the fifth frame
    assert (finding.kind, finding.file, finding.offset) == ("invalid-transaction", wal_name(1), where)
    assert finding.message.startswith("invalid transaction 5:") and bad_op["op"] in finding.message
    with pytest.raises(CorruptStore, match="invalid transaction 5"):
        Queue(tmp_path, sync=False)


@pytest.mark.parametrize("replay", [False, True], ids=["plain", "replay"])
def test_an_unknown_op_kind_is_an_invalid_transaction_naming_the_op(tmp_path: Path, replay: bool) -> None:
    """What an older reader says of a newer writer's kind (docs/FORMAT.md), and what fsck says too."""
    frames = write_log(tmp_path, [put("a")], [put("b"), {"op": "rewind", "task": "a", "generation": 1}])
    report = check(tmp_path, replay=replay)
    assert report.exit_code == EXIT_CORRUPT
    [finding] = report.findings
    assert (finding.severity, finding.kind, finding.file, finding.offset) == (
        "corrupt",
        "transaction",
        wal_name(1),
        len(frames[0]),
    )
    assert finding.message == "invalid transaction 2: op 1 is not a known op (op name 'rewind')"
    status, as_json = fsck_json(tmp_path, *(("--replay",) if replay else ()))
    assert status == EXIT_CORRUPT and "'rewind'" in as_json["findings"][0]["message"]
    with pytest.raises(CorruptStore) as opening:
        Queue(tmp_path, sync=False)
    assert "invalid transaction" in str(opening.value) and "rewind" in str(opening.value)
