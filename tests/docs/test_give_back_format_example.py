"""docs/FORMAT.md's give_back frame is what the engine writes, byte for byte, and its table row matches the op."""

from __future__ import annotations

import hashlib
from pathlib import Path

from test_format_examples import dumped_bytes, fenced, section

from walqueue import Queue
from walqueue.engine.state import OP_KINDS
from walqueue.format.frame import encode_frame


def test_the_give_back_example_is_the_frame_the_engine_writes(tmp_path: Path) -> None:
    text = section("**A frame holding a give_back op.**")
    blocks = fenced(text)
    with Queue(tmp_path / "q") as queue:
        queue.put("t1", {"n": 1})
        [lease] = queue.reserve("w1", now=100, lease_seconds=30)
        queue.give_back(lease, now=110)
        task = queue.get("t1")
    assert task is not None and (task.status, task.attempts, task.generation) == ("ready", 0, 0)
    segment = (tmp_path / "q" / "wal-00000000000000000001.log").read_bytes()
    frame, offsets = dumped_bytes(blocks[1])
    assert segment[265 : 265 + len(frame)] == frame and offsets[0] == 0
    assert encode_frame({"ops": [{"generation": 1, "op": "give_back", "task": "t1"}], "seq": 3}) == frame
    body = frame[4:-32]
    assert body.decode() == blocks[0].strip()
    assert hashlib.sha256(body).hexdigest() in text.replace("\n", "")


def test_the_give_back_row_shows_the_ops_exact_keys() -> None:
    row = next(line for line in section("### give_back").splitlines() if line.startswith("| give_back |"))
    assert "`" + OP_KINDS["give_back"].template.decode().replace("%d", "G").replace("%b", "T") + "`" in row
