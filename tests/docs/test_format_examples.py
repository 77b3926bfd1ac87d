"""docs/FORMAT.md's examples of the lifecycle ops (extend, redrive, cancel) are what the engine writes.

The extend frame of §10 is dumped byte for byte, and the cancel and redrive
transactions after it are quoted as JSON; this test makes the same calls on
a new directory and compares the segment with the page. It also checks the
op table of §4 against the frames, and the message that this version gives
for an op it does not know, which §4 quotes. The error frame of §10 (an
error op before the release it explains) is dumped byte for byte as well,
with the fail transaction after it, and §4's and §5's tables show the new
op and record keys exactly.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from walqueue import CorruptStore, LastError, Queue
from walqueue.format import OP_NAMES, canonical_json, encode_frame

if TYPE_CHECKING:
    from conftest import RunPython

FORMAT_MD = Path(__file__).resolve().parents[2] / "docs" / "FORMAT.md"
SEGMENT = "wal-00000000000000000001.log"


def section(title: str) -> str:
    text = FORMAT_MD.read_text(encoding="utf-8")
    return text.split(title, 1)[1].split("\n## ", 1)[0]


def example() -> str:
    return section("**A frame holding an extend op.**")


def fenced(text: str) -> list[str]:
    return [part.split("\n", 1)[1] for part in text.split("```")[1::2]]


def dumped_bytes(dump: str) -> tuple[bytes, list[int]]:
    """The bytes of a hex dump in FORMAT.md's style, and the offsets its lines start at."""
    data = bytearray()
    offsets = []
    for line in dump.splitlines():
        match = re.match(r"([0-9a-f]{4})    ((?:[0-9a-f]{2} ?)+)", line)
        if match:
            offsets.append(int(match.group(1), 16))
            assert offsets[-1] == len(data), line  # each line starts where the previous ended
            data += bytes.fromhex(match.group(2))
    return bytes(data), offsets


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, list[tuple[int, bytes]]]:
    """The calls of §10, and each frame of the segment with its offset."""
    directory = tmp_path / "q"
    with Queue(directory) as queue:
        queue.put("t1", {"n": 1})
        [lease] = queue.reserve("w1", now=100, lease_seconds=30)
        extended = queue.extend(lease, now=110, lease_seconds=60)
        assert (extended.deadline, extended.generation, extended.attempts) == (170, 1, 1)
        queue.cancel("t1")
        task = queue.get("t1")
        assert task is not None
        assert (task.status, task.attempts, task.max_attempts, task.available_at) == ("dead", 1, 3, 0)
        queue.redrive("t1", available_at=200, extra_attempts=2)
        task = queue.get("t1")
        assert task is not None
        assert (task.status, task.attempts, task.max_attempts, task.generation, task.available_at) == (
            "ready",
            1,
            5,
            1,
            200,
        )
    data = (directory / SEGMENT).read_bytes()
    frames = []
    offset = 0
    while offset < len(data):
        length = int.from_bytes(data[offset : offset + 4], "big")
        frames.append((offset, data[offset : offset + 36 + length]))
        offset += 36 + length
    return directory, frames


def test_the_extend_frame_is_dumped_byte_for_byte(store: tuple[Path, list[tuple[int, bytes]]]) -> None:
    _, frames = store
    text = example()
    (transaction, dump, _) = fenced(text)[:3]
    offset, frame = frames[2]
    assert dumped_bytes(dump)[0] == frame
    assert frame == encode_frame(json.loads(transaction))
    body = frame[4:-32]
    assert body.decode() == transaction.strip()
    # The figures in the prose around the dump.
    assert f"{len(body)} bytes of canonical JSON" in text
    assert f"in a {len(frame)}-byte frame at bytes {offset}..{offset + len(frame) - 1}" in text
    assert f"add {offset} = {offset:#x}" in text
    assert f"4 + {len(body)} + 32 = {len(frame)} = {len(frame):#x}" in text
    assert hashlib.sha256(body).hexdigest() in text.replace("\n", "")
    assert f"a {len(frames[1][1])}-byte frame at byte {frames[1][0]}" in text


def test_the_cancel_and_redrive_transactions_follow_as_quoted(store: tuple[Path, list[tuple[int, bytes]]]) -> None:
    _, frames = store
    text = example()
    quoted = fenced(text)[2].strip().splitlines()
    assert [frame[4:-32].decode() for _, frame in frames[3:]] == quoted
    (cancel_offset, cancel), (redrive_offset, redrive) = frames[3:]
    assert f"frames of {len(cancel)} and {len(redrive)} bytes at bytes {cancel_offset} and {redrive_offset}" in text


def test_the_op_table_shows_the_new_ops_with_their_exact_keys(store: tuple[Path, list[tuple[int, bytes]]]) -> None:
    _, frames = store
    table = section("### Ops")
    written = {op["op"]: op for _, frame in frames for op in json.loads(frame[4:-32])["ops"]}
    for name in ("extend", "redrive", "cancel"):
        (row,) = [line for line in table.splitlines() if line.startswith(f"| {name} |")]
        shown = row.split("`")[1]
        keys = re.findall(r'"(\w+)":', shown)
        assert keys == sorted(written[name]), (name, keys)
        assert canonical_json(written[name]).decode().startswith(shown.split(":")[0])


def test_an_unknown_op_is_named_as_section_4_says(tmp_path: Path, run_python: RunPython) -> None:
    directory = tmp_path / "q"
    with Queue(directory) as queue:
        queue.put("t1", {"n": 1})
    with open(directory / SEGMENT, "ab") as segment:
        segment.write(encode_frame({"ops": [{"op": "pause", "task": "t1"}], "seq": 2}))
    with pytest.raises(CorruptStore, match=r"invalid transaction 2: .*unknown op 'pause'"):
        Queue(directory)
    result = run_python(["-m", "walqueue.format.fsck", str(directory)])
    assert result.returncode == 2, result.stdout + result.stderr
    assert "invalid transaction 2: op 0 is not a known op (op name 'pause')" in result.stdout
    assert "invalid transaction S: op I is not a known op (op name 'NAME')" in section("### extend, redrive and cancel")


def error_example() -> str:
    return section("**A frame holding an error op.**")


@pytest.fixture
def error_store(tmp_path: Path) -> list[tuple[int, bytes]]:
    """The calls of §10's error example, and each frame of the segment with its offset."""
    directory = tmp_path / "q"
    with Queue(directory) as queue:
        queue.put("t1", {"n": 1})
        [lease] = queue.reserve("w1", now=100, lease_seconds=30)
        queue.release(lease, now=110, delay=10, error={"type": "ValueError", "message": "bad input"})
        task = queue.get("t1")
        assert task is not None and task.last_error == LastError("ValueError", "bad input", 1, 110)
        [lease] = queue.reserve("w1", now=120, lease_seconds=30)
        queue.fail(lease, now=125, error={"type": "KeyError", "message": "no handler"})
        task = queue.get("t1")
        assert task is not None and (task.status, task.attempts) == ("dead", 2)
        assert task.last_error == LastError("KeyError", "no handler", 2, 125)
    # The prose states both last errors as their canonical JSON (wrapped like any text).
    prose = " ".join(error_example().split())
    assert '{"at":110,"attempt":1,"message":"bad input","type":"ValueError"}' in prose
    assert canonical_json(task.last_error.to_dict()).decode() in prose
    data = (directory / SEGMENT).read_bytes()
    frames = []
    offset = 0
    while offset < len(data):
        length = int.from_bytes(data[offset : offset + 4], "big")
        frames.append((offset, data[offset : offset + 36 + length]))
        offset += 36 + length
    return frames


def test_the_error_frame_is_dumped_byte_for_byte(error_store: list[tuple[int, bytes]]) -> None:
    text = error_example()
    (transaction, dump, following) = fenced(text)[:3]
    offset, frame = error_store[2]
    assert dumped_bytes(dump)[0] == frame
    assert frame == encode_frame(json.loads(transaction))
    body = frame[4:-32]
    assert body.decode() == transaction.strip()
    assert f"{len(body)} bytes of canonical JSON" in text
    assert f"in a {len(frame)}-byte frame at bytes {offset}..{offset + len(frame) - 1}" in text
    assert f"add {offset} = {offset:#x}" in text
    assert f"4 + {len(body)} + 32 = {len(frame)} = {len(frame):#x}" in text
    assert hashlib.sha256(body).hexdigest() in text.replace("\n", "")
    assert [frame[4:-32].decode() for _, frame in error_store[3:]] == following.strip().splitlines()
    (lease_offset, lease), (fail_offset, fail) = error_store[3:]
    assert f"frames of {len(lease)} and {len(fail)} bytes at bytes {lease_offset} and {fail_offset}" in text


def test_the_op_table_shows_error_and_fail_with_their_exact_keys(error_store: list[tuple[int, bytes]]) -> None:
    table = section("### Ops")
    written = {op["op"]: op for _, frame in error_store for op in json.loads(frame[4:-32])["ops"]}
    for name in ("error", "fail"):
        (row,) = [line for line in table.splitlines() if line.startswith(f"| {name} |")]
        shown = row.split("`")[1]
        assert re.findall(r'"(\w+)":', shown) == sorted(written[name]), name


def test_the_snapshot_record_table_shows_the_last_error_as_written(tmp_path: Path) -> None:
    directory = tmp_path / "q"
    with Queue(directory) as queue:
        queue.put("t1", {"n": 1})
        [lease] = queue.reserve("w1", now=100, lease_seconds=30)
        queue.fail(lease, now=125, error={"type": "KeyError", "message": "no handler"})
        queue.compact()
    [snapshot] = directory.glob("snapshot-*.snap")
    (row,) = [line for line in section("## 5. Snapshots").splitlines() if line.startswith("| `last_error`")]
    shown = row.split("`")[3]
    assert shown == '{"at":N,"attempt":A,"message":M,"type":Y}'
    assert b'"last_error":{"at":125,"attempt":1,"message":"no handler","type":"KeyError"}' in snapshot.read_bytes()


def test_the_older_readers_messages_quoted_in_section_4_name_the_new_op() -> None:
    """What commit 409e5c8 said, run by hand (docs/FORMAT.md quotes it); the names it gives are the kinds'."""
    text = section("### The last error: error and fail")
    assert "unknown op 'error'" in text and "unknown op 'fail'" in text
    assert "op 0 is not a known op (op name 'error')" in text
    assert {"error", "fail"} <= set(OP_NAMES)
